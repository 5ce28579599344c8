"""What observing the event stream costs the observed program (issue 14, point 5): counts and
facts, never time."""
import functools
import gc
import sys
import weakref

import pytest
import torch

import hpu_lab  # noqa: F401
from hpu_lab import events as ev
from hpu_lab.examples import Net, train_step


@pytest.fixture(scope="module")
def step():
    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    s = functools.partial(train_step, model, opt, x, y)
    s()
    torch.hpu.synchronize()
    return s


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's cyclic garbage collector")
def test_kept_events_give_the_garbage_collector_nothing_to_walk(step):
    """A recording keeps tens of thousands of events; tracked, they would bring on full collections
    of the whole process that the unobserved program never has. Untracked, they are still freed."""
    with ev.Collector() as c:
        for _ in range(2):
            step()
        torch.hpu.synchronize()
    kinds = {type(e) for e in c.events}
    assert {ev.OpAccumulated, ev.MarkStep, ev.Launch, ev.DeviceExecution} <= kinds
    assert not [e for e in c.events if gc.is_tracked(e)]
    ref = weakref.ref(c.events[0])
    del c
    assert ref() is None                     # reference counting frees them as before
    # an event nobody observes is left as it was made
    assert gc.is_tracked(ev.MarkStep(0, 0, "host", 0))
