"""In-place ops that read, through another view, memory they write (``t.sub_(t[:, :1])``).

CPU runs such an op on the shared memory: where its overlap check cannot decide (a view that is
not dense, as a column), the elements written first are read afterwards, so the result depends on
the kernel's loop order; where it can decide (two dense views partly over each other), it refuses
("some elements of the input tensor and the written-to tensor refer to a single memory location").
The lazy path computes in-place ops functionally (every read before any write), which gave another
result silently. So such an op becomes one node that runs CPU's kernel on views of a copy of the
storage (graph.InplaceOnStorages, with one storage), and CPU's overlap check runs at the op, as on CPU.
Found by the random-program test (tests/fuzz_programs.py, seed 482).

Ops writing several tensors (foreach lists, optimizers) are the same story one level up: CPU applies
them tensor after tensor, so a tensor written first is read (or written again) afterwards, and the
functional form gave another answer (``_foreach_add_([a, a], [b, b])`` added b once). Those become
one node running CPU's kernel on copies of the written storages (graph.InplaceOnStorages).
"""
from __future__ import annotations

import functools

import torch

from ..tensor import HPUTensor


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


def flat_targets(targets) -> list:
    """The tensors an in-place op writes, its written lists flattened (``[xs, t]`` -> ``[*xs, t]``)."""
    return [x for t in targets for x in (t if isinstance(t, (list, tuple)) else [t])]


def tensor_slots(args, kwargs):
    """(path, tensor) of every hpu tensor among the args: path (i,) for an arg, (i, j) for element j
    of a list arg; i is a position or a keyword."""
    out = []
    for key, a in list(enumerate(args)) + list(kwargs.items()):
        if isinstance(a, HPUTensor):
            out.append(((key,), a))
        elif isinstance(a, (list, tuple)):
            for j, x in enumerate(a):
                if isinstance(x, HPUTensor):
                    out.append(((key, j), x))
    return out


def _geo(t):
    return (t._size, t._stride, t._offset)


def writes_over_reads(slots, written) -> bool:
    """Whether an op writing the args ``written`` (positions) of several tensors (a foreach list,
    an optimizer's params and state) writes memory that another of its tensors reads or writes.
    CPU applies such an op tensor after tensor (``_foreach_add_([a, a], [b, b])`` adds b twice), so
    the functional form, all reads before all writes, would differ. What is not overlap: tensors on
    one storage that share no element (params sliced from one flat buffer), and a tensor read at its
    own list index in the very view written there (``_foreach_mul_(xs, xs)``: elementwise)."""
    by_st: dict = {}
    for path, t in slots:
        if 0 not in t._size:
            by_st.setdefault(id(t._st), []).append((path, t))
    for group in by_st.values():
        if len(group) < 2:
            continue
        for a in range(len(group)):
            pa, ta = group[a]
            wa = pa[0] in written
            for b in range(a + 1, len(group)):
                pb, tb = group[b]
                wb = pb[0] in written
                if not (wa or wb):
                    continue
                ga, gb = _geo(ta), _geo(tb)
                if not (wa and wb) and ga == gb and len(pa) == len(pb) == 2 and pa[1] == pb[1]:
                    continue        # read where written, element by element
                if ga == gb or _geometries_share(ga, gb):
                    return True
    return False


def check_storages_like_cpu(func, args, kwargs, placed, extents):
    """Run ``func`` on CPU stand-ins laid out as the hpu args: the tensors ``placed`` ({path: (storage
    index, size, stride, offset)}) are views of one buffer of zeros per written storage, other hpu
    tensors zeros, so that CPU's checks (its overlap refusal, a dtype or shape it refuses) decide at
    the op, with CPU's message (they read layouts, dtypes and numbers, not values)."""
    bufs = [torch.zeros(n, dtype=dt) for n, dt in extents]

    def dummy(a, path):
        p = placed.get(path)
        if p is not None:
            k, size, stride, offset = p
            return bufs[k].as_strided(size, stride, offset)
        if isinstance(a, HPUTensor):
            return torch.zeros(a._size, dtype=a.dtype)
        return a

    def arg(key, a):
        if isinstance(a, (list, tuple)) and not isinstance(a, HPUTensor):
            return type(a)(dummy(x, (key, j)) for j, x in enumerate(a))
        return dummy(a, (key,))

    cargs = [arg(i, a) for i, a in enumerate(args)]
    ckw = {k: arg(k, a) for k, a in kwargs.items()}
    try:
        func(*cargs, **ckw)
    except Exception as e:
        raise type(e)(str(e)) from None
