"""``torch.hpu`` / ``htcore.hpu``: the device module (as habana_frameworks.torch.hpu).

Device queries, synchronize and autocast here; as in the real package, the rest is in submodules
re-exported at the end: ``memory``, ``random``, ``streams``, ``events``, ``graphs`` (HPU Graphs,
implemented in ``hpu_lab/graphs/``, and ``TensorPacker``) and ``metrics`` (``hpu_lab.observe.metrics``).
"""
from __future__ import annotations

import contextlib as _contextlib
import sys as _sys

import torch


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    """Initialise the device (hpu_lab's is ready once ``import hpu_lab`` has run)."""


def _lazy_call(fn):
    fn()             # torch defers some device calls until init; hpu_lab's device is always ready


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


class device:
    """Context manager selecting the current device, as ``torch.cuda.device``: torch's own code
    enters it around device work (``torch.serialization`` restoring a storage, ``torch.utils.checkpoint``,
    ``Storage.to``). hpu_lab emulates one device: hpu:0 (or -1/None: no change) is accepted."""

    def __init__(self, device):
        from ._utils import _get_device_index
        self.idx = _get_device_index(device, optional=True)
        if self.idx not in (-1, 0):
            raise RuntimeError(f"hpu_lab emulates one device (hpu:0); cannot select device {device}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class device_of(device):
    """Context manager selecting the device of ``obj`` (a tensor): hpu:0 for an hpu tensor, no
    change for anything else."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if getattr(obj, "is_hpu", False) else -1)


def _get_generator(device) -> torch.Generator:
    """The default generator of ``device`` (torch's rng-functionalization asks): hpu's random
    numbers are drawn on the host from torch's default generator (hpu/random.py)."""
    from ._utils import _get_device_index
    if _get_device_index(device, optional=True) != 0:
        raise RuntimeError(f"hpu_lab emulates one device (hpu:0); no generator for {device}")
    return torch.default_generator


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


# ---- autocast (habana_frameworks.torch.hpu); the kernels and op lists are in hpu_lab/kernels/amp.py ----

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


# ---- the bridge's deprecated deterministic switch (kept, no effect: see determinism.py)
# graph-compiler modes of the bridge's inference set-up (core/quantization.py keeps the state): flags
# of the real compiler, with no effect on the values hpu_lab computes
def enable_inference_mode() -> None:
    from ..core import quantization as _q
    _q._state["inference"] = True


def disable_inference_mode() -> None:
    from ..core import quantization as _q
    _q._state["inference"] = False


def is_inference_mode_enabled() -> bool:
    from ..core import quantization as _q
    return _q._state["inference"]


def enable_matmul3d_2d_reshape() -> None:
    from ..core import quantization as _q
    _q._state["matmul3d_2d_reshape"] = True


def disable_matmul3d_2d_reshape() -> None:
    from ..core import quantization as _q
    _q._state["matmul3d_2d_reshape"] = False


def enable_quantization() -> None:
    from ..core import quantization as _q
    _q._state["quantization"] = True


def disable_quantization() -> None:
    from ..core import quantization as _q
    _q._state["quantization"] = False


from .determinism import getDeterministic, setDeterministic  # noqa: E402,F401


# ---- dynamic shapes (the bridge's hpu/__init__.py -> habana_helpers::SetRefineDynamicShape): the
# switch PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES sets at start-up, turned on and off at run time.
# optimum-habana's GaudiTrainer turns it on for training (use_dynamic_shapes) and off for eval.
# What it changes here is in hpu_lab/dynamic_shapes.py (and in the Recompiles tab).
def enable_dynamic_shape() -> None:
    from .. import config as _config
    _config.set(PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES=True)


def disable_dynamic_shape() -> None:
    from .. import config as _config
    _config.set(PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES=False)


def get_dynamic_shape_status() -> bool:
    from .. import config as _config
    return bool(_config.get("PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES"))

# ---- the submodules, as in the real package (``from habana_frameworks.torch.hpu import random``);
# graphs, streams and events last: they need the lazy runtime
from ..observe import metrics  # noqa: E402,F401  (habana_frameworks.torch.hpu.metrics)
from .memory import *  # noqa: E402,F401,F403
from .random import *  # noqa: E402,F401,F403
from .streams import *  # noqa: E402,F401,F403
from .events import *  # noqa: E402,F401,F403
from .graphs import *  # noqa: E402,F401,F403
from . import _utils, events, graphs, memory, random, streams  # noqa: E402,F401

# ``habana_frameworks.torch.hpu.hpu`` is this module: the bridge's memory.py does ``import
# habana_frameworks.torch.hpu as hpu`` and the package re-exports memory's names (lightning-habana
# calls ``torch_hpu.hpu.memory_stats``)
hpu = _sys.modules[__name__]
