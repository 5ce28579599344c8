"""``torch.hpu`` / ``htcore.hpu``: the device module (as habana_frameworks.torch.hpu).

Device queries, synchronize, memory statistics and the random seed. HPU Graphs, streams and
events are added by ``hpu_lab.graphs`` when they are imported.
"""
from __future__ import annotations

import torch

from ..runtime import memory as _mem


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    idx = torch.device(device).index if not isinstance(device, int) else device
    if idx not in (None, 0):
        raise RuntimeError(f"hpu_lab emulates one device (hpu:0); cannot set device {device}")


def get_device_name(device=None) -> str:
    return "GAUDI2 (hpu_lab emulated)"


def get_device_capability(device=None):
    return None


def is_bf16_supported() -> bool:
    return True


def synchronize(device=None) -> None:
    """Waits for all kernels in all streams on the HPU device to complete."""
    from ..lazy import synchronize as _sync
    _sync("torch.hpu.synchronize()")


def manual_seed(seed: int) -> None:
    # hpu_lab draws random numbers on the host from torch's default generator, so that an "hpu" run
    # gives the numbers of the same loop on CPU: torch.manual_seed already seeds it.
    pass


def manual_seed_all(seed: int) -> None:
    pass


def initial_seed() -> int:
    return torch.initial_seed()


# ---- memory (habana_frameworks.torch.hpu.memory) ----

def memory_stats(device=None) -> dict:
    return _mem.stats()


def memory_allocated(device=None) -> int:
    return _mem.stats()["InUse"]


def max_memory_allocated(device=None) -> int:
    return _mem.stats()["MaxInUse"]


def memory_reserved(device=None) -> int:
    return _mem.stats()["Limit"]


max_memory_reserved = memory_reserved


def mem_get_info(device=None):
    s = _mem.stats()
    return (s["Limit"] - s["InUse"], s["Limit"])


def reset_peak_memory_stats(device=None) -> None:
    _mem.reset_peak()


def reset_accumulated_memory_stats(device=None) -> None:
    _mem.reset_accumulated()


def memory_summary(device=None, abbreviated=False) -> str:
    return _mem.summary()


def _lazy_call(fn):
    fn()


def get_rng_state(device="hpu"):
    return torch.get_rng_state()


def set_rng_state(state, device="hpu"):
    torch.set_rng_state(state)
