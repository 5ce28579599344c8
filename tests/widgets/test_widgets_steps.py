"""The timeline counts the recorded window's own training steps from 1, draws any step range of
any run (device lanes of lazy collectives included), says "your code, measured" only when there is
some, keeps a very short bar visible, and its window agrees with lab.step_times (issue 34)."""
import io

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import widgets  # noqa: E402
from hpu_lab import events as ev  # noqa: E402
from test_widgets_fixtures import MS, Sim  # noqa: E402
from widgets import panel as pn  # noqa: E402
from widgets import timeline as tl  # noqa: E402
from widgets import common  # noqa: E402
from widgets.common import COLORS  # noqa: E402


def lazy(steps=8, warm=0, user_ms=0.0):
    """A lazy training loop, two mark_steps a step (forward+backward, optimizer), after ``warm``
    steps recorded before the window."""
    s = Sim()
    for i in range(warm + steps):
        if i == warm:
            start = len(s.events)
        if user_ms:
            t = s.t
            s.t += int(user_ms * MS)
            s._emit(ev.UserCode(t, s.t, "host", s.step, what="data loading", src="train.py:5",
                                own_ns=int(user_ms * MS)))
        s.op(n=30, each_us=40)
        s.mark_step(key="fwd", device_ms=0.6, src="train.py:9")
        s.op(n=10, each_us=40)
        s.mark_step(key="opt", device_ms=0.2, src="train.py:11")
    return s.events[start:]


def _labels(fig):
    return [int(t.get_text().split()[-1]) for ax in fig.axes for t in ax.texts if t.get_gid() == "step label"]


@pytest.mark.parametrize("clock", ["gaudi", "measured"])
def test_labels_count_training_steps_not_mark_steps(clock):
    evs = lazy(steps=8, warm=90)
    assert min(e.step for e in evs) == 180            # the bridge's counter: mark_steps since the start
    assert common.step_count(evs) == 8
    fig = tl.draw_timeline(evs, clock=clock)
    assert _labels(fig) and max(_labels(fig)) <= 8 and 1 in _labels(fig)
    assert "(8 steps" in fig.axes[0].get_title(loc="left")
    # the dotted lines: one at the end of each training step, not at each mark_step
    (lines,) = [c for c in fig.axes[0].collections if c.get_gid() == "mark_step"]
    assert len(lines.get_segments()) == 8


def test_a_step_range_counts_own_steps_and_starts_at_its_window():
    evs = lazy(steps=8, warm=90)
    fig = tl.draw_timeline(evs, step_range=(5, 8), clock="gaudi")
    ax = fig.axes[0]
    assert set(_labels(fig)) <= {5, 6, 7, 8} and 5 in _labels(fig)
    assert "steps 5\u20138 of 8" in ax.get_title(loc="left")
    lo, hi = ax.get_xlim()
    assert lo <= 0 < lo + 0.02 * (hi - lo)            # the axis starts at the window's origin
    assert "since step 5 began" in ax.get_xlabel()
    last = tl.draw_timeline(evs, step_range=(-2, -1), clock="gaudi")
    assert "steps 7\u20138 of 8" in last.axes[0].get_title(loc="left")
    for bad in ((0, 3), (5, 9), (4, 2), (1.0, 2)):
        with pytest.raises(ValueError, match="step_range .*this window has 8 steps|expected two ints"):
            tl.draw_timeline(evs, step_range=bad)


def test_warm_up_steps_then_replays_are_each_a_step():
    s = Sim()
    for i in range(3):
        s.op(n=20)
        s.mark_step(key="warm", src="train.py:40")
    s.capture(n_ops=20)                                 # its mark_step is inside the capture: no step
    for _ in range(8):
        s.replay()                                      # (Sim: a replay, then a mark_step after it)
    assert common.step_count(s.events) == 11
    steps, n = common.own_steps(s.events)
    replays = [k for e, k in zip(s.events, steps) if isinstance(e, ev.Replay)]
    assert replays == list(range(4, 12))


def test_the_panel_slider_counts_own_steps_from_one():
    p = widgets.SectionPanel("", lazy(steps=8, warm=90))
    p.refresh()
    assert (p.step_range.min, p.step_range.max, p.step_range.value) == (1, 8, (1, 8))


def test_the_final_panel_of_a_long_section_is_cut_from_the_whole_clock(monkeypatch):
    """More than FINAL_STEPS steps: the panel draws the last ones cut out of the whole section's
    timeline, labelled with their own numbers."""
    calls = []
    real = pn.draw_timeline
    monkeypatch.setattr(pn, "draw_timeline", lambda events, **kw: calls.append((len(events), kw))
                        or real(events, **kw))
    evs = lazy(steps=pn.FINAL_STEPS + 10)
    p = widgets.SectionPanel("long", evs)
    p.refresh(["Timeline"])
    n, kw = calls[-1]
    assert n == len(evs) and kw["step_range"] == (11, pn.FINAL_STEPS + 10)


def _lazy_collective_run():
    """Two steps of a run with lazy collectives: the all_reduce is a node of the step's graph, its
    device-side Collective on the comm stream hpu:2, emitted when the device ran it (a step later)."""
    s = Sim()
    for i in range(4):
        s.op(n=20)
        if i == 1:
            s.launch(7, "hccl_all_reduce", 0.3, stream=2)
            ex = s.events[-1]
            s._emit(ev.Collective(ex.t_end - 100_000, ex.t_end, "hpu:2", s.step + 1, op="all_reduce",
                                  nbytes=1 << 20, world_size=2))
        s.mark_step(key="fwd", device_ms=0.5)
    return s.events


def test_a_step_range_of_a_run_with_lazy_collectives_draws():
    evs = _lazy_collective_run()
    for lo in range(1, 5):
        for hi in range(lo, 5):
            fig = tl.draw_timeline(evs, step_range=(lo, hi), clock="measured")
            lanes = [t.get_text() for t in fig.axes[0].get_yticklabels()]
            if lo <= 2 <= hi:
                assert any(x.startswith("hpu:2") for x in lanes), (lo, hi, lanes)
            if hi < 2:
                assert not any(x.startswith("hpu:2") for x in lanes), (lo, hi, lanes)
    assert "hpu:2" in tl.lanes_of([e for e in evs if isinstance(e, ev.Collective)])


@pytest.mark.parametrize("user_ms", [0.0, 2.0])
def test_your_code_measured_is_said_only_when_there_is_some(user_ms):
    evs = lazy(steps=3, user_ms=user_ms)
    fig = tl.draw_timeline(evs, clock="gaudi")
    ax = fig.axes[0]
    said = ["measured" in ax.get_xlabel(),
            any("your code" in t.get_text() for t in ax.get_yticklabels()),
            any("your code" in t.get_text() for t in ax.get_legend().get_texts())]
    assert said == [bool(user_ms)] * 3, said


def _pixels_near(fig, rgb, dpi=100, tol=40):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    img = matplotlib.image.imread(io.BytesIO(buf.getvalue()))[..., :3]
    return int((np.abs(img - np.array(rgb)).sum(axis=-1) * 255 < tol).sum())


def test_a_very_short_bar_stays_visible_and_keeps_its_length():
    s = Sim()
    s.op(n=200, each_us=50)                             # 10 ms of tracing
    s.mark_step(key="long", device_ms=8.0)
    s.op(n=2, each_us=50)
    s.mark_step(key="heavy", device_ms=0.012, stream=1)   # 0.1% of the window: ~1 px at 100 dpi
    s.sync()
    fig = tl.draw_timeline(s.events, clock="measured")
    rgb = matplotlib.colors.to_rgb(COLORS["execute"])
    (short,) = [c for c in fig.axes[0].collections if c.get_gid() == "hpu:1/execute"]
    # drawn at least MIN_BAR_PT wide, and in its own colour to its edge (no white border over it)
    (x0, _), (x1, _) = short.get_paths()[0].get_extents().get_points()
    pt_per_ms = fig.axes[0].get_window_extent().width / (fig.axes[0].get_xlim()[1] - fig.axes[0].get_xlim()[0]) \
        * 72 / fig.dpi
    assert (x1 - x0) * pt_per_ms >= 2.5 * 0.99                  # tl.MIN_BAR_PT
    assert _pixels_near(fig, rgb) >= 2 * 20         # the short bar's own pixels (plus the long bar's)
    rows = [b for b in tl.timeline_rows(s.events) if b.lane == "hpu:1" and b.kind == "execute"]
    assert rows[0].duration_ms == pytest.approx(0.012)    # the number is its own


def test_the_window_is_the_clocks_wall():
    """A window that begins with an op: its work began at the clock's zero, where the op's modeled
    cost starts (the op's event is an instant at the end of it). Before, the panel's window started
    at that instant, one op_ns (72 us) shorter than perfmodel.retime's wall."""
    from hpu_lab import perfmodel as pm
    evs = lazy(steps=3)
    assert isinstance(evs[0], ev.OpAccumulated)
    wall = pm.retime(evs, "gaudi2").wall_ns / 1e6
    assert widgets.verdict(evs, device="gaudi2").window_ms == pytest.approx(wall, abs=1e-9)
    assert widgets.section_metrics(evs, device="gaudi2")["window ms"] == round(wall, 3)
    fig = tl.draw_timeline(evs, device="gaudi2")
    assert f"{wall:.3g} ms)" in fig.axes[0].get_title(loc="left")


def test_a_step_range_says_how_its_window_and_lab_step_times_differ():
    """Device-bound steps: step 3's host work starts while step 2's recipes still run. The window
    (from step 3's first work) and lab.step_times' wall (from step 2's end) are both right; the
    picture draws step 2's running recipes and says both figures."""
    import torch
    import hpu_lab.core as htcore
    from hpu_lab import lab
    torch.manual_seed(0)
    m = torch.nn.Linear(512, 512).to("hpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(2048, 512).to("hpu")

    def step():
        opt.zero_grad(set_to_none=True)
        m(x).square().mean().backward()
        htcore.mark_step()
        opt.step()
        htcore.mark_step()
    step()
    with ev.Collector() as c:
        for _ in range(3):
            step()
        torch.hpu.synchronize()
    assert common.step_count(c.events) == 3
    fig = tl.draw_timeline(c.events, step_range=(3, 3), device="gaudi")
    ax = fig.axes[0]
    wall = lab.step_times_of(c.events, every=2, card="gaudi").steps[-1].wall_ns / 1e6
    assert f"step 3 ends {tl._fmt_ms(wall)} after step 2 (lab.step_times' wall)" in ax.get_xlabel()
    assert [col for col in ax.collections if col.get_gid() == "hpu:0/earlier"]
