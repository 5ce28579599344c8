"""DistributedDataParallel's reducer with ``static_graph=True`` or ``find_unused_parameters=True``
on "hpu" (torch.distributed, gloo underneath: hccl.py).

Both make the C++ reducer all-reduce its map of the parameters each rank used. For a module on a
CUDA or PrivateUse1 device it first copies the host map into a *pinned* temporary
(``at::native::empty_like(..., pin_memory=true)``, then asserts ``is_pinned()``) and sends that to
the device. torch finds pinned memory for PrivateUse1 through ``PrivateUse1HooksInterface::
getPinnedMemoryAllocator``, which a backend written in Python cannot provide (torch's Python hooks
binding has no such method), so the backward failed: "You should register
`PrivateUse1HooksInterface` ... and implement `getPinnedMemoryAllocator`". On a Gaudi, HPU is its
own device type and the bridge's host allocator gives the page-locked buffer.

Here, while a DistributedDataParallel on hpu that needs the map exists, a host tensor created with
``pin_memory=True`` by ``empty_strided`` (what ``empty_like`` of a dense tensor calls) is made in
hpu_lab's pinned memory (runtime/pinned.py: its own page-locked mapping, ``is_pinned()`` true). That is a
kernel for the factory's BackendSelect key, which every ``empty_strided`` passes through: it is
registered only while such a module lives, and removed with the last one.
"""
from __future__ import annotations

import threading
import weakref

import torch

from ..runtime import pinned

_OP = torch.ops.aten.empty_strided.default
_KEYS = {"cpu": torch._C.DispatchKeySet(torch._C.DispatchKey.CPU),
         "hpu": torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1),
         "meta": torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)}
_lock = threading.Lock()
_users = 0
_lib = None


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    """torch's BackendSelect kernel of ``empty_strided`` (dispatch to the device's kernel), with
    pinned host memory from runtime/pinned.py."""
    dev = "cpu" if device is None else torch.device(device).type
    keys = _KEYS.get(dev)
    if keys is None:
        raise RuntimeError(f"hpu_lab: empty_strided on {dev} while DDP's pinned staging is active")
    if pin_memory and dev == "cpu":
        t = _OP.redispatch(keys, size, stride, dtype=dtype, layout=layout, device=device, pin_memory=False)
        return pinned.pin(t)
    return _OP.redispatch(keys, size, stride, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


def _acquire() -> None:
    global _users, _lib
    with _lock:
        _users += 1
        if _lib is None:
            _lib = torch.library.Library("aten", "IMPL")
            _lib.impl("empty_strided", _empty_strided, "BackendSelect")


def _release() -> None:
    global _users, _lib
    with _lock:
        _users -= 1
        if _users == 0 and _lib is not None:
            _lib._destroy()             # torch's own BackendSelect kernel again
            _lib = None


def active() -> bool:
    """Whether host tensors made with ``pin_memory=True`` are pinned by hpu_lab now."""
    return _lib is not None


def _needs_used_map(ddp) -> bool:
    on_hpu = any(p.device.type == "hpu" for p in ddp.module.parameters())
    return on_hpu and (getattr(ddp, "find_unused_parameters", False) or getattr(ddp, "static_graph", False))


def _watch(ddp) -> None:
    if getattr(ddp, "_hpu_lab_pinned_staging", False) or not _needs_used_map(ddp):
        return
    ddp._hpu_lab_pinned_staging = True
    _acquire()
    weakref.finalize(ddp, _release)


_installed = False


def install() -> None:
    """Idempotent: DistributedDataParallel's constructor and ``_set_static_graph`` watch for hpu."""
    global _installed
    if _installed:
        return
    _installed = True
    ddp_cls = torch.nn.parallel.DistributedDataParallel
    init, set_static = ddp_cls.__init__, ddp_cls._set_static_graph

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _watch(self)

    def _set_static_graph(self):
        set_static(self)
        _watch(self)

    __init__.__wrapped__, _set_static_graph.__wrapped__ = init, set_static
    ddp_cls.__init__, ddp_cls._set_static_graph = __init__, _set_static_graph
