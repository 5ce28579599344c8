"""hpex ``CTCLoss`` (habana_frameworks.torch.hpex.kernels): Connectionist Temporal Classification loss.

``CTCLoss.apply(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
zero_infinity=False)``: the bridge's autograd function over its fused ``ctc_loss_custom`` kernels.
Here it is torch's own CTC loss (``F.ctc_loss``: the alpha recursion forward and torch's backward),
so loss and gradient equal ``nn.CTCLoss`` on CPU; reduction "none" / "mean" (per-target-length
mean, then batch mean) / "sum" as in torch.
"""
from __future__ import annotations

import torch.nn.functional as F

_REDUCTIONS = ("none", "mean", "sum")


class CTCLoss:
    """``CTCLoss.apply(...)`` as the bridge's autograd function is called."""

    @staticmethod
    def apply(log_probs, targets, input_lengths, target_lengths, blank: int = 0, reduction: str = "mean",
              zero_infinity: bool = False):
        if reduction not in _REDUCTIONS:
            raise ValueError(f"CTCLoss: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=blank, reduction=reduction,
                          zero_infinity=zero_infinity)
