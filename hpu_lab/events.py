"""The event stream: the contract between the runtime and every view.

Every layer reports what it did as a small frozen dataclass appended to one process-wide
recorder. Views (widgets, metrics, Chrome-trace export, the advisor) are observers: they
subscribe with a function and get a handle to remove themselves; none of them reaches into
runtime internals. Emitting is cheap when nobody listens: callers ask ``wants(Kind)`` first
for the per-op kinds, so a plain script pays almost nothing.

Times are ``time.perf_counter_ns()`` from one monotonic clock. ``lane`` is ``"host"`` or
``"hpu:<stream>"``. ``step`` is the number of mark_steps seen so far when the event began.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Tuple

from . import warmup

now = time.perf_counter_ns


@dataclass(frozen=True)
class NodeInfo:
    """One node of a compiled recipe, as the views draw it."""
    index: int
    op: str                      # "aten::addmm", "input", "output", "view"
    shape: Tuple[int, ...] = ()
    dtype: str = ""
    engine: str = "TPC"          # "MME" (matmul/conv), "TPC" (everything else), "CPU" (fallback)
    cluster: int = -1            # fusion cluster id, -1 if none
    is_cast: bool = False        # a dtype conversion (autocast / HMP)
    src: str = ""                # user's file:line that created the op
    tensor_class: str = ""       # for inputs/outputs: "persistent" / "non-persistent"


@dataclass(frozen=True)
class GraphSummary:
    """The structure of a recipe: nodes and (producer, consumer) edges by node index."""
    nodes: Tuple[NodeInfo, ...] = ()
    edges: Tuple[Tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Event:
    t_start: int
    t_end: int
    lane: str
    step: int

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def duration_ns(self) -> int:
        return self.t_end - self.t_start


@dataclass(frozen=True)
class OpAccumulated(Event):
    """One aten op appended to the pending lazy graph (or run at once in eager mode)."""
    op: str = ""
    shapes: Tuple[tuple, ...] = ()
    dtype: str = ""
    src: str = ""          # user's file:line


@dataclass(frozen=True)
class MarkStep(Event):
    src: str = ""
    pending_nodes: int = 0


@dataclass(frozen=True)
class GraphBuilt(Event):
    """The pending graph (or the part a sync needed) turned into a torch.fx graph."""
    graph_id: int = 0
    node_count: int = 0
    input_count: int = 0
    output_count: int = 0
    trigger: str = ""      # "mark_step", ".item()", ...
    src: str = ""


@dataclass(frozen=True)
class CacheLookup(Event):
    hit: bool = False
    key: str = ""
    source: str = "memory"   # "memory" or "disk"


@dataclass(frozen=True)
class Compile(Event):
    """A recipe compiled; ``reason`` says why the cache could not serve it."""
    key: str = ""
    recipe_id: int = 0
    node_count: int = 0
    reason: str = ""
    src: str = ""
    peak_bytes: int = 0
    clusters: int = 0
    graph: Optional[GraphSummary] = None


@dataclass(frozen=True)
class Launch(Event):
    launch_id: int = 0
    recipe_id: int = 0
    key: str = ""
    stream: int = 0
    graph: Optional[GraphSummary] = None


@dataclass(frozen=True)
class DeviceExecution(Event):
    """The recipe running on the device (the executor's worker thread)."""
    launch_id: int = 0
    recipe_id: int = 0
    key: str = ""
    node_count: int = 0
    ok: bool = True


@dataclass(frozen=True)
class HostSync(Event):
    """The host waited for the device. reason: '.item()', '.cpu()', 'print', 'data-dependent op aten::nonzero', ..."""
    reason: str = ""
    src: str = ""


@dataclass(frozen=True)
class HostToDevice(Event):
    """One host-to-device transfer (hpu_lab/transfers.py says which path each kind takes)."""
    nbytes: int = 0
    src: str = ""
    pinned: bool = False        # the source was in pinned (page-locked) host memory
    non_blocking: bool = False  # the caller asked for non_blocking=True
    staging_bytes: int = 0      # bytes the host first copied into a staging buffer (pageable source)
    stream: int = -1            # -1: the host did the transfer and waited; else the stream it was queued on
    op: str = ""                # what asked for it: "aten::copy_", or "<op> (CPU operand)"


@dataclass(frozen=True)
class CPUFallback(Event):
    op: str = ""
    dtypes: Tuple[str, ...] = ()
    src: str = ""


@dataclass(frozen=True)
class CaptureBegin(Event):
    graph_id: int = 0
    src: str = ""


@dataclass(frozen=True)
class CaptureEnd(Event):
    graph_id: int = 0
    recipes: int = 0
    node_count: int = 0
    src: str = ""


@dataclass(frozen=True)
class Replay(Event):
    graph_id: int = 0
    recipes: int = 0
    src: str = ""


@dataclass(frozen=True)
class MemorySample(Event):
    in_use: int = 0
    max_in_use: int = 0
    limit: int = 0


@dataclass(frozen=True)
class Collective(Event):
    op: str = ""
    nbytes: int = 0
    src: str = ""


@dataclass(frozen=True)
class Error(Event):
    message: str = ""
    op: str = ""
    src: str = ""


Observer = Callable[[Event], None]


class Handle:
    """Returned by subscribe(); remove() detaches the observer (torch hook style)."""

    def __init__(self, recorder: "Recorder", fn: Observer, kinds):
        self._recorder, self._fn, self._kinds = recorder, fn, kinds

    def remove(self) -> None:
        self._recorder._remove(self._fn, self._kinds)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class Recorder:
    """Process-wide, thread-safe fan-out of events to observers."""

    def __init__(self):
        self._lock = threading.Lock()
        self._all: tuple = ()              # observers of every kind
        self._by_kind: dict = {}           # kind class -> tuple of observers
        self.step = 0

    def subscribe(self, fn: Observer, kinds=None) -> Handle:
        """Call ``fn(event)`` for each event (of ``kinds`` only, if given)."""
        with self._lock:
            if kinds is None:
                self._all = self._all + (fn,)
            else:
                for k in kinds:
                    self._by_kind[k] = self._by_kind.get(k, ()) + (fn,)
        return Handle(self, fn, None if kinds is None else tuple(kinds))

    def _remove(self, fn, kinds) -> None:
        with self._lock:
            if kinds is None:
                self._all = tuple(f for f in self._all if f is not fn)
            else:
                for k in kinds:
                    self._by_kind[k] = tuple(f for f in self._by_kind.get(k, ()) if f is not fn)

    def wants(self, kind) -> bool:
        return bool(self._all) or bool(self._by_kind.get(kind))

    def emit(self, event: Event) -> None:
        for fn in self._all:
            fn(event)
        for fn in self._by_kind.get(type(event), ()):
            fn(event)


recorder = Recorder()


def subscribe(fn: Observer, kinds=None) -> Handle:
    """Call ``fn(event)`` for each event (of ``kinds`` only, if given). A recording starts only once
    the background warm-up (warmup.py) is over: torch's import would be a blank second in it."""
    warmup.wait()
    return recorder.subscribe(fn, kinds)


wants = recorder.wants
emit = recorder.emit


class Collector:
    """Keeps every event in a list while active: ``with Collector() as c: ...; c.events``."""

    def __init__(self, kinds=None):
        self.events: list = []
        self._kinds = kinds
        self._handle: Optional[Handle] = None

    def start(self) -> "Collector":
        self._handle = subscribe(self.events.append, self._kinds)
        return self

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def of(self, kind) -> list:
        return [e for e in self.events if isinstance(e, kind)]
