"""Helpers the tests import (``from helpers import counts``); conftest.py keeps the fixtures only."""
import contextlib
import functools
import gc
import os

import torch

from hpu_lab.observe import metrics
from hpu_lab.lab.examples import Net, train_step
from hpu_lab.perfmodel import record_steps


def counts(name):
    """The stats of the global metric ``name`` as a dict: ``counts("graph_compilation")["TotalNumber"]``."""
    return dict(metrics.metric_global(name).stats())


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
    gc.collect()                 # what earlier code left is not the block's
    with no_cyclic_gc():
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            yield found
            gc.collect()
            found.extend(type(o) for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()


def one_us_host():
    """A host model where every host event costs 1 us (and code of yours its measured time): for
    timelines built by hand, to test the device lanes with host events a known time apart."""
    import dataclasses
    from hpu_lab.perfmodel.host import HOST
    return dataclasses.replace(HOST, **{f.name: 1_000 for f in dataclasses.fields(HOST) if f.name != "notes"})


ONE_US = one_us_host()


def hand_made(*events):
    """Events built by hand for ``perfmodel.retime(..., host=ONE_US)``."""
    return list(events)


def into_closed_pipe(cmd, stderr_too=False, **kw):
    """Run ``cmd`` with its stdout (and its stderr if ``stderr_too``) a pipe whose reader is already
    gone, as ``cmd | head -0`` leaves it, without the race of a reader leaving mid-output: every write
    fails with EPIPE. Returns the CompletedProcess (stderr captured as text unless ``stderr_too``)."""
    import subprocess
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(cmd, stdout=w, stderr=w if stderr_too else subprocess.PIPE, text=True,
                              timeout=300, **kw)
    finally:
        os.close(w)
