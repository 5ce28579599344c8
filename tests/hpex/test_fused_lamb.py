"""hpex FusedLamb and torch.ops.hpu.optimizer_lamb_* (hpu_lab/kernels/custom_ops.py): the update equals a
plain-torch LAMB written here from its definition (global-norm clipping, Adam moments with bias
correction, trust ratio ||w|| / ||u||)."""
import copy

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab.hpex.optimizers import FusedLamb


def _reference_step(params, state, step, lr, b1, b2, eps, wd, max_norm, use_lamb):
    grads = [p.grad for p in params]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    clip = norm / max_norm if norm > max_norm else torch.tensor(1.0, dtype=torch.float64)
    for p, g in zip(params, grads):
        m, v = state.setdefault(id(p), (torch.zeros_like(p, dtype=torch.float64),
                                        torch.zeros_like(p, dtype=torch.float64)))
        g = g.double() / clip
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        u = (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + eps) + wd * p.double()
        wn, un = p.double().norm(), u.norm()
        trust = wn / un if (wd != 0 or use_lamb) and wn > 0 and un > 0 else 1.0
        p.data = (p.double() - lr * trust * u).float()


@pytest.mark.parametrize("wd, use_lamb, max_norm", [(0.01, False, 1.0), (0.0, True, 0.05), (0.0, False, 10.0)])
def test_fused_lamb_equals_the_definition(wd, use_lamb, max_norm):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    ref = copy.deepcopy(model)
    hpu_model = copy.deepcopy(model).to("hpu")
    opt = FusedLamb(hpu_model.parameters(), lr=0.02, weight_decay=wd, use_lamb=use_lamb, max_grad_norm=max_norm)
    state = {}
    for step in range(1, 4):
        x, y = torch.randn(7, 6), torch.randn(7, 2)
        torch.nn.functional.mse_loss(hpu_model(x.to("hpu")), y.to("hpu")).backward()
        opt.step()
        opt.zero_grad()
        htcore.mark_step()
        for p in ref.parameters():
            p.grad = None
        torch.nn.functional.mse_loss(ref(x), y).backward()
        _reference_step(list(ref.parameters()), state, step, 0.02, 0.9, 0.999, 1e-6, wd, max_norm, use_lamb)
    for a, b in zip(ref.parameters(), hpu_model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=1e-6, rtol=1e-5)


def test_lamb_fused_norm_clips_only_above_the_maximum():
    g = [torch.tensor([3.0, 0.0]).to("hpu"), torch.tensor([[4.0]]).to("hpu")]       # ||g|| = 5
    assert torch.ops.hpu.optimizer_lamb_fused_norm(g, 2.0).cpu().tolist() == [2.5]
    assert torch.ops.hpu.optimizer_lamb_fused_norm(g, 8.0).cpu().tolist() == [1.0]


def test_fused_lamb_refuses_amsgrad():
    with pytest.raises(RuntimeError, match="does not support the AMSGrad variant"):
        FusedLamb([torch.zeros(2, requires_grad=True)], amsgrad=True)
