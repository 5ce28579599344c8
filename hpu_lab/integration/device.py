"""Register the "hpu" device with stock PyTorch.

PrivateUse1 is renamed "hpu", given a Python device guard and hooks, ``torch.hpu`` becomes
hpu_lab's hpu module (as ``habana_frameworks.torch.core`` does with
``torch._register_device_module("hpu", hpu)``), and factory kernels for PrivateUse1 make
``torch.randn(..., device="hpu")`` return lazy HPU tensors.
"""
from __future__ import annotations

import torch

from .. import ops
from ..dispatch import route, special_ops
from ..util import warmup
from ..runtime import memory
from ..tensor import HPU, Inp, _itemsize, new_storage_tensor, storage_extent

aten = torch.ops.aten
_registered = False
_lib = None
_hooks = _guard = None


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def _factory(func):
    """A PrivateUse1 kernel for a factory op: a lazy node, or a fresh device buffer for empty."""
    def kernel(*args, **kwargs):
        warmup.wait()                        # the first op on the new tensor needs what it imports
        kwargs = dict(kwargs)
        kwargs["device"] = HPU
        kwargs.pop("pin_memory", None)
        return route.dispatch(func, args, kwargs)
    return kernel


def _empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    size, stride = tuple(size), tuple(stride)
    dtype = dtype or torch.get_default_dtype()
    return _empty_buffer(size, stride, dtype)


def _empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    size = tuple(size)
    mf = memory_format or torch.contiguous_format
    stride = tuple(torch.empty(size, dtype=dtype, device="meta", memory_format=mf).stride())
    return _empty_buffer(size, stride, dtype)


def _empty_buffer(size, stride, dtype):
    """Uninitialised device memory: no graph node; host memory is only allocated if it is read
    before being overwritten (``torch.empty(...).to`` writes it whole, the common case). A buffer
    that does not fit under the memory Limit is refused here (``x.to("hpu")`` allocates here)."""
    warmup.wait()                            # the first op on the new tensor needs what it imports
    memory.check_fits(storage_extent(size, stride) * _itemsize(dtype),
                      f"a {str(dtype).replace('torch.', '')} tensor of shape {tuple(size)}")
    return new_storage_tensor(size, stride, dtype, Inp(None, (size, stride, dtype)))


def _copy_from(self, dst, non_blocking=False):
    """Reached when torch itself bypasses Python dispatch (e.g. ``torch.tensor(..., device="hpu")``)."""
    special_ops.copy_(None, (dst, self, non_blocking), {})
    return dst


def _copy_from_and_resize(self, dst):
    return _copy_from(self, dst)


def _record_stream(self, s):
    """Reached under ``no_dispatch()``, which FSDP's post-backward hook uses for ``record_stream``
    (``torch.distributed.fsdp._common_utils._no_dispatch_record_stream``); the bridge wraps
    ``Tensor.record_stream`` in Python, so its call works there too."""
    special_ops.record_stream(None, (self, s), {})


FACTORIES = [
    aten.arange.default, aten.arange.start, aten.arange.start_step, aten.full.default,
    aten.zeros.default, aten.ones.default, aten.scalar_tensor.default, aten.eye.default,
    aten.eye.m, aten.linspace.default, aten.logspace.default, aten.tril_indices.default,
    aten.triu_indices.default,
]


def register() -> None:
    """Idempotent: called by ``import hpu_lab``."""
    global _registered, _lib
    if _registered:
        return
    from .. import hpu as hpu_module
    # keep the hook and guard alive: torch holds them without a reference of its own
    global _hooks, _guard
    _hooks, _guard = _Hooks(), _Guard()
    # what torch.utils.backend_registration._setup_privateuseone_for_python_backend does, with the
    # rename already done by hpu_lab/__init__.py
    torch.utils.generate_methods_for_privateuse1_backend()
    torch._register_device_module("hpu", hpu_module)
    torch._C._acc.register_python_privateuseone_hook(_hooks)
    torch._C._acc.register_python_privateuseone_device_guard(_guard)
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    _lib.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    _lib.impl("_copy_from", _copy_from, "PrivateUse1")
    _lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    _lib.impl("record_stream", _record_stream, "PrivateUse1")
    for f in FACTORIES:
        _lib.impl(f._schema.name.split("::")[1] + ("." + f._overloadname if f._overloadname != "default" else ""),
                  _factory(f), "PrivateUse1")
    _registered = True
