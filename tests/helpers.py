"""Helpers the tests import (``from helpers import counts``); conftest.py keeps the fixtures only."""
import contextlib
import functools
import gc
import os

import torch

from hpu_lab import metrics
from hpu_lab.examples import Net, train_step
from hpu_lab.perfmodel import record_steps


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
    """The events of ``n`` steps after ``warm`` unrecorded ones (``perfmodel.record_steps``)."""
    return record_steps(step, n, warm)


def seed_setup(batch=200):
    """Seed 000's model, optimizer and one training step on hpu (``step()``), seeded."""
    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    return model, opt, functools.partial(train_step, model, opt, x, y)


def run_queue_ns() -> int:
    """This thread's time spent waiting for a core so far (Linux schedstat; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def steal_ns() -> int:
    """Time the hypervisor ran something else on this machine's virtual CPUs so far, summed over
    them (Linux /proc/stat, in clock ticks: 10 ms grains; 0 elsewhere). A thread's CPU clock leaves
    it out and its run-queue delay does not hold it, so a gap's stolen time looks like a wait."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0


@contextlib.contextmanager
def no_cyclic_gc():
    """A recorded window without the cyclic garbage collector, for tests whose subject is not a
    collection: in the test session a full collection costs 150-240 ms of the CPU of whichever
    thread triggers it (measured with gc.callbacks over four test files), which a host-time bound of
    a few ms, or a device-bound verdict, cannot absorb. Collected once before, so the window starts
    with no garbage waiting."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def cyclic_garbage():
    """The types of what the block left for the cyclic garbage collector alone to free: yields a
    list, filled when the block ends (the collector is off inside it, so nothing is freed before)."""
    found = []
    with no_cyclic_gc():
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            yield found
            gc.collect()
            found.extend(type(o) for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
