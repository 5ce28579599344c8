"""Streams and events (habana_frameworks.torch.hpu streams/events; REFERENCE.md section 1).

A stream is a queue of the device executor (``runtime/executor.py``: one worker thread per stream);
``lazy.S.stream`` is the index of the current one, where flushes and replays launch. Stream 0 is the
default stream; ``Stream()`` hands out side streams from a small pool, round robin, as CUDA does.
An event is a marker queued on a stream: it completes when all work queued before it has run, and
records the time then (``enable_timing``).

In lazy mode, ``Event.record`` first launches the pending lazy work, so that the event follows the
ops the program issued before it (otherwise they would still be waiting for mark_step, and a timing
would measure nothing). Work on different streams runs concurrently; hpu_lab also makes a stream
wait for inputs produced on another stream (``lazy.launch_recipe``), so a missing ``wait_stream``
never gives a wrong number.
"""
from __future__ import annotations

import itertools

import torch

from .. import events as ev
from .. import lazy
from .._source import user_src
from ..runtime import executor

_POOL = 4                       # side streams 1..4, handed out round robin
_next_side = itertools.count(0)


class Stream:
    """A device queue. ``Stream()`` gives a side stream; ``default_stream()`` is stream 0."""

    def __init__(self, device=None, priority: int = 0, *, _index=None):
        self.stream_id = 1 + next(_next_side) % _POOL if _index is None else _index
        self.priority = priority
        self.device = torch.device("hpu", 0)
        self.is_capture = False

    @property
    def device_index(self) -> int:
        return 0

    def id(self) -> int:
        return self.stream_id

    def wait_event(self, event) -> None:
        """Make all future work on this stream wait for ``event`` (returns at once)."""
        event.wait(self)

    def wait_stream(self, stream) -> None:
        """Make all future work on this stream wait for the work queued on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self) -> bool:
        """True if all work queued on this stream has completed."""
        last = executor.stream(self.stream_id).last()
        return last is None or last.done.is_set()

    def synchronize(self) -> None:
        """Wait for all work queued on this stream."""
        executor.stream(self.stream_id).synchronize("Stream.synchronize()", user_src(2))

    def __eq__(self, other):
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self):
        return hash(("hpu-stream", self.stream_id))

    def __repr__(self):
        return f"<torch.hpu.Stream device=hpu:0 hpu_stream={self.stream_id}>"


_DEFAULT = Stream(_index=0)


def default_stream(device=None) -> Stream:
    return _DEFAULT


def current_stream(device=None) -> Stream:
    i = lazy.S.stream
    return _DEFAULT if i == 0 else Stream(_index=i)


def set_stream(stream) -> None:
    """Make ``stream`` current (prefer the ``stream()`` context manager); None is a no-op."""
    if stream is not None:
        lazy.S.stream = stream.stream_id


class StreamContext:
    """Selects a stream for the work queued inside the ``with`` block (no-op for None)."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.prev = lazy.S.stream
        lazy.S.stream = self.stream.stream_id
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None and self.prev is not None:
            lazy.S.stream = self.prev
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)


def record_stream(tensor, stream) -> None:
    """No-op: a launch holds its input buffers until it has run, so no buffer is freed early."""


class Event:
    """A marker on a stream: ``record``, ``wait``, ``query``, ``elapsed_time``, ``synchronize``."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._marker = None        # the executor launch that completes with the event
        self._t = None             # perf_counter_ns when the marker ran (enable_timing)

    def record(self, stream=None) -> None:
        """Record on ``stream`` (default: the current one), after the pending lazy work."""
        src = user_src(2)
        cap = lazy.S.capture
        if cap is not None:
            cap.refuse("Event.record", src)
        s = current_stream() if stream is None else stream
        lazy.flush("Event.record", src)
        self._t = None
        if self.enable_timing:
            def stamp():
                self._t = ev.now()
            fn = stamp
        else:
            fn = _nothing
        self._marker = executor.stream(s.stream_id).submit_fn(fn)

    def wait(self, stream=None) -> None:
        """Make all future work on ``stream`` (default: current) wait for this event."""
        m = self._marker
        s = current_stream() if stream is None else stream
        if m is None or m.stream == s.stream_id or m.done.is_set():
            return
        executor.stream(s.stream_id).submit_fn(m.done.wait)

    def query(self) -> bool:
        m = self._marker
        return m is None or m.done.is_set()

    def synchronize(self) -> None:
        """Block the host until the work before this event has completed."""
        m = self._marker
        if m is not None:
            m.wait("Event.synchronize()", user_src(2))

    def elapsed_time(self, end_event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded and completed)."""
        if not isinstance(end_event, Event):
            raise TypeError("elapsed_time: end_event must be a torch.hpu.Event")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("elapsed_time: both events must be created with enable_timing=True")
        if self._marker is None or end_event._marker is None:
            raise RuntimeError("elapsed_time: both events must be recorded before calculating elapsed time")
        if not (self.query() and end_event.query()):
            raise RuntimeError("elapsed_time: both events must have completed (call synchronize() first)")
        return (end_event._t - self._t) / 1e6

    def __repr__(self):
        state = "unrecorded" if self._marker is None else ("done" if self.query() else "pending")
        return f"<torch.hpu.Event {state}>"


def _nothing():
    return None
