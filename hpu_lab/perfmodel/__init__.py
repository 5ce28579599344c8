"""The Gaudi clock: a documented performance model of Gaudi, Gaudi 2 and Gaudi 3.

Results are computed on the CPU; the *time* the lab shows comes from this model, applied to the
recipes the emulator really built and launched (docs/gaudi_clock.md):

    hpu_lab.perfmodel.DEVICES                       # "gaudi" / "gaudi2" / "gaudi3" -> Card
    hpu_lab.perfmodel.card()                        # the card HPU_LAB_DEVICE selects (default gaudi2)
    r = hpu_lab.perfmodel.retime(c.events, "gaudi3")   # recorded events re-timed on a card
    r.host_ns, r.device_busy_ns, r.wall_ns, r.verdict, r.spans, r.events
    e = hpu_lab.perfmodel.estimate(train_step, model, x, y, device="gaudi3")   # nothing runs
    e.host_ns, e.device_ns, e.wall_ns, e.verdict
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

from .. import config
from .cards import DEVICES, GAUDI, GAUDI2, GAUDI3, Card
from .cost import EFFICIENCY, RecipeCost, collective_ns, copy_ns, recipe_cost
from .estimate import Estimate, EstimateError, sync_point
from .host import HOST, HostModel
from .timeline import Retimed, Span

__all__ = ["DEVICES", "Card", "card", "retime", "record_steps", "estimate", "recipe_cost", "copy_ns",
           "collective_ns", "EFFICIENCY", "Retimed", "Span", "Estimate", "EstimateError", "HOST", "HostModel", "sync_point"]


def card(device: Union[str, Card, None] = None) -> Card:
    """The Card named ``device`` ("gaudi", "gaudi2", "gaudi3"), or HPU_LAB_DEVICE's (default gaudi2)."""
    if isinstance(device, Card):
        return device
    name = config.get("HPU_LAB_DEVICE") if device is None else str(device).strip().lower()
    try:
        return DEVICES[name]
    except KeyError:
        raise ValueError(f"unknown device {device!r}: expected one of {', '.join(DEVICES)}") from None


def retime(events: Sequence, device: Union[str, Card, None] = None, fusion: bool = True,
           host: Optional[HostModel] = None) -> Retimed:
    """The recorded ``events`` on the Gaudi clock of ``device`` (a pure function of the events:
    one recording can be re-timed for every card). ``fusion=False``: as if the graph compiler
    fused nothing. ``host``: another host model (host.py) for a what-if."""
    from .timeline import retime as _retime
    return _retime(events, card(device), fusion=fusion, host=host or HOST)


def record_steps(step, steps: int, warm: int = 3) -> list:
    """The events of ``steps`` calls of ``step()`` after ``warm`` unrecorded ones (so the recipes are
    compiled), the device work included (synchronized before the recording ends): what ``retime``
    re-times as a steady training loop."""
    import torch
    from .. import events as ev
    for _ in range(warm):
        step()
    torch.hpu.synchronize()
    with ev.Collector() as c:
        for _ in range(steps):
            step()
        torch.hpu.synchronize()
    return c.events


def estimate(fn, *args, device: Union[str, Card, None] = None, fusion: bool = True, **kwargs) -> Estimate:
    """One step ``fn(*args, **kwargs)`` on the Gaudi clock, without running it: ``.host_ns``,
    ``.device_ns``, ``.wall_ns`` (a loop's steady-state step), ``.verdict``, and ``.recipes`` (each
    graph's summary and RecipeCost). Traced in lazy mode (see estimate.py): nothing runs, nothing
    is launched, no pending node is left behind."""
    from .estimate import trace
    return trace(fn, args, kwargs, card(device), fusion=fusion)

