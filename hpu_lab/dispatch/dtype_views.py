"""Dtype-reinterpreting views of hpu tensors: ``t.view(torch.uint8)``, ``t.view(torch.int32)``, and
``set_`` onto a storage of another dtype, as on CPU (the same bytes, read and written through
either name). DeepSpeed looks at every parameter this way (``p.data.view(torch.uint8)``);
quantized checkpoints write scales through ``.view(torch.uint8)``.

A view of an HPUTensor is a (size, stride, offset) over a ``Storage`` of the storage's dtype. A view
of another dtype is a view over a ``Reinterpreted`` storage: the base storage's bytes, in address
order, as a flat array of the view's dtype (offsets and strides in its elements, as CPU's meta
kernel gives them). It holds no value of its own: reading its ``value`` reads the base's (on the
host, a zero-copy view of the buffer when the base holds one; in the pending graph, an ``as_dtype``
node), and writing it writes the base's (``from_dtype``). Every view of either name reads the base,
so a write through one is seen through the other, lazy or eager. Complex dtypes stay refused: a
Gaudi has none ("Complex datatype is not supported on HPU device").
"""
from __future__ import annotations

import weakref

import torch

from .. import lazy
from ..compiler.graph import as_dtype, from_dtype, ref_sig
from ..tensor import Inp, Out, Storage, _itemsize, storage_extent


def _complex(dtype) -> bool:
    return dtype.is_complex


class Reinterpreted:
    """The bytes of ``base`` (a Storage) as a flat array of ``dtype``; the same device memory."""
    __slots__ = ("base", "size", "stride", "dtype", "nbytes", "_seen", "__weakref__")

    def __init__(self, base: Storage, dtype):
        self.base, self.dtype, self.nbytes = base, dtype, base.nbytes
        self.size, self.stride = (base.nbytes // _itemsize(dtype),), (1,)
        self._seen = None          # (base value, this storage's value for it)

    def address(self) -> int:
        return self.base.address()

    @property
    def value(self):
        v = self.base.value
        seen = self._seen
        if seen is not None:
            r = seen[1]()
            if r is not None and seen[0]() is v and _current(r):
                return r
        r = self._read(v)
        self._seen = (weakref.ref(v), weakref.ref(r))     # weak: no old buffer kept (lazy.read_ref)
        return r

    @value.setter
    def value(self, r):
        base = self.base
        v = self._write(r)
        base.value = v
        if type(v) is Out:
            lazy.S.pg.track(base)
        self._seen = (weakref.ref(v), weakref.ref(r))

    def host_view(self, base_tensor):
        """This storage's buffer, given the base's laid out as the base (zero-copy)."""
        flat = base_tensor.as_strided((storage_extent(self.base.size, self.base.stride),), (1,), 0)
        return flat.view(torch.uint8)[:self.size[0] * _itemsize(self.dtype)].view(self.dtype)

    def _read(self, v):
        base = self.base
        meta = (self.size, self.stride, self.dtype)
        if type(v) is Inp and v.launch is None and _laid_out(v.get(), base):
            return Inp(self.host_view(v.tensor), meta)
        pg = lazy.S.pg
        args = (v, base.stride, self.dtype, self.size[0])
        (r,) = pg.add(as_dtype, args, {}, [meta], None,
                      (ref_sig(pg, v), base.stride, self.dtype, self.size[0]), (), (v,), "")
        return r

    def _write(self, r):
        base = self.base
        meta = (base.size, base.stride, base.dtype)
        whole = self.size[0] * _itemsize(self.dtype) == storage_extent(base.size, base.stride) * _itemsize(base.dtype)
        if type(r) is Inp and r.launch is None and whole:
            t = r.get()
            if tuple(t.stride()) == (1,) and t.storage_offset() == 0:
                return Inp(t.view(torch.uint8).view(base.dtype).as_strided(base.size, base.stride, 0), meta)
        pg = lazy.S.pg
        old = None if whole else base.value
        refs = (r,) if old is None else (r, old)
        (v,) = pg.add(from_dtype, (r, old, base.size, base.stride, base.dtype), {}, [meta], None,
                      (ref_sig(pg, r), None if old is None else ref_sig(pg, old), base.size, base.stride,
                       base.dtype), (), refs, "")
        return v


def _current(r) -> bool:
    """A pending value made for an earlier graph is stale once that graph was launched."""
    if type(r) is Out:
        n = r.node
        return n.graph is lazy.S.pg and n.launched is None
    return True


def _laid_out(t, st) -> bool:
    return tuple(t.stride()) == st.stride and t.storage_offset() == 0


def storage_as(st, dtype):
    """``st`` (a Storage or a Reinterpreted one) seen as ``dtype``: itself, its base, or a
    Reinterpreted storage over its base."""
    if st.dtype is dtype:
        return st
    base = st.base if type(st) is Reinterpreted else st
    if base.dtype is dtype:
        return base
    if _complex(dtype) or _complex(base.dtype):
        raise NotImplementedError("dtype-reinterpreting views are not supported on hpu for complex dtypes "
                                  f"({base.dtype} as {dtype}): Complex datatype is not supported on HPU device.")
    return Reinterpreted(base, dtype)



