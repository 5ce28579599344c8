"""``torch.hpu`` / ``htcore.hpu``: the device module (as habana_frameworks.torch.hpu).

Device queries, synchronize, memory statistics and the random seed. HPU Graphs, streams and
events are added by ``hpu_lab.graphs`` when they are imported.
"""
from __future__ import annotations

import contextlib as _contextlib

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
    """The card's name as the real API gives it ("GAUDI", "GAUDI2", "GAUDI3"): the card the Gaudi
    clock models, chosen by HPU_LAB_DEVICE (default gaudi2)."""
    from ..perfmodel import card
    return card().device_name


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


# ---- autocast (habana_frameworks.torch.hpu); the kernels and op lists are in hpu_lab/amp.py ----

def get_amp_supported_dtype():
    """What torch.autocast("hpu", dtype=...) accepts (torch asks the device module)."""
    return [torch.bfloat16, torch.float16]


def set_autocast_hpu_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("hpu", bool(enabled))


def is_autocast_hpu_enabled() -> bool:
    return torch.is_autocast_enabled("hpu")


def set_autocast_hpu_dtype(dtype) -> None:
    if dtype not in get_amp_supported_dtype():
        raise ValueError(f"set_autocast_hpu_dtype: hpu autocast supports torch.bfloat16 and torch.float16, "
                         f"not {dtype}")
    torch.set_autocast_dtype("hpu", dtype)


def get_autocast_hpu_dtype():
    return torch.get_autocast_dtype("hpu")


# ---- FusedSDPA recompute switch (hpu/sdp_kernel_flag.py): recompute is on by default ----

_recompute_sdp = [True]


def enable_recompute_sdp(enabled: bool) -> None:
    """FusedSDPA with recompute_mode=None recomputes in backward (True) or saves probabilities (False)."""
    _recompute_sdp[0] = bool(enabled)


def recompute_sdp_enabled() -> bool:
    return _recompute_sdp[0]


@_contextlib.contextmanager
def sdp_kernel(enable_recompute: bool = True):
    """``with torch.hpu.sdp_kernel(enable_recompute=False): ...`` sets the FusedSDPA mode for a block."""
    prev = _recompute_sdp[0]
    enable_recompute_sdp(enable_recompute)
    try:
        yield {}
    finally:
        enable_recompute_sdp(prev)


# ---- HPU Graphs, streams and events (hpu_lab/graphs/); imported last: graphs needs the lazy runtime
from ..graphs import (HPUGraph, graph, Stream, StreamContext, stream, set_stream, current_stream,  # noqa: E402,F401
                      default_stream, record_stream, Event, make_graphed_callables, ModuleCacher,
                      wrap_in_hpu_graph, wrap_in_hpu_graph_func, is_current_stream_capturing)
