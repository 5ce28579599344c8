"""``import hpu_lab.core as htcore``: mark_step and friends (habana_frameworks.torch.core)."""
from __future__ import annotations

import warnings

from .. import config
from .. import hpu  # noqa: F401  (htcore.hpu is torch.hpu)
from .. import lazy as _lazy

_warned = set()


def _lazy_only(name: str) -> bool:
    if config.lazy_mode():
        return True
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"Calling {name} function does not have any effect. It's lazy mode only functionality",
                      stacklevel=3)
    return False


def mark_step(device_str: str = "", sync: bool = False) -> None:
    """Compile (or reuse) and launch every op accumulated since the last mark_step.

    Asynchronous: returns once the graph is queued on the device. ``sync=True`` also waits for the
    host-side execution of this graph (not for other streams: use ``torch.hpu.synchronize()``).
    """
    if _lazy_only("mark_step"):
        _lazy.mark_step(device_str, sync)


def iter_mark_step():
    """An endless generator that calls mark_step() before each yield (for dataloader loops)."""
    while True:
        mark_step()
        yield


def add_step_closure(closure, args=()) -> None:
    """Run ``closure(*args)`` right after the next mark_step (e.g. to log a loss without a sync
    in the middle of the step)."""
    if _lazy_only("add_step_closure"):
        _lazy.add_step_closure(closure, tuple(args))


def is_lazy() -> bool:
    return config.lazy_mode()


from .quantization import (  # noqa: E402,F401  (htcore.hpu_set_inference_env, ...: the bridge exports them here)
    hpu_inference_initialize, hpu_reset_env, hpu_set_env, hpu_set_inference_env, hpu_teardown_inference_env,
)
from . import step_closure  # noqa: E402,F401  (htcore.step_closure._mark_step_if_lazy: DeepSpeed's FusedAdam)
