"""widgets.compare: the HPU Graph row separates the one-time capture from the replayed steps.

Synthetic sections (tests/test_widgets_fixtures.Sim) carry no CPU-time stamps, so the Gaudi clock
re-times them from their chosen spans: every figure below is deterministic."""
import pytest

import widgets
from hpu_lab import events as ev
from widgets.comparison import ONCE, capture_cut, compare_html, split_at

from test_widgets_fixtures import Sim

STEPS = 8


def lazy_section():
    """8 training steps, two mark_steps each (forward+backward, optimizer), 3 ms of tracing each."""
    s = Sim()
    for i in range(STEPS):
        s.op(n=40, each_us=50)
        s.mark_step(key="fwd_bwd", device_ms=0.5, src="train.py:9")
        s.op(n=20, each_us=50)
        s.mark_step(key="opt", device_ms=0.2, src="train.py:11")
    s.sync()
    return s.events


def replay_section():
    """3 warm-up steps, a capture of one step, then 8 replays of it."""
    s = Sim()
    for i in range(3):
        s.op(n=60, each_us=50)
        s.mark_step(key=f"warm{i}", device_ms=0.7)
    s.sync(reason="hpu.graph(): synchronize before capture")
    s.capture(n_ops=60, key="cap", device_ms=0.7)
    for _ in range(STEPS):
        s.replay(key="cap", device_ms=0.7, host_us=40)
    s.sync()
    return s.events


@pytest.mark.parametrize("clock", ["gaudi", None])
def test_replay_row_is_cheapest_per_step_and_capture_is_its_own_row(clock):
    rows = widgets.compare_rows([("lazy", lazy_section()), ("replay", replay_section())], clock=clock,
                                steps=STEPS)
    assert [r["section"] for r in rows] == ["lazy", "replay: warm-up + capture (once)", "replay: replays"]
    lazy, once, replay = rows
    assert (lazy["a step is"], once["a step is"], replay["a step is"]) == ("training step", ONCE, "replay")
    assert (lazy["steps"], once["steps"], replay["steps"]) == (STEPS, 1, STEPS)
    # every compile is one-time work; the replays compile nothing and trace nothing
    assert once["compiles"] == 4 and replay["compiles"] == 0 and replay["replays"] == STEPS
    # the lesson: replayed, a step costs the host far less than a lazy step ...
    assert replay["host ms/step"] < lazy["host ms/step"] / 10
    # ... while the one-time row alone costs more than a lazy step: divided over the steps it
    # would have made replay look like the slowest mode
    assert once["host ms/step"] > lazy["host ms/step"]


def test_without_steps_a_step_is_what_the_section_counts():
    rows = widgets.compare_rows({"lazy": lazy_section(), "replay": replay_section()})
    assert rows[0]["a step is"] == "step (counted)" and rows[0]["steps"] == STEPS   # two mark_steps a step
    assert rows[2]["steps"] == STEPS         # replays are counted as such, whatever ``steps`` says


def test_device_work_stays_with_the_part_that_launched_it():
    events = replay_section()
    cut = capture_cut(events)
    assert cut == max(e.t_end for e in events if isinstance(e, ev.CaptureEnd))
    before, after = split_at(events, cut)
    assert len(before) + len(after) == len(events)
    early = {e.launch_id for e in before if isinstance(e, ev.Launch)}
    assert {e.launch_id for e in before if isinstance(e, ev.DeviceExecution)} == early
    late = [e for e in after if isinstance(e, ev.DeviceExecution)]
    assert len(late) == STEPS and not any(e.launch_id in early for e in late)
    # the capture's own execution ran after the capture's end: it is still one-time work
    cap_exec = next(e for e in before if isinstance(e, ev.DeviceExecution) and e.key == "cap")
    assert cap_exec.t_end > cut


def test_replays_of_a_graph_captured_elsewhere_are_all_steps():
    events = [e for e in replay_section() if e.t_start >= capture_cut(replay_section())]
    assert capture_cut(events) is None
    rows = widgets.compare_rows([("replay only", events)])
    assert len(rows) == 1 and rows[0]["a step is"] == "replay" and rows[0]["steps"] == STEPS


def test_bad_steps_fail_clearly():
    with pytest.raises(ValueError, match="steps for section 'lazy': expected a positive int"):
        widgets.compare_rows([("lazy", lazy_section())], steps=0)
    with pytest.raises(ValueError, match="positive int"):
        widgets.compare([("lazy", lazy_section())], steps={"lazy": "8"})


def test_table_and_picture_say_which_row_is_one_time():
    pairs = [("lazy", lazy_section()), ("replay", replay_section())]
    html = compare_html(pairs, steps=STEPS)
    assert 'class="once"' in html and "warm-up + capture (once)" in html and "shows its totals" in html
    fig = widgets.draw_compare(pairs)
    cuts = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == "capture-cut"]
    assert len(cuts) == 1 and "Gaudi clock" in fig.axes[1].get_title(loc="left")


def test_with_the_real_runtime():
    """A lazy loop and a capture + replay of the same step: the split holds on what hpu_lab emits."""
    import torch
    import hpu_lab.core as htcore
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("hpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8, device="hpu"), torch.randn(4, 2, device="hpu")

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    with widgets.section("replay", live=False) as s:
        with htcore.hpu.stream(htcore.hpu.Stream()):
            step()
            htcore.mark_step()
        g = htcore.hpu.HPUGraph()
        opt.zero_grad(set_to_none=True)
        with htcore.hpu.graph(g):
            step()
        for _ in range(3):
            g.replay()
        torch.hpu.synchronize()
    once, replay = widgets.compare_rows([s])
    assert once["a step is"] == ONCE and once["compiles"] >= 1
    assert replay["steps"] == 3 and replay["replays"] == 3 and replay["compiles"] == 0
    assert replay["device ms/step"] > 0          # the replayed recipes are costed on the Gaudi clock


def _with_data_loading(events, ms=3.0):
    """The same section with a measured DataLoader fetch before each step's first op."""
    out, t_shift = [], 0
    firsts = {e.step: i for i, e in reversed(list(enumerate(events)))      # (two mark_steps a step)
              if isinstance(e, ev.OpAccumulated) and e.step % 2 == 0}
    for i, e in enumerate(events):
        if firsts.get(e.step) == i:
            t = e.t_start + t_shift
            out.append(ev.UserCode(t, t + int(ms * 1e6), "host", e.step, what="data loading", src="train.py:5",
                                   own_ns=int(ms * 1e6)))
            t_shift += int(ms * 1e6)
        out.append(type(e)(**{**e.__dict__, "t_start": e.t_start + t_shift, "t_end": e.t_end + t_shift})
                   if hasattr(e, "__dict__") else e)
    return out


def test_the_table_is_lab_step_times_with_your_code_apart():
    """One timing helper: every row's times are hpu_lab.lab.step_times_of's on the Gaudi clock; a
    DataLoader's measured time is its own column, not mixed into the modeled host work."""
    from hpu_lab import lab
    plain, loaded = lazy_section(), _with_data_loading(lazy_section())
    (a,), (b,) = (widgets.compare_rows([("lazy", x)], steps=STEPS) for x in (plain, loaded))
    t = lab.step_times_of(loaded, steps=STEPS)
    assert (b["host ms/step"], b["your code ms/step"], b["device ms/step"], b["wall ms/step"], b["verdict"]) == \
        (round(t.host_ms, 3), round(t.user_ms, 3), round(t.device_ms, 3), round(t.wall_ms, 3), t.verdict)
    assert b["your code ms/step"] == pytest.approx(3.0, abs=1e-3) and a["your code ms/step"] == 0
    assert b["host ms/step"] == a["host ms/step"]          # the modeled host work is the same
    assert "your code ms/step" in compare_html([("lazy", loaded)], steps=STEPS)
    assert "your code" not in compare_html([("lazy", plain)], steps=STEPS)
    with pytest.raises(ValueError, match="Gaudi clock's"):
        widgets.compare_rows([("lazy", plain)], clock="measured")


@pytest.mark.parametrize("user_ms", [0.0, 2.0])
def test_the_pictures_say_your_code_measured_only_when_there_is_some(user_ms):
    from test_widgets_steps import lazy
    fig = widgets.draw_compare([("a", lazy(steps=3, user_ms=user_ms))])
    assert ("measured" in fig.axes[0].get_xlabel()) == bool(user_ms)
