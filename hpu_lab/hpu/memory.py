"""``habana_frameworks.torch.hpu.memory``: the device memory statistics (runtime/memory.py keeps them)."""
from __future__ import annotations

import warnings

from ..runtime import memory as _mem

__all__ = ["memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
           "max_memory_reserved", "mem_get_info", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
           "memory_summary", "memory_usage", "memory_cached", "max_memory_cached"]


def memory_stats(device=None) -> dict:
    return _mem.stats()


def memory_allocated(device=None) -> int:
    return _mem.stats()["InUse"]


def max_memory_allocated(device=None) -> int:
    return _mem.stats()["MaxInUse"]


def memory_reserved(device=None) -> int:
    return _mem.stats()["Limit"]


def max_memory_reserved(device=None) -> int:
    return _mem.stats()["Limit"]


def memory_cached(device=None) -> int:
    """Deprecated: the bridge's old name of memory_reserved (DeepSpeed's timers still call it)."""
    warnings.warn("torch.hpu.memory_cached has been renamed to torch.hpu.memory_reserved", FutureWarning)
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """Deprecated: the bridge's old name of max_memory_reserved."""
    warnings.warn("torch.hpu.max_memory_cached has been renamed to torch.hpu.max_memory_reserved", FutureWarning)
    return max_memory_reserved(device)


def memory_usage(device=None) -> int:
    """What hl-smi would report as used: the bytes in use."""
    return _mem.stats()["InUse"]


def mem_get_info(device=None):
    s = _mem.stats()
    return (s["Limit"] - s["InUse"], s["Limit"])


def reset_peak_memory_stats(device=None) -> None:
    _mem.reset_peak()


def reset_accumulated_memory_stats(device=None) -> None:
    _mem.reset_accumulated()


def memory_summary(device=None, abbreviated=False) -> str:
    return _mem.summary()
