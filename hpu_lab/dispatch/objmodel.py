"""The object model of a dense device for "hpu" tensors: which Python objects a module, an optimizer
and a view share, as on CPU and CUDA (and on a Gaudi, where HPU is one of torch's dense backends).

Training libraries rely on it. accelerate's ``prepare(model, optimizer)`` and Lightning Fabric's
``setup`` move the model after the optimizer holds its parameters; ZeRO binds every parameter into
a flat buffer with ``p.data = flat.narrow(...).view_as(p)``. An HPUTensor is a Python wrapper
subclass over PrivateUse1, which torch's C++ does not count as dense, and its view of the device
memory is Python state; so, left to torch:

- ``torch._has_compatible_shallow_copy_type(cpu, hpu)`` is false, and ``Module._apply`` made a new
  Parameter for every slot: an optimizer built before ``model.to("hpu")`` kept stepping orphaned CPU
  tensors while the model never trained;
- ``t.data = x`` (torch's ``set_data``) copied x's C++ metadata into t but not its view, so t kept
  its old storage with x's sizes (and ``cpu_t.data = hpu_x`` was refused outright).

Here (``install()``):

- ``torch._has_compatible_shallow_copy_type`` says what it says for CUDA: an hpu tensor is
  compatible with a dense CPU tensor and with another hpu tensor, so ``_apply`` takes CUDA's path,
  ``param.data = fn(param)``, and keeps the Parameter objects (with
  ``torch.__future__.set_overwrite_module_params_on_conversion(True)`` it makes new ones, as on CUDA;
  with ``set_swap_module_params_on_conversion(True)`` it swaps, which works since HPUTensor has the
  layout of a Parameter: tensor/).
- ``Tensor.data``'s setter (``set_data``): between hpu tensors, torch's own setter, then the view is
  x's (t shares x's storage: a later write through either is seen through the other). Across
  devices, the object keeps its identity, ``__dict__``, ``requires_grad``, ``_version``, hooks and
  ``.grad`` (moved along: on CUDA ``_apply`` moves it right after), and takes a fresh tensor
  implementation aliasing x (torch's ``_swap_tensor_impl``) and x's class (a Parameter on "hpu" is
  an ``HPUParameter``, a subclass of both HPUTensor and ``nn.Parameter``; back on CPU it is a
  Parameter again).
- ``nn.Parameter(x)`` of an hpu tensor or parameter is an HPUParameter sharing x's storage (torch's
  path for tensor subclasses refused an hpu parameter: its ``detach()`` is a plain hpu tensor, as a
  Parameter's is a plain Tensor), so ``type(p)(value, requires_grad=...)`` rebuilds a parameter.
"""
from __future__ import annotations

import torch

from ..tensor import HPUParameter, HPUTensor, VIEW_KEYS

_C_DATA = torch._C.TensorBase.data          # torch's own getter/setter of Tensor.data
_orig_compatible = None
_CPU_DENSE = torch.empty(0)                 # what a dense CPU tensor is compatible with

_INCOMPATIBLE = ("Attempted to call `variable.set_data(tensor)`, but `variable` and `tensor` have incompatible "
                 "tensor type.")


def _dense_host(t) -> bool:
    return _orig_compatible(t, _CPU_DENSE)


def has_compatible_shallow_copy_type(input, from_):      # torch's parameter names (dynamo's polyfill checks)
    """torch's check, with hpu as the dense backend it is on a Gaudi (c10's ``is_dense`` lists HPU)."""
    a, b = input, from_
    ah, bh = isinstance(a, HPUTensor), isinstance(b, HPUTensor)
    if not (ah or bh):
        return _orig_compatible(a, b)
    if ah and bh:
        return True
    return _dense_host(b if ah else a) and not a.is_sparse and not b.is_sparse


def set_data(self, new) -> None:
    """``self.data = new``, as torch's ``VariableHooks::set_data`` does it for dense tensors."""
    if not (isinstance(self, HPUTensor) or isinstance(new, HPUTensor)):
        _C_DATA.__set__(self, new)
        return
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"Variable data has to be a tensor, but got {type(new).__name__}")
    if isinstance(self, HPUTensor) and isinstance(new, HPUTensor):
        _C_DATA.__set__(self, new)          # torch's checks, metadata; _version and autograd kept
        d = self.__dict__
        d["_st"], d["_size"], d["_stride"], d["_offset"], d["_rc"] = (
            new._st, new._size, new._stride, new._offset, None)
        return
    if not has_compatible_shallow_copy_type(self, new):
        raise RuntimeError(_INCOMPATIBLE)
    _across_devices(self, new)


def _across_devices(self, new) -> None:
    if self.requires_grad and not (new.dtype.is_floating_point or new.dtype.is_complex):
        raise RuntimeError("data set to a tensor that requires gradients must be floating point or complex dtype")
    if not self.is_leaf:
        raise RuntimeError(f"hpu_lab: `.data =` moving a non-leaf tensor (grad_fn {type(self.grad_fn).__name__}) "
                           f"between {self.device} and {new.device} is not supported; detach() it first")
    to_hpu = isinstance(new, HPUTensor)
    rg = self.requires_grad
    if to_hpu:
        alias = HPUTensor(new._st, new._size, new._stride, new._offset, new.dtype, requires_grad=rg,
                          zero=new._is_zerotensor())
        cls = HPUParameter if issubclass(type(self), torch.nn.Parameter) else HPUTensor
    else:
        alias = new.detach()
        alias.requires_grad_(rg)
        cls = self.__dict__.get("_hpu_host_class") or (torch.nn.Parameter if isinstance(self, HPUParameter)
                                                       else torch.Tensor)
    old_cls = type(self)
    if old_cls.__dictoffset__ != cls.__dictoffset__ or old_cls.__basicsize__ != cls.__basicsize__:
        raise RuntimeError(_INCOMPATIBLE)   # a class with slots of its own: its objects cannot change class
    grad = self.grad
    version = self._version
    hooks, post_hooks = self._backward_hooks, self._post_accumulate_grad_hooks
    if grad is not None:
        self.grad = None
    _poison_pending_accumulator(self)
    self.__class__ = cls
    torch._C._swap_tensor_impl(self, alias)
    alias.__class__ = old_cls               # the old implementation, in the object thrown away
    d = self.__dict__
    if to_hpu:
        for k in VIEW_KEYS:
            d[k] = alias.__dict__.pop(k)
        if old_cls not in (torch.Tensor, torch.nn.Parameter):
            d["_hpu_host_class"] = old_cls   # the class it gets back on the host
    else:
        for k in VIEW_KEYS:
            d.pop(k, None)
        d.pop("_hpu_host_class", None)
    torch._C._autograd._unsafe_set_version_counter((self,), (version,))
    if hooks is not None:
        self._backward_hooks = hooks        # registered again on the new implementation
    if post_hooks is not None:
        self._post_accumulate_grad_hooks = post_hooks
    if grad is not None and grad.shape == new.shape:
        # the gradient goes with its parameter (CUDA's _apply moves it right after; here .grad must
        # be on the parameter's device and of its dtype to be set at all). One of another shape (the
        # data replaced by a tensor of another size) cannot be set on it and is dropped.
        with torch.no_grad():
            set_data(grad, grad.to(device=new.device, dtype=new.dtype))
        self.grad = grad


def _poison_pending_accumulator(t) -> None:
    """A graph built before the move still holds the old implementation's gradient accumulator: a
    backward through it would accumulate into the implementation thrown away. As torch's
    ``swap_tensors``, such a backward raises instead."""
    if t._use_count() == 2 and t.requires_grad:
        node = torch.autograd.graph.get_gradient_edge(t).node

        def refuse(grad_outputs):
            raise RuntimeError("Trying to execute AccumulateGrad node of a tensor whose .data was moved between "
                               "hpu and cpu after this graph was built: the graph holds the old tensor. Run the "
                               "forward again after the move.")
        node.register_prehook(refuse)


_PARAMETER_NEW = torch.nn.Parameter.__new__


def parameter_new(cls, data=None, requires_grad=True):
    """``nn.Parameter.__new__``: of hpu data, an HPUParameter aliasing it (as ``_make_subclass`` makes
    a CPU Parameter alias a CPU tensor); anything else as torch does it."""
    if isinstance(data, HPUTensor):
        t = HPUTensor.detach(data).requires_grad_(requires_grad)
        t.__class__ = HPUParameter
        return t
    return _PARAMETER_NEW(cls, data, requires_grad)


def install() -> None:
    """Idempotent: torch's compatibility check, ``Tensor.data``'s setter and ``nn.Parameter``'s
    constructor, for hpu tensors."""
    global _orig_compatible
    if _orig_compatible is not None:
        return
    torch.nn.Parameter.__new__ = staticmethod(parameter_new)
    _orig_compatible = torch._has_compatible_shallow_copy_type
    torch._has_compatible_shallow_copy_type = has_compatible_shallow_copy_type
    torch.Tensor.data = property(_C_DATA.__get__, set_data, doc=_C_DATA.__doc__)


def installed() -> bool:
    return _orig_compatible is not None


# ---------------------------------------------------------------- aten::set_ (an op: dispatch/special_ops.py)

_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def set_(func, args, kwargs):
    """``t.set_(source)``, ``t.set_(storage[, offset, size, stride])``, ``t.set_()``: t becomes a view
    of that memory, as on CPU (torch.nn.utils.parametrize registers and removes parametrizations
    this way). The TensorImpl's metadata is rewritten by CPU's own ``set_`` kernel (with its
    checks), then the view is the source's. Autograd's version bump happened above the device."""
    from .dtype_views import storage_as
    from ..tensor import Inp, new_storage_tensor
    name = func._overloadname
    t = args[0]
    params = dict(zip([a.name for a in func._schema.arguments], args))
    params.update(kwargs)
    if name == "source_Tensor":
        src = params["source"]
        if not isinstance(src, HPUTensor):
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                               f"hpu:0 and {src.device}!")
        if src.dtype != t.dtype:
            raise RuntimeError(f"Could not set tensor of type {_c_name(src.dtype)} to a tensor of type "
                               f"{_c_name(t.dtype)}")
        if src is t:
            return t
        st, size, stride, offset, owner = src._st, src._size, src._stride, src._offset, src
    elif name == "default":
        owner = new_storage_tensor((0,), (1,), t.dtype, Inp(meta=((0,), (1,), t.dtype)))
        st, size, stride, offset = owner._st, (0,), (1,), 0
    else:
        storage = params["source"]
        found = getattr(storage, "_hpu_st", None)
        if found is None:
            raise RuntimeError(f"Expected an hpu storage to set an hpu tensor, got a {storage.device} storage")
        st = storage._storage()
        if name == "source_Storage":
            n = st.nbytes // t.element_size()
            size, stride, offset = (n,), (1,), 0
        else:
            offset = int(params["storage_offset"])
            size = tuple(int(s) for s in params["size"])
            stride = params.get("stride") or None
            stride = tuple(int(s) for s in stride) if stride else _contiguous(size)
        st = storage_as(st, t.dtype)
        owner = None
    c_storage = owner.untyped_storage() if owner is not None else params["source"]
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(_CPU_KEYS, t, c_storage, offset, size, stride)
    d = t.__dict__
    d["_st"], d["_size"], d["_stride"], d["_offset"], d["_rc"] = st, tuple(size), tuple(stride), offset, None
    return t


def _contiguous(size):
    from ..tensor import contiguous_strides
    return contiguous_strides(size)


def _c_name(dtype) -> str:
    """ATen's name of a dtype in messages (``float``, ``int``, ``c10::BFloat16``...)."""
    return {torch.float32: "float", torch.float64: "double", torch.int32: "int", torch.int64: "long",
            torch.int16: "short", torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool: "bool",
            torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16"}.get(dtype, str(dtype).replace("torch.", ""))
