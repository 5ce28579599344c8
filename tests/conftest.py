"""Shared fixtures: every test starts in lazy mode with fresh metrics and an empty pending graph."""
import pytest
import torch

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import config, events, metrics


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
