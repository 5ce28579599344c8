"""FusedSDPA (habana_frameworks.torch.hpex.kernels): fused scaled-dot-product attention.

``FusedSDPA.apply(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
softmax_mode="None", recompute_mode=None)`` computes ``F.scaled_dot_product_attention`` as ONE node
of the lazy graph forward and ONE backward, instead of the ~12 forward and ~20 backward nodes of
the unfused attention. What it keeps for backward is what makes the two modes differ (seed 003):

- recompute mode (the default, ``torch.hpu.sdp_kernel(enable_recompute=...)`` switches it): keeps
  q, k, v, the output and the row log-sum-exp (N, ..., L) only; backward recomputes the
  attention probabilities from them.
- no-recompute mode: keeps the attention probabilities (N, ..., L, S) from forward.

Both keep less than the unfused attention, which holds scores, probabilities and their gradients.
The fused ops are ``hpu_lab::sdpa_recomp_fwd/bwd`` and ``hpu_lab::sdpa_fwd/bwd``, with the bridge's
names. Their CPU kernels compute in float32 and cast back (the real kernels work in tiles; hpu_lab
counts device memory by the tensors a node reads and writes, as the memory plan does for every op).

Restrictions, as documented: FP32 and BF16 only; recompute mode does not broadcast over the batch
dimension (q, k, v batch sizes must match). attn_mask may be boolean (True = attend) or additive,
broadcastable to (N, ..., L, S), e.g. (N, ..., 1, S). Grouped-query attention (fewer k/v heads than
q heads) works as in the real kernel. Dropout draws from a seed taken from torch's generator, and
backward regenerates the same mask from it.
"""
from __future__ import annotations

import inspect
import math

import torch

from ...kernels._common import define

__all__ = ["FusedSDPA"]

_NEG_INF = float("-inf")


# ---------------------------------------------------------------- the math (CPU kernels)

def _expand_heads(x, heads):
    """k/v with fewer heads than q (grouped-query attention): repeat each head for its group."""
    if x.dim() >= 3 and x.shape[-3] != heads:
        return x.repeat_interleave(heads // x.shape[-3], dim=-3)
    return x


def _scores(q, k, attn_mask, scale, is_causal):
    s = torch.matmul(q.float(), _expand_heads(k, q.shape[-3] if q.dim() >= 3 else 1).float().transpose(-2, -1))
    s = s * scale
    L, S = s.shape[-2], s.shape[-1]
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), _NEG_INF)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, _NEG_INF) if attn_mask.dtype == torch.bool else s + attn_mask.float()
    return s


def _probs(s, lse):
    """softmax rows from the log-sum-exp; a row with every position masked gives zeros (as torch)."""
    return torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0).unsqueeze(-1))


def _keep(shape, dropout_p, seed):
    """The dropout keep-scale (mask / (1 - p)) regenerated from the seed, or None."""
    if dropout_p == 0.0 or seed is None:
        return None
    g = torch.Generator().manual_seed(int(seed.item()))
    return torch.empty(shape).bernoulli_(1 - dropout_p, generator=g).div_(1 - dropout_p)


def _forward(q, k, v, attn_mask, dropout_p, scale, is_causal, seed):
    s = _scores(q, k, attn_mask, scale, is_causal)
    lse = torch.logsumexp(s, dim=-1)
    p = _probs(s, lse)
    keep = _keep(p.shape, dropout_p, seed)
    pd = p if keep is None else p * keep
    out = torch.matmul(pd, _expand_heads(v, q.shape[-3] if q.dim() >= 3 else 1).float())
    return out.to(v.dtype), lse, p


def _sum_to(g, shape, heads_of):
    """Gradient of an input that was broadcast (batch) or repeated (grouped heads): sum back."""
    if g.dim() >= 3 and len(shape) >= 3 and shape[-3] != g.shape[-3] and shape[-3] != 1:
        g = g.unflatten(-3, (shape[-3], g.shape[-3] // shape[-3])).sum(-3)
    lead = g.dim() - len(shape)
    if lead:
        g = g.sum(tuple(range(lead)))
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(dims, keepdim=True) if dims else g


def _backward(dout, q, k, v, attn_mask, out, p, dropout_p, scale, is_causal, seed):
    """Gradients given the probabilities p (saved, or recomputed by the caller)."""
    heads = q.shape[-3] if q.dim() >= 3 else 1
    ke, ve = _expand_heads(k, heads).float(), _expand_heads(v, heads).float()
    do = dout.float()
    keep = _keep(p.shape, dropout_p, seed)
    pd = p if keep is None else p * keep
    dv = torch.matmul(pd.transpose(-2, -1), do)
    dpd = torch.matmul(do, ve.transpose(-2, -1))
    dp = dpd if keep is None else dpd * keep
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))          # softmax backward
    dq = torch.matmul(ds, ke) * scale
    dk = torch.matmul(ds.transpose(-2, -1), q.float()) * scale
    return (_sum_to(dq, q.shape, heads).to(q.dtype), _sum_to(dk, k.shape, heads).to(k.dtype),
            _sum_to(dv, v.shape, heads).to(v.dtype))


def _recomp_fwd(q, k, v, attn_mask, dropout_p, scale, is_causal, seed):
    out, lse, _ = _forward(q, k, v, attn_mask, dropout_p, scale, is_causal, seed)
    return out, lse


def _recomp_bwd(dout, q, k, v, attn_mask, out, lse, dropout_p, scale, is_causal, seed):
    p = _probs(_scores(q, k, attn_mask, scale, is_causal), lse)     # the recompute
    return _backward(dout, q, k, v, attn_mask, out, p, dropout_p, scale, is_causal, seed)


def _fwd(q, k, v, attn_mask, dropout_p, scale, is_causal, seed):
    out, _, p = _forward(q, k, v, attn_mask, dropout_p, scale, is_causal, seed)
    return out, p.to(q.dtype)


def _bwd(dout, q, k, v, probs, out, dropout_p, scale, seed):
    return _backward(dout, q, k, v, None, out, probs.float(), dropout_p, scale, False, seed)


# ---------------------------------------------------------------- shapes (Meta kernels)

def _out_shape(q, k, v):
    heads = q.shape[-3] if q.dim() >= 3 else None
    kb = list(k.shape[:-2])
    if heads is not None and kb:
        kb[-1] = heads
    batch = torch.broadcast_shapes(tuple(q.shape[:-2]), tuple(kb))
    return batch + (q.shape[-2],), batch + (q.shape[-2], v.shape[-1]), batch + (q.shape[-2], k.shape[-2])


def _recomp_fwd_meta(q, k, v, attn_mask, dropout_p, scale, is_causal, seed):
    rows, out, _ = _out_shape(q, k, v)
    return q.new_empty(out, dtype=v.dtype), q.new_empty(rows, dtype=torch.float32)


def _fwd_meta(q, k, v, attn_mask, dropout_p, scale, is_causal, seed):
    _, out, probs = _out_shape(q, k, v)
    return q.new_empty(out, dtype=v.dtype), q.new_empty(probs)


def _grads_meta(dout, q, k, v, *rest):
    return tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))


_FWD_ARGS = ("Tensor q, Tensor k, Tensor v, Tensor? attn_mask, float dropout_p, float scale, bool is_causal, "
             "Tensor? seed")
define(f"sdpa_recomp_fwd({_FWD_ARGS}) -> (Tensor out, Tensor logsumexp)", _recomp_fwd, _recomp_fwd_meta)
define("sdpa_recomp_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor? attn_mask, Tensor out, "
       "Tensor logsumexp, float dropout_p, float scale, bool is_causal, Tensor? seed) -> (Tensor, Tensor, Tensor)",
       _recomp_bwd, _grads_meta)
define(f"sdpa_fwd({_FWD_ARGS}) -> (Tensor out, Tensor probs)", _fwd, _fwd_meta)
define("sdpa_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor probs, Tensor out, float dropout_p, "
       "float scale, Tensor? seed) -> (Tensor, Tensor, Tensor)", _bwd, _grads_meta)


# ---------------------------------------------------------------- the autograd Function

def _check(q, k, v, attn_mask, dropout_p, is_causal, softmax_mode, recompute, requires_backward):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"FusedSDPA supports FP32 and BF16 only; {name} is {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"FusedSDPA: q, k and v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"FusedSDPA: q, k, v must have the same rank >= 2; got {q.dim()}, {k.dim()}, {v.dim()}")
    if q.dim() >= 3 and q.shape[-3] % k.shape[-3]:
        raise ValueError(f"FusedSDPA: {q.shape[-3]} query heads cannot be grouped over {k.shape[-3]} key/value heads")
    if recompute and q.dim() >= 4 and not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError("FusedSDPA recompute mode does not support broadcasting on batch size dimension: "
                         f"query, key and value tensors should have same batch size (got {q.shape[0]}, "
                         f"{k.shape[0]}, {v.shape[0]}); use recompute_mode=False")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"FusedSDPA: dropout_p must be in [0, 1), got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise ValueError("FusedSDPA: attn_mask must be None when is_causal=True (as in F.scaled_dot_product_attention)")
    if softmax_mode not in ("none", "fast", "fp32"):
        raise ValueError(f"FusedSDPA: softmax_mode must be 'None', 'fast' or 'fp32', got {softmax_mode!r}")
    if recompute and requires_backward and softmax_mode == "fast" and not is_causal:
        raise ValueError("Optimized softmax mode is supported in recompute training mode only in causal(triangular) "
                         "mask case")
    if softmax_mode == "fp32" and q.dtype != torch.bfloat16:
        raise ValueError("softmax_mode = fp32 is supported only when q/k/v inputs are BF16")


class FusedSDPA(torch.autograd.Function):
    """Fused attention; see the module docstring. ``FusedSDPA.apply(q, k, v, ...)``."""

    @classmethod
    def apply(cls, *args, **kwargs):
        # torch's Function.apply takes keywords only with a setup_context; bind them to positions so
        # the documented signature (attn_mask=..., recompute_mode=...) can be used as written
        if kwargs:
            bound = inspect.signature(cls.forward).bind(None, *args, **kwargs)
            bound.apply_defaults()
            args = bound.args[1:]
        return super().apply(*args)

    @staticmethod
    def forward(ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, softmax_mode="None",
                recompute_mode=None, valid_seq_len=None, seq_padding_type="left", return_dropout_mask=False,
                return_attn_probs=False):
        if valid_seq_len is not None:
            raise NotImplementedError("FusedSDPA: valid_seq_len is not emulated by hpu_lab")
        if return_dropout_mask:
            # hpu_lab draws dropout from a seed and regenerates it in backward; the mask tensor the
            # real kernel can hand out is not materialised
            raise NotImplementedError("FusedSDPA: return_dropout_mask is not emulated by hpu_lab")
        requires_backward = q.requires_grad or k.requires_grad or v.requires_grad
        softmax_mode = str(softmax_mode).lower()
        recompute = recompute_mode
        if recompute is None:
            recompute = torch.hpu.recompute_sdp_enabled()
        if return_attn_probs:
            # as the bridge: inference only, and it selects the mode that keeps the probabilities
            if requires_backward:
                raise RuntimeError("FusedSDPA: return_attn_probs is supported only for inference mode")
            recompute = False
        _check(q, k, v, attn_mask, dropout_p, is_causal, softmax_mode, recompute, requires_backward)
        if scale is None:
            scale = 1.0 / math.sqrt(q.size(-1))
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            attn_mask = attn_mask.to(q.dtype)
        # dropout: a seed drawn on the host from torch's generator, an input of the graph (not a constant)
        seed = torch.randint(0, 2 ** 62, (), dtype=torch.int64) if dropout_p > 0 else None
        args = (q, k, v, attn_mask, float(dropout_p), float(scale), bool(is_causal), seed)
        if recompute:
            out, stats = torch.ops.hpu_lab.sdpa_recomp_fwd(*args)
        else:
            out, stats = torch.ops.hpu_lab.sdpa_fwd(*args)
        ctx.recompute, ctx.dropout_p, ctx.scale = recompute, float(dropout_p), float(scale)
        ctx.is_causal = bool(is_causal)
        ctx.seed = seed
        if requires_backward:
            # recompute: q, k, v, mask, out, logsumexp; no-recompute: q, k, v, probabilities, out
            ctx.save_for_backward(q, k, v, attn_mask if recompute else None, out, stats)
        if return_attn_probs:
            return out, stats                   # (out, softmax probabilities), as the bridge returns
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, attn_mask, out, stats = ctx.saved_tensors
        dout = dout.contiguous()
        if ctx.recompute:
            dq, dk, dv = torch.ops.hpu_lab.sdpa_recomp_bwd(dout, q, k, v, attn_mask, out, stats, ctx.dropout_p,
                                                            ctx.scale, ctx.is_causal, ctx.seed)
        else:
            dq, dk, dv = torch.ops.hpu_lab.sdpa_bwd(dout, q, k, v, stats, out, ctx.dropout_p, ctx.scale, ctx.seed)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


# RoPE helpers (issue 16): their own module
from .rotary import (RotaryPosEmbeddingHelperV1, RotaryPosEmbeddingHelperV2,  # noqa: E402,F401
                     RotaryPosEmbeddingHelperV3, RotaryPosEmbeddingMode, apply_rotary_pos_emb)

__all__ += ["RotaryPosEmbeddingHelperV1", "RotaryPosEmbeddingHelperV2", "RotaryPosEmbeddingHelperV3",
            "RotaryPosEmbeddingMode", "apply_rotary_pos_emb"]
from .custom_softmax import CustomSoftmax  # noqa: E402,F401

__all__ += ["CustomSoftmax"]
from .ctc_loss import CTCLoss  # noqa: E402,F401

__all__ += ["CTCLoss"]
