"""hpex FusedRMSNorm: ``FusedRMSNorm.apply(x, gamma, eps, use_stages=True, bwd_mode=0, fast_math=False)``,
one ``torch.ops.hpu.rms_norm`` node forward and one ``rms_norm_backward`` node backward
(hpu_lab/kernels/custom_ops.py). ``use_stages``, ``bwd_mode`` choose among the real kernel's backward TPC
implementations and ``fast_math`` its approximate variant: the same exact result here."""
from __future__ import annotations

from enum import Enum

import torch


class RmsNormBwdMode(Enum):
    DEFAULT = 0
    STATIC_CASE_WIDTH_PARTITIONING = 1


class FusedRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, data_in, gamma, eps, use_stages=True, bwd_mode=0, fast_math=False):
        op = torch.ops.hpu.rms_norm_fast if fast_math else torch.ops.hpu.rms_norm
        out, inverse_rms = op(data_in, gamma, eps)
        ctx.save_for_backward(inverse_rms, data_in, gamma)
        ctx.use_stages, ctx.bwd_mode, ctx.fast_math = use_stages, int(getattr(bwd_mode, "value", bwd_mode)), fast_math
        return out

    @staticmethod
    def backward(ctx, grad):
        inverse_rms, data_in, gamma = ctx.saved_tensors
        op = torch.ops.hpu.rms_norm_fast_backward if ctx.fast_math else torch.ops.hpu.rms_norm_backward
        dx, dgamma = op(grad, data_in, gamma, inverse_rms, ctx.use_stages, ctx.bwd_mode)
        return dx, dgamma, None, None, None, None
