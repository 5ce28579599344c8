"""``F.scaled_dot_product_attention`` on hpu: ONE graph node running the kernel CPU runs.

On Gaudi, SDPA is one fused kernel. torch's composite ``scaled_dot_product_attention`` picks a
backend per device; for "hpu" (PrivateUse1) it took the math decomposition (a dozen nodes), whose
result lands ~1e-5 from CPU's flash kernel. Here the hpu device asks the CPU backend choice the
same question (on empty CPU tensors of the same layouts and flags, grouped-query attention
included) and then does what CPU's front (``scaled_dot_product_attention`` in ATen's
``transformers/attention.cpp``) does:

- a boolean ``attn_mask`` (True = attend) becomes the additive mask CPU makes of it (0 where True,
  -inf where False, in the query's dtype) before either kernel sees it: the kernels add the mask
  they are given, so a bool mask handed on as is was a 0/1 bias (a max logit error of 0.09);
- then the op CPU calls: the fused ``_scaled_dot_product_flash_attention_for_cpu`` (one node; its
  backward is one node too), or the math path where CPU takes it (dropout, 3-D inputs, ...).
  Causal with a mask, float masks and fully masked rows (zeros) follow from running CPU's kernel.

The flash op is tagged ``nondeterministic_seeded`` (it takes a ``dropout_p``), which would route
it to the host as a random op: a host sync in lazy mode, and "not supported during HPU Graph
capturing" inside a capture. CPU's choice never picks it with dropout, so without dropout it is
an ordinary graph node (``install`` routes it so); with dropout it stays a host draw.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .. import ops
from ..dispatch import route
from ..dispatch.host_ops import host_op
from ..lazy import functional_op

aten = torch.ops.aten
_lib = None
FLASH = 1          # torch.nn.attention.SDPBackend.FLASH_ATTENTION


def _concrete(n) -> int:
    """A size or stride as a number; a symbolic one (torch.compile with dynamic shapes) by its
    hint, without a guard: the choice must not specialize the compiled graph."""
    if isinstance(n, torch.SymInt):
        hint = getattr(n.node, "hint", None)
        return int(hint) if hint is not None else int(n)
    return int(n)


def _like(t):
    if t is None:
        return None
    return torch.empty_strided(tuple(map(_concrete, t.shape)), tuple(map(_concrete, t.stride())),
                               dtype=t.dtype).requires_grad_(t.requires_grad)


def _cpu_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> int:
    """The backend CPU's front picks for these layouts and flags, asked on empty CPU stand-ins
    outside any dispatch mode: under torch.compile's fake and functional modes the question went to
    the fake device, which answers "math" for every input."""
    with _disable_current_modes():
        return aten._fused_sdp_choice(_like(query), _like(key), _like(value), _like(attn_mask), dropout_p,
                                      is_causal, scale=scale, enable_gqa=enable_gqa)


def additive_mask(attn_mask, dtype):
    """CPU's ``convert_boolean_attn_mask``: a bool mask as 0 (attend) / -inf (masked) in ``dtype``;
    any other mask is returned as it is (the kernels add it)."""
    if attn_mask is None or attn_mask.dtype != torch.bool:
        return attn_mask
    zero = torch.zeros((), dtype=dtype, device=attn_mask.device)
    return torch.where(attn_mask.logical_not(), float("-inf"), zero)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    choice = -1
    if dropout_p == 0.0:
        choice = _cpu_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    attn_mask = additive_mask(attn_mask, query.dtype)
    if choice == FLASH and query.dim() == 4:
        return aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
    return aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal,
                                                   scale=scale, enable_gqa=enable_gqa)[0]


def _flash(func, args, kwargs):
    """The router's handler for the flash op: a graph node without dropout, a host draw with it
    (as the router does for every random op)."""
    p = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
    if p == 0.0:
        return functional_op(func, args, kwargs)
    return host_op(func, args, kwargs, f"random op {ops.op_name(func)} (drawn on the host)")


def install() -> None:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("scaled_dot_product_attention", sdpa, "AutogradPrivateUse1")
        route.register_special(aten._scaled_dot_product_flash_attention_for_cpu.default, _flash)
