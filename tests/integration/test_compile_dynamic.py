"""torch.compile after a batch-size change: dynamo recompiles with a dynamic dimension, and the
result must still be CPU's (issue 10, point 1: a TorchScript lowering once returned a constant for
a convolution traced inside dynamo's runtime, so a model evaluated at a new batch size scored at
chance). A recipe executor must never change a result."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hpu_lab  # noqa: F401  (registers hpu_backend)
from hpu_lab import config
from hpu_lab.compiler import lowering

torch._dynamo = pytest.importorskip("torch._dynamo")


def _net():
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 26 * 26, 10))


@pytest.fixture(params=["eager", "lazy"])
def mode(request):
    config.set(PT_HPU_LAZY_MODE="0" if request.param == "eager" else "1")
    torch._dynamo.reset()
    yield request.param
    torch._dynamo.reset()
    config.reload()


def _pair():
    torch.manual_seed(0)
    ref = _net()
    model = _net()
    model.load_state_dict(ref.state_dict())
    return ref, model.to("hpu")


def _train(ref, model, steps, bs):
    cmodel = torch.compile(model, backend="hpu_backend")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(steps):
        x, y = torch.randn(bs, 1, 28, 28), torch.randint(0, 10, (bs,))
        for m, o, xx, yy in ((cmodel, opt, x.to("hpu"), y.to("hpu")), (ref, ropt, x, y)):
            o.zero_grad()
            F.cross_entropy(m(xx), yy).backward()
            o.step()
    return cmodel


def test_train_at_one_batch_size_evaluate_at_two_others_equals_cpu(mode):
    ref, model = _pair()
    cmodel = _train(ref, model, 3, 16)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)
    model.eval()
    ref.eval()
    with torch.no_grad():
        for bs in (24, 32, 24):                 # the recompile with a dynamic batch dimension
            x = torch.randn(bs, 1, 28, 28)
            torch.testing.assert_close(cmodel(x.to("hpu")).cpu(), ref(x), rtol=1e-5, atol=1e-5)


def test_mark_dynamic_input_equals_cpu(mode):
    ref, model = _pair()
    model.eval()
    ref.eval()
    cmodel = torch.compile(model, backend="hpu_backend")
    with torch.no_grad():
        for bs in (8, 12, 20):
            x = torch.randn(bs, 1, 28, 28)
            hx = x.to("hpu")
            torch._dynamo.mark_dynamic(hx, 0)
            torch.testing.assert_close(cmodel(hx).cpu(), ref(x), rtol=1e-5, atol=1e-5)


def test_a_trace_holding_a_constant_is_not_used():
    """The check that keeps a bad trace out: a trace that recorded a value instead of the op."""
    def f(x, w):
        return torch.ops.aten.mm.default(x, w).relu()
    gm = torch.fx.symbolic_trace(f)
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    good = torch.jit.trace(gm, (x, w))
    assert lowering.faithful(good, gm)
    baked = f(x, w)                            # the mm ran, but the trace did not record it
    bad = torch.jit.trace(lambda x, w: torch.ops.aten.relu.default(baked) + 0 * x.sum(), (x, w))
    assert not lowering.faithful(bad, gm)


def test_a_traced_recipe_runs_the_fx_code_for_inputs_laid_out_otherwise():
    """The trace baked the layout branch of its example inputs (graph._layout_ok): a buffer laid
    out differently (a launch output that came out in another layout) must get the fx code."""
    import hpu_lab.core as htcore
    from hpu_lab.compiler import cache
    config.set(PT_HPU_LAZY_MODE="1")
    try:
        x = torch.randn(4, 6)
        y = x.to("hpu").t()[1:3] * 2          # reads a view of the input's storage
        htcore.mark_step()
        assert torch.equal(y.cpu(), x.t()[1:3] * 2)
        (r,) = [r for r in cache.recipes() if r.backend == "torchscript"][-1:]
        other = torch.empty_strided((4, 6), (1, 4)).copy_(x)       # same values, column-major
        (got,) = r.run([other])
        assert torch.equal(got, x.t()[1:3] * 2)
    finally:
        config.reload()
