"""Streams and events (habana_frameworks.torch.hpu streams/events; REFERENCE.md section 1).

A stream is a queue of the device executor (``runtime/executor.py``: one worker thread per stream);
``lazy.S.stream`` is the index of the current one, where flushes and replays launch. Stream 0 is the
default stream; ``Stream()`` hands out side streams from a small pool, round robin, as CUDA does.
An event is a marker queued on a stream: it completes when all work queued before it has run, and
records the time then (``enable_timing``).

In lazy mode, ``Event.record`` first launches the pending lazy work, so that the event follows the
ops the program issued before it (otherwise they would still be waiting for mark_step, and a timing
would measure nothing). Work on different streams runs concurrently; hpu_lab also makes a stream
wait for inputs produced on another stream (``lazy.launch.launch_recipe``), so a missing ``wait_stream``
never gives a wrong number.
"""
from __future__ import annotations

import itertools

import torch

from .. import events as ev
from .. import lazy
from ..util._source import user_src
from ..runtime import executor

_POOL = 4                       # side streams 1..4, handed out round robin
_next_side = itertools.count(0)


_PRIVATEUSE1 = int(torch._C._autograd.DeviceType.PrivateUse1)


def _index_of(stream) -> int:
    """The executor queue of a torch.hpu.Stream or of a plain ``torch.Stream("hpu")``."""
    if isinstance(stream, torch.Stream) and getattr(stream, "device_type", _PRIVATEUSE1) != _PRIVATEUSE1:
        raise ValueError(f"expected an hpu stream, got {stream!r}")
    i = stream.stream_id
    if not 0 <= i <= _POOL:
        raise ValueError(f"hpu stream {i} does not exist (hpu_lab has streams 0..{_POOL})")
    return i


class Stream(torch.Stream):
    """A device queue. ``Stream()`` gives a side stream; ``default_stream()`` is stream 0;
    ``Stream(stream_id=i, device_index=0, device_type=...)`` names an existing one (what torch does to
    turn a ``torch.Stream`` into a device stream). A ``torch.Stream`` too, so generic torch code
    (``torch.accelerator``, ``isinstance(s, torch.Stream)``) accepts it."""

    def __new__(cls, device=None, priority: int = 0, *, stream_id=None, device_index=None, device_type=None,
                _index=None):
        if _index is None:
            _index = stream_id if stream_id is not None else 1 + next(_next_side) % _POOL
        if device_type is not None and int(device_type) != _PRIVATEUSE1:
            raise ValueError(f"torch.hpu.Stream: device_type {device_type} is not hpu ({_PRIVATEUSE1})")
        if device_index not in (None, 0, -1):
            raise ValueError(f"torch.hpu.Stream: hpu_lab emulates one device (hpu:0), not {device_index}")
        if device is not None and torch.device(device).type != "hpu" and not isinstance(device, int):
            raise ValueError(f"torch.hpu.Stream: device {device} is not an hpu device")
        self = super().__new__(cls, stream_id=int(_index), device_index=0, device_type=_PRIVATEUSE1,
                               priority=priority)
        _index_of(self)
        return self

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.priority = priority          # accepted, as on Gaudi: every stream has one priority
        self.is_capture = False

    @property
    def device(self):
        return torch.device("hpu", 0)

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
        last = executor.stream(_index_of(self)).last()
        return last is None or last.done.is_set()

    def synchronize(self) -> None:
        """Wait for all work queued on this stream."""
        executor.stream(self.stream_id).synchronize("Stream.synchronize()", user_src(2))

    def __eq__(self, other):
        return isinstance(other, torch.Stream) and other.stream_id == self.stream_id and \
            other.device_type == self.device_type

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
        lazy.set_stream(_index_of(stream))


class StreamContext:
    """Selects a stream for the work queued inside the ``with`` block (no-op for None)."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.prev = lazy.S.stream
        lazy.set_stream(_index_of(self.stream))
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None and self.prev is not None:
            lazy.set_stream(self.prev)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)


def record_stream(tensor, stream) -> None:
    """No-op: a launch holds its input buffers until it has run, so no buffer is freed early."""


class Event(torch.Event):
    """A marker on a stream: ``record``, ``wait``, ``query``, ``elapsed_time``, ``synchronize``.
    A ``torch.Event`` too (for generic torch code); its methods are hpu_lab's."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, "hpu", enable_timing=enable_timing, blocking=blocking,
                               interprocess=interprocess)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self._timing = enable_timing
        self._marker = None        # the executor launch that completes with the event
        self._marker_id = 0        # its name in the event stream
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
        if self._timing:
            def stamp():
                self._t = ev.now()
            fn = stamp
        else:
            fn = _nothing
        q = executor.stream(_index_of(s))
        self._marker = executor.Marker(fn, q.index)
        q.submit(self._marker)
        # its name in the event stream (StreamRecord/StreamWait) is its launch id, the one a host
        # sync on it names (Event.synchronize(), Stream.synchronize() after it): the Gaudi clock
        # waits for the work before the marker, on its stream only
        self._marker_id = self._marker.id
        if ev.wants(ev.StreamRecord):         # the Gaudi clock orders cross-stream waits by it
            t = ev.now()
            ev.emit(ev.StreamRecord(t, t, "host", ev.recorder.step, marker=self._marker_id,
                                    stream=_index_of(s), src=src))

    def wait(self, stream=None) -> None:
        """Make all future work on ``stream`` (default: current) wait for this event."""
        m = self._marker
        s = current_stream() if stream is None else stream
        i = _index_of(s)
        if m is None or m.stream == i:
            return
        if ev.wants(ev.StreamWait):           # also when the marker ran already here: on the Gaudi
            t = ev.now()                      # clock the recorded work may still be running
            ev.emit(ev.StreamWait(t, t, "host", ev.recorder.step, marker=self._marker_id, stream=i,
                                  src=user_src(2)))
        if m.done.is_set():
            return
        executor.stream(i).submit_fn(m.done.wait)

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
            raise TypeError("elapsed_time: end_event must be a torch.hpu.Event (a plain torch.Event(\"hpu\") "
                            "does not record on hpu_lab's streams)")
        if not (self._timing and end_event._timing):
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
