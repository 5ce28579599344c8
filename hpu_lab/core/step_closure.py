"""``habana_frameworks.torch.core.step_closure``: mark_step, step closures and ``_mark_step_if_lazy``.

DeepSpeed's HPU FusedAdam calls ``htcore.step_closure._mark_step_if_lazy()`` around its update, as the
bridge's fused optimizers do: in lazy mode the update is a graph of its own; in eager mode nothing
happens. ``mark_step`` / ``add_step_closure`` are ``htcore``'s (hpu_lab.core).
"""
from __future__ import annotations

from .. import config


def _mark_step_if_lazy(device_str: str = "") -> None:
    if config.lazy_mode():
        from . import mark_step
        mark_step(device_str)


def mark_step(device_str: str = "", sync: bool = False) -> None:
    from . import mark_step as _mark_step
    _mark_step(device_str, sync)


def add_step_closure(closure, args=()) -> None:
    from . import add_step_closure as _add
    _add(closure, args)

