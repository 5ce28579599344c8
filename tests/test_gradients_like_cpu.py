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


def test_prod_double_backward_runs():
    x = torch.randn(3, 4)
    xs = [x.clone().requires_grad_(), x.to("hpu").requires_grad_()]
    gs = [torch.autograd.grad(t.prod(1).sum(), t, create_graph=True)[0] for t in xs]
    hs = [torch.autograd.grad(g.sum(), t)[0] for g, t in zip(gs, xs)]
    torch.testing.assert_close(hs[1].cpu(), hs[0], rtol=1e-5, atol=1e-6)
