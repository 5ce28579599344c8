"""``habana_frameworks.torch.utils.debug`` (``import ... as htdebug``): the bridge's debug helpers
that have a meaning in hpu_lab. Model-References' hello-world MNIST and most of Intel's lazy-mode
tests import this module; the helpers they call answer from hpu_lab's own runtime. A helper of the
real module that hpu_lab does not emulate (the graph-pass switches, the Synapse memory dumps) raises
an AttributeError naming it, rather than doing nothing.
"""
from __future__ import annotations

import torch

from .. import config
from ..dispatch import fallback as _fallback
from ..compiler import cache as _cache


def _get_fallback_op_count() -> dict:
    """Op name -> how many times it ran on the CPU (the bridge's fallback counter)."""
    return dict(_fallback.counts)


def _get_jit_cache_size() -> int:
    """Recipes in the in-memory recipe cache."""
    return len(_cache.recipes())


def _clear_jit_cache() -> None:
    """Drop every cached recipe: the next graph of each kind compiles again."""
    _cache.clear()


def _is_enabled_lazy_collectives() -> bool:
    return bool(config.get("PT_HPU_ENABLE_LAZY_COLLECTIVES"))


def _is_enabled_synapse_layout_handling() -> bool:
    return True


def _is_enabled_weight_permute_pass() -> bool:
    return False


def _bridge_cleanup() -> None:
    """Wait for the device and drop the cached recipes (what the bridge frees between tests)."""
    torch.hpu.synchronize()
    _cache.clear()


def get_tensor_info(tensor):
    """None for a tensor not on hpu; else (storage id, bytes) of its device storage (hpu_lab has no
    device addresses: the id stands for the bridge's data pointer, equal for views of one storage)."""
    if "hpu" not in str(tensor.device):
        return None
    st = tensor._st
    return (id(st), st.nbytes)


def _memstat_livealloc(msg: str = "") -> None:
    """Print the live device allocations summary (hpu_lab: torch.hpu.memory_summary())."""
    print((msg + "\n" if msg else "") + torch.hpu.memory_summary())


def _hb_print(msg) -> None:
    print(msg)


_hg_print = _hb_print


_EMULATED = ("_get_fallback_op_count", "_get_jit_cache_size", "_clear_jit_cache", "_is_enabled_lazy_collectives",
             "_is_enabled_synapse_layout_handling", "_is_enabled_weight_permute_pass", "_bridge_cleanup",
             "get_tensor_info", "_memstat_livealloc", "_hb_print", "_hg_print")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"hpu_lab does not emulate habana_frameworks.torch.utils.debug.{name} "
                         f"(emulated: {', '.join(_EMULATED)})")
