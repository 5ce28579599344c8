"""``Module.to("hpu")`` keeps shared parameters shared (claim M12).

On CUDA, ``nn.Module._apply`` moves a parameter with ``param.data = param.to(device)``: the
Parameter object survives, so a weight two modules share (``decoder.weight = embedding.weight``)
stays one tensor. An HPUTensor is a Python wrapper subclass, which torch cannot shallow-copy into a
CPU tensor's object, so ``_apply`` instead makes a new Parameter per module slot: each slot of a
shared weight would get its own copy, and the copies would train apart, silently. (``swap_tensors``,
torch's other path for subclasses, is refused whenever anything else holds the parameter.)

So the outermost ``_apply`` converts each tensor once (a memo keyed by the tensor, so both slots get
the same device buffer) and gives every slot that held one Parameter the Parameter its first slot
received. Any conversion (to "hpu", back to "cpu", ``.half()``) keeps the model's sharing as it was.
"""
from __future__ import annotations

import threading

import torch

_orig_apply = None
_local = threading.local()


def _shared_slots(module, recurse):
    """[(module, key), ...] for each Parameter held by more than one slot (first slot first)."""
    slots: dict = {}
    for m in (module.modules() if recurse else (module,)):
        for k, p in m._parameters.items():
            if p is not None:
                slots.setdefault(id(p), []).append((m, k))
    return [s for s in slots.values() if len(s) > 1]


def _apply(self, fn, recurse=True):
    if getattr(_local, "active", False):
        return _orig_apply(self, fn, recurse)
    shared = _shared_slots(self, recurse)
    if not shared:
        return _orig_apply(self, fn, recurse)
    memo: dict = {}

    def once(t):
        hit = memo.get(id(t))
        if hit is None:
            hit = memo[id(t)] = (t, fn(t))      # t kept alive: its id is not reused meanwhile
        return hit[1]

    _local.active = True
    try:
        res = _orig_apply(self, once, recurse)
    finally:
        _local.active = False
        memo.clear()
    for slots in shared:
        m0, k0 = slots[0]
        p = m0._parameters[k0]
        for m, k in slots[1:]:
            m._parameters[k] = p
    return res


def install() -> None:
    """Idempotent: wrap ``nn.Module._apply`` once."""
    global _orig_apply
    if _orig_apply is not None:
        return
    _orig_apply = torch.nn.Module._apply
    _apply.__wrapped__ = _orig_apply
    torch.nn.Module._apply = _apply


def installed() -> bool:
    return _orig_apply is not None
