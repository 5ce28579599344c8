"""Pinned (page-locked) host memory for "hpu": ``tensor.pin_memory()``, ``is_pinned()``,
``DataLoader(pin_memory=True, pin_memory_device="hpu")``.

On Gaudi the bridge's host allocator gives page-locked buffers the DMA engine reads directly; from
pageable memory a transfer first copies the data into such a buffer on the host (seed 004: pinned
memory "reduces the time required for doing a DMA by avoiding a copy on the host side").

torch asks the PrivateUse1 hooks for a pinned allocator (``getPinnedMemoryAllocator``), which a
Python backend cannot provide. So hpu_lab registers CPU kernels for ``aten::_pin_memory`` and
``aten::is_pinned`` (what ``Tensor.pin_memory()`` / ``is_pinned()`` and the DataLoader's pinning
thread call):

- ``_pin_memory`` copies the tensor into a fresh anonymous memory mapping of its own, page-locked
  with ``mlock`` when the process's RLIMIT_MEMLOCK allows (else the pages stay pageable and
  ``Region.locked`` says so), keeping the tensor's sizes and strides. The mapping lives exactly as
  long as the tensor's storage (views included).
- ``is_pinned`` is true for a CPU tensor whose data lies in such a mapping that is still alive.

The copy path is what differs (``runtime/transfers.py``): from a pinned tensor the transfer reads the
buffer directly, and ``non_blocking=True`` queues it on the current stream; from pageable memory the
host first copies into a staging buffer and the transfer is synchronous. Host *speed* is not
emulated: the events say which path each copy took (``staging_bytes``), and the Gaudi clock times it.
"""
from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import mmap
import threading
import weakref

import torch

_lock = threading.Lock()
_starts: list = []          # sorted start addresses of live regions
_regions: dict = {}         # start -> Region

try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    _mlock = _libc.mlock
    _mlock.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
except (OSError, AttributeError):   # not a libc platform: regions stay pageable, and say so
    _mlock = None


class Region:
    """One pinned allocation: [start, end) of a mapping, and whether the OS locked its pages."""
    __slots__ = ("start", "end", "locked", "_map")

    def __init__(self, start, end, locked, m):
        self.start, self.end, self.locked = start, end, locked
        self._map = weakref.ref(m, self._gone)

    def alive(self) -> bool:
        return self._map() is not None

    def _gone(self, _ref) -> None:
        with _lock:
            if _regions.get(self.start) is self:
                del _regions[self.start]
                _starts.remove(self.start)


def _storage_bytes(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return (t.storage_offset() + extent) * t.element_size()


def pin(t: torch.Tensor, device=None) -> torch.Tensor:
    """A copy of CPU tensor ``t`` in pinned memory, same sizes, strides and offset."""
    _check_device(device)
    if t.layout != torch.strided or t.is_quantized:
        raise RuntimeError(f"pin_memory: hpu_lab pins strided dense tensors only, not {t.layout}")
    nbytes = _storage_bytes(t)
    m = mmap.mmap(-1, max(nbytes, 1))
    raw = torch.frombuffer(m, dtype=torch.uint8)          # the storage keeps the mapping alive
    start = raw.data_ptr()
    locked = _mlock is not None and _mlock(ctypes.c_void_p(start), ctypes.c_size_t(len(m))) == 0
    elems = nbytes // t.element_size()
    base = raw[: elems * t.element_size()].view(t.dtype)
    out = base.as_strided(t.shape, t.stride(), t.storage_offset())
    with torch.no_grad():
        out.copy_(t)
    region = Region(start, start + len(m), locked, m)
    with _lock:
        bisect.insort(_starts, start)
        _regions[start] = region
    return out


def region_of(t: torch.Tensor):
    """The live pinned Region holding ``t``'s data, or None (pageable memory, or not on the CPU)."""
    if t.device.type != "cpu" or t.layout != torch.strided:
        return None
    p = t.untyped_storage().data_ptr()
    with _lock:
        i = bisect.bisect_right(_starts, p) - 1
        if i < 0:
            return None
        r = _regions[_starts[i]]
    return r if r.start <= p < r.end and r.alive() else None


def is_pinned(t: torch.Tensor, device=None) -> bool:
    _check_device(device)
    return region_of(t) is not None


def _check_device(device) -> None:
    if device is not None and torch.device(device).type not in ("hpu", "cpu"):
        raise RuntimeError(f"pin_memory: hpu_lab pins host memory for the hpu device, not {device}")


def stats() -> dict:
    """Live pinned regions: how many, their bytes, and how many the OS really page-locked."""
    with _lock:
        live = [r for r in _regions.values() if r.alive()]
    return {"regions": len(live), "bytes": sum(r.end - r.start for r in live),
            "locked": sum(1 for r in live if r.locked)}


_lib = None


def install() -> None:
    """Register the CPU kernels (idempotent; called by ``import hpu_lab``)."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("_pin_memory", lambda self, device=None: pin(self, device), "CPU")
    _lib.impl("is_pinned", lambda self, device=None: is_pinned(self, device), "CPU")
