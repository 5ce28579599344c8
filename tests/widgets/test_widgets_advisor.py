"""Each advisor rule fires on its pattern and stays quiet otherwise."""
from hpu_lab import events as ev
from test_widgets_fixtures import Sim, device_bound_loop, host_bound_loop
from widgets import advisor as adv
import pytest  # noqa: E402

pytestmark = pytest.mark.usefixtures("measured_clock")   # synthetic spans: the measured clock


def _quiet_loop(steps=6):
    """Device-bound, one compile, no syncs in the loop, no fallback: nothing but 'device-bound'."""
    return device_bound_loop(steps)


def test_host_bound_rule():
    msg = adv.host_or_device_bound(host_bound_loop(steps=6))
    assert len(msg) == 1
    assert msg[0].startswith("host-bound: device idle") and "HPU Graphs" in msg[0] and "seed 000" in msg[0]
    assert "compile steps left out" in msg[0]
    assert "increase the batch size" in msg[0]                 # seed 003: the perf tool's advice


def test_host_bound_rule_ignores_compile_steps():
    s = Sim()
    s.op(n=5)
    s.mark_step(key="k0", compile_ms=500.0, device_ms=20.0)    # step 0: compiling makes it look host-bound
    for _ in range(4):
        s.op(n=5)
        s.mark_step(key="k0", device_ms=20.0)
    s.sync("torch.hpu.synchronize()")
    msg = adv.host_or_device_bound(s.events)
    assert msg[0].startswith("device-bound")


def test_host_bound_with_replay_says_host_work_is_outside_the_graph():
    s = Sim()
    s.capture()
    for _ in range(4):
        s.host(10)
        s.replay(device_ms=1.0)
    msg = adv.host_or_device_bound(s.events)
    assert msg[0].startswith("host-bound even with HPU Graph replay")


def test_device_bound_rule():
    msg = adv.host_or_device_bound(_quiet_loop())
    assert msg[0].startswith("device-bound: device busy") and "would not make this faster" in msg[0]
    assert "batch size" not in msg[0]
    assert adv.host_or_device_bound([ev.OpAccumulated(0, 0, "host", 0)]) == []


def test_shape_recompile_rule():
    msg = adv.shape_recompiles(host_bound_loop(steps=6, shapes_vary=True))
    assert msg == ['recompiled 3 times: input shapes vary (e.g. "input 0 shape changed (32, 64) -> (16, 64)" '
                   "at step 1) \u2014 pad the last batch or use drop_last (seed 002)"]
    assert adv.shape_recompiles(host_bound_loop(steps=6)) == []


def test_constant_recompile_rule():
    s = Sim()
    for i in range(4):
        s.op(n=3)
        s.mark_step(key=f"k{i}", reason=None if i == 0 else
                    f"constant changed {i - 1} -> {i} at node 2 aten::mul (train.py:18) (loop variable?)")
    msg = adv.constant_recompiles(s.events)
    assert len(msg) == 1 and msg[0].startswith("loop variable became a graph constant (seed 003): recompiled 3 times")
    assert "torch.roll" in msg[0]
    assert adv.shape_recompiles(s.events) == [] and adv.other_recompiles(s.events) == []
    assert adv.constant_recompiles(host_bound_loop(shapes_vary=True)) == []


def test_other_recompile_rule():
    s = Sim()
    s.op()
    s.mark_step(key="a")
    s.op()
    s.mark_step(key="b", reason="new op aten::nonzero at node 14 (train.py:42) where there was aten::mul")
    msg = adv.other_recompiles(s.events)
    assert len(msg) == 1 and "recompiled once" in msg[0] and "mark_step" in msg[0] and "seed 003" in msg[0]


def test_item_sync_rule_fires_every_step_not_every_tenth():
    msg = adv.value_read_syncs(host_bound_loop(steps=6, item_every=1))
    assert len(msg) == 1
    assert msg[0].startswith(".item() (e.g. loss.item()) at train.py:22 forces a host sync in 6 of 6 steps")
    assert "seed 003: print frequency" in msg[0]
    assert adv.value_read_syncs(host_bound_loop(steps=20, item_every=10)) == []


def test_item_sync_rule_with_two_mark_steps_per_iteration():
    s = Sim()
    for _ in range(5):
        s.op(n=5)
        s.mark_step(key="fwd_bwd")
        s.op(n=2)
        s.mark_step(key="opt")
        s.sync("print")
    msg = adv.value_read_syncs(s.events)
    assert len(msg) == 1 and msg[0].startswith("print at train.py:22 forces a host sync in 5 of 10 steps")


def test_explicit_synchronize_is_not_a_value_read():
    s = Sim()
    for _ in range(5):
        s.op()
        s.mark_step()
        s.sync("torch.hpu.synchronize()")
    assert adv.value_read_syncs(s.events) == []


def test_data_dependent_sync_rule():
    s = Sim()
    for _ in range(2):
        s.op()
        s.sync("data-dependent op aten::nonzero")
    msg = adv.data_dependent_syncs(s.events)
    assert msg == ["data-dependent op aten::nonzero forced a host sync 2 times: its output shape depends on the "
                   "values, so the graph is cut there (seed 000: dynamic ops stay outside the graph)"]


def test_cpu_fallback_rule():
    s = Sim()
    for _ in range(3):
        s.fallback("aten::digamma", ("BFloat16",))
    s.fallback("aten::lgamma", ("Float",))
    msg = adv.cpu_fallbacks(s.events)
    assert msg[0].startswith("3 CPU fallbacks of aten::digamma (BFloat16)") and "seed 003" in msg[0]
    assert msg[1].startswith("1 CPU fallback of aten::lgamma (Float)")
    assert adv.cpu_fallbacks(host_bound_loop()) == []


def test_error_rule():
    evs = [ev.Error(0, 0, "host", 0, message="aten::mm: shapes (2, 3) and (4, 5) cannot be multiplied")]
    assert adv.errors(evs) == ["1 error reported, first: aten::mm: shapes (2, 3) and (4, 5) cannot be multiplied"]


def test_advise_on_a_quiet_loop_only_says_device_bound():
    tips = adv.advise(_quiet_loop())
    assert len(tips) == 1 and tips[0].startswith("device-bound")


def test_advise_order_and_html():
    evs = host_bound_loop(steps=6, shapes_vary=True)
    tips = adv.advise(evs)
    assert tips[0].startswith("host-bound") and tips[1].startswith("recompiled 3 times")
    assert tips[2].startswith(".item()")
    assert adv.advice_html(evs).count("<li") == 3
    assert "Nothing to flag" in adv.advice_html([])
