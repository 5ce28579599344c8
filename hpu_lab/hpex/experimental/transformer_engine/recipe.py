"""``transformer_engine.recipe``: the fp8 formats and the delayed-scaling recipe.

As Transformer Engine's (Intel's port keeps NVIDIA's API): ``Format.E4M3`` / ``E5M2`` use one format
in both passes, ``HYBRID`` E4M3 in the forward pass and E5M2 for the gradients of the backward pass.
``DelayedScaling`` keeps, per fp8 tensor, a history of its absolute maxima (amax) and scales it by
``fp8_max / amax / 2**margin`` from that history ("max" of the window, or the "most_recent"), so a
step is cast with a scale computed from the steps before it. ``fp8_max`` is the card's: 240 for
E4M3 on Gaudi 2, 448 on Gaudi 3, 57344 for E5M2 (hpu_lab.kernels.fp8_ops.fp8_max).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Optional, Union

import torch


class Format(Enum):
    E4M3 = "E4M3"
    E5M2 = "E5M2"
    HYBRID = "HYBRID"

    @property
    def fwd_dtype(self):
        return torch.float8_e5m2 if self is Format.E5M2 else torch.float8_e4m3fn

    @property
    def bwd_dtype(self):
        return torch.float8_e4m3fn if self is Format.E4M3 else torch.float8_e5m2


@dataclass
class DelayedScaling:
    margin: int = 0
    interval: int = 1
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: Union[str, Callable] = "max"
    scaling_factor_compute_algo: Optional[Callable] = None
    reduce_amax: bool = True

    def __post_init__(self):
        if not isinstance(self.fp8_format, Format):
            raise TypeError(f"DelayedScaling: fp8_format must be a recipe.Format, not {self.fp8_format!r}")
        if self.amax_history_len < 1:
            raise ValueError(f"DelayedScaling: amax_history_len must be >= 1, not {self.amax_history_len}")
        if self.interval < 1:
            raise ValueError(f"DelayedScaling: interval must be >= 1, not {self.interval}")
        if not callable(self.amax_compute_algo) and self.amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"DelayedScaling: amax_compute_algo must be 'max', 'most_recent' or a callable, "
                             f"not {self.amax_compute_algo!r}")
