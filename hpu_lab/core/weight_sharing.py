"""``habana_frameworks.torch.core.weight_sharing``: parameters shared before ``module.to("hpu")``
stay shared after it (seed 003, "weight sharing"; on by default in lazy mode on a real Gaudi).

In hpu_lab this is always so: "hpu" is a dense device to ``nn.Module._apply`` (hpu_lab/dispatch/objmodel.py),
which keeps every Parameter object and moves its data, as on CUDA, so a tied weight stays one
Parameter. This module keeps the bridge's names for scripts that call them; turning sharing off is
not emulated, because untied copies would silently train apart.
"""
from __future__ import annotations

from ..dispatch import objmodel


def enable_weight_sharing() -> None:
    """Make module conversions keep shared parameters shared (idempotent; already on)."""
    objmodel.install()


def disable_weight_sharing() -> None:
    """Kept for the bridge's API. hpu_lab does not untie weights: sharing stays on."""


def is_enabled() -> bool:
    return objmodel.installed()
