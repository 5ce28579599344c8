"""wrap_in_hpu_graph / wrap_in_hpu_graph_func for inference (claim I2)."""
import torch
import torch.nn as nn

import hpu_lab.core as htcore
from hpu_lab import config
from hpu_lab import events as ev
from hpu_lab.runtime import memory

TRACING = (ev.OpAccumulated, ev.GraphBuilt, ev.CacheLookup, ev.Compile)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4)).eval()


def test_capture_once_then_replay_returning_the_same_objects():
    cpu = _model()
    model = torch.hpu.wrap_in_hpu_graph(_model().to("hpu"))
    outs = []
    with torch.no_grad():
        with ev.Collector() as c:
            for _ in range(4):
                x = torch.randn(5, 8)
                out = model(x.to("hpu"))
                outs.append(out)
                assert torch.allclose(out.cpu(), cpu(x), atol=1e-6)
    assert len(c.of(ev.CaptureEnd)) == 1 and len(c.of(ev.Replay)) == 3
    assert all(o is outs[0] for o in outs)                 # the cached output objects (I2)
    # after the capture nothing is traced, built, looked up or compiled
    end = c.of(ev.CaptureEnd)[0].t_end
    assert not [e for e in c.events if isinstance(e, TRACING) and e.t_start > end]


def test_one_graph_per_input_signature_and_max_graphs():
    model = torch.hpu.wrap_in_hpu_graph(_model().to("hpu"), max_graphs=2)
    with torch.no_grad(), ev.Collector(kinds=[ev.CaptureEnd]) as c:
        for n in (1, 2, 3, 1, 2, 3):
            model(torch.randn(n, 8).to("hpu"))
    assert len(c.events) == 2                              # the third shape runs the plain forward
    model.clear_cache()
    with torch.no_grad(), ev.Collector(kinds=[ev.CaptureEnd]) as c:
        model(torch.randn(1, 8).to("hpu"))
    assert len(c.events) == 1


def test_bypass_and_warmup_mode():
    cpu = _model()
    model = torch.hpu.wrap_in_hpu_graph(_model().to("hpu"))
    x = torch.randn(2, 8)
    with torch.no_grad():
        with ev.Collector(kinds=[ev.CaptureEnd, ev.Replay]) as c:
            y = model(x.to("hpu"), bypass_hpu_graphs=True)
        assert not c.events and torch.allclose(y.cpu(), cpu(x), atol=1e-6)
        first = model(x.to("hpu"))
        with ev.Collector(kinds=[ev.Replay, ev.MarkStep]) as c:
            again = model(torch.randn(2, 8).to("hpu"), warmup_mode=True)
        assert again is first and not c.of(ev.Replay) and len(c.of(ev.MarkStep)) == 1
        assert torch.allclose(first.cpu(), cpu(x), atol=1e-6)   # warm-up did not replay


def test_wrap_function_and_clear_inputs():
    w = torch.randn(4, 4).to("hpu")

    def f(a, b, alpha=1.0):
        return a @ w + alpha * b

    gf = torch.hpu.wrap_in_hpu_graph_func(f)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    r1 = gf(a.to("hpu"), b.to("hpu"))
    r2 = gf(a.to("hpu"), b.to("hpu"), alpha=2.0)          # another non-tensor value: another graph
    assert len(gf.hpu_graph_cache) == 2
    gf.clear_inputs()
    r3 = gf(a.to("hpu"), (b * 3).to("hpu"))
    assert r3 is r1
    assert torch.allclose(r3.cpu(), a @ w.cpu() + 3 * b, atol=1e-5)
    assert torch.allclose(r2.cpu(), a @ w.cpu() + 2 * b, atol=1e-5)


def test_disable_tensor_cache_reads_each_calls_inputs_and_keeps_none():
    cpu = _model()
    model = torch.hpu.wrap_in_hpu_graph(_model().to("hpu"), disable_tensor_cache=True)
    with torch.no_grad():
        with ev.Collector(kinds=[ev.Launch, ev.Replay]) as c:
            x = torch.randn(64, 8)
            y = model(x.to("hpu"))
        assert len(c.of(ev.Replay)) == 1                   # dry-run capture, then one replay
        assert torch.allclose(y.cpu(), cpu(x), atol=1e-6)
        cache = model.forward.hpu_graph_cache
        assert all(cp.graph_inputs is None for cp in cache.values())
        htcore.mark_step()
        torch.hpu.synchronize()
        before = memory.stats()["InUse"]
        x2 = torch.randn(64, 8)
        y2 = model(x2.to("hpu"))
        assert y2 is y and torch.allclose(y.cpu(), cpu(x2), atol=1e-6)
    del x2
    assert memory.stats()["InUse"] <= before               # the input is not held by the cache


def test_env_var_overrides_disable_tensor_cache():
    config.set(PT_HPUGRAPH_DISABLE_TENSOR_CACHE="1")
    model = torch.hpu.wrap_in_hpu_graph(_model().to("hpu"), disable_tensor_cache=False)
    with torch.no_grad():
        model(torch.randn(2, 8).to("hpu"))
    assert all(cp.graph_inputs is None for cp in model.forward.hpu_graph_cache.values())
