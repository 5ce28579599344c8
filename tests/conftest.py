"""Shared fixtures: every test starts in lazy mode with fresh metrics and an empty pending graph.
Tests marked ``timing`` (they read a clock to decide) run only when asked for (``-m timing``,
``make test-timing``): ``make test`` must pass on any machine, busy or idle."""
import pytest
import torch

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import config, events
from hpu_lab.observe import metrics


def pytest_collection_modifyitems(config, items):
    if "timing" in (config.getoption("-m") or ""):
        return
    timed = [i for i in items if i.get_closest_marker("timing")]
    if timed:
        config.hook.pytest_deselected(items=timed)
        items[:] = [i for i in items if not i.get_closest_marker("timing")]


@pytest.fixture(autouse=True)
def _clean_runtime():
    config.reload()
    htcore.mark_step()
    torch.hpu.synchronize()
    metrics.reset_all()
    hpu_lab.compiler.cache.clear()      # each test sees its own first compiles
    yield
    config.reload()
    try:
        htcore.mark_step()
        torch.hpu.synchronize()
    except Exception:
        pass


@pytest.fixture
def collect():
    """Collect every event emitted during the test: ``collect.of(events.Compile)``."""
    with events.Collector() as c:
        yield c


@pytest.fixture
def measured_clock():
    """Views on the measured clock: for tests whose synthetic events carry the spans they check
    (the default clock of the views is the Gaudi clock, which re-times them)."""
    import widgets
    widgets.set_clock("measured")
    yield
    widgets.set_clock("gaudi")


@pytest.fixture
def habana():
    """``habana_frameworks`` imports resolve to hpu_lab for the test, and are forgotten after it."""
    from hpu_lab import compat
    compat.enable_habana_imports()
    yield
    compat.disable_habana_imports()
