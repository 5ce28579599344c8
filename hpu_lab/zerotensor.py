"""``_efficientzerotensor`` on hpu: torch's zero tensor, as a zeros node of the graph.

Backward formulas whose gradient is identically zero (``sgn`` of a real input, some complex and
linear-algebra formulas) return ``at::_efficientzerotensor``: on CPU a tensor with the ZeroTensor
dispatch key, whose values are zeros (it owns a zeroed buffer) and which the ZeroTensor fallback
treats as a known zero. The hpu device had no kernel for it, so those backwards raised "Could not
run 'aten::_efficientzerotensor' with arguments from the 'hpu' backend". Here it is ``zeros`` of
the same size and dtype, contiguous as CPU's: the same values, so the same gradients. (An hpu
tensor cannot carry the ZeroTensor key, a flag torch sets only in C++: ``_is_zerotensor()`` is False
and an in-place write to it, which CPU refuses as "ZeroTensors are immutable", succeeds.)
"""
from __future__ import annotations

import torch

_lib = None


def _efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return torch.zeros(size, dtype=dtype or torch.get_default_dtype(), device="hpu")


def install() -> None:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("_efficientzerotensor", _efficientzerotensor, "PrivateUse1")
