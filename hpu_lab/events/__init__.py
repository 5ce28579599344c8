"""The event stream: the contract between the runtime and every view.

Every layer reports what it did as a small frozen dataclass (``kinds.py``: OpAccumulated,
MarkStep, GraphBuilt, CacheLookup, Compile, Launch, DeviceExecution, HostSync, HostToDevice,
DeviceToHost, Replay, UserCode, ...) emitted to one process-wide recorder. Views (widgets, metrics,
Chrome-trace export, the advisor, the Gaudi clock) are observers: they subscribe with a function
and get a handle to remove themselves; none of them reaches into runtime internals.

    from hpu_lab import events as ev
    with ev.Collector() as c:                  # keep every event of the block
        train()
    c.events, c.of(ev.HostSync)
    h = ev.subscribe(print, kinds=[ev.Compile])    # or call a function for each event
    h.remove()
    with ev.user_code("augmentation"):         # your own host work, measured (user_time.py)
        ...

Emitters: ``emit(event)``; ``emit_host(cls, fields)`` / ``emit_device(cls, fields)`` build the
event only if someone takes its kind; ``op_accumulated(op, src)`` for the per-op kind (callers ask
``recorder.ops_wanted`` first). Observers get every event in the order it was emitted; op events
reach them in runs (``OpRun``), which an ``EventLog`` keeps unbuilt until read (recorder.py).
``now()`` is the one clock of every event (``time.perf_counter_ns``). ``recorder.step`` counts
mark_steps. ``use(ReferenceRecorder())`` swaps in the plain recorder the fast one is tested
against (reference.py).
"""
from __future__ import annotations

import contextlib
import time
from typing import Optional

from ..util import warmup
from ._record import untrack
from .kinds import (CaptureBegin, CaptureEnd, Collective, CompiledCall, Compile, CopyQueued, CPUFallback,
                    CacheLookup, DeviceExecution, DeviceToHost, Error, Event, GraphBuilt, GraphSummary, HostSync,
                    HostToDevice, Launch, MarkStep, MemorySample, NodeInfo, OpAccumulated, Replay, StreamRecord,
                    StreamWait, UserCode)
from .log import EventLog
from .recorder import Handle, OpRun, Recorder
from .reference import ReferenceRecorder
from . import user_time as _user_time
from .user_time import emulator_enter, emulator_exit, user_code

__all__ = ["Event", "NodeInfo", "GraphSummary", "OpAccumulated", "MarkStep", "GraphBuilt", "CacheLookup",
           "Compile", "Launch", "DeviceExecution", "HostSync", "HostToDevice", "CopyQueued", "DeviceToHost",
           "CPUFallback", "CaptureBegin", "CaptureEnd", "Replay", "MemorySample", "Collective", "StreamRecord",
           "StreamWait", "UserCode", "CompiledCall", "Error", "KINDS",
           "now", "recorder", "subscribe", "emit", "emit_host", "emit_device", "op_accumulated", "wants", "flush",
           "Collector", "EventLog", "OpRun", "Handle", "logged_events", "user_code", "use", "Recorder",
           "ReferenceRecorder", "untrack", "emulator_enter", "emulator_exit"]

KINDS = (OpAccumulated, MarkStep, GraphBuilt, CacheLookup, Compile, Launch, DeviceExecution, HostSync,
         HostToDevice, CopyQueued, DeviceToHost, CPUFallback, CaptureBegin, CaptureEnd, Replay, MemorySample,
         Collective, StreamRecord, StreamWait, UserCode, CompiledCall, Error)

now = time.perf_counter_ns
recorder = Recorder()


def subscribe(fn, kinds=None, many=None, runs=None) -> Handle:
    """Call ``fn(event)`` for each event (of ``kinds`` only, if given); ``many`` / ``runs``: see
    Recorder.subscribe. A recording starts only once the background warm-up (util/warmup.py) is over:
    torch's own import of its lazy modules would be a blank second in it."""
    warmup.wait()
    return recorder.subscribe(fn, kinds, many, runs)


def _bind(rec) -> None:
    global recorder, emit, emit_host, emit_device, op_accumulated, wants, flush
    recorder = rec
    emit, emit_host, emit_device = rec.emit, rec.emit_host, rec.emit_device
    op_accumulated, wants, flush = rec.op_accumulated, rec.wants, rec.flush


_bind(recorder)


@contextlib.contextmanager
def use(rec):
    """``with use(ReferenceRecorder()):`` events go to ``rec`` inside the block (its step count
    continues the current one's)."""
    old = recorder
    old.flush()
    rec.step = old.step
    _bind(rec)
    try:
        yield rec
    finally:
        rec.flush()
        old.step = rec.step
        _bind(old)


def next_step() -> int:
    """A mark_step happened: events from now on belong to the next step (returns it)."""
    recorder.step += 1
    return recorder.step


def set_step(step: int) -> None:
    """Put the step counter back (perfmodel.estimate, after tracing a program it never ran)."""
    recorder.step = step


def _read_log(self) -> list:
    recorder.flush()                     # what is kept but not yet handed over first
    return self.log.read()


def _replace_log(self, value: list) -> None:
    self.log = EventLog(value)


#: ``events = logged_events`` in a class that keeps its events in ``self.log`` (an EventLog): reading
#: builds the kept op runs' events in place; assigning a list starts a new log holding it.
logged_events = property(_read_log, _replace_log, doc="The events so far (op runs built when read).")


class Collector:
    """Keeps every event (of ``kinds``, if given) in a list while active:
    ``with Collector() as c: ...; c.events``. Op events are kept as runs (``OpRun``) and built
    when ``events`` is read (see EventLog)."""

    def __init__(self, kinds=None, log: Optional[EventLog] = None):
        self.log = log if log is not None else EventLog()
        self._kinds = kinds
        self._handle = None

    @property
    def events(self) -> list:
        """The events so far (ops kept but not yet handed over are handed over first)."""
        if self._handle is not None:
            recorder.flush()
        return self.log.read()

    @events.setter
    def events(self, value: list) -> None:
        self.log = EventLog(value)

    def start(self) -> "Collector":
        add = self.log.add
        self._handle = subscribe(add, self._kinds, runs=add)
        return self

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
            self.log.read()              # a finished recording is a plain list of events

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def of(self, kind) -> list:
        return [e for e in self.events if isinstance(e, kind)]


def _emit_user(what: str, t0: int, t1: int, own_ns: int, src: str) -> None:
    recorder.emit(UserCode(t0, t1, "host", recorder.step, what=what, src=src, own_ns=own_ns))


_user_time.set_sink(_emit_user, lambda: recorder.user_wanted)
