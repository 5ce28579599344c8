"""``habana_frameworks.torch._hpex_C``: the C++ entry points behind hpex.

- ``fused_norm(grads, max_norm, norm_type)``: gradient clipping as one fused node, the max norm a
  device tensor; scales the tensors in place by ``min(1, max_norm / (total + 1e-6))`` and returns the
  total norm (as ``torch.nn.utils.clip_grad_norm_``).
- ``fused_ema(model_inputs, updated_ema, decay)``: ``torch.ops.hpu.optimizer_ema``.
"""
from __future__ import annotations

import torch

from ..kernels import custom_ops  # noqa: F401  (torch.ops.hpu.optimizer_ema)
from ..kernels._common import define


def _fused_norm_cpu(grads_and_norm, max_norm, norm_type):
    *grads, total_out = grads_and_norm
    total = torch.nn.utils.get_total_norm(grads, norm_type)
    coef = torch.clamp(max_norm.reshape(()).to(total.dtype) / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype))
    total_out.copy_(total)


define("fused_norm_(Tensor(a!)[] grads_and_norm, Tensor max_norm, float norm_type) -> ()",
       _fused_norm_cpu, lambda *a: None)


def fused_norm(grads, max_norm, norm_type=2.0):
    grads = list(grads)
    if not grads:
        raise ValueError("fused_norm: no tensors given")
    total = torch.zeros((), dtype=grads[0].dtype).to(grads[0].device)
    with torch.no_grad():
        torch.ops.hpu_lab.fused_norm_(grads + [total], max_norm, float(norm_type))
    return total


def fused_ema(model_inputs, updated_ema, decay):
    torch.ops.hpu.optimizer_ema(list(model_inputs), list(updated_ema), decay)
