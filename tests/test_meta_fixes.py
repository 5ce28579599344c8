"""Meta kernels corrected to the CPU kernel's shapes (hpu_lab/meta_fixes.py), and the loss that needed
it: multilabel_margin_loss on hpu equals CPU in every dtype Gaudi supports, forward and backward."""
import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("shape", [(6,), (3, 6), (0, 6)])
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_multilabel_margin_loss_forward_meta_shape_is_the_cpus(shape, reduction):
    x, t = torch.rand(shape), torch.zeros(shape, dtype=torch.long)
    cpu = torch.ops.aten.multilabel_margin_loss_forward(x, t, reduction)
    meta = torch.ops.aten.multilabel_margin_loss_forward(x.to("meta"), t.to("meta"), reduction)
    assert [(c.shape, c.dtype) for c in cpu] == [(m.shape, m.dtype) for m in meta]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(6,), (2, 6)])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_on_hpu(dtype, shape, reduction):
    torch.manual_seed(0)
    x = torch.rand(shape).to(dtype)
    t = torch.multinomial(torch.rand((1, 6) if len(shape) == 1 else shape), 6).reshape(shape)
    t[..., 3] = -1                                    # labels end at the first -1
    xc = x.float().clone().requires_grad_()
    ref = F.multilabel_margin_loss(xc, t, reduction=reduction)
    ref.backward(torch.ones_like(ref))
    xh = x.to("hpu").requires_grad_()
    out = F.multilabel_margin_loss(xh, t.to("hpu"), reduction=reduction)
    out.backward(torch.ones_like(out))
    assert out.shape == ref.shape and out.dtype == dtype and xh.grad.dtype == dtype
    # bf16/fp16: computed in float32 and rounded once (the CPU has no kernel for them)
    assert torch.equal(out.cpu(), ref.detach().to(dtype))
    assert torch.equal(xh.grad.cpu(), xc.grad.to(dtype))
