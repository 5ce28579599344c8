"""Device-to-host read-backs as the event stream reports them (the runtime's half of the Gaudi
clock's D2H cost).

Every read of device values into host memory goes through ``lazy.to_cpu`` (``.cpu()``, ``.item()``,
``print``, ``.tolist()``, ``torch.save``, and host ops reading an hpu operand). After the host sync
that made the values available, the copy itself is one ``events.DeviceToHost``: its wall span is the
emulator's memcpy, which the Gaudi clock replaces by a transfer over the host link
(``perfmodel.cost.copy_ns``), as it does for host-to-device copies. The destination is a new tensor
in pageable memory (``pinned=False``): the DMA lands in a pinned bounce buffer the host then copies
out, so a read-back costs the staging copy too.
"""
from __future__ import annotations

import torch

from .. import events as ev


def copied(t0: int, out: torch.Tensor, src: str = "") -> torch.Tensor:
    """Report ``out`` (a host copy made since ``t0``, an ``events.now()`` reading) as read back from
    the device; returns ``out``."""
    if ev.wants(ev.DeviceToHost):
        report(t0, out.numel() * out.element_size(), src)
    return out


def report(t0: int, nbytes: int, src: str = "") -> None:
    """One DeviceToHost of ``nbytes``, copied since ``t0`` (the caller asked ``wants(DeviceToHost)``)."""
    ev.emit(ev.DeviceToHost(t0, ev.now(), "host", ev.recorder.step, nbytes=nbytes, src=src))
