"""In-place ops that read, through another view, memory they write (``t.sub_(t[:, :1])``).

CPU runs such an op on the shared memory: where its overlap check cannot decide (a view that is
not dense, as a column), the elements written first are read afterwards, so the result depends on
the kernel's loop order; where it can decide (two dense views partly over each other), it refuses
("some elements of the input tensor and the written-to tensor refer to a single memory location").
The lazy path computes in-place ops functionally (every read before any write), which gave another
result silently. So such an op becomes one node that runs CPU's kernel on views of a copy of the
storage (graph.InplaceOnAliases), and CPU's overlap check runs at the op, as on CPU.
Found by the random-program test (tests/fuzz_programs.py, seed 482).
"""
from __future__ import annotations

import functools

import torch

from .tensor import HPUTensor


def _span(size, stride, offset):
    return offset, offset + sum((s - 1) * st for s, st in zip(size, stride) if s > 0)


@functools.lru_cache(maxsize=4096)
def _geometries_share(ga, gb) -> bool:
    """Whether two (size, stride, offset) views of one storage share an element."""
    (lo_a, hi_a), (lo_b, hi_b) = _span(*ga), _span(*gb)
    if hi_a < lo_b or hi_b < lo_a:
        return False
    n = max(hi_a, hi_b) + 1                    # e.g. two columns of one matrix: ranges meet, elements not
    idx = torch.arange(n)
    mark = torch.zeros(n, dtype=torch.bool)
    mark[idx.as_strided(*ga).reshape(-1)] = True
    return bool(mark[idx.as_strided(*gb).reshape(-1)].any())


def shares_elements(a, b) -> bool:
    """Whether hpu tensors a and b (a written, b read) share a memory location and are not the same
    view (reading the very elements an elementwise op writes is what the functional form does)."""
    if a._st is not b._st or 0 in a._size or 0 in b._size:
        return False
    ga, gb = (a._size, a._stride, a._offset), (b._size, b._stride, b._offset)
    return ga != gb and _geometries_share(ga, gb)


def aliased_args(target, args, kwargs, skip):
    """Positions (int) and keywords (str) of the top-level tensor args other than ``skip`` that share
    memory with ``target`` (see ``shares_elements``). On every in-place op: the common answer (no
    other arg on the target's storage) costs one attribute test per tensor arg."""
    st = target._st
    keys = None
    for i, a in enumerate(args):
        if i != skip and getattr(a, "_st", None) is st and isinstance(a, HPUTensor) and shares_elements(target, a):
            keys = (keys or []) + [i]
    if kwargs:
        for k, a in kwargs.items():
            if getattr(a, "_st", None) is st and isinstance(a, HPUTensor) and shares_elements(target, a):
                keys = (keys or []) + [k]
    return keys


def describe(a):
    """What of an argument can change CPU's verdict on an op: a tensor's layout and dtype, a number
    with its type (never a tensor's values: that would read the device)."""
    if isinstance(a, HPUTensor):
        return ("T", a._size, a._stride, a.dtype)
    if isinstance(a, (list, tuple)):
        return tuple(describe(x) for x in a)
    if isinstance(a, torch.Tensor):
        return ("t", tuple(a.shape), a.dtype, a.device.type)
    return (type(a), repr(a))


def check_like_cpu(func, args, kwargs, keys, target_key, extent):
    """Run ``func`` on CPU stand-ins laid out as the hpu args (the aliased ones as views of one
    buffer of zeros), so that CPU's checks decide at the op: its overlap refusal, a dtype or shape it
    refuses, raised here with CPU's message (the checks read layouts, dtypes and numbers, not values)."""
    st = args[target_key]._st if type(target_key) is int else kwargs[target_key]._st
    buf = torch.zeros(extent, dtype=st.dtype)

    def dummy(a, key):
        if key == target_key or key in keys:
            return buf.as_strided(a._size, a._stride, a._offset)
        if isinstance(a, HPUTensor):
            return torch.zeros(a._size, dtype=a.dtype)
        return a

    cargs = [dummy(a, i) for i, a in enumerate(args)]
    ckw = {k: dummy(a, k) for k, a in kwargs.items()}
    try:
        func(*cargs, **ckw)
    except Exception as e:
        raise type(e)(str(e)) from None
