"""``_efficientzerotensor`` on hpu: torch's zero tensor, an immutable known zero, as on CPU.

Backward formulas whose gradient is identically zero (``sgn`` of a real input, some complex and
linear-algebra formulas) return ``at::_efficientzerotensor``: on CPU a tensor with the ZeroTensor
dispatch key, whose values are zeros and which torch treats as a known zero: ``mul`` by it gives
another zero tensor, any other op sees zeros, and an in-place write to it is refused ("ZeroTensors
are immutable"), e.g. ``x.grad.add_(1)`` after ``sgn(x).sum().backward()``. On hpu it is a zeros node
of the graph (the same values, contiguous as CPU's) whose wrapper carries the same ZeroTensor key:
torch's own ZeroTensor layer, which runs above the "hpu" device, then does exactly what it does on
CPU. The few ops that layer passes through to the device keep the key where CPU's do: views of a
zero tensor are zero tensors (dispatch/view_ops.py), and ``copy_`` into one is refused (dispatch/special_ops.py).
"""
from __future__ import annotations

import torch

from ..tensor import HPUTensor

_lib = None


def _efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    z = torch.zeros(size, dtype=dtype or torch.get_default_dtype(), device="hpu")
    return HPUTensor(z._st, z._size, z._stride, z._offset, z.dtype, zero=True)


def install() -> None:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("_efficientzerotensor", _efficientzerotensor, "PrivateUse1")
