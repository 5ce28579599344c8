"""Meta kernels that disagree with the CPU kernel they describe, corrected.

hpu_lab infers every lazy op's output shape from its Meta kernel; where torch's Meta kernel gives a
shape the CPU kernel does not, an "hpu" tensor would report a shape its value does not have. Each
correction here is the CPU kernel's rule, checked against it by tests/test_meta_fixes.py.

- ``multilabel_margin_loss_forward``: for a 1-D input with ``reduction="none"`` the CPU returns a
  0-dim loss; torch's Meta kernel says ``[1]``.
- ``take``: Gaudi takes int32 indices as well as int64 (the CPU kernel only int64: hpu_lab widens the
  index when it runs, see widen.py); the Meta kernel refuses int32, so the op could not be recorded.
"""
from __future__ import annotations

import torch

_lib = torch.library.Library("aten", "IMPL")


def _multilabel_margin_loss_forward(self, target, reduction):
    if self.dim() > 2 or self.dim() < 0 or (self.dim() == 2 and self.shape[1] == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(self.shape)}")
    if tuple(target.shape) != tuple(self.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: {list(self.shape)}")
    batched = self.dim() == 2
    shape = (self.shape[0],) if (reduction == 0 and batched) else ()
    return self.new_empty(shape), self.new_empty(target.shape)        # is_target: the input's dtype


_lib.impl("multilabel_margin_loss_forward", _multilabel_margin_loss_forward, "Meta")


def _take(self, index):
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"take(): Expected a long or int tensor for index, but got {index.dtype}")
    if self.numel() == 0 and index.numel() != 0:
        raise IndexError("take(): tried to take from an empty tensor")
    return self.new_empty(index.shape)


_lib.impl("take", _take, "Meta")
