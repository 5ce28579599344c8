"""Lazy mode's state ``S`` (one device, as hpu:0) and the named functions through which other modules
change it (tests/test_import_graph.py checks that nothing else writes it).

Only lazy/'s own modules write ``S`` (these writers, and lazy/flushing.py, which replaces the
pending graph after a launch and takes a sync's reason); every other module calls the functions here.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

from .. import config
from ..compiler.graph import PendingGraph
from ..util._source import user_src
from .capture import GraphCapture

_default_dtype = torch.get_default_dtype
_on_eager_switch = None     # lazy/flushing.py's flush (set_eager_switch)


class State:
    """The runtime's global state (one device, as hpu:0)."""

    def __init__(self):
        self.pg = PendingGraph()
        self.lock = threading.RLock()
        self.max_ops = None          # PT_HPU_MAX_COMPOUND_OP_SIZE
        self.eager = False           # PT_HPU_LAZY_MODE=0
        self.source_lines = True
        self.sync_reason = None      # set by .item()/.tolist()/... for the sync they cause
        self.capture = None          # the GraphCapture underway, if any (lazy/capture.py, graphs/)
        self.stream = 0              # current stream index
        self.observers_before_flush = []
        self.step_closures = []
        # Inp -> weakref of the storage that held it when a pending op read it: an input whose
        # tensor died stays on the device until the graph runs (launch_recipe counts it)

    def reload(self):
        self.max_ops = config.get("PT_HPU_MAX_COMPOUND_OP_SIZE")
        eager = not config.get("PT_HPU_LAZY_MODE")
        if eager and not self.eager and self.pg.nodes:
            _on_eager_switch("switch to eager mode", "")   # what lazy mode accumulated runs now (dispatch/eager.py)
        self.eager = eager
        self.source_lines = config.get("HPU_LAB_SOURCE_LINES")


S = State()


# ---------------------------------------------------------------- the named writers of S
# Other modules change the runtime's state only through these (tests/test_import_graph.py checks it).

def begin_capture(cap: GraphCapture) -> None:
    """An HPU Graph capture starts: from now on the lazy path reports to ``cap``."""
    if not isinstance(cap, GraphCapture):
        raise TypeError(f"begin_capture: {type(cap).__name__} lacks what a capture provides (lazy/capture.py)")
    S.capture = cap


def end_capture(cap) -> None:
    """The capture ``cap`` ended or was abandoned (a no-op if another one is current)."""
    if S.capture is cap:
        S.capture = None


def set_stream(index: int) -> None:
    """Flushes and replays launch on stream ``index`` from now on (graphs/streams.py)."""
    S.stream = index


@contextmanager
def eager_suspended():
    """Accumulate whatever the mode (a compiled graph replays op by op, then launches once)."""
    was, S.eager = S.eager, False
    try:
        yield
    finally:
        S.eager = was


def drop_pending() -> None:
    """Forget the pending graph (eager mode: what a failed op or a dead allocation left)."""
    S.pg = PendingGraph()


def add_step_closure(fn, args: tuple) -> None:
    """Run ``fn(*args)`` right after the next mark_step."""
    S.step_closures.append((fn, args))


_trace = None      # (on_write, on_flush) while perfmodel.estimate traces without launching


@contextmanager
def tracing(on_write, on_flush):
    """Accumulate into a fresh pending graph that is never launched: ``on_write(t)`` is told of each
    write, ``on_flush(trigger, src, needed)`` replaces every flush. Yields the graph; the previous
    graph, mode and tracer are back afterwards (perfmodel.estimate)."""
    global _trace
    old = S.pg, S.eager, _trace
    pg = S.pg = PendingGraph()
    S.eager = False
    _trace = (on_write, on_flush)
    try:
        yield pg
    finally:
        S.pg, S.eager, _trace = old


def set_eager_switch(flush) -> None:
    """``flush(trigger, src)`` runs what lazy mode accumulated when the mode turns eager (lazy/flushing.py
    gives its flush: flush imports this module, so this one cannot import it)."""
    global _on_eager_switch
    _on_eager_switch = flush


def _on_config_change():
    S.reload()


config.on_change(_on_config_change)


def _src():
    return user_src(3) if S.source_lines else ""
