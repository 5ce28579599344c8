"""Helpers the tests import (``from helpers import counts``); conftest.py keeps the fixtures only."""
import torch

from hpu_lab import events as ev
from hpu_lab import metrics


def counts(name):
    """The stats of the global metric ``name`` as a dict: ``counts("graph_compilation")["TotalNumber"]``."""
    return dict(metrics.metric_global(name).stats())


def stamped(*events, step_ns=1_000):
    """Host events stamped as the recorder stamps them, ``step_ns`` of host CPU apart, never blocked
    (for timelines built by hand: ``perfmodel.retime(stamped(ev.Launch(...), ...))``)."""
    for k, e in enumerate(events, 1):
        object.__setattr__(e, "cpu_ns", k * step_ns)
        object.__setattr__(e, "blocked_ns", 0)
    return list(events)


def recorded(step, n=12, warm=3):
    """The events of ``n`` calls of ``step`` after ``warm`` unrecorded ones (compiles done), device
    work included (synchronized before the recording ends)."""
    for _ in range(warm):
        step()
    torch.hpu.synchronize()
    with ev.Collector() as c:
        for _ in range(n):
            step()
        torch.hpu.synchronize()
    return c.events
