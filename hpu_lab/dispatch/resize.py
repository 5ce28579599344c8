"""Resizing an "hpu" tensor in place: ``out=`` tensors of the wrong shape, and ``Tensor.resize_``.

Stock PyTorch resizes an ``out=`` tensor whose shape differs from the result's: silently if it has no
elements, with a deprecation warning if it has some (``at::native::resize_output``). hpu_lab does the
same. An HPUTensor is a wrapper: its shape lives both in the C++ TensorImpl (what ``.shape`` reports)
and in hpu_lab's view (storage, size, stride, offset). A resize gives it a fresh device storage of the
new shape (uninitialised, as a grown CPU storage is), points the TensorImpl at it with the CPU's own
``set_`` kernel (which only rewrites metadata), and rebinds the view.

``resize_`` keeps the leading elements of a contiguous tensor, as on CPU; one difference: other views
of the old storage keep the old storage (on CPU they share the grown one).
"""
from __future__ import annotations

import math
import warnings

import torch

from ..tensor import HPUTensor, Inp, contiguous_strides, new_storage_tensor
from .view_ops import set_view_meta

_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def rebind(t: HPUTensor, size, stride=None) -> HPUTensor:
    """Make ``t`` a tensor of ``size`` on a fresh (uninitialised) storage, in place: contiguous, or
    laid out as ``stride`` (a dense layout, e.g. the column-major one a linalg kernel gives)."""
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    stride = contiguous_strides(size) if stride is None else tuple(int(s) for s in stride)
    fresh = new_storage_tensor(size, stride, t.dtype, Inp(meta=(size, stride, t.dtype)))
    # the TensorImpl's sizes, strides and (empty, metadata-only) storage: CPU's set_ only rewrites them
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KEYS, t, fresh.untyped_storage(), 0, size, stride)
    t._st, t._size, t._stride, t._offset, t._rc = fresh._st, size, stride, 0, None
    return t


def resize_output(out: HPUTensor, shape, stride=None) -> bool:
    """``at::native::resize_output``: what an ``out=`` argument of the wrong shape gets on CPU;
    whether it was resized. ``stride``: the layout the kernel asks for, which a resized ``out``
    takes (CPU's structured kernels restride an out they resized: ``resize_out``; a linalg kernel
    lays it out column-major); an ``out`` of the right shape keeps its own."""
    shape = tuple(shape)
    if tuple(out.shape) == shape:
        return False
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, which "
            f"does not match the required output shape {list(shape)}. This behavior is deprecated, and in "
            "a future PyTorch release outputs will not be resized unless they have zero elements. You can "
            "explicitly reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).")
    dense = stride is not None and torch._prims_common.is_non_overlapping_and_dense_or_false(
        torch.empty_strided(shape, stride, device="meta"))
    rebind(out, shape, stride if dense else None)
    return True


def resize_(t: HPUTensor, size, copy, memory_format=None) -> HPUTensor:
    """``t.resize_(size)``: keeps the first elements of a contiguous tensor (``copy(dst, src)`` writes
    them), the rest uninitialised. ``memory_format`` (channels_last, ...) lays the result out as
    CPU's resize_ does (restrided after the resize, over the same first elements)."""
    size = tuple(int(s) for s in size)
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        resize_(t, size, copy)
        stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
        if tuple(t.stride()) != stride:
            set_view_meta(t, size, stride, 0)
        return t
    if tuple(t.shape) == size:
        return t
    if not t.is_contiguous():
        raise RuntimeError(f"resize_ of a non-contiguous hpu tensor (shape {list(t.shape)}, stride "
                           f"{list(t.stride())}) to {list(size)} is not supported in hpu_lab: its storage "
                           "layout is not emulated; make it contiguous first")
    keep = min(t.numel(), math.prod(size))
    old = t.reshape(-1)[:keep] if keep else None       # a lazy view of the old values
    rebind(t, size)
    if keep:
        copy(t.view(-1)[:keep], old)
    return t
