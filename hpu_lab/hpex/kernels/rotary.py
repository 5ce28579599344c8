"""hpex RotaryPosEmbeddingHelperV1/V2/V3 and apply_rotary_pos_emb: RoPE as the fused kernel
``torch.ops.hpu.rotary_pos_embedding`` (hpu_lab/kernels/custom_ops.py), with the bridge's dtype rule: if any of
input, cos, sin is float32 all are computed in float32, else cos and sin take the input's dtype."""
from __future__ import annotations

from enum import Enum

import torch


class RotaryPosEmbeddingMode(Enum):
    BLOCKWISE = 0
    PAIRWISE = 1


def _match_dtypes(p, cos, sin):
    if torch.float32 in (p.dtype, cos.dtype, sin.dtype):
        return p.float(), cos.float(), sin.float()
    return p, cos.to(p.dtype), sin.to(p.dtype)


def apply_rotary_pos_emb(p, *args):
    """``apply_rotary_pos_emb(p, cos, sin, position_ids=None, offset=0, mode=BLOCKWISE)`` or
    ``apply_rotary_pos_emb(p, rope_cache)`` (ChatGLM)."""
    if len(args) == 1:
        return RotaryPosEmbeddingHelperV3.apply(p, args[0])
    cos, sin = args[0], args[1]
    position_ids = args[2] if len(args) > 2 else None
    offset = args[3] if len(args) > 3 else 0
    mode = args[4] if len(args) > 4 else RotaryPosEmbeddingMode.BLOCKWISE
    p, cos, sin = _match_dtypes(p, cos, sin)
    return torch.ops.hpu.rotary_pos_embedding(p, sin, cos, position_ids, offset, mode.value)


def apply_rotary_pos_emb_bwd(grad, cos, sin, position_ids=None, offset=0, mode=RotaryPosEmbeddingMode.BLOCKWISE):
    grad, cos, sin = _match_dtypes(grad, cos, sin)
    return torch.ops.hpu.rotary_pos_embedding_backward(grad, sin, cos, position_ids, offset, mode.value)


class RotaryPosEmbeddingHelperV1(torch.autograd.Function):
    """GPT-NeoX (transformers <= 4.27.4) / LLaMA: ``apply(p, cos, sin, offset)``."""

    @staticmethod
    def forward(ctx, p, cos, sin, offset):
        ctx.save_for_backward(cos, sin)
        ctx.offset = offset
        return apply_rotary_pos_emb(p, cos, sin, None, offset, RotaryPosEmbeddingMode.BLOCKWISE)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return apply_rotary_pos_emb_bwd(grad, cos, sin, None, ctx.offset), None, None, None


class RotaryPosEmbeddingHelperV2(torch.autograd.Function):
    """transformers > 4.27.4 (StableLM, LLaMA): ``apply(p, cos, sin, position_ids)``."""

    @staticmethod
    def forward(ctx, p, cos, sin, position_ids):
        ctx.save_for_backward(cos, sin, position_ids)
        return apply_rotary_pos_emb(p, cos, sin, position_ids, 0, RotaryPosEmbeddingMode.BLOCKWISE)

    @staticmethod
    def backward(ctx, grad):
        cos, sin, position_ids = ctx.saved_tensors
        return apply_rotary_pos_emb_bwd(grad, cos, sin, position_ids), None, None, None


def _rope_cache_parts(p, rope_cache):
    """ChatGLM: rope_cache [positions, ..., rot_dim/2, 2] holds (cos, sin) pairs for the first rot_dim
    channels of p [sq, b, np, hn]; the rest pass through."""
    sq, heads = p.size(0), p.size(2)
    rot = rope_cache.shape[-2] * 2
    head, rest = p[..., :rot], p[..., rot:]
    cache = rope_cache[:sq].reshape(sq, -1, 1, rot // 2, 2)
    cos = torch.repeat_interleave(cache[..., 0], 2, dim=-1).to(p.dtype)
    sin = torch.repeat_interleave(cache[..., 1], 2, dim=-1).to(p.dtype)
    return head.reshape(sq, -1, heads, rot), rest, sin, cos


class RotaryPosEmbeddingHelperV3(torch.autograd.Function):
    """ChatGLM: ``apply(p, rope_cache)``."""

    @staticmethod
    def forward(ctx, p, rope_cache):
        head, rest, sin, cos = _rope_cache_parts(p, rope_cache)
        ctx.save_for_backward(rope_cache)
        out = torch.ops.hpu.rotary_pos_embedding(head, sin, cos, None, 0, RotaryPosEmbeddingMode.PAIRWISE.value)
        return out if rest.shape[-1] == 0 else torch.cat((out, rest), -1)

    @staticmethod
    def backward(ctx, grad):
        (rope_cache,) = ctx.saved_tensors
        head, rest, sin, cos = _rope_cache_parts(grad, rope_cache)
        g = apply_rotary_pos_emb_bwd(head, cos, sin, None, 0, RotaryPosEmbeddingMode.PAIRWISE)
        return (g if rest.shape[-1] == 0 else torch.cat((g, rest), -1)), None
