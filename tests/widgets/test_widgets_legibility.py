"""What every timeline picture shares, read from the figure objects: step labels that count the
section's own steps, distinct legend colours that survive the stored PNG, legends inside the
figure, lanes named by what they are, bar labels that fit and do not overlap, visible replays,
labelled idle gaps, and text sizes readable at the stored dpi."""
import io
import itertools
import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from hpu_lab import events as ev  # noqa: E402
from test_widgets_fixtures import MS, Sim  # noqa: E402
from widgets import static  # noqa: E402
from widgets import timeline as tl  # noqa: E402
from widgets.common import COLORS  # noqa: E402
from widgets.comparison import draw_compare  # noqa: E402


def _user(s, ms_, what="data loading"):
    t = s.t
    s.t += int(ms_ * MS)
    s._emit(ev.UserCode(t, s.t, "host", s.step, what=what, src="train.py:5", own_ns=int(ms_ * MS)))


def _every_kind_loop(warm_steps=0):
    """A section of 8 steps with data loading, a CPU fallback, a capture and replays, after
    ``warm_steps`` steps recorded before the section started."""
    s = Sim()
    for _ in range(warm_steps):
        s.op(n=3)
        s.mark_step(key="k0")
    start = len(s.events)
    for i in range(4):
        _user(s, 3.0)
        s.op(n=30, each_us=40)
        s.mark_step(key="k0" if i else "k1", device_ms=1.0)
    fb0 = s.t
    s.mark_step(key="fb", device_ms=0.5)                       # the fallback's sync of its input
    s.sync(".cpu()")
    s.t += 100_000
    s._emit(ev.CPUFallback(fb0, s.t, "host", s.step, op="aten::digamma", dtypes=("BFloat16",), src="x.py:3"))
    s._emit(ev.DeviceToHost(s.t, s.t + 50_000, "host", s.step, nbytes=1 << 20))
    s.t += 50_000
    s.capture(graph_id=1, n_ops=20)
    for _ in range(3):
        _user(s, 3.0)
        s.replay(graph_id=1)
    s.sync(".item()")
    return s.events[start:]


def _texts(fig, gid):
    """The texts of one sort, told apart by what they say (a gid only names them since this test)."""
    texts = [t for ax in fig.axes for t in ax.texts]
    if gid == "step label":
        return [t for t in texts if t.get_text().startswith(" end of step")]
    if gid == "bar label":
        return [t for t in texts if not t.get_text().startswith((" end of step", "device idle"))
                and t.get_gid() != "verdict"]
    return [t for t in texts if t.get_gid() == gid]


def _lab(rgb):
    def lin(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = map(lin, rgb[:3])
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = lambda t: t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116  # noqa: E731
    return (116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z)))


@pytest.fixture(params=["gaudi", "measured"])
def clock(request):
    return request.param


def test_step_labels_count_the_sections_own_steps(clock):
    evs = _every_kind_loop(warm_steps=180)
    assert min(e.step for e in evs) == 180                 # the bridge's counter, before the fix the label
    fig = tl.draw_timeline(evs, clock=clock)
    numbers = [int(t.get_text().split()[-1]) for t in _texts(fig, "step label")]
    n_steps = len({e.step for e in evs if isinstance(e, ev.MarkStep)})
    assert numbers and min(numbers) >= 1 and max(numbers) <= n_steps
    assert "end of step 1" in [t.get_text().strip() for t in _texts(fig, "step label")]


def test_step_labels_of_a_tail_count_from_the_sections_first_step():
    evs = _every_kind_loop(warm_steps=50)
    fig = tl.draw_timeline(evs, step_range=(5, 8), clock="measured")   # the last four of its 8 steps
    numbers = [int(t.get_text().split()[-1]) for t in _texts(fig, "step label")]
    assert numbers and 5 <= min(numbers) and max(numbers) <= 8
    assert "steps 5\u20138 of 8" in fig.axes[0].get_title(loc="left")


def test_every_kind_has_a_colour_far_from_every_other():
    kinds = [k for k in tl._DRAW_ORDER]
    patches = [h for h in tl.legend_handles(kinds, compiles=False, syncs=False)]
    labs = {h.get_label(): _lab(h.get_facecolor()) for h in patches}
    assert len(labs) == len(kinds)
    closest = min((math.dist(labs[a], labs[b]), a, b) for a, b in itertools.combinations(labs, 2))
    assert closest[0] >= 20, closest                          # CIELAB units: red and orange were 17 apart
    first, re = (_lab(matplotlib.colors.to_rgb(COLORS[k])) for k in ("first compile", "recompile"))
    assert math.dist(first, re) >= 20


def test_the_stored_png_keeps_every_legend_colour(clock):
    from PIL import Image
    evs = _every_kind_loop()
    fig = tl.draw_timeline(evs, clock=clock)
    png = static.png_bytes(fig)
    colours = {rgb for _, rgb in Image.open(io.BytesIO(png)).convert("RGB").getcolors(1 << 16)}
    legend = fig.axes[0].get_legend()
    for h in legend.legend_handles:
        if isinstance(h, matplotlib.patches.Patch):
            rgb = tuple(round(255 * c) for c in h.get_facecolor()[:3])
            assert rgb in colours, (h.get_label(), rgb)        # a 64-colour median cut merged them


@pytest.mark.parametrize("draw", ["timeline", "compare"])
def test_the_legend_lies_inside_its_figure(draw):
    evs = _every_kind_loop()
    if draw == "timeline":
        fig = tl.draw_timeline(evs, clock="gaudi")
        legend = fig.axes[0].get_legend()
    else:
        from widgets.recording import Section
        a, b = Section("lazy"), Section("graphs")
        a.events, b.events = evs[:40], evs
        fig = draw_compare([a, b])
        legend = fig.legends[0]
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()                 # the layout as saved
    box, page = legend.get_window_extent(renderer), fig.bbox
    assert box.x0 >= page.x0 and box.x1 <= page.x1 and box.y0 >= page.y0, (box, page)
    if draw == "timeline":                        # and the title, however long the section's name
        long = tl.draw_timeline(evs, clock="gaudi", title="CPU fallback in the middle of device ops: host and "
                                "device timeline")
        long.draw_without_rendering()
        title = long.axes[0].title if long.axes[0].get_title() else long.axes[0]._left_title
        assert title.get_window_extent(renderer).x1 <= long.bbox.x1


def test_lanes_are_named_by_what_they_are():
    evs = _every_kind_loop()
    names = [t.get_text() for t in tl.draw_timeline(evs, clock="gaudi").axes[0].get_yticklabels()]
    assert names[0] == "your code\n(measured, this CPU)"
    assert names[1] == "host: the bridge\n(modeled)"
    assert all("Python" not in n for n in names)
    assert names[2].startswith("hpu:0") and "modeled" in names[2]
    measured = [t.get_text() for t in tl.draw_timeline(evs, clock="measured").axes[0].get_yticklabels()]
    assert measured[1] == "host: emulator\n(measured, this CPU)"
    legend = [t.get_text() for t in tl.draw_timeline(evs, clock="gaudi").axes[0].get_legend().get_texts()]
    assert "ops traced" in legend and not any("Python" in t for t in legend)


def test_your_code_has_its_own_lane():
    evs = _every_kind_loop()
    rows = tl.timeline_rows(evs)
    assert {b.lane for b in rows if b.kind == "your code"} == {"user"}
    assert sum(b.kind == "your code" for b in rows) == 7


def test_bar_labels_fit_their_bar_and_do_not_overlap(clock):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    s = Sim()
    for i in range(5):                  # data-loading blocks side by side, each narrower than its label
        _user(s, 8.0)
        s.op(n=2)
        s.mark_step(key="k0", device_ms=0.2)
    fig = tl.draw_timeline(s.events, clock="measured")
    renderer = FigureCanvasAgg(fig).get_renderer()
    labels = _texts(fig, "bar label")
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert labels
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b)
    ax = fig.axes[0]
    for t, box in zip(labels, boxes):
        bar = next(b for b in tl.timeline_rows(s.events) if t.get_text() in (b.label, getattr(tl, "_short_label", lambda b: b.label)(b))
                   and b.start_ms <= t.get_position()[0] <= b.end_ms)
        left, right = (ax.transData.transform((x, 0))[0] for x in (bar.start_ms, bar.end_ms))
        assert left - 1 <= box.x0 and box.x1 <= right + 1, t.get_text()


def test_each_replay_is_marked_and_counted(clock):
    evs = _every_kind_loop()
    fig = tl.draw_timeline(evs, clock=clock)
    marks = [c for c in fig.axes[0].collections if c.get_gid() == "replay"]
    assert len(marks) == 1 and len(marks[0].get_offsets()) == 3
    assert "HPU Graph replay (3)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_a_cpu_fallback_encloses_its_sync_and_compile_instead_of_hiding_them():
    evs = _every_kind_loop()
    rows = tl.timeline_rows(evs)
    (fb,) = [b for b in rows if b.kind == "cpu fallback"]
    assert fb.level == 1 and fb.label == "CPU fallback digamma"
    inside = [b.kind for b in rows if b.lane == "host" and not b.level and fb.start_ms <= b.start_ms < fb.end_ms]
    assert "host sync" in inside
    fig = tl.draw_timeline(evs, clock="measured")
    drawn = {c.get_gid() for c in fig.axes[0].collections}
    assert {"host/cpu fallback", "host/host sync"} <= drawn


def test_a_gap_that_decides_the_verdict_says_what_filled_it(clock):
    s = Sim()
    _user(s, 60.0)                           # the learner's data loading
    s.op(n=5)
    s.mark_step(key="k0", device_ms=1.0, compile_ms=40.0)
    for _ in range(3):
        s.op(n=5)
        s.mark_step(key="k0", device_ms=1.0)
    s.sync(".item()")
    (gap, fillers), = tl.idle_gaps(tl.timeline_rows(s.events), 20.0)
    assert [k for k, _ in fillers][:2] == ["your code", "compile"]
    assert dict(fillers)["your code"] == pytest.approx(60.0)
    fig = tl.draw_timeline(s.events, clock=clock)
    (label,) = _texts(fig, "gap label")
    assert label.get_text().startswith("device idle") and "your code (measured) 60" in label.get_text()
    assert "compile" in label.get_text()


def test_text_is_readable_at_the_stored_size(clock):
    evs = _every_kind_loop()
    for fig in (tl.draw_timeline(evs, clock=clock), tl.draw_timeline(evs, clock=clock, compact=True)):
        texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]
        assert texts
        smallest = min(t.get_fontsize() for t in texts)
        assert smallest * static.STORED_DPI / 72 >= 10, smallest   # px high in the stored picture
    assert static.STORED_DPI >= 100
