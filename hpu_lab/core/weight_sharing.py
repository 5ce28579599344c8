"""``habana_frameworks.torch.core.weight_sharing``: parameters shared before ``module.to("hpu")``
stay shared after it (seed 003, "weight sharing"; PT_HPU_WEIGHT_SHARING, on by default in lazy mode).

torch's ``Module._apply`` gives each module its own new Parameter when the converted tensor cannot
take the old one's place (a CPU Parameter cannot hold an "hpu" tensor), so a weight tied between
two modules would come out as two independent copies. ``enable_weight_sharing()`` wraps
``nn.Module.to`` to tie them again: every parameter that was one object before the move is one
object after it (the copy made for its first occurrence), as the bridge's wrapped ``to`` does.
"""
from __future__ import annotations

import torch

_original_to = None


def _slots(module):
    """(owning module, name, parameter) for every parameter slot, shared ones once per owner."""
    for m in module.modules():
        for name, p in m._parameters.items():
            if p is not None:
                yield m, name, p


def _to_keeping_shared(self, *args, **kwargs):
    before = [(m, name, id(p)) for m, name, p in _slots(self)]
    result = _original_to(self, *args, **kwargs)
    first = {}
    for m, name, pid in before:
        new = m._parameters.get(name)
        if new is None:
            continue
        if pid in first:
            if m._parameters[name] is not first[pid]:
                m._parameters[name] = first[pid]      # tie again to the first occurrence's copy
        else:
            first[pid] = new
    return result


def enable_weight_sharing() -> None:
    """Make ``nn.Module.to`` keep shared parameters shared (idempotent)."""
    global _original_to
    if _original_to is None:
        _original_to = torch.nn.Module.to
        torch.nn.Module.to = _to_keeping_shared


def disable_weight_sharing() -> None:
    global _original_to
    if _original_to is not None:
        torch.nn.Module.to = _original_to
        _original_to = None


def is_enabled() -> bool:
    return _original_to is not None
