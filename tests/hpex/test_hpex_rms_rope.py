"""hpex FusedRMSNorm and the RoPE helpers on hpu equal their plain-torch definitions, with gradients."""
import pytest
import torch

from hpu_lab.hpex.kernels import (RotaryPosEmbeddingHelperV1, RotaryPosEmbeddingHelperV2,
                                  RotaryPosEmbeddingHelperV3, RotaryPosEmbeddingMode, apply_rotary_pos_emb)
from hpu_lab.hpex.normalization import FusedRMSNorm, RmsNormBwdMode


def _grads(fn, *xs):
    xs = [x.detach().clone().requires_grad_() for x in xs]
    out = fn(*xs)
    w = torch.linspace(-1, 1, out.numel()).view(out.shape).to(out.device, out.dtype)
    (out * w).sum().backward()
    return out.detach().cpu().float(), [x.grad.cpu().float() for x in xs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rms_norm(dtype):
    torch.manual_seed(0)
    x, g = torch.randn(3, 4, 16), torch.rand(16) + 0.5
    ref, (rdx, rdg) = _grads(lambda x, g: x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * g, x, g)
    out, (dx, dg) = _grads(lambda x, g: FusedRMSNorm.apply(x, g, 1e-6, True, RmsNormBwdMode.DEFAULT.value, False),
                           x.to(dtype).to("hpu"), g.to(dtype).to("hpu"))
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    for a, b in ((out, ref), (dx, rdx), (dg, rdg)):
        torch.testing.assert_close(a, b, atol=tol * max(1.0, b.abs().max().item()), rtol=tol)


def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), -1)


def test_rope_v1_with_offset_and_v2_with_position_ids():
    torch.manual_seed(0)
    p = torch.randn(6, 2, 8)
    cos, sin = torch.randn(6, 1, 11), torch.randn(6, 1, 11)          # offset 3: the last 8 values
    ref, (rg,) = _grads(lambda p: p * cos[..., 3:] + _rotate_half(p) * sin[..., 3:], p)
    out, (g,) = _grads(lambda p: RotaryPosEmbeddingHelperV1.apply(p, cos.to("hpu"), sin.to("hpu"), 3), p.to("hpu"))
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, rg)

    p = torch.randn(2, 3, 5, 8)
    cos, sin, pos = torch.randn(1, 1, 9, 8), torch.randn(1, 1, 9, 8), torch.randint(0, 9, (2, 5))
    c, s = cos[0, 0][pos].unsqueeze(1), sin[0, 0][pos].unsqueeze(1)
    ref, (rg,) = _grads(lambda p: p * c + _rotate_half(p) * s, p)
    out, (g,) = _grads(lambda p: RotaryPosEmbeddingHelperV2.apply(p, cos.to("hpu"), sin.to("hpu"), pos.to("hpu")),
                       p.to("hpu"))
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, rg)


def test_rope_pairwise_and_chatglm_cache():
    torch.manual_seed(0)
    p, cos, sin = torch.randn(2, 3, 4, 6), torch.randn(1, 3, 1, 6), torch.randn(1, 3, 1, 6)
    rot2 = torch.stack((-p[..., 1::2], p[..., ::2]), -1).flatten(-2)
    out = apply_rotary_pos_emb(p.to("hpu"), cos.to("hpu"), sin.to("hpu"), None, 0, RotaryPosEmbeddingMode.PAIRWISE)
    torch.testing.assert_close(out.cpu(), p * cos + rot2 * sin)

    x, cache = torch.randn(4, 2, 3, 10), torch.randn(16, 3, 2)       # rotates 6 of 10 channels
    cc = cache[:4].view(4, 1, 1, 3, 2)                              # (cos, sin) per position and pair

    def chatglm(x):
        xs = x[..., :6].reshape(4, 2, 3, 3, 2)
        rot = torch.stack((xs[..., 0] * cc[..., 0] - xs[..., 1] * cc[..., 1],
                           xs[..., 1] * cc[..., 0] + xs[..., 0] * cc[..., 1]), -1).flatten(3)
        return torch.cat((rot, x[..., 6:]), -1)

    ref, (rg,) = _grads(chatglm, x)
    out, (g,) = _grads(lambda x: RotaryPosEmbeddingHelperV3.apply(x, cache.to("hpu")), x.to("hpu"))
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, rg)
