"""``F.scaled_dot_product_attention`` on hpu: ONE graph node running the kernel CPU runs.

On Gaudi, SDPA is one fused kernel. torch's composite ``scaled_dot_product_attention`` picks a
backend per device; for "hpu" (PrivateUse1) it took the math decomposition (a dozen nodes), whose
result lands ~1e-5 from CPU's flash kernel. Here the hpu device asks the CPU backend choice the
same question (on empty CPU tensors of the same layouts and flags) and calls the op CPU calls: the
fused ``_scaled_dot_product_flash_attention_for_cpu`` (one node; its backward is one node too), or
the math path where CPU takes it. With dropout the math path keeps host-drawn randomness.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
_lib = None
FLASH = 1          # torch.nn.attention.SDPBackend.FLASH_ATTENTION


def _like(t):
    if t is None:
        return None
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).requires_grad_(t.requires_grad)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    choice = -1
    if dropout_p == 0.0 and not enable_gqa:
        choice = aten._fused_sdp_choice(_like(query), _like(key), _like(value), _like(attn_mask), dropout_p,
                                        is_causal, scale=scale, enable_gqa=enable_gqa)
    if choice == FLASH and query.dim() == 4 and (attn_mask is None or attn_mask.dtype != torch.bool):
        return aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
    return aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal,
                                                   scale=scale, enable_gqa=enable_gqa)[0]


def install() -> None:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("scaled_dot_product_attention", sdpa, "AutogradPrivateUse1")
