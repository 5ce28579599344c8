"""SiLU's and Mish's backward on hpu: CPU's kernel, bit for bit (issue 38 item 6).

Both backward ops are CompositeImplicitAutograd and have a CPU kernel: CPU runs the kernel, and a
device without one got the decomposition (sigmoid, sub, mul, ...), 1.2e-7 away from CPU."""
import pytest
import torch
import torch.nn.functional as F

import hpu_lab.core as htcore
from hpu_lab import config


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("act", [F.silu, F.mish], ids=["silu", "mish"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_equals_cpu_bit_for_bit(act, lazy, dtype, monkeypatch):
    from hpu_lab import tensor
    seen, real = [], tensor._dispatch
    monkeypatch.setattr(tensor, "_dispatch", lambda f, a, k: seen.append(str(f)) or real(f, a, k))
    config.set(PT_HPU_LAZY_MODE=lazy)
    torch.manual_seed(0)
    x = (torch.randn(64, 33) * 4).to(dtype)
    a = x.clone().requires_grad_()
    act(a).sum().backward()
    h = x.to("hpu").requires_grad_()
    act(h).sum().backward()
    htcore.mark_step()
    assert torch.equal(h.grad.cpu(), a.grad)
    assert f"aten.{act.__name__}_backward.default" in seen
    assert "aten.sigmoid.default" not in seen


def test_double_backward_still_works():
    """create_graph: CPU's formula is the differentiable decomposition there, and so is hpu's."""
    torch.manual_seed(0)
    x = torch.randn(16, 5)
    a, h = x.clone().requires_grad_(), x.to("hpu").requires_grad_()
    ga, = torch.autograd.grad(F.silu(a).sum(), a, create_graph=True)
    gh, = torch.autograd.grad(F.silu(h).sum(), h, create_graph=True)
    gga, = torch.autograd.grad(ga.sum(), a)
    ggh, = torch.autograd.grad(gh.sum(), h)
    assert torch.equal(ggh.cpu(), gga)
