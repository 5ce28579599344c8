"""Reading and writing hpu tensors in the pending graph: a read is a reference to a storage's value
(or a view node over it), a write rebinds the storage (a ``scatter`` node when the target is part
of it).
"""
from __future__ import annotations

import weakref

from ..compiler.graph import ref_sig, restride, scatter, view
from ..tensor import HPUTensor, Inp, Out, contiguous_strides, new_storage_tensor, storage_extent
from . import state
from .state import S, _src


def _full(t) -> bool:
    st = t._st
    return t._offset == 0 and t._size == st.size and t._stride == st.stride


def _whole_reshape(t) -> bool:
    """t is a reshape of its whole, dense storage (e.g. the (3,) result torch's linear makes of a 1-D
    input by squeezing a (1, 3) matmul): writing it updates no part of a tensor, so an HPU Graph
    capture takes it (the bridge's own linear returns a fresh tensor there)."""
    st = t._st
    n = 1
    for s in t._size:
        n *= s
    return (t._offset == 0 and n == storage_extent(st.size, st.stride) and t.is_contiguous()
            and st.stride == contiguous_strides(st.size))


_weak = weakref.ref


def read_ref(t):
    """A reference to t's current value: an Out, an Inp, or a new view node over the storage."""
    st = t._st
    v = st.value
    if S.capture is not None and type(v) is Inp:
        S.capture.saw(v, st)           # replay reads this storage's value then (graphs/)
    if t._offset == 0 and t._size == st.size and t._stride == st.stride:
        return v
    rc = t._rc
    # the cached view node is only valid in the graph that is still pending (not after a flush).
    # A weak reference: a view read once held its node, whose arguments held the storage's value
    # of then, so every view of a buffer written since kept an old copy of the whole buffer alive
    if rc is not None:
        r = rc()
        if r is not None:
            n = r.node
            if n.args[0] is v and n.graph is S.pg and n.launched is None:
                return r
    pg = S.pg
    sig = (ref_sig(pg, v), t._size, t._stride, t._offset, st.stride)
    (r,) = pg.add(view, (v, t._size, t._stride, t._offset, st.stride), {}, [(t._size, t._stride, t.dtype)],
                  None, sig, (), (v,), _src() if S.source_lines else "")
    t._rc = _weak(r)
    return r


# In-place ops CPU lets write through a view whose elements share memory (an expand): all the
# elements sharing a location receive the same value. Every other op refuses, with this message.
OVERLAP_OK = {"aten::fill_", "aten::zero_", "aten::masked_fill_", "aten::index_fill_",
              "aten::index_put_", "aten::_index_put_impl_"}
_OVERLAP_MSG = ("unsupported operation: more than one element of the written-to tensor refers to a single "
                "memory location. Please clone() the tensor before performing the operation.")


def _overlapping(t) -> bool:
    for s, st in zip(t._size, t._stride):
        if st == 0 and s > 1:
            return True
    return False


def write(t, r, op: str = "") -> None:
    """t's elements now hold value r (an Out or Inp with t's shape and dtype); ``op`` names the
    writing op for errors."""
    if state._trace is not None:
        state._trace[0](t)
    st = t._st
    pg = S.pg
    if op not in OVERLAP_OK and not _full(t) and _overlapping(t):
        raise RuntimeError(_OVERLAP_MSG)       # as CPU, at the op (not when the graph runs)
    if S.capture is not None and not _full(t) and not _whole_reshape(t):
        S.capture.refuse_view_write(t, op or "in-place op", _src())   # seed 001: unsupported
    if _full(t):
        if r.meta[1] != st.stride and r.meta[0] == st.size and storage_extent(st.size, st.stride) > 1:
            (r,) = pg.add(restride, (r, st.size, st.stride), {}, [(st.size, st.stride, st.dtype)], None,
                          (ref_sig(pg, r), st.size, st.stride), (), (r,), "")
        st.value = r
    else:
        base = st.value
        if S.capture is not None and type(base) is Inp:
            S.capture.saw(base, st)
        pg.scatters += 1
        (r2,) = pg.add(scatter, (base, r, t._size, t._stride, t._offset, st.stride), {},
                       [(st.size, st.stride, st.dtype)], None,
                       (ref_sig(pg, base), ref_sig(pg, r), t._size, t._stride, t._offset, st.stride),
                       (), (base, r), _src() if S.source_lines else "")
        st.value = r2
        r = r2
    if type(r) is Out:
        pg.track(st)
    t._rc = None


def write_concrete(t, cpu_tensor, regen=None, op: str = "", source=None) -> None:
    """t's elements now hold a host tensor already on the device (an H2D copy of ``source``, or a
    host draw)."""
    st = t._st
    if _full(t) and tuple(cpu_tensor.stride()) == st.stride and cpu_tensor.storage_offset() == 0:
        st.value = inp = Inp(cpu_tensor, (st.size, st.stride, st.dtype), regen=regen)
        if S.capture is not None:
            S.capture.created(inp, source)   # a constant of the graph, or redrawn at replay (regen)
        t._rc = None
        return
    inp = Inp(cpu_tensor, (tuple(cpu_tensor.shape), tuple(cpu_tensor.stride()), cpu_tensor.dtype), regen=regen)
    if S.capture is not None:
        S.capture.created(inp, source)
    write(t, inp, op)


def wrap_new(meta, value) -> HPUTensor:
    size, stride, dtype = meta
    t = new_storage_tensor(size, stride, dtype, value)
    if type(value) is Out:
        S.pg.track(t._st)
    return t


def scalar_sig(a):
    """A number's signature: its type and exact bits. Python says 1 == 1.0 == True and
    0.0 == -0.0, but ``x + 1`` and ``x + 1.0`` differ in dtype and ``x * -0.0`` in sign: keyed by
    value alone, a cached meta result or recipe of one was reused for the other."""
    t = type(a)
    if t is float:
        return (float, a.hex())
    if t is complex:
        return (complex, a.real.hex(), a.imag.hex())
    return (t, a)
