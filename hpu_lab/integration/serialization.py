"""``torch.save`` / ``torch.load`` of hpu tensors: storages, views and sharing kept, as on CPU.

On CPU (and CUDA, and Gaudi) ``torch.save`` writes each *storage* once and each tensor as a view of
it (``_rebuild_tensor_v2(storage, offset, size, stride)``): a view saved with its base comes back as
a view of the same storage, parameters tied in a model stay tied. hpu tensors were saved one by one
through the CPU (each an independent tensor after loading), and loading with ``map_location="hpu"``
raised (``torch.hpu.device`` was missing; with it, torch's own ``Storage.to("hpu")`` would have made
a storage on a device with no allocator: a crash).

Saving: an hpu tensor is written as CPU writes a tensor, its storage being a host copy of its
``Storage`` made once per save (every view of one Storage names the same copy), which reports
device "hpu": the file says ``location="hpu:0"``, as a Gaudi checkpoint does, and loads on CPU with
``map_location="cpu"``. Loading: torch restores a storage to "hpu" the way it restores one to any
device (``Storage.to``/``.hpu()``: ``torch.UntypedStorage(n, device="hpu")`` then ``copy_``), and
rebuilds each tensor as ``torch.empty(0, device="hpu").set_(storage, offset, size, stride)``. An hpu
storage made that way is a ``HostStagedStorage``: host bytes bound for the device. ``set_`` with one
makes the device ``Storage`` of the tensor's dtype from those bytes, once; the other tensors of the
same storage become views of it. So ``map_location`` "hpu", "hpu:0", ``torch.device("hpu")``, a dict
or a callable returning ``storage.hpu()`` / ``storage.to("hpu")`` all load onto hpu with CPU's sharing.

Not kept: tensors of the dtypes torch saves with ``_rebuild_tensor_v3`` (uint16/32/64, float8 ...)
are saved one by one through the CPU as before (torch's v3 path needs a registered storage class).
The deprecated ``TypedStorage.hpu()`` refuses a HostStagedStorage (it wants exactly
``torch.UntypedStorage``); ``UntypedStorage.hpu()`` and ``.to(device="hpu")`` work.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict

import torch

from ..dispatch import route
from ..lazy import to_cpu
from ..tensor import HPU, VIEW_KEYS, HPUTensor, Inp, new_storage_tensor

aten = torch.ops.aten
_CPU_NEW = torch.UntypedStorage.__new__
_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


class HostStagedStorage(torch.UntypedStorage):
    """An hpu storage on its way to or from the device: host bytes (a CPU storage underneath) that
    report device hpu:0. ``torch.save`` writes it with location "hpu:0"; ``set_`` of an hpu tensor
    with it puts the bytes on the device (``_device_storage``)."""

    @property
    def device(self):
        return HPU

    def _device_storage(self, dtype):
        """A device tensor of ``dtype`` holding these bytes, its Storage made once and shared by every
        tensor set to this storage (a storage is saved in one dtype)."""
        made = self.__dict__.setdefault("_hpu_made", {})
        base = made.get(dtype)
        if base is None:
            host = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage(self.nbytes()).copy_(self))
            values = host.view(dtype)
            n = values.numel()
            base = made[dtype] = new_storage_tensor((n,), (1,), dtype, Inp(values, ((n,), (1,), dtype)))
        return base


def _staged(nbytes: int) -> HostStagedStorage:
    s = _CPU_NEW(torch.UntypedStorage, nbytes)
    s.__class__ = HostStagedStorage
    return s


def _untyped_storage_new(cls, *args, **kwargs):
    """``torch.UntypedStorage(n, device="hpu")``: a HostStagedStorage of n bytes (torch would ask the
    PrivateUse1 allocator, which a Python backend does not have: a segmentation fault)."""
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type == "hpu":
        kwargs.pop("device")
        if torch.device(dev).index not in (None, 0):
            raise RuntimeError(f"hpu_lab emulates one device (hpu:0); cannot allocate a storage on {dev}")
        s = _CPU_NEW(torch.UntypedStorage, *args, **kwargs)
        s.__class__ = HostStagedStorage
        return s
    return _CPU_NEW(cls, *args, **kwargs)


# ---------------------------------------------------------------- saving

_HOST_COPIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # Storage -> (value, weakref of copy)


def _host_copy(t) -> HostStagedStorage:
    """The host copy of ``t``'s whole Storage, shared by every tensor of that Storage while its value
    is the same (one save writes it once; torch keys the file's storages by this object)."""
    st = t._st
    held = _HOST_COPIES.get(st)
    if held is not None and held[0] is st.value:
        copy = held[1]()
        if copy is not None:
            return copy
    base = to_cpu(t, "torch.save", whole_storage=True)      # laid out as the Storage, at offset 0
    raw = torch.empty(0, dtype=torch.uint8).set_(base.untyped_storage())[:st.nbytes]
    copy = _staged(st.nbytes)
    torch.empty(0, dtype=torch.uint8).set_(copy).copy_(raw)
    _HOST_COPIES[st] = (st.value, weakref.ref(copy))
    return copy


def reduce_tensor(t, proto):
    """``HPUTensor.__reduce_ex__``: the tensor as CPU's ``_reduce_ex_internal`` writes one, over the
    host copy of its Storage; a parameter (an hpu Parameter is an HPUTensor marked ``_is_param``) as
    ``Parameter.__reduce_ex__`` writes one, around its data."""
    if getattr(t, "_is_param", False):
        # (a user's attributes on it are state, as on CPU; hpu_lab's own, its view and marks, are not)
        state = {k: v for k, v in t.__dict__.items() if k not in VIEW_KEYS and not k.startswith(("_is_param", "_hpu"))}
        if state:
            return (torch._utils._rebuild_parameter_with_state, (t.detach(), t.requires_grad, OrderedDict(), state))
        return (torch._utils._rebuild_parameter, (t.detach(), t.requires_grad, OrderedDict()))
    if t.dtype in torch.storage._new_dtypes():
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (to_cpu(t, "torch.save"), t.dtype, "hpu:0", t.requires_grad))
    typed = torch.storage.TypedStorage(wrap_storage=_host_copy(t), dtype=t.dtype, _internal=True)
    return (torch._utils._rebuild_tensor_v2,
            (typed, t._offset, tuple(t._size), tuple(t._stride), t.requires_grad, OrderedDict()))


# ---------------------------------------------------------------- loading: set_ with a staged storage

_PREV: dict = {}


def set_from_storage(func, args, kwargs):
    """``t.set_(storage[, offset, size, stride])`` with a HostStagedStorage: ``t`` becomes that view of
    the storage's device Storage. Any other source goes to the handler that was there before."""
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args), **kwargs)
    src, t = bound["source"], bound["self"]
    if not isinstance(src, HostStagedStorage) or not isinstance(t, HPUTensor):
        return _PREV[func](func, args, kwargs)
    base = src._device_storage(t.dtype)
    n = base._size[0]
    if "size" in bound:
        size = tuple(int(x) for x in bound["size"])
        stride = tuple(bound.get("stride") or torch._prims_common.make_contiguous_strides_for(size))
        offset = int(bound.get("storage_offset", 0))
    else:
        size, stride, offset = (n,), (1,), 0
    # the TensorImpl's sizes, strides and metadata-only storage, by CPU's set_ (its bounds check and
    # message too), then the view of the device Storage (as resize.rebind)
    aten.set_.source_Storage_storage_offset.redispatch(_CPU_KEYS, t, base.untyped_storage(), offset, size, stride)
    t._st, t._size, t._stride, t._offset, t._rc = base._st, size, stride, offset, None
    return t


def install() -> None:
    from ..tensor import set_reduce
    torch.UntypedStorage.__new__ = staticmethod(_untyped_storage_new)
    set_reduce(reduce_tensor)
    for func in (aten.set_.source_Storage, aten.set_.source_Storage_storage_offset):
        _PREV[func] = route.register_special(func, set_from_storage).prev
