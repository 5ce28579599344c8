"""``te.Linear``: a Linear layer whose GEMMs run in fp8 under ``fp8_autocast``, with delayed scaling.

Outside ``fp8_autocast`` it is ``torch.nn.functional.linear``. Inside, for ``y = x W^T + b``:

- forward: ``x`` and ``W`` are cast to the recipe's forward format with their current scales
  (``torch.ops.hpu.cast_to_fp8_v2``, which also returns each one's amax), and
  ``torch.ops.hpu.fp8_gemm_v2(x8, W8^T) * (1/scale_x) * (1/scale_W) + b`` gives ``y`` in ``x``'s dtype;
- backward: the output gradient ``g`` is cast to the backward format the same way, and
  ``dx = fp8_gemm(g8, W8)``, ``dW = fp8_gemm(g8^T, x8)`` (the fp8 copies saved by the forward),
  ``db = g.sum(0)``.

Delayed scaling (recipe.DelayedScaling): each module keeps an amax history per tensor (x, W; g) on
the device; every ``interval`` steps, before casting, the scales are recomputed from the history as
``fp8_max / amax / 2**margin`` (kept where the amax is 0 or not finite); the first step casts with
scale 1. With ``reduce_amax`` and a process group of more than one rank, the amaxes are all-reduced
(MAX) before the scales are computed, so every rank casts with the same scales. All of it runs as
device ops (no host sync): in lazy mode it is part of the step's graph.

Numbers: the same ops on CPU tensors give the same values (the fp8 ops have CPU kernels), so an
fp8 model on hpu equals itself on CPU bitwise; against a float32 Linear it differs by fp8 rounding
(3 mantissa bits for E4M3, 2 for E5M2).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .fp8 import get_fp8_recipe, is_fp8_enabled
from .recipe import DelayedScaling


def _fp8_max(dtype) -> float:
    from ....kernels.fp8_ops import fp8_max
    return fp8_max(dtype)


class _ScalingMeta:
    """Scales and amax history of ``n`` tensors cast to one fp8 format."""

    def __init__(self, n: int, recipe: DelayedScaling, dtype, device):
        self.recipe, self.dtype = recipe, dtype
        self.history = torch.zeros(recipe.amax_history_len, n, dtype=torch.float32, device=device)
        self.scale = torch.ones(n, dtype=torch.float32, device=device)
        self.steps = 0

    def before_cast(self) -> None:
        """Every ``interval`` steps (not before the first), the scales from the history."""
        r = self.recipe
        if self.steps and self.steps % r.interval == 0:
            h = self.history
            if callable(r.amax_compute_algo):
                amax = r.amax_compute_algo(h)
            else:
                amax = h.amax(0) if r.amax_compute_algo == "max" else h[0]
            if r.reduce_amax and torch.distributed.is_available() and torch.distributed.is_initialized() \
                    and torch.distributed.get_world_size() > 1:
                amax = amax.clone()
                torch.distributed.all_reduce(amax, op=torch.distributed.ReduceOp.MAX)
            fp8_max = _fp8_max(self.dtype)
            if r.scaling_factor_compute_algo is not None:
                sf = r.scaling_factor_compute_algo(amax, self.scale, fp8_max, r)
            else:
                sf = (fp8_max / amax) / (2 ** r.margin)
                sf = torch.where((amax > 0) & torch.isfinite(amax), sf, self.scale)
            self.scale = sf
        self.steps += 1

    def cast(self, i: int, t):
        """``t`` in fp8 with scale i, and its amax recorded as the newest entry of history column i."""
        t8, amax = torch.ops.hpu.cast_to_fp8_v2(t, self.scale[i], False, True, self.dtype)
        return t8, amax

    def record(self, amaxes) -> None:
        newest = torch.stack(amaxes).reshape(1, -1)
        self.history = torch.cat([newest, self.history[:-1]], 0)


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, weight, bias, module):
        fwd = module._fp8_fwd
        fwd.before_cast()
        x2 = inp.reshape(-1, inp.shape[-1])
        x8, amax_x = fwd.cast(0, x2)
        w8, amax_w = fwd.cast(1, weight)
        fwd.record([amax_x, amax_w])
        inv_x, inv_w = fwd.scale[0].reciprocal(), fwd.scale[1].reciprocal()
        out = torch.ops.hpu.fp8_gemm_v2(x8, False, w8, True, None, inp.dtype, inv_x, inv_w, bias, False)
        ctx.save_for_backward(x8, w8, inv_x, inv_w)
        ctx.module, ctx.shape, ctx.dtype, ctx.has_bias = module, inp.shape, inp.dtype, bias is not None
        ctx.w_dtype = weight.dtype
        return out.reshape(*inp.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_out):
        x8, w8, inv_x, inv_w = ctx.saved_tensors
        bwd = ctx.module._fp8_bwd
        bwd.before_cast()
        g2 = grad_out.reshape(-1, grad_out.shape[-1])
        g8, amax_g = bwd.cast(0, g2.to(torch.float32) if g2.dtype not in (torch.float32, torch.bfloat16) else g2)
        bwd.record([amax_g])
        inv_g = bwd.scale[0].reciprocal()
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = torch.ops.hpu.fp8_gemm_v2(g8, False, w8, False, None, ctx.dtype, inv_g, inv_w, None, False)
            dx = dx.reshape(ctx.shape)
        if ctx.needs_input_grad[1]:
            dw = torch.ops.hpu.fp8_gemm_v2(g8, True, x8, False, None, ctx.w_dtype, inv_g, inv_x, None, False)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g2.sum(0)
        return dx, dw, db, None


class Linear(torch.nn.Module):
    """``te.Linear(in_features, out_features, bias=True, params_dtype=None, device=None)``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, params_dtype=None,
                 device=None, **kwargs):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        factory = {"dtype": params_dtype or torch.get_default_dtype(), "device": device}
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, **factory))
        self.bias = torch.nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        self.reset_parameters()
        self._fp8_fwd = self._fp8_bwd = None

    def reset_parameters(self) -> None:
        # torch.nn.Linear's initialisation, so a te.Linear replacing one starts from the same law
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def _metas(self):
        recipe = get_fp8_recipe()
        dev = self.weight.device
        # a recipe equal to the last one (a new DelayedScaling() with the same settings each step, as
        # fp8_autocast callers write it) keeps the scales and the amax history
        if self._fp8_fwd is None or self._fp8_fwd.recipe != recipe or self._fp8_fwd.scale.device != dev:
            self._fp8_fwd = _ScalingMeta(2, recipe, recipe.fp8_format.fwd_dtype, dev)
            self._fp8_bwd = _ScalingMeta(1, recipe, recipe.fp8_format.bwd_dtype, dev)

    def forward(self, inp):
        if not is_fp8_enabled():
            return F.linear(inp, self.weight, self.bias)
        self._metas()
        return _Fp8Linear.apply(inp, self.weight, self.bias, self)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
