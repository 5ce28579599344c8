"""The strides CPU gives an elementwise op's result: TensorIterator's rule, for the lazy path.

A lazy op's output layout comes from its Meta kernel. For elementwise ops torch's Meta kernels take
it from ``torch._prims_common.compute_elementwise_output_strides``, which follows CPU's
TensorIterator except where dimensions tie (size-1 and broadcast dimensions, empty tensors): there
CPU's result can even be laid out in another order (``(2, 1) + (1, 1, 2)``-shaped operands give a
column-major (1, 2, 2) on CPU, row-major from the Meta kernel), so a later ``view`` or in-place write
through it did on "hpu" what it does not do on CPU. Found by the random-program test (seeds 4006,
4042). This is TensorIterator's own procedure (aten/src/ATen/TensorIterator.cpp): the fast set-up
when every operand has one shape, else ``reorder_dimensions``' insertion sort over the operands'
strides and the output allocated in that order.
"""
from __future__ import annotations

import torch

from ..tensor import contiguous_strides


def _channels_last_strides(size):
    n, c, h, w = size
    sc = 1
    sw = max(c, 1)
    sh = sw * max(w, 1)
    sn = sh * max(h, 1)
    return (sn, sc, sh, sw)


def _is_contiguous(size, stride) -> bool:
    if 0 in size:
        return True
    expect = 1
    for s, st in zip(reversed(size), reversed(stride)):
        if s != 1 and st != expect:
            return False
        expect *= s
    return True


def _is_channels_last(size, stride) -> bool:
    # torch's is_contiguous(memory_format=channels_last): 4-d, dims checked in the order C, W, H, N
    if len(size) != 4:
        return False
    expect = 1
    for d in (1, 3, 2, 0):
        if size[d] != 1:
            if stride[d] != expect:
                return False
            expect *= size[d]
    return True


def _non_overlapping_and_dense(size, stride) -> bool:
    if len(size) == 1:
        return size[0] < 2 or stride[0] == 1
    dims = sorted((d for d in range(len(size))), key=lambda d: (size[d] < 2, stride[d]))
    expect = 1
    for d in dims:
        if size[d] == 1:
            continue
        if size[d] == 0:
            return True
        if stride[d] != expect:
            return False
        expect *= size[d]
    return True


def output_strides(shape, operands):
    """The strides of the fresh output of CPU's TensorIterator over ``operands`` ((size, stride) of
    each input tensor, 0-dim wrapped numbers included) broadcast to ``shape``."""
    shape = tuple(shape)
    nd = len(shape)
    if all(tuple(s) == shape for s, _ in operands):       # fast set-up
        if all(_is_contiguous(s, st) for s, st in operands):
            return contiguous_strides(shape)
        if all(_is_channels_last(s, st) for s, st in operands):
            return _channels_last_strides(shape)
        if all(_non_overlapping_and_dense(s, st) for s, st in operands) and \
                all(tuple(st) == tuple(operands[-1][1]) for _, st in operands):
            return tuple(operands[-1][1])
    if nd <= 1:
        return contiguous_strides(shape)
    strides = []
    for size, stride in operands:       # TensorIterator.compute_strides: 0 where broadcast
        off = nd - len(size)
        st = [0] * nd
        for i, (s, x) in enumerate(zip(size, stride)):
            st[off + i] = 0 if (s == 1 and shape[off + i] != 1) else x
        strides.append(st)

    def should_swap(d0, d1):
        for st in strides:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(nd - 1, -1, -1))          # fastest dimension first
    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    if perm == list(range(nd - 1, -1, -1)):
        return contiguous_strides(shape)
    out = [0] * nd
    acc = 1
    for d in perm:                  # compatible_stride: no max(size, 1) here, unlike contiguous
        out[d] = acc
        acc *= shape[d]
    return tuple(out)


_SCALAR = (int, float, bool, complex)


def operand_layouts(func, args, kwargs):
    """(size, stride) of the operands CPU's TensorIterator sees for elementwise ``func``: its tensor
    args (meta tensors here), and a Python number passed where the schema takes a Tensor (``x * 2``
    is ``mul.Tensor`` with a wrapped 0-dim number). None when an argument is a list (not elementwise
    over operands) or a Scalar-typed number (a parameter of the kernel, e.g. ``alpha``)."""
    out = []
    for a, arg in zip(list(args) + [kwargs.get(x.name) for x in func._schema.arguments[len(args):]],
                      func._schema.arguments):
        if isinstance(a, torch.Tensor):
            out.append((tuple(a.shape), tuple(a.stride())))
        elif isinstance(a, (list, tuple)):
            return None
        elif type(a) in _SCALAR and isinstance(arg.type, torch.TensorType):
            out.append(((), ()))
    return out
