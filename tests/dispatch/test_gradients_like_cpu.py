"""Gradients equal to CPU's bit for bit where the math is the same (issue 10, point 7): prod's
backward used to take torch's formula for tensor subclasses (cumprod-based), CPU's the quotient."""
import pytest
import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config

INPUTS = [torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)),
          torch.tensor([[1., 0, 2], [3, 4, 5]]), torch.tensor([1., 0, 0, 2]), torch.tensor(3.),
          torch.empty(0), torch.empty(3, 0)]      # empty: the gradient is empty (it raised in narrow)
KWARGS = [{}, {"dim": 0}, {"dim": -1, "keepdim": True}, {"dtype": torch.float64}]


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("kw", KWARGS, ids=str)
@pytest.mark.parametrize("x", INPUTS, ids=lambda x: str(tuple(x.shape)))
def test_prod_gradient_is_cpus(x, kw, lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    xs = [x.clone().requires_grad_(), x.to("hpu").requires_grad_()]
    outs = [t.prod(**kw) for t in xs]
    g = torch.randn(outs[0].shape, dtype=outs[0].dtype, generator=torch.Generator().manual_seed(1))
    outs[0].backward(g)
    outs[1].backward(g.to("hpu"))
    htcore.mark_step()
    assert torch.equal(outs[1].cpu(), outs[0])
    assert torch.equal(xs[1].grad.cpu(), xs[0].grad)


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("shape, kw", [((0,), {}), ((3, 0), {}), ((3, 0), {"dim": 1}), ((0, 4), {"dim": 0}),
                                       ((0, 4), {"dim": 1, "keepdim": True})], ids=str)
def test_prod_gradient_of_an_empty_tensor(shape, kw, lazy):
    # the gradient sweep's prod samples 10, 11, 25, 33, 34: "start (0) + length (-1) exceeds
    # dimension size (0)" from the safe-zeros formula over an empty dimension
    config.set(PT_HPU_LAZY_MODE=lazy)
    x = torch.randn(shape)
    xs = [x.clone().requires_grad_(), x.to("hpu").requires_grad_()]
    gs = [torch.autograd.grad(t.prod(**kw).sum(), t)[0] for t in xs]
    htcore.mark_step()
    assert gs[1].shape == gs[0].shape and torch.equal(gs[1].cpu(), gs[0])


def test_prod_double_backward_runs():
    x = torch.randn(3, 4)
    xs = [x.clone().requires_grad_(), x.to("hpu").requires_grad_()]
    gs = [torch.autograd.grad(t.prod(1).sum(), t, create_graph=True)[0] for t in xs]
    hs = [torch.autograd.grad(g.sum(), t)[0] for g, t in zip(gs, xs)]
    torch.testing.assert_close(hs[1].cpu(), hs[0], rtol=1e-5, atol=1e-6)


def _layout(t, kind):
    if kind == "col":
        return t.mT.contiguous().mT
    if kind == "perm" and t.dim() == 3:
        return t.permute(1, 0, 2).contiguous().permute(1, 0, 2)
    return t


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("left, transpose", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("shape", [(5, 5), (5, 2), (2, 4, 3)], ids=str)
@pytest.mark.parametrize("kind", ["row", "col", "perm"])
def test_ormqr_gradients_have_cpus_layout_and_bits(shape, kind, left, transpose, lazy):
    # the gradient sweep's 48 ormqr layout samples: the subclass formula returned the input's
    # gradient contiguous; CPU's keeps the input's layout (column-major from geqrf)
    config.set(PT_HPU_LAZY_MODE=lazy)
    gen = torch.Generator().manual_seed(2)
    *b, m, n = shape
    a = _layout(torch.randn(shape, generator=gen), kind)
    tau = torch.randn(*b, n, generator=gen)
    other = torch.randn(*b, m, 3, generator=gen) if left else torch.randn(*b, 3, m, generator=gen)
    gout = torch.randn(other.shape, generator=gen)
    cpu = [t.clone().requires_grad_() for t in (a, tau, other)]
    hpu = [t.to("hpu").requires_grad_() for t in (a, tau, other)]
    assert hpu[0].stride() == cpu[0].stride()
    gc = torch.autograd.grad(torch.ormqr(*cpu, left, transpose), cpu, gout)
    gh = torch.autograd.grad(torch.ormqr(*hpu, left, transpose), hpu, gout.to("hpu"))
    htcore.mark_step()
    for c, h in zip(gc, gh):
        assert h.stride() == c.stride()
        assert torch.equal(h.cpu(), c)


def test_ormqr_double_backward_and_no_grad_run():
    a, tau, c = torch.randn(5, 3).mT.contiguous().mT, torch.randn(3), torch.randn(5, 2)
    res = []
    for dev in ("cpu", "hpu"):
        xs = [t.to(dev).requires_grad_() for t in (a, tau, c)]
        g = torch.autograd.grad(torch.ormqr(*xs).pow(2).sum(), xs, create_graph=True)
        gg = torch.autograd.grad(sum(t.sum() for t in g), xs)
        with torch.no_grad():
            plain = torch.ormqr(*xs)
        assert plain.grad_fn is None
        res.append([t.cpu() for t in (*g, *gg, plain)])
    for x, y in zip(*res):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5)
