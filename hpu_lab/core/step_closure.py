"""``habana_frameworks.torch.core.step_closure``: ``_mark_step_if_lazy``.

DeepSpeed's HPU FusedAdam calls ``htcore.step_closure._mark_step_if_lazy()`` before and after its
update, as the bridge's fused optimizers do: in lazy mode the update is a graph of its own; in eager
mode nothing happens. (The bridge's module also holds ``mark_step`` and ``add_step_closure``, which
``htcore`` exports: they are ``hpu_lab.core``'s.)
"""
from __future__ import annotations

from .. import config
from .. import lazy as _lazy


def _mark_step_if_lazy(device_str: str = "") -> None:
    if config.lazy_mode():
        _lazy.mark_step(device_str, False)
