"""hpu_lab.lab.step_times: per-step host, device and wall time on the Gaudi clock (docs/lab.md)."""
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
import hpu_lab.perfmodel as pm
from hpu_lab import events as ev
from hpu_lab import lab


class Net(nn.Module):                 # seed 000's model
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(torch.flatten(x, 1)))), dim=1)


def _lazy_step(batch=200, sleep=0.0):
    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, t = torch.randn(batch, 1, 28, 28).to("hpu"), torch.randint(0, 10, (batch,)).to("hpu")

    def step():
        opt.zero_grad(set_to_none=True)
        F.nll_loss(model(x), t).backward()
        htcore.mark_step()
        opt.step()
        htcore.mark_step()
        if sleep:
            time.sleep(sleep)             # your own code: measured
    return step


def _replay_step(batch=200):
    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, t = torch.randn(batch, 1, 28, 28).to("hpu"), torch.randint(0, 10, (batch,)).to("hpu")
    htcore.mark_step()
    g = htcore.hpu.HPUGraph()
    opt.zero_grad(set_to_none=True)
    with htcore.hpu.graph(g):
        F.nll_loss(model(x), t).backward()
        opt.step()
    return g.replay


def test_steps_are_modeled_and_add_up_to_the_recording():
    st = lab.step_times(_lazy_step(), steps=4, warmup=2, card="gaudi2")
    assert st.card.name == "gaudi2" and st.warmup == 2 and len(st.steps) == 4
    # the host lane is modeled per event: every warm step of the same ops costs the same
    assert len({s.host_ns for s in st.steps}) == 1 and st.steps[0].host_ns > 0
    assert all(s.user_ns == 0 and s.compiles == 0 and s.launches == 2 for s in st.steps)
    # the steps are differences of one re-timing: with the lead-in (the last warm-up step, recorded,
    # not reported) they add up to the whole recording's figures
    r, lead = pm.retime(st.events, "gaudi2"), pm.retime(st.events[:st.bounds[0]], "gaudi2")
    assert st.lead_in and len(st.bounds) == 5
    assert sum(s.wall_ns for s in st.steps) == r.wall_ns - lead.wall_ns
    assert sum(s.host_ns for s in st.steps) == r.host_ns - lead.host_ns
    assert sum(s.device_ns for s in st.steps) == r.device_busy_ns - lead.device_busy_ns
    # in a steady loop a step's wall is its host's or its device's, whichever is longer: no tail
    assert all(s.wall_ns == max(s.host_ns, s.device_ns) for s in st.steps)
    # seed 000's step is host-bound on Gaudi 2 (4.8 ms of host work on first-gen Gaudi's host model)
    assert st.verdict == "host-bound" and st.host_ms > 10 * st.device_ms
    assert 0.67 * 4.8 < st.host_ms < 1.5 * 4.8
    table = st.table()
    assert "after 2 warm-up steps" in table and "modeled" in table and "GAUDI2" in table
    assert st.labels["host"].endswith("modeled (Gaudi clock)") and "measured" not in st.labels["wall"]


def test_other_card_is_the_same_recording_retimed():
    st = lab.step_times(_lazy_step(), steps=3, warmup=2, card="gaudi2")
    g1 = st.on("gaudi")
    assert g1.card.name == "gaudi" and g1.events is st.events
    assert g1.host_ms == st.host_ms                     # one host model for every card
    assert g1.device_ms > st.device_ms                  # first-gen Gaudi's device is slower


def test_cold_steps_show_their_compiles():
    # a batch size no other test compiles: the first step compiles its recipes, the later ones do not
    st = lab.step_times(_lazy_step(batch=173), steps=3, warmup=0)
    # (Adadelta's second step compiles its optimizer graph again: its state exists from then on)
    assert st.warmup == 0 and st.steps[0].compiles >= 2 and st.steps[2].compiles == 0
    assert st.steps[0].host_ns > 2 * st.steps[2].host_ns          # a compile is modeled host time
    assert "compile" in st.table()
    warm = st.after(2)
    assert len(warm.steps) == 1 and warm.warmup == 2 and warm.compiles == 0 and warm.wall_ms < st.wall_ms / 5


def test_your_code_is_measured_and_kept_apart():
    quiet = lab.step_times(_lazy_step(), steps=2, warmup=2)
    sleepy = lab.step_times(_lazy_step(sleep=0.002), steps=2, warmup=2)
    assert quiet.user_ms == 0 and sleepy.user_ms >= 2.0           # time.sleep is your code, measured
    assert sleepy.host_ms == quiet.host_ms                        # the modeled host work does not change
    assert sleepy.measured and "measured" in sleepy.labels["wall"]
    assert sleepy.wall_ms >= quiet.wall_ms + 2.0


def test_compare_lazy_and_replay_on_one_card():
    lazy = lab.step_times(_lazy_step(), steps=3, warmup=2, name="lazy")
    replay = lab.step_times(_replay_step(), steps=3, warmup=2, name="replay")
    cmp = lab.compare({"lazy": lazy, "replay": replay})
    assert replay.host_ms < 0.2 * lazy.host_ms                    # a replay traces nothing
    assert cmp.speedup("replay") > 5 and cmp.speedup("lazy") == 1.0
    assert "replay" in cmp.table() and "speed-up" in cmp.table()
    with pytest.raises(ValueError, match="different cards"):
        lab.compare({"lazy": lazy, "gaudi": replay.on("gaudi")})
    with pytest.raises(TypeError, match="not a StepTimes"):
        lab.compare({"lazy": lazy, "x": 3.0})


def test_a_recording_you_made_split_at_mark_steps():
    step = _lazy_step()
    step()
    torch.hpu.synchronize()
    with ev.Collector() as c:
        for _ in range(3):
            step()
        torch.hpu.synchronize()
    split = lab.step_times_of(c.events, every=2, card="gaudi2")
    assert len(split.steps) == 3 and split.split
    direct = lab.step_times(step, steps=3, warmup=0)
    assert split.steps[1].host_ns == direct.steps[1].host_ns
    averaged = lab.step_times_of(c.events, steps=3)
    assert not averaged.split and abs(averaged.wall_ms - split.wall_ms) < 1e-5
    with pytest.raises(ValueError, match="splits into 3 steps"):
        lab.step_times_of(c.events, steps=4, every=2)
    with pytest.raises(ValueError, match="needs steps"):
        lab.step_times_of(c.events)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="steps must be a positive int"):
        lab.step_times(lambda: None, steps=0)
    with pytest.raises(ValueError, match="warmup"):
        lab.step_times(lambda: None, steps=2, warmup=-1)
    with pytest.raises(ValueError, match="unknown device"):
        lab.step_times(_lazy_step(), steps=1, warmup=0, card="gaudi9")
    with pytest.raises(ValueError, match="holds no event"):
        lab.step_times_of([], steps=1)


def test_import_hpu_lab_does_not_import_the_lab():
    import subprocess
    import sys
    code = ("import sys, hpu_lab; assert 'hpu_lab.lab' not in sys.modules; "
            "from hpu_lab import lab; lab.step_times; "
            "assert not any(m in sys.modules for m in ('matplotlib', 'ipywidgets', 'networkx'))")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_step_times_does_not_count_work_left_pending_before_it():
    import torch
    from hpu_lab import core as htcore
    h = torch.randn(64, 64, device="hpu")
    for _ in range(30):                  # an earlier cell's work, never ended by a mark_step
        h = torch.tanh(h)
    w = torch.randn(8, 8, device="hpu")
    htcore.mark_step()
    h = torch.randn(64, 64, device="hpu")
    for _ in range(30):
        h = torch.tanh(h)

    kept = []                            # a step's result stays alive, so its ops are run

    def step():
        kept.append((w * 2).sum())
        htcore.mark_step()
    t = lab.step_times(step, steps=2, warmup=0)
    built = [e.node_count for e in t.events if isinstance(e, ev.GraphBuilt)]
    assert len(built) == 2 and built[0] == built[1], f"the first step's graph took the leftover ops: {built}"
