"""FusedClipNorm (habana_frameworks.torch.hpex.normalization).

``torch.nn.utils.clip_grad_norm_`` on hpu gradients traces a norm per gradient, a stack, a norm,
the clip coefficient and a multiply per gradient; ``FusedClipNorm(parameters, max_norm)
.clip_norm(parameters)`` traces ONE op, ``hpu_lab::fused_clip_norm_``, and returns the total norm,
as the real one does. Norm type 2.0 (the real one supports no other); mark_step before and after in
lazy mode. The CPU kernel computes exactly what ``clip_grad_norm_`` computes on CPU.

As in the real bridge's eager path, the total norm comes back through a placeholder tensor appended
to the gradient list: the op writes the gradients and the placeholder, and returns nothing.
"""
from __future__ import annotations

import torch

from ...kernels._common import define, mark_step_if_lazy

__all__ = ["FusedClipNorm"]


def _clip_norm_cpu(grads_and_norm, max_norm, norm_type):
    *grads, total_out = grads_and_norm
    # torch.nn.utils.clip_grad_norm_, same calls in the same order
    total = torch.nn.utils.get_total_norm(grads, norm_type)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    total_out.copy_(total)


define("fused_clip_norm_(Tensor(a!)[] grads_and_norm, float max_norm, float norm_type) -> ()",
       _clip_norm_cpu, lambda *a: None)


class FusedClipNorm:
    """``FusedClipNorm(parameters, max_norm).clip_norm(parameters)`` -> total norm (a 0-dim tensor)."""

    def __init__(self, parameters, max_norm):
        self.max_norm = float(max_norm)
        self.norm_type = 2.0

    def clip_norm(self, parameters):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        params = list(parameters)
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return torch.tensor(0.0)
        mark_step_if_lazy(grads)
        # a host zero copied to the device: an input of the graph, not a node
        total = torch.zeros((), dtype=grads[0].dtype).to(grads[0].device)
        with torch.no_grad():
            torch.ops.hpu_lab.fused_clip_norm_(grads + [total], self.max_norm, self.norm_type)
        mark_step_if_lazy(grads)
        return total


# FusedRMSNorm (issue 16): its own module
from .rms_norm import FusedRMSNorm, RmsNormBwdMode  # noqa: E402,F401

__all__ += ["FusedRMSNorm", "RmsNormBwdMode"]
