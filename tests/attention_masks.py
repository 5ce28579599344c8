"""OpInfo-style entries for the attention calls that transformers' SDPA path makes (issue 32).

PyTorch's own OpInfo samples for ``scaled_dot_product_attention`` use no boolean mask, and none of
a padded batch, so the bool-mask bug (a bool ``attn_mask`` added as a 0/1 bias) passed the sweep.
These entries, added to ``opinfo_diff.ops_for``, run in every configuration of the sweep (float32,
bfloat16, gradients; lazy and eager) and in full in ``make test`` (``test_core_opinfo``). Each
sample is a mask transformers builds (``masking_utils.sdpa_mask``, ``_prepare_4d_attention_mask``):

- padded batches: a 4-D bool mask (batch, 1, q, kv) broadcast over the heads, causal and padding
  combined, left padding (so the padded query rows are fully masked) and right padding;
- a padding-only mask (batch, 1, 1, kv) broadcast over heads and queries; the decode step (q = 1);
- ``is_causal=True`` with no mask (what transformers passes when the mask is all ones);
- an additive float mask with ``finfo.min`` where masked (older transformers), and with -inf;
- a per-head bool mask (batch, heads, q, kv), a 2-D (q, kv) one, causal with a mask, a custom scale;
- grouped-query attention (``enable_gqa=True``, fewer key/value heads) with a padding mask;
- q, k, v laid out as every HF attention layer makes them: ``view(b, s, h, d).transpose(1, 2)``;
- 3-D inputs (CPU takes the math kernel there) with a bool mask.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    from torch.testing._internal.common_dtype import floating_types_and
    from torch.testing._internal.opinfo.core import OpInfo, SampleInput
except Exception:            # a torch without its testing package: opinfo_diff skips
    OpInfo = None

B, H, L, D = 3, 4, 5, 8


def _hf_layout(shape, dtype, requires_grad, g):
    """(b, h, s, d) as a transposed view of (b, s, h, d), the layout of every HF attention layer."""
    b, h, s, d = shape
    t = torch.randn(b, s, h, d, generator=g).to(dtype).transpose(1, 2)
    return t.requires_grad_(requires_grad)


def _padding(lengths, kv, left):
    """(batch, kv) bool: True on real tokens."""
    pos = torch.arange(kv)
    keep = [(pos >= kv - n) if left else (pos < n) for n in lengths]
    return torch.stack(keep)


def _causal(q, kv):
    return torch.ones(q, kv, dtype=torch.bool).tril(kv - q)


def sample_inputs_transformers_masks(op_info, device, dtype, requires_grad, **kwargs):
    g = torch.Generator().manual_seed(32)

    def qkv(q_len=L, kv_len=L, kv_heads=H):
        return (_hf_layout((B, H, q_len, D), dtype, requires_grad, g),
                _hf_layout((B, kv_heads, kv_len, D), dtype, requires_grad, g),
                _hf_layout((B, kv_heads, kv_len, D), dtype, requires_grad, g))

    lengths = [L, L - 2, 1]
    for left in (True, False):
        pad = _padding(lengths, L, left)
        # causal & padding, broadcast over heads: left padding leaves fully masked query rows
        q, k, v = qkv()
        yield SampleInput(q, args=(k, v), kwargs=dict(attn_mask=(_causal(L, L) & pad[:, None, :])[:, None]))
        # padding only, broadcast over heads and queries
        q, k, v = qkv()
        yield SampleInput(q, args=(k, v), kwargs=dict(attn_mask=pad[:, None, None, :]))
    # decode step: one query against the cache, padded
    q, k, v = qkv(q_len=1, kv_len=L + 2)
    yield SampleInput(q, args=(k, v), kwargs=dict(attn_mask=_padding(lengths, L + 2, True)[:, None, None, :]))
    # all ones: transformers drops the mask and passes is_causal
    q, k, v = qkv()
    yield SampleInput(q, args=(k, v), kwargs=dict(is_causal=True))
    # additive float masks: finfo.min (older transformers) and -inf where masked
    pad = _padding(lengths, L, True)
    keep = (_causal(L, L) & pad[:, None, :])[:, None]
    for masked in (torch.finfo(dtype).min, float("-inf")):
        q, k, v = qkv()
        mask = torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, masked)
        yield SampleInput(q, args=(k, v), kwargs=dict(attn_mask=mask))
    # a bool mask per head, and a 2-D one
    q, k, v = qkv()
    per_head = torch.rand(B, H, L, L, generator=g) > 0.4
    per_head[..., 0] = True
    yield SampleInput(q, args=(k, v), kwargs=dict(attn_mask=per_head))
    q, k, v = qkv()
    yield SampleInput(q, args=(k, v), kwargs=dict(attn_mask=_causal(L, L)))
    # causal together with a padding mask (CPU applies both), and a custom scale
    q, k, v = qkv()
    yield SampleInput(q, args=(k, v), kwargs=dict(attn_mask=pad[:, None, None, :], is_causal=True, scale=0.3))
    # grouped-query attention: 4 query heads over 2 key/value heads, with a padding mask
    q, k, v = qkv(kv_heads=2)
    yield SampleInput(q, args=(k, v), kwargs=dict(attn_mask=keep, enable_gqa=True))
    # 3-D inputs (CPU's math kernel) with a bool mask
    q3, k3, v3 = (t.detach()[:, 0].contiguous().requires_grad_(requires_grad) for t in qkv())
    yield SampleInput(q3, args=(k3, v3), kwargs=dict(attn_mask=keep[:, 0]))


def extra_ops() -> list:
    if OpInfo is None:
        return []
    return [OpInfo("nn.functional.scaled_dot_product_attention", variant_test_name="transformers_masks",
                   op=F.scaled_dot_product_attention, dtypes=floating_types_and(torch.bfloat16),
                   sample_inputs_func=sample_inputs_transformers_masks, supports_out=False)]
