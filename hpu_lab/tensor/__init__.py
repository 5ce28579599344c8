"""HPUTensor: the "hpu" tensor, a torch wrapper subclass over emulated device memory.

An HPUTensor is a *view* (size, stride, offset) of a ``Storage``, as on a real device. A storage's
value is either

- an ``Inp``: a device buffer that exists (a CPU tensor standing in for HBM) or will exist once a
  launched recipe finishes (launch, output index); or
- an ``Out``: an output of a node of the pending lazy graph, not computed yet.

In-place ops never mutate a buffer: they rebind the storage to a new value (functionalisation),
so every view of the storage, and the base, see the update, in lazy mode too. Reading a view that
is not the whole storage adds a ``view`` node; writing one adds a ``scatter`` node.
"""
from __future__ import annotations

import copy
import threading
import weakref

import torch

from ..runtime import memory
from ..runtime.memory import _HOST_CHECK_MIN

HPU = torch.device("hpu", 0)


class Inp:
    """A device buffer: concrete now (``tensor``) or produced by a launch (``launch``, ``idx``)."""
    __slots__ = ("tensor", "launch", "idx", "meta", "regen", "owner", "__weakref__")

    def __init__(self, tensor=None, meta=None, launch=None, idx=0, regen=None):
        self.owner = None          # weakref of the storage it was read from (memory accounting)
        self.tensor = tensor
        self.launch = launch
        self.idx = idx
        self.meta = meta           # (size, stride, dtype) of the buffer's layout
        self.regen = regen         # for host-drawn random inputs: how to draw again (graph replay)

    def get(self, reason: str = "", src: str = ""):
        """The CPU tensor behind this buffer, waiting for the device if needed (a host sync)."""
        t = self.tensor
        if t is None and self.launch is None:       # empty memory, allocated on first use
            size, stride, dtype = self.meta
            t = self.tensor = torch.empty_strided(size, stride, dtype=dtype)
        if t is None:
            self.launch.wait(reason, src)
            t = self.tensor = self.launch.outputs[self.idx]
            self.launch = None
        return t


class Out:
    """Output ``idx`` of a pending node."""
    __slots__ = ("node", "idx", "meta", "__weakref__")

    def __init__(self, node, idx, meta):
        self.node, self.idx, self.meta = node, idx, meta


class Storage:
    """Device memory: accounted by the memory manager for as long as any view is alive.

    ``address()`` is its emulated device address, what ``data_ptr()`` reports (see there)."""
    __slots__ = ("nbytes", "size", "stride", "dtype", "value", "addr", "__weakref__")

    def __init__(self, size, stride, dtype, value, nbytes):
        self.size, self.stride, self.dtype = size, stride, dtype
        self.value = value
        self.nbytes = nbytes
        self.addr = 0                # given on the first data_ptr(): nothing on the op path
        memory.alloc(nbytes)

    def address(self) -> int:
        """A device address of its own, the same for as long as it lives: the range
        [address, address + nbytes) is no other storage's, alive or freed (a bump allocator: the
        real allocator's reuse of freed blocks is not modelled). 0 for an empty storage, as CPU."""
        if self.addr == 0 and self.nbytes:
            with _ADDR_LOCK:
                if self.addr == 0:
                    self.addr = _NEXT_ADDR[0]
                    _NEXT_ADDR[0] += -(-self.nbytes // _ADDR_ALIGN) * _ADDR_ALIGN
        return self.addr

    def __del__(self):
        try:
            memory.free(self.nbytes)
        except Exception:  # interpreter shutdown
            pass


_ADDR_LOCK = threading.Lock()
_NEXT_ADDR = [0x7F0000000000]   # hpu:0's emulated address space
_ADDR_ALIGN = 512

_EXTENT: dict = {}


def storage_extent(size, stride) -> int:
    """Elements a dense buffer of this layout spans (cached: it is on every op's path)."""
    key = (size, stride)
    n = _EXTENT.get(key)
    if n is None:
        n = _EXTENT[key] = _extent(size, stride)
    return n


def _extent(size, stride) -> int:
    if not size:
        return 1
    n = 1
    for s, st in zip(size, stride):
        if s == 0:
            return 0
        n += (s - 1) * st
    return n


class HPUUntypedStorage(torch.UntypedStorage):
    """What ``untyped_storage()`` (and ``storage()``) of an hpu tensor returns: torch's storage object of
    the wrapper, reporting its Storage as CPU reports a tensor's memory. Every view of a Storage has a
    storage object of its own (torch makes one per wrapper), all with the same ``data_ptr()`` and
    ``nbytes()``, so ``t.data_ptr() == t.untyped_storage().data_ptr() + t.storage_offset() *
    t.element_size()`` as on CPU. The class is set on the object torch made (same layout), not a copy:
    torch keeps one Python object per storage. Not registered as a torch storage class (so
    ``torch.is_storage`` is false of it, true on CPU): torch.load's weights-only unpickler takes every
    registered class for a legacy typed storage, and failed on it."""

    def data_ptr(self):
        return self._storage().address()

    def nbytes(self):
        return self._storage().nbytes

    def _storage(self) -> "Storage":
        st = self._hpu_st()
        if st is None:          # its tensors are gone (torch keeps this object with their C storage)
            raise RuntimeError("the hpu storage of this object was freed with its tensors")
        return st


class HPUTensor(torch.Tensor):
    """A tensor on device "hpu": a view of a Storage. All ops go to the active mode.

    The view (``_st``, ``_size``, ``_stride``, ``_offset``, and ``_rc``, a read cache) lives in the
    instance ``__dict__``, not in ``__slots__``: an object's class can only be assigned between
    classes of the same layout, and a CPU ``Parameter`` becomes an hpu one in place (the same
    Python object, as ``module.to("cuda")`` keeps it: dispatch/objmodel.py) by taking this class. So do
    ``torch.utils.swap_tensors`` (which refuses classes with different slots) and ``_apply``."""

    @staticmethod
    def __new__(cls, st: Storage, size, stride, offset, dtype, requires_grad=False, zero=False):
        # zero: torch's ZeroTensor key (an immutable known zero, kernels/zerotensor.py), above Python's key
        r = torch.Tensor._make_wrapper_subclass(
            cls, size, strides=stride, storage_offset=offset, dtype=dtype, device=HPU,
            requires_grad=requires_grad, _extra_dispatch_keys=_ZERO_KEYS if zero else None)
        r._st = st
        r._size, r._stride, r._offset = size, stride, offset
        r._rc = None      # read cache of a view: a weak reference to its view node's output
        return r

    # every op reaches __torch_dispatch__ anyway: skip the Python-level __torch_function__ layer
    # (it costs several microseconds an op and only re-wraps what dispatch already returns)
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or _EMPTY)

    # printing goes through one host sync, then torch's own formatting
    def __repr__(self, *, tensor_contents=None):
        cpu = _to_cpu(self, "print")
        s = torch._tensor_str._str(self, tensor_contents=torch._tensor_str._tensor_str(cpu, 7))
        return "tensor(" + s[len(type(self).__name__) + 1:] if s.startswith(type(self).__name__ + "(") else s

    def data_ptr(self):
        """The address of the first element: the storage's emulated device address plus the view's
        storage_offset * itemsize, as on CPU. Distinct for every storage (it was 0 for all: any two
        hpu tensors looked like one memory to code telling buffers apart by address, e.g. Intel's
        record_stream tests) and stable while it lives (in-place ops, mark_step do not move it)."""
        return self._st.address() + self._offset * self.element_size()

    def untyped_storage(self):
        """Torch's storage object of this tensor, as an ``HPUUntypedStorage``: its ``data_ptr()`` is
        the Storage's emulated address (a wrapper subclass's storage raised "invalid python storage")."""
        s = super().untyped_storage()
        if type(s) is not HPUUntypedStorage:    # the same object each call while the tensor lives
            s.__class__ = HPUUntypedStorage
        # resize_ may rebind the tensor to a fresh Storage. A weak reference: the object lives as long
        # as torch's C storage, and a strong one (through a pending value's graph) kept the Storage
        # and its memory alive after the tensors were gone
        s._hpu_st = weakref.ref(self._st)
        return s

    def __deepcopy__(self, memo):
        # torch's Tensor.__deepcopy__ clones a wrapper subclass whose data_ptr() is 0 (with an
        # address, it would copy the wrapper's empty host storage: a crash), and then deep-copies
        # its slots onto the clone: the clone's storage was replaced by a copy
        # of this one's Storage object (a pending lazy value copied off its graph: reading it
        # crashed; memory freed that was never allocated). The clone, with its own storage, here.
        if not self.is_leaf:
            return super().__deepcopy__(memo)       # torch's error for a non-leaf
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = self.clone()
        if self.requires_grad:
            new.requires_grad_()
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        self._clear_non_serializable_cached_data()
        # e.g. a Parameter's _is_param; not the view, which the clone has of its own storage
        new.__dict__.update(copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in VIEW_KEYS}, memo))
        new.__class__ = type(self)          # a parameter's copy is a parameter, as Parameter.__deepcopy__'s
        memo[id(self)] = new
        return new

    def tolist(self):
        return _to_cpu(self, ".tolist()").tolist()

    def numpy(self, *, force=False):
        raise TypeError("can't convert hpu:0 device type tensor to numpy. Use Tensor.cpu() to copy "
                        "the tensor to host memory first.")

    # The host reads of one element go straight to the emulator's read (lazy.read_item), not through
    # torch's dispatch of aten::_local_scalar_dense into __torch_dispatch__: that round trip (C++ into
    # Python, the router, a host tensor for the copy) cost ~10 us of the user's thread per read when
    # idle and 30-80 us while the device thread ran, on the Gaudi clock's host lane, where a bridge
    # pays a C++ call. Whatever could observe the aten op takes torch's way (_plain_read).
    def item(self):
        if _plain_read(self) and not (self.requires_grad and _GRAD_WARNING):
            return _read_item(self, ".item()")
        if self.requires_grad:
            _GRAD_WARNING.clear()       # torch warns once: "Converting a tensor with requires_grad..."
        return _torch_read(super().item, ".item()")

    def __float__(self):
        if _plain_read(self) and not self.dtype.is_complex:
            return float(_read_item(self, "bool/float/int of a tensor"))
        return super().__float__()

    def __bool__(self):
        if _plain_read(self):
            return bool(_read_item(self, "bool(tensor): data-dependent control flow"))
        return _torch_read(super().__bool__, "bool(tensor): data-dependent control flow")

    def __format__(self, spec):
        if self.dim() == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __setitem__(self, index, value):
        # torch's set_item fills a basic-indexed view with a 0-dim value by fill_ when the value is
        # a CPU tensor, and copies its expansion otherwise (copy_to, TensorIndexing.h). CPU's fill_
        # reads the value first, so writing an element into a view of itself is accepted
        # (t1[0:1:3] = t1.squeeze(0)), where copy_ of the expansion refuses the overlap. The same
        # branch for a 0-dim hpu value, so that hpu does what CPU does.
        if type(value) is HPUTensor and not value._size and _basic_index(index):
            super().__getitem__(index).fill_(value)
            return
        super().__setitem__(index, value)

    # torch marks a custom tensor as a parameter by setting ``_is_param`` (``nn.Parameter(t)``'s path for
    # tensor subclasses): an hpu tensor then takes the class of an hpu parameter (HPUParameter below)
    @property
    def _is_param(self) -> bool:
        return isinstance(self, HPUParameter)

    @_is_param.setter
    def _is_param(self, value) -> None:
        self.__class__ = HPUParameter if value else HPUTensor

    def __reduce_ex__(self, proto):
        # torch.save / pickle: as CPU saves a tensor, a view of its storage's host copy, storages
        # shared (integration/serialization.py); torch.load (weights_only too) rebuilds it with torch's functions
        if _reduce is not None:
            return _reduce(self, proto)
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (_to_cpu(self, "torch.save"), self.dtype, "hpu:0", self.requires_grad))


class HPUParameter(HPUTensor, torch.nn.Parameter):
    """A Parameter on "hpu": ``type(p)`` is a subclass of ``nn.Parameter``, as a CUDA Parameter's class
    is ``nn.Parameter``, so code that rebuilds a parameter from its class gets one
    (accelerate's ``set_module_tensor_to_device``: ``type(p)(new_value, requires_grad=...)``), and
    ``issubclass(type(p), nn.Parameter)`` holds. It is an HPUTensor too: its ops are the device's.

    Constructed as ``nn.Parameter``: hpu data gives an HPUParameter sharing the data's storage,
    other data a Parameter of that data's device (objmodel.parameter_new)."""

    def __new__(cls, data=None, requires_grad=True):
        return torch.nn.Parameter(data, requires_grad)

    def __repr__(self, *, tensor_contents=None):
        return "Parameter containing:\n" + HPUTensor.__repr__(self, tensor_contents=tensor_contents)


HPU_CLASSES = (HPUTensor, HPUParameter)   # the classes of hpu tensors (for `type(x) in` fast paths)

VIEW_KEYS = frozenset(("_st", "_size", "_stride", "_offset", "_rc"))   # an HPUTensor's own view of its storage
_EMPTY: dict = {}
_ZERO_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.ZeroTensor)
_dispatch = None       # the router's dispatch (set_dispatch: dispatch/route.py, wrapped by kernels/backward_errors.py)
_to_cpu = None         # lazy's host reads (set_host_reads: lazy/flushing.py)
_read_item = None
_set_reason = None
_reduce = None         # set by hpu_lab.integration.serialization: how torch.save writes an hpu tensor


def set_reduce(fn) -> None:
    global _reduce
    _reduce = fn


def set_dispatch(fn) -> None:
    """``fn(func, args, kwargs)`` receives every aten op on an HPUTensor (``__torch_dispatch__``)."""
    global _dispatch
    _dispatch = fn


def set_host_reads(to_cpu, read_item, set_reason) -> None:
    """What printing, ``.tolist()``, ``.item()`` and ``bool()`` of an HPUTensor call: lazy's host
    syncs (the tensor cannot import lazy, which imports it)."""
    global _to_cpu, _read_item, _set_reason
    _to_cpu, _read_item, _set_reason = to_cpu, read_item, set_reason


_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_profiling = torch._C._autograd._profiler_enabled


def _plain_read(t) -> bool:
    """``t`` has one element and nothing would see torch's dispatch of its read (no dispatch or
    function mode, e.g. a capture's host-state mode; no profiler recording aten ops): the read may
    skip that dispatch. Each check costs 1-4 us right after a launch (cold caches), so only these:
    a ZeroTensor's storage holds its zeros (kernels/zerotensor.py), and a JIT trace records a number read
    from a tensor as a constant either way."""
    for s in t._size:
        if s != 1:
            return False
    return not (_dispatch_modes() or _function_modes() or _profiling())


def _basic_index(index) -> bool:
    """An index torch's set_item takes as slicing only (ints, slices, None, Ellipsis): the written
    view is ``t[index]``, not an index_put_."""
    for i in index if type(index) is tuple else (index,):
        if not (i is None or i is Ellipsis or type(i) in (int, slice)):
            return False
    return True


_GRAD_WARNING = [True]     # torch's .item() has not warned of requires_grad in this process yet


def _torch_read(read, reason: str):
    """``read()`` through torch's dispatch, its host sync named ``reason``; the name is dropped
    however it ends (torch refuses a read of several elements before dispatching it: the name was
    left for the next sync, e.g. a ``.cpu()``, to take)."""
    _set_reason(reason)
    try:
        return read()
    finally:
        _set_reason(None)


def contiguous_strides(size) -> tuple:
    """The strides of a contiguous tensor of ``size``, as torch computes them (a 0 dim counts as 1)."""
    stride, acc = [], 1
    for s in reversed(size):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))


def new_storage_tensor(size, stride, dtype, value) -> HPUTensor:
    """A fresh storage holding ``value`` (Inp or Out) with this layout, and its base tensor."""
    n = storage_extent(size, stride)
    nbytes = n * _itemsize(dtype)
    if nbytes >= _HOST_CHECK_MIN:           # lazy outputs too: refused at the op that makes them
        memory.check_host(nbytes, f"a {str(dtype).replace('torch.', '')} tensor of shape {tuple(size)}")
    st = Storage(size, stride, dtype, value, nbytes)
    return HPUTensor(st, size, stride, 0, dtype)


_ITEMSIZE: dict = {}


def _itemsize(dtype) -> int:
    s = _ITEMSIZE.get(dtype)
    if s is None:
        s = _ITEMSIZE[dtype] = torch.empty((), dtype=dtype).element_size()
    return s


def is_hpu(x) -> bool:
    return type(x) in HPU_CLASSES or isinstance(x, HPUTensor)
