"""The event stream: the contract between the runtime and every view.

Every layer reports what it did as a small frozen dataclass appended to one process-wide
recorder. Views (widgets, metrics, Chrome-trace export, the advisor) are observers: they
subscribe with a function and get a handle to remove themselves; none of them reaches into
runtime internals. Emitting is cheap when nobody listens: callers ask ``wants(Kind)`` first
for the per-op kinds, so a plain script pays almost nothing. Op events (``OpAccumulated``, ~60 a
training step) are kept as flat stamps and handed over in runs, before the next event of any kind
(``op_accumulated``): observers see the same events in the same order; one that passes ``many=``
to ``subscribe`` takes a run in one call, one that passes ``runs=`` (an ``EventLog``: a Collector,
a panel) keeps the run and builds its events only when its list is read. While every observer
keeps runs or takes its kinds late (``subscribe(late=True)``: the global metrics, which hand the
run over before they are read), the other events go into the run too, host events stamped when it
is settled, device events queued as they come and put into the run by the next event or op the
host adds to it, in the order they came (``emit``, ``emit_device``), and the run is handed over
when someone asks (``flush``) or once ``KEPT_STAMPS_MAX`` stamp items are kept; the late observers
get their events every ``HAND_OVER_NS`` (20 ms) without a hand-over: in a recorded training loop
no event is delivered at once, and a 600-step loop is handed over once, at its end.

Times are ``time.perf_counter_ns()`` from one monotonic clock. ``lane`` is ``"host"`` or
``"hpu:<stream>"``. ``step`` is the number of mark_steps seen so far when the event began.

The Gaudi clock (``hpu_lab.perfmodel``) re-times host events by CPU time, not wall time. So the
recorder stamps every host event it hands to observers with two cumulative counters of the host
lane, taken as the event is emitted (at its end): ``cpu_ns``, the CPU time of the threads emitting
host events (the user's thread, and autograd's thread running backward) *minus the CPU time spent
inside observers* (a panel's redraw, a collector's bookkeeping are not the user's host work); and
``blocked_ns``, the time the host spent blocked *outside* hpu_lab (a DataLoader waiting for its
workers, a sleep, I/O: off the CPU and not waiting for a core, in gaps of at least
``BLOCKED_MIN_NS`` in which no host event was emitted; not the interpreter lock held by the
emulator's own threads, see ``emulator_python_begin``). Both are -1 on unstamped events, and on
every host event while only observers that read no stamps listen (``subscribe(stamps=False)``: the
global metrics): the recorder then keeps no host clock at all.
"""
from __future__ import annotations

import collections
import dataclasses
import gc
import inspect
import itertools
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable, Optional, Tuple

from . import warmup

_perf_ns = time.perf_counter_ns
_get_ident = threading.get_ident
thread_cpu = time.thread_time_ns


def now() -> int:
    """The event clock (``perf_counter_ns``). The first reading a host thread takes more than
    ``BLOCKED_MIN_NS`` after the last stamped host event marks where the host re-entered hpu_lab:
    the recorder notes the thread's CPU time and run-queue delay there, so that a gap before an
    event *with a duration* (an H2D copy after a DataLoader wait) is measured up to the event's
    start, not its end (the run-queue delay inside the copy is not the gap's)."""
    t = _perf_ns()
    r = recorder
    last = r._host.last_wall
    if r._listening and t - last > BLOCKED_MIN_NS and r._gap_seen != last:
        r._gap_end(t)
    return t


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
    # what the Gaudi clock (perfmodel) costs the node by: one entry per input value, in argument
    # order (the node index of its producer, its shape, its bytes), and the bytes the node writes
    inputs: Tuple[int, ...] = ()
    in_shapes: Tuple[Tuple[int, ...], ...] = ()
    in_bytes: Tuple[int, ...] = ()
    out_bytes: int = 0


@dataclass(frozen=True)
class GraphSummary:
    """The structure of a recipe: nodes and (producer, consumer) edges by node index."""
    nodes: Tuple[NodeInfo, ...] = ()
    edges: Tuple[Tuple[int, int], ...] = ()


def _record(cls):
    """``@dataclass(frozen=True)`` with a faster ``__init__``: a live panel builds one event per op
    (45,000 for a 600-step MLP loop), and the generated one assigns each field with its own
    ``object.__setattr__`` call (1.3-1.9 us an event here); this one fills the instance's
    ``__dict__`` in one call (~0.8 us). Same signature, defaults and result (fields, repr, eq, hash,
    frozen, replace, asdict); a call the generated ``__init__`` would refuse (a missing, unknown or
    repeated argument) goes to it, for its error."""
    cls = dataclass(frozen=True)(cls)
    fs = dataclasses.fields(cls)
    for f in fs:
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: events take plain defaults, not a default_factory")
    generated = cls.__init__
    pos = tuple(f.name for f in fs if not f.kw_only)
    if pos[:4] != ("t_start", "t_end", "lane", "step"):
        raise TypeError(f"{cls.__name__}: an event's fields start with t_start, t_end, lane, step")
    rest, n_fields = pos[4:], len(fs)
    required = tuple(f.name for f in fs[4:] if f.default is dataclasses.MISSING)
    # in field order; the four fields every call sets hold None, not MISSING (an object), so that the
    # template, and so each event's copy of it, is a dict the garbage collector does not track while
    # its values are numbers and strings (see _gc_untracker: emit then has nothing to untrack)
    template = {f.name: (None if i < 4 else f.default) for i, f in enumerate(fs)}
    setter = object.__setattr__

    def __init__(self, t_start, t_end, lane, step, *args, **kw):
        d = template.copy()
        d["t_start"], d["t_end"], d["lane"], d["step"] = t_start, t_end, lane, step
        if args:
            if len(args) > len(rest) or (kw and not kw.keys().isdisjoint(rest[:len(args)])):
                return generated(self, t_start, t_end, lane, step, *args, **kw)
            d.update(zip(rest, args))
        if kw:
            d.update(kw)
            if len(d) != n_fields:                   # an unknown keyword
                return generated(self, t_start, t_end, lane, step, *args, **kw)
        if required and any(d[r] is dataclasses.MISSING for r in required):
            return generated(self, t_start, t_end, lane, step, *args, **kw)
        setter(self, "__dict__", d)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__signature__ = inspect.signature(generated)
    __init__.__doc__ = generated.__doc__
    cls.__init__ = __init__
    return cls


@_record
class Event:
    t_start: int
    t_end: int
    lane: str
    step: int
    # stamped by Recorder.emit (see the module docstring); keyword-only, so subclasses keep
    # their positional fields; not compared and not shown
    cpu_ns: int = field(default=-1, kw_only=True, compare=False, repr=False)
    blocked_ns: int = field(default=-1, kw_only=True, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def duration_ns(self) -> int:
        return self.t_end - self.t_start


@_record
class OpAccumulated(Event):
    """One aten op appended to the pending lazy graph (or run at once in eager mode)."""
    op: str = ""
    shapes: Tuple[tuple, ...] = ()
    dtype: str = ""
    src: str = ""          # user's file:line


@_record
class MarkStep(Event):
    src: str = ""
    pending_nodes: int = 0


@_record
class GraphBuilt(Event):
    """The pending graph (or the part a sync needed) turned into a torch.fx graph."""
    graph_id: int = 0
    node_count: int = 0
    input_count: int = 0
    output_count: int = 0
    trigger: str = ""      # "mark_step", ".item()", ...
    src: str = ""


@_record
class CacheLookup(Event):
    hit: bool = False
    key: str = ""
    source: str = "memory"   # "memory" or "disk"


@_record
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


@_record
class Launch(Event):
    launch_id: int = 0
    recipe_id: int = 0
    key: str = ""
    stream: int = 0
    graph: Optional[GraphSummary] = None
    # launches on other streams whose outputs this one reads: its stream waits for them first
    # (the runtime's implicit cross-stream wait, runtime/launch.py; the Gaudi clock orders by it)
    waits_for: Tuple[int, ...] = ()


@_record
class DeviceExecution(Event):
    """The recipe running on the device (the executor's worker thread)."""
    launch_id: int = 0
    recipe_id: int = 0
    key: str = ""
    node_count: int = 0
    ok: bool = True


@_record
class HostSync(Event):
    """The host waited for the device. reason: '.item()', '.cpu()', 'print', 'data-dependent op aten::nonzero', ...

    ``launch_id``: the launch waited for, a queued copy's (``CopyQueued.launch_id``) or a recorded
    event's marker (``StreamRecord.marker``) (0: every stream's work, or no device work at all when
    the event has no duration: the value was already on the host)."""
    reason: str = ""
    src: str = ""
    launch_id: int = 0


@_record
class HostToDevice(Event):
    """One host-to-device transfer (hpu_lab/transfers.py says which path each kind takes).
    ``pinned``: from page-locked host memory (DMA straight from it; pageable memory is first staged
    into a pinned buffer by the host). ``non_blocking``: the caller asked for non_blocking=True."""
    nbytes: int = 0
    src: str = ""
    pinned: bool = False        # the source was in pinned (page-locked) host memory
    non_blocking: bool = False  # the caller asked for non_blocking=True
    staging_bytes: int = 0      # bytes the host first copied into a staging buffer (pageable source)
    stream: int = -1            # -1: the host did the transfer and waited; else the stream it was queued on
    op: str = ""                # what asked for it: "aten::copy_", or "<op> (CPU operand)"
    launch_id: int = 0          # a queued copy (stream >= 0): its launch, as in its CopyQueued; else 0


@_record
class CopyQueued(Event):
    """The host queued a host-to-device copy on ``stream`` (a pinned ``non_blocking=True`` copy,
    transfers.py) and went on: an instant on the host lane, emitted before the stream can run it.
    The copy's run is the ``HostToDevice`` with the same ``launch_id``, emitted by the stream when it
    runs (a busy stream makes it later than host events after the queue point); a recipe or a sync
    that reads the copy names ``launch_id`` (``Launch.waits_for``, ``HostSync.launch_id``). The Gaudi
    clock starts the copy's DMA here, on the host's clock."""
    launch_id: int = 0
    stream: int = 0
    nbytes: int = 0
    src: str = ""


@_record
class DeviceToHost(Event):
    """A device-to-host copy of ``nbytes`` (fields as HostToDevice)."""
    nbytes: int = 0
    src: str = ""
    pinned: bool = False
    non_blocking: bool = False


@_record
class CPUFallback(Event):
    op: str = ""
    dtypes: Tuple[str, ...] = ()
    src: str = ""


@_record
class CaptureBegin(Event):
    graph_id: int = 0
    src: str = ""


@_record
class CaptureEnd(Event):
    graph_id: int = 0
    recipes: int = 0
    node_count: int = 0
    src: str = ""


@_record
class Replay(Event):
    graph_id: int = 0
    recipes: int = 0
    src: str = ""


@_record
class MemorySample(Event):
    in_use: int = 0
    max_in_use: int = 0
    limit: int = 0


@_record
class Collective(Event):
    op: str = ""
    nbytes: int = 0
    src: str = ""
    world_size: int = 0      # ranks taking part (0: unknown)


@_record
class StreamRecord(Event):
    """An hpu Event recorded on ``stream`` (graphs/streams.py): a marker that completes once the work
    queued on that stream before it has run. ``marker`` names it for the StreamWaits on it."""
    marker: int = 0
    stream: int = 0
    src: str = ""


@_record
class StreamWait(Event):
    """``stream`` waits for marker ``marker`` recorded on another stream (``Stream.wait_event``,
    ``wait_stream``, ``Event.wait``): work queued on ``stream`` afterwards starts after it."""
    marker: int = 0
    stream: int = 0
    src: str = ""


@_record
class HostWait(Event):
    """Host time blocked outside hpu_lab (made by the Gaudi clock from ``blocked_ns``, not emitted)."""
    reason: str = ""


@_record
class Error(Event):
    message: str = ""
    op: str = ""
    src: str = ""


Observer = Callable[[Event], None]


def _gc_untracker():
    """``untrack(obj)``: take an object out of the cyclic garbage collector's lists (CPython's
    ``PyObject_GC_UnTrack``; a no-op elsewhere). A recording keeps every event it sees (45,000 for
    a 600-step MLP loop), and each kept object counts towards the collector's next *full*
    collection, which walks every object of the process: in a Jupyter kernel one such collection
    cost 0.3-0.7 s of a 2.3 s loop, a pause the loop without a panel never has. An event cannot be
    part of a reference cycle (it is immutable and holds numbers, strings and tuples of them, and
    frozen graph summaries that hold no events), so the collector has nothing to find in it: CPython
    untracks tuples and dicts of such values itself. An event's fields are its ``__dict__`` (a dict
    of its own, see _record), untracked with it (a dict re-tracks itself if a container is ever put
    in it). Reference counting still frees events."""
    import sys
    if sys.implementation.name != "cpython":
        return lambda obj: None
    try:
        import ctypes
        fn = ctypes.pythonapi.PyObject_GC_UnTrack     # pythonapi: calls keep the GIL
        fn.argtypes, fn.restype = (ctypes.py_object,), None
        return fn
    except (ImportError, AttributeError):
        return lambda obj: None


_untrack = _gc_untracker()
_is_tracked = gc.is_tracked


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


# Off-CPU gaps shorter than this are not counted as host waits: handing the interpreter lock to
# the device thread, page faults and scheduler noise all make such gaps; a sleep, a DataLoader
# waiting for its workers or a file read is longer.
BLOCKED_MIN_NS = 1_000_000

# Wall-time intervals in which the emulator's own threads (the device streams' workers, the disk
# cache's writer) ran Python, i.e. held the interpreter lock: the user's thread, wanting it then,
# waited off the CPU. A real Gaudi host has no such threads (its device is not Python in the user's
# process), so that wait is not host time: a gap's off-CPU time overlapping these intervals is not
# counted as blocked (Recorder.emit). Under load one such wait lasts up to the switch interval
# (5 ms) whenever the worker is descheduled holding the lock. Appended in end order; only while
# anyone listens; bounded (a gap is measured against the intervals since it began).
_emulator_python: collections.deque = collections.deque(maxlen=4096)
# the stretches running now (thread ident -> start): the lock is handed to the user's thread in the
# middle of one every switch interval, and the gap that thread measures then ends inside it
_emulator_open: dict = {}


def emulator_python_begin(t0: int) -> None:
    """The calling emulator thread runs Python from ``t0`` (perf_counter_ns) on."""
    _emulator_open[threading.get_ident()] = t0


def emulator_python_end(t1: int) -> None:
    """... until ``t1``: the stretch is kept (while anyone listens) for the gaps that overlap it."""
    t0 = _emulator_open.pop(threading.get_ident(), None)
    if t0 is not None and t1 > t0 and recorder._listening:
        _emulator_python.append((t0, t1))


def _emulator_python_in(g0: int, g1: int) -> int:
    """Wall time in [g0, g1) during which some emulator thread ran Python (the union of the
    intervals clipped to it: the lock is held by one thread at a time)."""
    if g1 <= g0 or not (_emulator_python or _emulator_open):
        return 0
    clipped = [(max(a, g0), g1) for a in list(_emulator_open.values()) if a < g1]
    for a, b in reversed(_emulator_python):       # newest first; a copy-free walk of the tail
        if b <= g0:
            break
        a, b = max(a, g0), min(b, g1)
        if b > a:
            clipped.append((a, b))
    total, end = 0, None
    for a, b in sorted(clipped):
        if end is None or a >= end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _gil_holding_pread():
    """A pread(2) that keeps the interpreter lock. ``os.pread`` releases it, and a thread that
    releases the lock while another thread runs Python (the emulator's device thread, a kernel's
    I/O thread) gets it back only after the switch interval (5 ms): a stamp that read the run-queue
    delay that way cost up to 5 ms of waiting, about once a millisecond, and the wait landed in the
    next gap as "blocked" host time. Reading /proc/thread-self/schedstat takes a few microseconds
    and never blocks, so holding the lock through it is harmless. Falls back to os.pread."""
    try:
        import ctypes
        libc = ctypes.PyDLL(None)               # PyDLL: calls keep the GIL
        fn = libc.pread
        fn.restype, fn.argtypes = ctypes.c_ssize_t, (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                                     ctypes.c_long)
        buf = ctypes.create_string_buffer(64)

        def pread(fd: int) -> bytes:
            n = fn(fd, buf, 64, 0)
            if n < 0:
                raise OSError(ctypes.get_errno(), "pread")
            return buf.raw[:n]
        return pread
    except (ImportError, AttributeError, OSError):
        return lambda fd: os.pread(fd, 64, 0)


_pread_holding_gil = _gil_holding_pread()

# A host event stamped within this much wall time of the thread's previous stamp (and of its last
# thread-clock reading) takes its CPU time as the previous one plus the wall time in between: the
# thread-clock reading is a system call, 2 us on an idle VM and 70-220 us under load (profiled: 3 s
# of a 600-step loop's 45,000 events). A reading at least every 2 ms (and after any gap of 1 ms, where
# the blocked-time test needs it) keeps the host lane on CPU time: a stamp in between runs ahead of
# the thread's CPU time by at most the time it spent off the CPU since the last reading (waiting for
# the interpreter lock, preempted), and the next reading takes that back: what the credit ran ahead
# is owed, paid out of the wall time credited next (_read, _credit). Each reading closes the op run
# (a due: ~250 bytecodes, 20-130 us on this VM): every 1 ms it was 6-8 in a 6 ms training step, ~4%
# of a recorded step's wall time.
CPU_READ_NS = 2_000_000

# The run-queue baseline a gap subtracts from its off-CPU time (Recorder.emit) is refreshed with the
# thread-clock readings, as often. The baseline (a /proc read: 1.7 us hot, ~21 us in place, 16 of
# it the system call) is not read again while the thread's clock shows it was off the CPU at most
# this long since the last read (wall time minus CPU time: it cannot have waited for a core longer).
# A gap then subtracts at most this much run-queue delay that was not its own, against up to the
# run-queue delay of the last CPU_READ_NS before the gap when the baseline is read at every reading.
# 100 us until session 13: in a training step the user's thread is off the CPU ~350 us (median) of
# every 2 ms, waiting for the interpreter lock the device thread holds, so the baseline was read at
# nearly every reading (2.8 times a step); at 500 us, about every other reading (1.4 a step).
RUNQ_SLACK_NS = 500_000

# A thread that runs no user code (autograd's, which runs backward) has no gap of its own measured:
# its baseline serves only a gap of the user's thread that ends while it stamped last
# (_ThreadClock.busy_since_stamp: its CPU and wait for a core since its last stamp are not the
# user's blocked time). That thread is idle between backward passes, so at the first op of each
# pass the slack above was always spent, and the baseline was read at every pass (~10 us a
# training step in place). It is kept this long instead: such a gap then also subtracts the
# thread's waits for a core in the passes since the read, at most this much wall time of them
# (a wait the user's thread counts as blocked can only come out smaller, never larger).
RUNQ_HELPER_NS = 20_000_000

# Observers that return within this much wall time are charged their wall time as their CPU time
# (a list.append, a collector: the chance of being descheduled inside ~1 us is nil); longer ones
# are charged their exact CPU time, which costs a second thread-clock reading (~2 us on a VM).
OBSERVER_EXACT_NS = 20_000

# ... and a longer observer run that a stamp without a thread-clock reading led to (a hand-over of
# the op run, 50-300 us in a training step) is still charged its wall time, up to this much: the
# reading taken after it then tells how far the user's credit ran ahead before it (it cannot tell
# both apart). Longer ones (a panel's redraw, which a loaded machine deschedules) get the CPU the
# reading shows beyond the user's credit.
OBSERVER_WALL_NS = 1_000_000

# While every observer keeps op runs (an EventLog: a Collector, a panel) or takes its kinds late (the
# global metrics, a panel's live check), no event is needed at once: host and device events go into
# the run (emit), and the run is handed over when someone asks (flush: a panel's redraw, a
# collector read, subscribe, remove), before an event some observer takes at once, and (until
# session 12) otherwise at most this often (checked at a stamp that reads the thread clock: at least
# every CPU_READ_NS while events flow), for the late observers (the panel's live check looks whether
# a redraw is due). A
# hand-over costs 20-60 us in a training step (the run settled and built into an OpRun, the
# observers called), and handing over before every device event and every stamp that read the
# clock was ~4 of them a 5 ms step: the device thread's ~120 us a step held the interpreter lock
# the user's thread waited for.
HAND_OVER_NS = 20_000_000

# Since session 12 that period only gives the late observers their events (Recorder._deliver_late):
# the run itself is handed over when someone asks, before an event some observer takes at once, or
# once this many stamp items (OP_FIELDS an op or event) are kept. A hand-over copies every stamp
# out of the list and untracks its segments one C call each, proportional to the loop: timed in a
# kernel, a loop without them ran 3.5% [-9.3, +0.6] faster than with one every 20 ms (40 rounds).
# 2**20 items: ~150,000 ops, ~2,400 steps of the seed loop, 8 MB of list.
KEPT_STAMPS_MAX = 1 << 20


class _ThreadClock:
    """Per-thread counters behind the stamps: CPU time inside observers, and the run-queue delay."""
    __slots__ = ("observers", "last_user", "debt", "fd", "last_runq", "runq_at", "runq_mark", "gap_end", "read_at",
                 "last_end", "cpu_clock", "runs_user_code", "ident", "open_t", "__weakref__")

    def __init__(self, cpu: int):
        # a thread Python did not start (autograd's device thread, which runs backward) runs no
        # user code between two events: a gap there is the engine's hand-off, not the user's wait
        self.runs_user_code = not isinstance(threading.current_thread(), threading._DummyThread)
        self.ident = threading.get_ident()
        # the stamp (t) of this thread's latest op event settled while the op's own bookkeeping (up
        # to this thread's next stamp) was not yet charged to the observers (Recorder._settle)
        self.open_t = None
        try:                         # this thread's CPU clock, for another host thread to read
            self.cpu_clock = time.pthread_getcpuclockid(threading.get_ident())
        except (AttributeError, OSError):
            self.cpu_clock = None
        self.observers = 0           # CPU time spent inside observers, cumulative
        self.last_user = cpu         # the user's CPU credited up to the previous stamp (monotone)
        # how far the credit ran ahead of the thread's clock at its last reading: between readings a
        # stamp credits the wall time since the previous one, off-CPU time included (a wait for the
        # interpreter lock, a short sleep); the reading finds that out, and the wall time credited
        # next pays it back first (Recorder._credit), so that the host lane keeps to CPU time
        self.debt = 0
        try:                         # Linux: run-queue delay (waiting for a core is not blocking)
            self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None
        self.last_runq = self._runq()
        self.runq_at = _perf_ns()    # when last_runq was read: kept within CPU_READ_NS of every stamp
        self.runq_mark = None        # (wall, thread CPU) when last_runq was read by _after_observers
        self.gap_end = None          # (t, host last_wall then, user CPU, run-queue delay) or None
        self.read_at = 0             # perf_counter_ns of the last thread-clock reading by emit
        self.last_end = _perf_ns()   # when this thread's previous emit returned

    def _runq(self) -> int:
        if self.fd is None:
            return 0
        try:
            return int(_pread_holding_gil(self.fd).split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    def renew_runq(self, mark, waited: int = 0) -> bool:
        """At a thread-clock reading ``mark`` (wall, thread CPU): the run-queue baseline read again
        unless the thread was off the CPU at most RUNQ_SLACK_NS since it was read, so waited for a
        core at most that long: the baseline still holds (a thread-clock reading, not a /proc read:
        ~0.5 against ~21 us in place). (More CPU than wall time: not one clock; read.) True: read.

        ``waited``: wall time in between that the thread spent waiting for another host thread that
        runs no user code (the user's thread blocked in backward() while autograd's ran it): a
        blocked thread is in no run queue, so that time off the CPU is not counted against the
        slack. A thread that runs no user code (autograd's) keeps its baseline up to
        RUNQ_HELPER_NS (see there). Both spare the two reads a thread switch took (~20 us a
        training step in place)."""
        m = self.runq_mark
        w = mark[0]
        self.runq_at = w
        if m is not None:
            off = (w - m[0]) - (mark[1] - m[1])
            if -RUNQ_SLACK_NS <= off and (off - waited <= RUNQ_SLACK_NS
                                         or (not self.runs_user_code and w - m[0] < RUNQ_HELPER_NS)):
                return False
        self.last_runq, self.runq_mark = self._runq(), mark
        return True

    def waited_for_core(self) -> int:
        """Run-queue delay since the last call (an upper bound for the latest gap)."""
        cur = self._runq()
        d, self.last_runq = cur - self.last_runq, cur
        return max(d, 0)

    def busy_since_stamp(self) -> int:
        """Read from *another* thread: this thread's CPU time and run-queue delay since its last
        stamp (a gap that ends on another host thread, e.g. the user's thread handing backward()
        to autograd's: this thread's CPU and wait for a core in it are not blocked time)."""
        busy = 0
        if self.cpu_clock is not None:
            try:
                busy += max(time.clock_gettime_ns(self.cpu_clock) - self.observers - (self.last_user - self.debt), 0)
            except OSError:          # the thread has ended
                return 0
        return busy + max(self._runq() - self.last_runq, 0)

    def __del__(self):
        try:
            if self.fd is not None:
                os.close(self.fd)
        except Exception:            # noqa: BLE001 - interpreter shutdown
            pass


class _HostClock:
    """The host lane's clock: the CPU time of every thread that emits host events (the user's
    thread, and autograd's device thread that runs backward), summed at each stamp, and the time
    the host was blocked outside hpu_lab (no host thread emitted anything and the emitting thread
    was off the CPU without waiting for a core)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cpu = 0
        self.blocked = 0
        self.last_wall = _perf_ns()
        self.last_clock = None       # the _ThreadClock of the thread that stamped last


class OpRun:
    """A run of op events handed to the observers at once (Recorder.op_accumulated), kept as the
    stamps it was made of: ``events()`` builds its ``OpAccumulated`` events on the first call, once,
    for every observer (with the other host events that went into the run, stamped then: emit).
    An observer that subscribes with ``runs=`` keeps the run itself (``EventLog``:
    one list item) and builds the events only when its list is read: a live panel keeps ~36,000 op
    events of a 600-step loop and reads them when it draws, after the loop."""
    __slots__ = ("_segments", "_made", "_n")
    _build_lock = threading.Lock()

    def __init__(self, segments: list):
        # [(cpu_ns before the first, blocked_ns, [t, op, src, step, prev, clock, t, ...], lo, hi, debt)]:
        # the stamps items[lo:hi] (a segment may be a range of a longer list: Recorder._settle), whose
        # first wall time up to ``debt`` paid back what the thread's credit ran ahead (_credit)
        self._segments = segments
        self._made = None
        n = 0
        for s in segments:
            n += s[4] - s[3]
        self._n = n // OP_FIELDS

    def __len__(self) -> int:
        return self._n

    def events(self) -> list:
        """The run's OpAccumulated events, in order (the same objects on every call)."""
        made = self._made
        if made is not None:
            return made
        with self._build_lock:
            if self._made is None:
                self._made = made = _build_ops(self._segments)
                _untrack(made)               # see _hand_over
                self._segments = None
            return self._made

    def host_events(self) -> list:
        """The events other than ops that went into the run (emit: host events, and device events
        too), in order, without building the op events (the launches and executions a section's
        end waits for: widgets.recording)."""
        made = self._made
        if made is not None:
            return [e for e in made if type(e) is not OpAccumulated]
        with self._build_lock:
            segments = self._segments
            if segments is None:             # built meanwhile, on another thread
                return [e for e in self._made if type(e) is not OpAccumulated]
            out = []
            for _cpu, _blocked, items, lo, hi, _debt in segments:
                slots = items[lo + 1:hi:OP_FIELDS]
                if tuple in set(map(type, slots)):
                    # events kept as their fields (_drain_device, emit_host): built once, in
                    # their place, so that events() later gives the same objects
                    for k in range(lo + 1, hi, OP_FIELDS):
                        if type(items[k]) is tuple:
                            items[k] = _event_of(items[k])
                    slots = items[lo + 1:hi:OP_FIELDS]
                out += [x for x in slots if isinstance(x, Event)]
            return out

    def __repr__(self) -> str:
        return f"<OpRun of {self._n} events>"


# An op stamp, kept flat in a list (six items an op, no tuple: a kept tuple would count towards the
# next garbage collection): its stamp t, op, src, step; prev, the wall time from which the user's CPU
# time since the thread's previous stamp is counted (that stamp's end); the thread's _ThreadClock.
# ``op`` is the op's name, or the op itself (named when the event is built), or an event put
# into the run by emit (a host event stamped when built; src and step unused), or an event kept as
# its fields, one flat tuple (class, fields...), built when the run is read (_drain_device,
# Recorder.emit_host). Until session 19 a seventh item, a running sum of t - prev, let
# a settle read a range's ends instead of summing it: one more int an op on the loop's path (32
# bytes kept, a few bytecodes), where the settle sums two slices in C (_settle_to).
OP_FIELDS = 6
# a settled segment in Recorder._ready: cpu_ns before it, blocked_ns, stamps, lo, hi, debt (flat)
READY_FIELDS = 6


def _op_name(op) -> str:
    from .ops import op_name         # not at import: ops imports torch
    return op_name(op)


def _build_ops(segments) -> list:
    """The events of settled op stamps (Recorder._settle): the host lane's CPU time at each is the
    time before the run plus the user's time between this thread's stamps, the sum _settle added to
    the host clock, in the same order. An op becomes an OpAccumulated; a host event that went into
    the run (emit) gets its stamps."""
    from .ops import op_name         # once a build, not once an op (an import statement is ~1 us)
    new, setter, untrack, tracked = object.__new__, object.__setattr__, _untrack, _is_tracked
    # names by id: an OpOverload's __hash__ is Python (~0.3 us an op); the ops are alive meanwhile
    # (the stamps hold them), so their ids are theirs
    names: dict = {}
    made = []
    for cpu, blocked, items, lo, hi, debt in segments:
        it = iter(items[lo:hi] if lo or hi != len(items) else items)
        for t, op, src, step, prev, _clock in zip(it, it, it, it, it, it):
            got = t - prev                   # credited, as _settle credited the range: a debt first
            if debt:
                paid = min(got, debt)
                debt -= paid
                got -= paid
            cpu += got
            if type(op) is not str:
                if type(op) is tuple:        # an event kept as its fields (_drain_device, emit_host)
                    op = _event_of(op)
                if isinstance(op, Event):
                    d = op.__dict__
                    if d["lane"] == "host":          # a device event (emit) is not stamped
                        d["cpu_ns"], d["blocked_ns"] = cpu, blocked     # frozen: set past __setattr__
                    untrack(op)
                    if tracked(d):
                        untrack(d)
                    made.append(op)
                    continue
                name = names.get(id(op))
                if name is None:
                    name = names[id(op)] = op_name(op)
                op = name
            e = new(OpAccumulated)
            d = {"t_start": t, "t_end": t, "lane": "host", "step": step, "cpu_ns": cpu,
                 "blocked_ns": blocked, "op": op, "shapes": (), "dtype": "", "src": src}
            setter(e, "__dict__", d)
            untrack(e)                       # see _gc_untracker; a dict display of untracked values
            made.append(e)                   # (numbers, strings, ()) is made untracked already
    return made


def _event_of(x: tuple) -> Event:
    """An event the op run kept as (class, its positional fields...), one flat tuple (one object a
    garbage collection counts, not two): a device event (Recorder._drain_device) or a host event
    (Recorder.emit_host), built when the run is read."""
    return x[0](*x[1:])


def _made_at(t_end: int, since: int, now: int) -> int:
    """Where the recording's bookkeeping of a host event began (emit): at its end ``t_end`` when
    it was made just now (after ``since``, the thread's stamp before it, and less than
    OBSERVER_EXACT_NS before ``now``: building it was the observers' work, not the user's), else
    ``now``."""
    return t_end if since <= t_end <= now and now - t_end < OBSERVER_EXACT_NS else now


def _credit(clock: _ThreadClock, wall: int) -> int:
    """The user's CPU to credit ``clock``'s thread for ``wall`` ns since its previous stamp, taken
    without reading its clock (hc.lock held): the wall time, less what is owed (``debt``)."""
    debt = clock.debt
    if not debt:
        return wall
    paid = min(wall, debt)
    clock.debt = debt - paid
    return wall - paid


def _read(clock: _ThreadClock, exact: int) -> int:
    """The user's CPU credited to ``clock``'s thread at a stamp that read its clock (``exact``: the
    thread's CPU less the observers', hc.lock held): never below what was credited before (the
    host lane's CPU only grows), and whatever the credit ran ahead of the clock is owed, to be paid
    back out of the wall time credited next (_credit). Without that, the credit between readings
    (the wall time, waits for the interpreter lock and short sleeps included) stayed credited: a
    loop sleeping 0.3 ms between ops had 352 ms of host CPU for 104 ms of its thread's."""
    user = clock.last_user if exact < clock.last_user else exact
    clock.debt = user - exact
    return user



def _stamp_user(clock: _ThreadClock, t: int, read_at) -> tuple:
    """(hc.lock held) The user's CPU credited to ``clock``'s thread at its stamp ``t``, and what
    that adds since its previous stamp; ``clock.last_user`` moves there. ``read_at``: None to
    credit the wall time since the previous stamp (``_credit``), or the wall time at which to read
    the thread clock now (``_read``: its CPU there, less the observers' and the time since ``t``),
    then also returned with the reading as the mark (wall, thread CPU); else the mark is None."""
    if read_at is None:
        mark = None
        user = clock.last_user + _credit(clock, t - clock.last_end)
    else:
        clock.read_at = read_at
        mark = (read_at, thread_cpu())
        user = _read(clock, mark[1] - clock.observers - (read_at - t))
    mine = user - clock.last_user
    clock.last_user = user
    return user, mine, mark

class Recorder:
    """Process-wide, thread-safe fan-out of events to observers."""

    def __init__(self):
        self._lock = threading.Lock()
        self._all: tuple = ()              # observers of every kind
        self._by_kind: dict = {}           # kind class -> tuple of observers
        self.step = 0
        self._tls = threading.local()      # .clock: _ThreadClock
        self._clocks = weakref.WeakSet()   # every thread's clock: see _restart_clocks
        # observers that read no stamps (subscribe(stamps=False): the global metrics count events);
        # while only they listen, host events reach them unstamped, with no clock work at all
        self._unstamped: set = set()
        self._muted = 0                    # > 0: host events reach no observer (perfmodel.estimate)
        self._host = _HostClock()
        # a recording listens: an observer that reads the stamps (now() notes gap ends only then)
        self._listening = False
        self.ops_wanted = False            # anyone observes OpAccumulated (lazy.py asks per op)
        self._defer = False                # host events may go into the op run (_update_listening)
        self._late: set = set()            # observers that take their events late (subscribe(late=))
        self._kinds_now = frozenset()      # kinds some observer by kind takes at once
        self._kinds_late = frozenset()     # kinds only late observers by kind take
        self._gap_seen = -1                # the gap (host last_wall) whose end a thread has noted
        # op events stamped (see op_accumulated): t, op, src, step, prev, clock (OP_FIELDS) an
        # op, in order, ``prev`` the end of the thread's previous stamp; those from ``_settled`` on
        # are settled (added to the host clock) at the next stamp of any host event and on every
        # flush, and the list is emptied up to there at each hand-over (a settle neither copies nor
        # deletes stamps: that touched every object of the run, ~20 us a settle in a training step)
        self._ops: list = []
        self._settled = 0
        # thread-clock readings taken at op stamps of _ops (a due within the thread's own run:
        # _read_in_run, a thread switch: _switch_in_run), applied in order when those stamps are
        # settled: index of the op's stamp, wall time and thread CPU of the reading, its thread's
        # observers then, its _ThreadClock; five items a reading, flat (a kept tuple would count
        # towards the next garbage collection, as an op stamp's would)
        self._reads: list = []
        # settled op stamps not yet handed to observers, flat, READY_FIELDS items a segment: cpu_ns
        # before, blocked_ns, stamps, lo, hi, debt: the stamps stamps[lo:hi], a range of _ops or of
        # _own (the segments settled on their own: _add_ready, several threads' stamps); a
        # hand-over takes them, as tuples. Flat, for the cyclic collector: a tuple or a list kept a
        # segment (~6.5 a training step) counted towards the next young collection, as a kept op
        # stamp's would (see OP_FIELDS)
        self._ready: list = []
        self._own: list = []
        # op_accumulated's short path: open while ``_run_clock``'s thread (``_run_ident``) stamped
        # last, until ``_run_until`` (the thread clock or run-queue baseline due), for ops less than
        # ``_run_gap`` after the thread's previous stamp (see _open_run). Meanwhile the host clock's
        # ``last_wall`` is that thread's last stamp (its clock's ``last_end``: _catch_up)
        self._run_until = 0
        self._run_due = 0                  # the run's hard end: the thread clock or baseline due
        self._run_clock: Optional[_ThreadClock] = None
        self._run_ident = None
        self._run_gap = 0
        self._many: dict = {}              # observer -> its function taking a list of op events
        self._runs: dict = {}              # observer -> its function taking an OpRun
        # held while a run of op events is handed over: an event emitted meanwhile (on another
        # thread: the device thread may be the one handing them over) waits for the run, so that
        # it never reaches an observer before the ops stamped before it. Reentrant: an observer may emit.
        self._handing = threading.RLock()
        self._handing_over = 0             # runs being handed over (nested: an observer emitted)
        self._handed_at = 0                # when the late observers last got their events (HAND_OVER_NS)
        # what they got: _ready's segments before _late_ready, _ops's items before _late_ops
        self._late_ready = 0
        self._late_ops = 0
        # device events (the streams' workers) waiting to go into the run, before the next thing the
        # host adds to it or a settle: an Event, or (class, fields) to build it from (emit_device);
        # appended without a lock (deque.append: one C call), taken under hc.lock (_drain_device)
        self._device_q: collections.deque = collections.deque()

    def _settle(self) -> None:
        """Add the op stamps kept since the last settle to the host clock (hc.lock held): each op's
        user time (since its thread's previous stamp) to the host lane's CPU time, and the previous
        op's bookkeeping (from its stamp to the end of op_accumulated) to its thread's observers.
        The ops go to ``_ready``, as a range of ``_ops``, for the next hand-over. May run on any
        thread (another thread's stamp that reads its clock settles the ops before it); the thread
        that stamped them touches none of these counters meanwhile. An op stamp that took a
        thread-clock reading (_read_in_run) is credited from it, in order, as _op_due would have."""
        if self._device_q:
            self._drain_device()
        reads = self._reads
        if reads:
            self._reads = []
            it = iter(reads)
            reads = list(zip(it, it, it, it, it))
            # a reading's observers are its thread's at the reading: what this settle charges them
            # for the stamps before it, on top of what they were then
            start = {}
            for x in reads:
                start.setdefault(x[4], x[4].observers)
            for k, r, cpu, obs, c in reads:
                self._settle_to(k)
                self._settle_read(k, r, cpu, obs - start[c])
        self._settle_to(len(self._ops))     # whole stamps: one C call (+=) adds all of one, or none

    def _drain_device(self) -> None:
        """(hc.lock held) The device events queued so far (_defer_device, emit_device) into the run,
        in the order they came, each after everything the host added to the run before it: called
        before the host adds anything else to the run (an op, an event, a settle), so the order is
        the order of arrival, as when the worker put them into the run itself. Each continues the
        chain of the stamp added last (its t as its own t and prev, and that stamp's clock), so that
        _settle's sums over the chain are unchanged (it adds t - prev = 0).

        Not built here either: the fields the worker queued (emit_device) go into the run as they
        are, and the event is built when the run is read (_build_ops, OpRun.host_events). On the
        worker, where the recorder's code runs twice a step and is always cold, building and
        emitting a DeviceExecution took 10.8 us (median, in place: 5.5 to build, 4.1 to emit under
        the host clock's lock); built here, on the host's thread between two ops, it still took ~6
        us (session 19, in place: ~12 us a training step). Unless a late observer takes its kind:
        those look at the run's events by type (_give_late), so it is built now."""
        q, ops = self._device_q, self._ops
        late = self._kinds_late
        for _ in range(len(q)):             # (a worker may append meanwhile: those wait for the next)
            e = q.popleft()
            if type(e) is tuple and e[0] in late:
                e = _event_of(e)
            if len(ops) > self._settled:     # (a settled stamp's chain is applied already)
                last = ops[-OP_FIELDS:]      # one C call: another host thread may be adding an op
                ops += (last[0], e, "", 0, last[0], last[5])
            else:
                self._add_ready(0, 0, 0, e, "", 0, 0, None)

    def _take_device_events(self) -> None:
        """Before the host adds to the op run without the host clock's lock (op_accumulated, emit's
        in-run path): the device events queued before it go in first."""
        with self._host.lock:
            self._drain_device()

    def _settle_read(self, k: int, r: int, cpu: int, behind: int) -> None:
        """(_settle) The op stamp at ``_ops[k]``, which read its thread's clock at wall time ``r``
        (``cpu``): the user's CPU there is that reading less the observers' (theirs now, plus
        ``behind``: what they were at the reading less what they were when this settle began) and
        the time since the stamp; into a segment of its own, like the stamp of _op_due."""
        ops = self._ops
        t, prev, c = ops[k], ops[k + 4], ops[k + 5]
        o = c.open_t
        if o is not None:                    # the previous stamp's bookkeeping, up to this op's prev
            c.observers += prev - o
        c.open_t = t
        user = _read(c, cpu - (c.observers + behind) - (r - t))
        mine = user - c.last_user
        c.last_user = user
        hc = self._host
        base = hc.cpu
        hc.cpu = base + mine
        self._add_ready(base, hc.blocked, t, ops[k + 1], ops[k + 2], ops[k + 3], t - mine, c)
        self._settled = k + OP_FIELDS

    def _settle_to(self, n: int) -> None:
        """(_settle) The stamps of ``_ops`` from the last settled one up to ``n``, credited by wall time."""
        ops = self._ops
        lo = self._settled
        if n == lo:
            return
        # settled where they are: the stamping thread may be adding one right now (it holds no lock)
        hc = self._host
        cpu = base = hc.cpu
        F = OP_FIELDS
        c = ops[lo + 5]
        if ops[n - 1] is c and ops[lo + 5:n:F].count(c) == (n - lo) // F:
            # one thread's run (nearly always): the user's time is the sum of t - prev (two sums in
            # C); the observers' the gaps from each stamp to the next one's prev: from the first
            # prev to the last t, less the user's time
            t0, prev0, t1 = ops[lo], ops[lo + 4], ops[n - F]
            mine = sum(ops[lo:n:F]) - sum(ops[lo + 4:n:F])
            obs = t1 - prev0 - mine
            o = c.open_t
            if o is not None:
                obs += prev0 - o
            c.observers += obs
            c.open_t = t1
            debt = c.debt                    # the run's first stamps pay it (_build_ops does the same)
            mine = _credit(c, mine)
            c.last_user += mine
            cpu += mine
            self._ready += (base, hc.blocked, ops, lo, n, debt)    # a range of _ops: taken at the hand-over
        else:
            # stamps of several threads (rare): each credited against its own thread's debt, into a
            # segment of its own whose stamps say what each was credited (t - prev)
            own = self._own
            k = len(own)
            it = iter(ops[lo:n])
            for t, op, src, step, prev, c in zip(it, it, it, it, it, it):
                o = c.open_t
                if o is not None:
                    c.observers += prev - o
                c.open_t = t
                d = _credit(c, t - prev)
                c.last_user += d
                cpu += d
                own += (t, op, src, step, t - d, c)
            self._ready += (base, hc.blocked, own, k, len(own), 0)
        hc.cpu = cpu
        self._settled = n

    def _add_ready(self, cpu: int, blocked: int, t: int, op, src: str, step: int, prev: int, clock) -> None:
        """(hc.lock held) A settled stamp in a segment of its own (the host clock before it; its
        stamp, credited t - prev) for the next hand-over: flat in ``_own`` and ``_ready``."""
        own = self._own
        k = len(own)
        own += (t, op, src, step, prev, clock)
        self._ready += (cpu, blocked, own, k, k + OP_FIELDS, 0)

    def _catch_up(self, clock: "_ThreadClock") -> None:
        """Before reading or stamping ``clock`` (the calling thread's, hc.lock held): its last stamp
        (an op's, kept only as the host clock's ``last_wall``), the op stamps settled, and this
        thread's latest op bookkeeping, up to its last stamp, charged to the observers."""
        hc = self._host
        last = hc.last_clock
        if last is clock:
            clock.last_end = hc.last_wall
        elif last is not None:
            # another thread stamped last: its last stamp (an op's, perhaps) ends at last_wall, which
            # this thread's stamps move on. Kept only there, its end was lost, and that thread's next
            # catch-up charged its ops' bookkeeping from an older end: a negative charge to its
            # observers, ~1 ms a training step on each of the user's and autograd's threads, which
            # the next reading then credited to the user (the host lane ran ~25% over the CPU time)
            last.last_end = hc.last_wall
        if len(self._ops) > self._settled or self._device_q:
            self._settle()
        o = clock.open_t
        if o is not None:
            clock.observers += clock.last_end - o
            clock.open_t = None

    def _open_run(self, clock: "_ThreadClock") -> None:
        """After ``clock``'s thread stamped a host event: op_accumulated may stamp ops of this thread
        by wall time until the thread clock or the run-queue baseline is due (emit's short path)."""
        if self._muted or clock.gap_end is not None:
            self._run_until = 0
            return
        self._run_clock, self._run_ident = clock, clock.ident
        self._run_gap = gap = min(CPU_READ_NS, BLOCKED_MIN_NS + 1)
        # the thread's stamps only move later while the run is open, so an op or event before
        # ``_run_until`` is less than ``gap`` after the latest of them: op_accumulated and emit's
        # in-run path need not check a gap. The run stays open past that bound, up to
        # ``_run_due`` (the thread clock or the baseline due), for an op less than ``gap`` after
        # the latest stamp: op_accumulated moves the bound on (a gap shorter than the reading period)
        self._run_due = due = min(clock.read_at + CPU_READ_NS, clock.runq_at + CPU_READ_NS + 1)
        self._run_until = min(due, clock.last_end + gap)

    def _run_goes_on(self, t: int) -> bool:
        """Past the op run's gap bound (``_run_until``, set from the stamp that opened it), ``t`` on
        this thread is still in the run: neither the thread clock nor the baseline is due, and it is
        less than a gap after the latest stamp (op_accumulated, emit; ~once a millisecond)."""
        return bool(self._run_until and t < self._run_due and _get_ident() == self._run_ident
                    and 0 <= t - self._host.last_wall < self._run_gap)

    def _gap_end(self, t: int) -> None:
        """now() on this thread, after a gap with no stamped host event: note where it ended."""
        clock = getattr(self._tls, "clock", None)
        if clock is None:                  # a thread that never emitted host events (the device thread)
            return
        last = self._host.last_wall
        if clock.gap_end is not None and clock.gap_end[1] == last:
            return                         # this gap's end is already noted
        self._run_until = 0                # the next op measures the gap (emit)
        with self._host.lock:
            self._catch_up(clock)
        clock.gap_end = (t, last, thread_cpu() - clock.observers, clock._runq())
        self._gap_seen = last              # noted once a gap (a second host thread: the old estimate)

    def _update_listening(self) -> None:
        stamped = self._unstamped
        self._listening = (any(f not in stamped for f in self._all)
                           or any(f not in stamped for fs in self._by_kind.values() for f in fs))
        self.ops_wanted = bool(self._all) or bool(self._by_kind.get(OpAccumulated))
        # an event (host or device) of a kind no observer subscribed to by kind may go into the op
        # run (emit) when every observer of every kind keeps the runs themselves (an EventLog: a
        # Collector, a panel): they then get it in order, in the run; an observer that wants its
        # events one by one, or ops only, gets them as before
        self._defer = (bool(self._all) and all(f in self._runs for f in self._all)
                       and not self._by_kind.get(OpAccumulated))
        # ... and whose observers by kind, if any, are all late (subscribe(late=True)): the others'
        # kinds are delivered at once; the late ones' get their events at the hand-over
        late = self._late
        self._kinds_now = frozenset(k for k, fs in self._by_kind.items() if any(f not in late for f in fs))
        self._kinds_late = frozenset(k for k, fs in self._by_kind.items() if fs and k not in self._kinds_now)

    def subscribe(self, fn: Observer, kinds=None, many=None, runs=None, stamps=True, late=False) -> Handle:
        """Call ``fn(event)`` for each event (of ``kinds`` only, if given). ``many``: a function
        taking a list of events (``list.extend``), called instead of ``fn`` for a run of op events
        handed over at once (see op_accumulated): one call instead of one per op. ``runs``: a
        function taking the run itself (an ``OpRun``, its events built when first asked for),
        called instead of both: what an ``EventLog`` keeps. ``stamps=False``: ``fn`` reads no
        ``cpu_ns`` / ``blocked_ns`` (a counter); while only such observers listen, host events reach
        them unstamped (-1) and the recorder keeps no host clock: no thread-clock or run-queue
        reading (the global metrics cost a plain loop ~8 of each a step). With a recording, they get
        the same stamped events as every other observer. ``late=True`` (with ``kinds`` and
        ``stamps=False``: a counter that flushes before it is read, the global metrics): ``fn``
        may get its events at the next hand-over of an op run instead of at once, in order; while
        a recording keeps op runs, such events then go into the run (emit), not through emit's
        whole path (~10 of a training step's events are the metrics')."""
        if late and (kinds is None or stamps):
            raise ValueError("subscribe(late=True) is for an observer of given kinds that reads no "
                             "stamps (kinds=..., stamps=False)")
        self.flush()                       # ops stamped before it subscribed are not its
        self._run_until = 0                # a recording starts from a stamp (see _open_run)
        if stamps and not self._listening:
            self._restart_clocks(user_threads=True)    # a recording starts: the host clock starts now
        elif not (self._listening and self.ops_wanted):
            # (while a recording takes op events, every thread stamps its ops and its clock is up to
            # date: a restart would drop the CPU a thread without user code spent since its last
            # stamp, in the middle of a backward pass when a live panel wakes up to redraw)
            self._restart_clocks()
        with self._lock:
            if not stamps:
                self._unstamped.add(fn)
            if late:
                self._late.add(fn)
            if many is not None:
                self._many[fn] = many
            if runs is not None:
                self._runs[fn] = runs
            if kinds is None:
                self._all = self._all + (fn,)
            else:
                for k in kinds:
                    self._by_kind[k] = self._by_kind.get(k, ()) + (fn,)
            self._update_listening()
        return Handle(self, fn, None if kinds is None else tuple(kinds))

    def _restart_clocks(self, user_threads: bool = False) -> None:
        """Start thread clocks from their CPU now (read through each thread's CPU clock id).

        Always those of threads that run no user code (autograd's, which runs backward): such a
        thread stamps only while its events are observed, so its next stamp would take all the CPU
        it spent since its previous one: the backward passes of every unrecorded step since, brought
        into a new recording's host time (3.5-13 ms measured). A user thread's first stamp is the
        recording's start, its earlier CPU before it, so it needs nothing then.

        With ``user_threads`` (a recording starts with no other listening), every thread's clock,
        and the host clock's last stamp is now, as if each thread had stamped here: nothing stamped
        since the previous recording (unstamped observers only), so a thread's next stamp would
        otherwise take all the CPU and off-CPU time since its last stamp in that recording."""
        hc = self._host
        with hc.lock:
            now = _perf_ns()
            for clock in list(self._clocks):
                if clock.runs_user_code and not user_threads:
                    continue
                try:
                    cpu = time.clock_gettime_ns(clock.cpu_clock)
                except (OSError, TypeError):     # no CPU clock id, or the thread has ended
                    continue
                if clock.runs_user_code:
                    clock.last_user, clock.debt = cpu - clock.observers, 0
                    clock.last_end, clock.gap_end, clock.open_t = now, None, None
                else:
                    clock.last_user = _read(clock, cpu - clock.observers)
                clock.read_at = 0                # its next stamp reads its clock
            if user_threads:
                hc.last_wall, hc.last_clock = now, None

    def _remove(self, fn, kinds) -> None:
        self.flush()                       # the ops stamped while it listened are its
        self._run_until = 0
        with self._lock:
            self._many.pop(fn, None)
            self._runs.pop(fn, None)
            if kinds is None:
                self._all = tuple(f for f in self._all if f is not fn)
            else:
                for k in kinds:
                    self._by_kind[k] = tuple(f for f in self._by_kind.get(k, ()) if f is not fn)
            if fn not in self._all and not any(fn in fs for fs in self._by_kind.values()):
                self._unstamped.discard(fn)
                self._late.discard(fn)
            self._update_listening()

    def wants(self, kind) -> bool:
        return bool(self._all) or bool(self._by_kind.get(kind))

    def emit(self, event: Event) -> None:
        # The op events stamped before it (op_accumulated) reach the observers first: handed over
        # after this event is stamped, just before it is delivered, so that the hand-over (the
        # observers' work on a whole run) is charged to the observers, not to the user's host time.
        # An event nobody observes hands nothing over: no observer can see it out of order.
        everyone, some = self._all, self._by_kind.get(type(event), ())
        if not everyone and not some:
            return
        if event.lane != "host":             # device events are re-timed by the model, not stamped
            if self._defer and type(event) not in self._kinds_now:
                self._defer_device(event)
            else:
                self._deliver(event, everyone, some)
            return
        w0 = _perf_ns()
        if (w0 < self._run_until and _get_ident() == self._run_ident) or self._run_goes_on(w0):
            # this thread's op run is open (_open_run: a recording listens, nothing muted, this
            # thread stamped last, no gap noted, neither the thread clock nor the run-queue
            # baseline due): into the run, or emit's short path without its checks (~12 such
            # events a training step besides the ~60 op stamps; no gap to check: see
            # op_accumulated, and the event started before w0). Past the run's gap bound, an event
            # less than a gap after the latest stamp is in it too, as an op is (op_accumulated):
            # a graph's GraphBuilt, ~1 ms of tracing after the run opened, went emit's whole way
            # (~0.6 a training step, ~40 us each)
            if self._defer and type(event) not in self._kinds_now:
                # every observer of it keeps op runs (an EventLog) and takes every kind, or takes
                # it late: it goes into the run like an op stamp, stamped when the run is settled,
                # handed over in order with it (see op_accumulated and _hand_over)
                self._into_run(event, event.t_end, w0)
                return
            hc = self._host
            last = hc.last_wall
            self._emit_short(event, everyone, some, hc, self._run_clock, last, _made_at(event.t_end, last, w0),
                             reopen=False)
            return
        if self._muted:
            return
        if not self._listening:              # counters only (the global metrics): no stamps
            for fn in everyone:
                fn(event)
            for fn in some:
                fn(event)
            return
        tls = self._tls
        clock = getattr(tls, "clock", None)
        if clock is None:
            clock = tls.clock = _ThreadClock(thread_cpu())
            self._clocks.add(clock)
        hc = self._host
        if hc.last_clock is clock:           # its last stamp may be an op's (op_accumulated)
            clock.last_end = hc.last_wall
        last_end = clock.last_end
        back = self._back_from_helper(clock)
        if (back and self._defer and type(event) not in self._kinds_now
                and self._switch_back(event.t_start, event.t_end, event, w0, clock)):
            return
        if (w0 - last_end <= BLOCKED_MIN_NS and w0 - clock.read_at < CPU_READ_NS and clock.gap_end is None
                and event.t_start - hc.last_wall <= BLOCKED_MIN_NS and w0 - clock.runq_at <= CPU_READ_NS):
            # the common case (a live panel: ~15 events a step besides the op events, tens of us
            # apart), the same stamps as below in fewer steps: no thread-clock reading, no gap
            self._emit_short(event, everyone, some, hc, clock, last_end, _made_at(event.t_end, last_end, w0),
                             reopen=True)
            return
        # Building the event (between its end and this call) is the recording's bookkeeping, not
        # the user's host work, when the event was made just now (its end after this thread's
        # previous emit, within OBSERVER_EXACT_NS): it is charged like an observer from there.
        start = _made_at(event.t_end, clock.last_end, w0)
        d = event.__dict__
        # the user's thread back from waiting for a thread that runs no user code (backward() on
        # autograd's), after a gap or with an event taken at once: the wall time from its own last
        # stamp to that thread's last (renew_runq)
        waited = hc.last_wall - clock.last_end if back else 0
        with hc.lock:
            self._catch_up(clock)
            true_prev = clock.last_user - clock.debt     # the thread's clock at its previous stamp
            # close to the previous stamp (less than a gap after it: the thread may have been blocked
            # in a longer one): the thread ran user code since that emit returned (the wall time since
            # then), without a thread-clock reading (a system call: 2-70 us here); else read, with the
            # run-queue baseline, when either is due (_after_observers)
            close = (w0 - clock.read_at < CPU_READ_NS and w0 - clock.last_end <= BLOCKED_MIN_NS
                     and w0 - clock.runq_at <= CPU_READ_NS)
            user, mine, mark = _stamp_user(clock, start, None if close else w0)
            ge, clock.gap_end = clock.gap_end, None
            hc.cpu += mine
            gap = event.t_start - hc.last_wall
            if gap > BLOCKED_MIN_NS and clock.runs_user_code:
                if ge is not None and ge[1] == hc.last_wall and ge[0] <= event.t_start:
                    # the gap ended where now() noted it: CPU and run-queue delay up to there only
                    # (the previous stamp's CPU may be an estimate that ran ahead: never below 0)
                    off_cpu = ge[0] - hc.last_wall - max(ge[2] - true_prev, 0)
                    runq = max(ge[3] - clock.last_runq, 0)
                    clock.last_runq = ge[3]
                    clock.waited_for_core()      # the rest (inside the event) is not a gap's
                    gap_end = ge[0]
                else:
                    # the thread's own CPU in the gap, by its clock (not what was credited: a credit
                    # that ran ahead before the gap is paid back out of it)
                    off_cpu = gap - (user - clock.debt - true_prev)
                    runq = clock.waited_for_core() if off_cpu > BLOCKED_MIN_NS else 0
                    gap_end = event.t_start
                if off_cpu > BLOCKED_MIN_NS:
                    # waiting for a core, or for the interpreter lock an emulator thread held, is
                    # not being blocked outside hpu_lab; nor is the time the host thread that
                    # stamped last spent running or waiting for a core, when the gap ends on another
                    off_cpu -= runq + _emulator_python_in(hc.last_wall, gap_end)
                    other = hc.last_clock
                    if other is not None and other is not clock:
                        off_cpu -= other.busy_since_stamp()
                    clock.runq_at = event.t_start
                    if off_cpu > BLOCKED_MIN_NS:
                        hc.blocked += off_cpu
            d["cpu_ns"], d["blocked_ns"] = hc.cpu, hc.blocked    # frozen: set past __setattr__
            defer = self._defer and type(event) not in self._kinds_now
            if defer:
                # stamped, into the run after the ops settled above (t == prev: _build_ops gives
                # it these stamps again); handed over later (HAND_OVER_NS)
                self._add_ready(hc.cpu, hc.blocked, w0, event, "", 0, w0, clock)
        if not defer:
            self._deliver(event, everyone, some)
        self._after_observers(clock, start, _perf_ns(), user, mark, waited)

    def emit_host(self, cls, fields: tuple) -> None:
        """A host event of class ``cls`` from its positional ``fields`` (t_start, t_end, lane, step,
        then its own, in the class's order), emitted on a host thread. While it would go into this
        thread's open op run (emit's in-run path: every observer of it keeps runs, none takes it at
        once or late), the run keeps the fields and the event is built when the run is read, as a
        device event's are (_drain_device): building one in the loop took ~2-4 us in place, its
        code cold between two ops. Otherwise it is built and emitted now."""
        if (fields[2] == "host" and self._defer and cls not in self._kinds_now and cls not in self._kinds_late
                and (self._all or self._by_kind.get(cls))):
            w0 = _perf_ns()
            if (w0 < self._run_until and _get_ident() == self._run_ident) or self._run_goes_on(w0):
                self._into_run((cls,) + fields, fields[1], w0)
                return
            # the user's thread back from backward(): its first event, a GraphBuilt, once a step
            # (built and emitted, it went emit's way to the same switch: ~5 us more in place)
            clock = getattr(self._tls, "clock", None)
            if (clock is not None and not self._muted and self._back_from_helper(clock)
                    and self._switch_back(fields[0], fields[1], (cls,) + fields, w0, clock)):
                return
        self.emit(cls(*fields))

    def _back_from_helper(self, clock: _ThreadClock) -> bool:
        """Whether ``clock``'s thread comes back from waiting for a thread that runs no user code
        (backward() on autograd's): that thread stamped last."""
        other = self._host.last_clock
        return other is not None and other is not clock and not other.runs_user_code

    def _switch_back(self, t_start: int, t_end: int, item, w0: int, clock: _ThreadClock) -> bool:
        """(emit, emit_host: a host event of ``clock``'s thread that goes into the run, at ``w0``;
        the thread is back from waiting for one that runs no user code: _back_from_helper) With no
        gap, the event into the run with a reading (_switch_in_run). False: not this case."""
        hc = self._host
        if not self._run_until or clock.gap_end is not None or t_start - hc.last_wall > BLOCKED_MIN_NS:
            return False
        self._switch_in_run(_made_at(t_end, hc.last_wall, w0), item, "", 0, clock, hc, hc.last_wall - clock.last_end)
        return True

    def _into_run(self, item, t_end: int, w0: int) -> None:
        """(emit, emit_host: this thread's run is open, at ``w0``) A host event (``item``: the
        event, or its (class, fields...)) into the run like an op stamp, stamped when the run is
        settled, at its end ``t_end`` if it was made just now (building it was the observers'),
        after the device events queued before it."""
        hc = self._host
        last = hc.last_wall
        start = _made_at(t_end, last, w0)
        if self._device_q:
            self._take_device_events()
        self._ops += (start, item, "", 0, last, self._run_clock)
        hc.last_wall = _perf_ns()

    def _defer_device(self, event: Event) -> None:
        """A device event into the op run (emit; any thread: the device streams' workers): queued
        without a lock, and put into the run before the next op or event the host adds to it, or
        the next settle (_drain_device)."""
        self._device_q.append(event)

    def emit_device(self, cls, fields: tuple) -> None:
        """A device event of class ``cls`` built from its positional ``fields`` (t_start, t_end,
        lane, step, then its own), emitted from a device stream's worker. While it would go into the
        op run anyway (every observer of it keeps runs or takes it late), only (cls, fields...) is
        queued (one tuple, one C call): the host puts it into the run before the next op or event it
        adds, and it is built when the run is read (_drain_device). Otherwise it is built and
        emitted now (an observer takes it at once)."""
        if not self._all and not self._by_kind.get(cls):
            return
        if self._defer and cls not in self._kinds_now:
            self._device_q.append((cls,) + fields)
            return
        self.emit(cls(*fields))

    def _deliver(self, event: Event, everyone: tuple, some: tuple) -> None:
        """Hand an event (stamped, if a host event) to its observers, after the op events stamped
        before it (flush)."""
        _untrack(event)                      # observers may keep it: see _gc_untracker
        d = event.__dict__
        if _is_tracked(d):                   # its fields (a dict: see _record), if they hold
            _untrack(d)                      # containers (most hold numbers and strings only)
        if self._ops or self._ready or self._handing_over or self._device_q:
            self.flush()
        for fn in everyone:
            fn(event)
        for fn in some:
            fn(event)

    def _emit_short(self, event: Event, everyone: tuple, some: tuple, hc: "_HostClock", clock: "_ThreadClock",
                    last_end: int, start: int, reopen: bool) -> None:
        """emit's short path (no thread-clock reading, no gap): the user's CPU since the thread's
        previous stamp (``last_end``) taken as the wall time up to ``start``, the event delivered,
        the emit's own time charged to the observers. ``reopen``: open the thread's op run after
        it; within the open run (emit) it stays open as it is (_open_run would set what it holds)."""
        defer = self._defer and type(event) not in self._kinds_now
        with hc.lock:
            self._catch_up(clock)
            mine = _credit(clock, start - last_end)
            clock.last_user += mine
            hc.cpu = cpu = hc.cpu + mine
            blocked = hc.blocked
            if defer:                        # into the run, as in emit's long path
                self._add_ready(cpu, blocked, start, event, "", 0, start, clock)
        d = event.__dict__
        d["cpu_ns"], d["blocked_ns"] = cpu, blocked     # frozen: set past __setattr__
        if not defer:
            self._deliver(event, everyone, some)
        elif start - self._handed_at > HAND_OVER_NS:
            self._deliver_late()
        t = _perf_ns()
        if t - start >= OBSERVER_EXACT_NS or t - clock.runq_at > CPU_READ_NS:
            self._after_observers(clock, start, t, clock.last_user)
        else:
            with hc.lock:
                clock.observers += t - start
            hc.last_wall = clock.last_end = t
            if reopen:
                hc.last_clock = clock
                self._open_run(clock)

    def _after_observers(self, clock: _ThreadClock, start: int, t: int, user: int, mark=None,
                         waited: int = 0) -> None:
        """The end of a host event's emit (``t``: now): a fresh run-queue baseline, and what the
        emit cost since ``start`` (building the event, stamping, observers, the baseline read)
        charged to the observers, not to the user's CPU time (``user`` at this stamp): short ones
        by their wall time, long ones by a thread-clock reading. ``mark``: (wall, thread CPU) of
        the thread-clock reading this stamp took, if it took one.

        The baseline is refreshed with every thread-clock reading a stamp takes, and a stamp takes
        one when either is due: so both fall due together, once every CPU_READ_NS, and the op run
        (_open_run) is closed once a period for both, not once for each."""
        if t - self._handed_at > HAND_OVER_NS:
            self._deliver_late()                    # (HAND_OVER_NS)
            t = _perf_ns()
        read = mark is not None                     # the stamp read the clock: the user's CPU is exact
        c = None                                    # a thread-clock reading taken just now
        if mark is not None or t - clock.runq_at > CPU_READ_NS:
            if mark is None:                        # due during the observers (rare): read now
                c = thread_cpu()
                mark = (t, c)
            if clock.renew_runq(mark, waited):
                c = None                            # the read's own CPU is the observers' too
            t = _perf_ns()
        with self._host.lock:
            if t - start < OBSERVER_EXACT_NS or (read and t - start < OBSERVER_WALL_NS):
                # short, or not long after a stamp that read the clock (a due: its own bookkeeping
                # and run-queue read take 20-60 us, which asked a second reading ~4 times a step):
                # the observers' wall time, as after a stamp that read none (below)
                clock.observers += t - start
            else:
                # the clock read now, so this thread's clock is exact here, a reading the next stamp
                # need not take again (before, it did, and on a VM where a due's own bookkeeping
                # takes 20-130 us every due made the next stamp due too: ~8 extra dues in a 6 ms
                # training step). One reading cannot split the CPU since ``start`` between the
                # observers and a credit that ran ahead of the clock before it:
                cpu = thread_cpu() if c is None else c
                if mark is None and t - start < OBSERVER_WALL_NS:
                    # the stamp read no clock and the observers' work was short (a hand-over): they
                    # ran on the CPU, their wall time
                    clock.observers += t - start
                else:
                    # the observers ran long (a panel's redraw, which a loaded machine deschedules;
                    # the user's CPU at the stamp known if it read the clock), or a reading fell due
                    # during them: all the rest is theirs, but never less than nothing
                    clock.observers = max(clock.observers, cpu - (user - clock.debt))
                # what the credit ran ahead of the clock now is owed (nothing new, when the observers
                # took all the rest: ``user`` is the credit at this stamp)
                _read(clock, cpu - clock.observers)
                clock.read_at = t
        self._host.last_wall = clock.last_end = _perf_ns()
        self._host.last_clock = clock
        self._open_run(clock)

    def op_accumulated(self, op, src: str) -> None:
        """One ``OpAccumulated`` (an instant, now), for a caller that asked ``wants(OpAccumulated)``
        (or ``ops_wanted``). ``op``: its name ("aten::add"), or the op itself (an OpOverload: named
        only when its event is built, ops.op_name).

        A live panel sees ~60 op events a training step, so an op's recording must do next to
        nothing (issue 14 point 5). In the common case (this thread stamped the latest host event,
        less than ``CPU_READ_NS`` ago, no gap, no thread-clock reading or run-queue baseline due:
        the conditions of emit's short path, ``_open_run``) the op keeps only its wall-clock stamp
        and the end of the thread's previous stamp; ``_settle`` turns them into the host lane's
        stamps (the user's CPU since the previous stamp, by wall time; the stamping itself charged
        to the observers), exactly as emit's short path would, at the next event of any kind (from
        any thread), and on subscribe, remove and ``flush()``; the events are built when a reader
        asks (``OpRun``), and handed to the observers in order before that next event. Otherwise
        the op is emitted at once (which reads the thread clock, measures a gap, refreshes the
        run-queue baseline)."""
        t = _perf_ns()
        # as few steps as can be (~60 ops a training step). The run is open only until the thread
        # clock or the run-queue baseline is due, and for ops less than a gap (BLOCKED_MIN_NS) apart:
        # below ``_run_until`` this op is less than one after the thread's latest stamp
        # (``last_wall``): no gap to check (_open_run)
        if t >= self._run_until or _get_ident() != self._run_ident:
            if self._run_goes_on(t):
                # only the gap bound passed (~once a millisecond): no gap, as this op is less than
                # one after the thread's latest stamp; the run goes on, bounded from this op
                self._run_until = min(self._run_due, t + self._run_gap)
            else:
                if not self._op_due(t, op, src):
                    self.emit(OpAccumulated(t, t, "host", self.step, op=op if type(op) is str else _op_name(op),
                                            src=src))
                return
        if self._device_q:                   # device events that came before it go in first
            self._take_device_events()
        hc = self._host
        last = hc.last_wall
        self._ops += (t, op, src, self.step, last, self._run_clock)
        hc.last_wall = _perf_ns()

    def _op_due(self, t: int, op: str, src: str) -> bool:
        """An op of the thread that stamped last, with no gap, once its thread clock or run-queue
        baseline is due: stamped as emit stamps it (an exact thread-clock reading if due, a fresh
        baseline if due, the bookkeeping charged to the observers) and kept in the run like the
        others, without building its event or calling the observers for it alone (~4 a training
        step). So is an op of a thread that runs no user code (autograd's: the first op of each
        backward pass, when another thread stamped last), whose gaps are never measured: it takes
        an exact reading. False: not this case (emit it)."""
        clock = getattr(self._tls, "clock", None)
        hc = self._host
        if clock is None or self._muted or clock.gap_end is not None:
            return False
        other = hc.last_clock is not clock
        if clock.runs_user_code and (not self._run_until or other or not 0 <= t - hc.last_wall < self._run_gap):
            return False
        if (not other and self._run_until and _get_ident() == self._run_ident
                and (t - clock.read_at >= CPU_READ_NS or t - clock.runq_at > CPU_READ_NS)):
            self._read_in_run(t, op, src, clock, hc)
            return True
        if other and self._run_until and not clock.runs_user_code:
            self._switch_in_run(t, op, src, self.step, clock, hc)
            return True
        with hc.lock:
            self._catch_up(clock)
            due = t - clock.read_at >= CPU_READ_NS or other or t - clock.runq_at > CPU_READ_NS
            user, mine, mark = _stamp_user(clock, t, _perf_ns() if due else None)
            base = hc.cpu
            hc.cpu = base + mine
            self._add_ready(base, hc.blocked, t, op, src, self.step, t - mine, clock)
        self._after_observers(clock, t, _perf_ns(), user, mark)
        return True

    def _read_in_run(self, t: int, op, src: str, clock: _ThreadClock, hc: "_HostClock") -> None:
        """_op_due for an op of the thread whose run is open (no other thread stamped since): its
        thread clock (and the run-queue baseline, if it may have moved) read now, the op kept in
        the run like the others with the reading beside it, and the run left open for the next
        CPU_READ_NS. The reading is applied when the run is settled (_settle_read): the ops before
        it credited by wall time first, exactly as _op_due credits them now, but without settling,
        locking twice, building a segment and reopening the run here, on the loop's path (timed
        in place, wrapped: a due 51-55 us before, ~3 of them a 6 ms training step; now 29-36 us,
        ~10 us of it on average the run-queue read, ~20 us at about every other due)."""
        r = self._keep_with_reading(t, op, src, self.step, clock, hc)
        self._run_due = due = r + CPU_READ_NS
        hc.last_wall = end = _perf_ns()
        self._run_until = min(due, end + self._run_gap)

    def _keep_with_reading(self, t: int, op, src: str, step: int, clock: _ThreadClock, hc: "_HostClock",
                           waited: int = 0, switch: bool = False) -> int:
        """(_read_in_run, _switch_in_run) ``clock``'s thread clock read now (the run-queue baseline
        too, if it may have moved: renew_runq), and the stamp kept in the run with the reading
        beside it (_reads), for the settle to apply in order. ``switch``: the stamp is the first of
        this thread while another's run is open: its own previous stamp's end is its ``prev``, and
        the other thread's last stamp ends where the host clock's does (see _catch_up). Returns
        the reading's wall time."""
        r = _perf_ns()
        cpu = thread_cpu()
        clock.renew_runq((r, cpu), waited)
        clock.read_at = r
        with hc.lock:                        # a settle (any thread) finds the reading with its stamp
            if self._device_q:
                self._drain_device()
            if switch:
                last = hc.last_clock
                if last is not None:
                    last.last_end = hc.last_wall
                prev = clock.last_end
                hc.last_clock = clock
            else:
                prev = hc.last_wall
            ops = self._ops
            self._reads += (len(ops), r, cpu, clock.observers, clock)
            ops += (t, op, src, step, prev, clock)
        if r - self._handed_at > HAND_OVER_NS:
            self._deliver_late()             # (HAND_OVER_NS)
        return r

    def _switch_in_run(self, t: int, op, src: str, step: int, clock: _ThreadClock, hc: "_HostClock",
                       waited: int = 0) -> None:
        """The first stamp of a thread while another thread's run is open, kept in the run (``op``:
        an op, or a host event that goes into the run, at ``t``): the thread clock read now and kept
        beside it, as _read_in_run keeps a due's, and the run handed to this thread. The stamps
        before it are settled later, with it (_settle: those up to it by wall time, it by the
        reading, in order), not here. Its own previous stamp's end (``prev``) is where the
        bookkeeping of its last stamp ended (_settle_read charges it to the observers, as
        _catch_up did). Two cases, the two ends of every backward pass: the first op of a thread
        that runs no user code (autograd's: _op_due), and the user's thread back from waiting for
        it, with no gap (emit; ``waited``: see renew_runq).

        Before (session 19, in place): the first took _op_due's whole way, 35-60 us (the settle of
        the forward's ops, two locked sections, a segment, the observers' charge, the run
        reopened), the second emit's, ~30 us, against ~15-20 for a due in the run."""
        self._keep_with_reading(t, op, src, step, clock, hc, waited, switch=True)
        hc.last_wall = clock.last_end = _perf_ns()
        self._open_run(clock)                # the run is this thread's, due from the reading

    def flush(self) -> None:
        """Hand the op events stamped so far (op_accumulated) to the observers listening now."""
        if not self._ops and not self._ready and not self._handing_over and not self._device_q:
            return
        with self._handing:
            self._handing_over += 1
            try:
                self._hand_over()
            finally:
                self._handing_over -= 1

    def _deliver_late(self) -> None:
        """Every HAND_OVER_NS while events flow: the late observers' events since they last got
        theirs, without handing the run over (unless KEPT_STAMPS_MAX stamps are kept)."""
        self._handed_at = _perf_ns()
        if len(self._ops) > KEPT_STAMPS_MAX:
            self.flush()
            return
        if not self._kinds_late:
            return
        with self._handing:
            with self._host.lock:
                # (no drain of queued device events here: every caller has just put them into the run,
                # before the op or event it stamped; one queued since waits for the next turn)
                parts = self._late_pending()
            self._give_late(parts)

    def _late_pending(self) -> list:
        """(hc.lock held) The op slots the late observers have not seen: of the segments settled
        since they last looked (in order), then of the stamps not settled yet; marked seen."""
        F = OP_FIELDS
        ops, ready, seen = self._ops, self._ready, self._late_ops
        parts = []
        # by index from where they stopped: the segments kept since the last hand-over (once per
        # loop, since session 12) pile up, and skipping the seen ones one by one (islice) made each
        # turn walk the whole list: 140 us a turn at the end of a 600-step loop, 0.9% of its time
        for i in range(self._late_ready, len(ready), READY_FIELDS):
            items, lo, hi = ready[i + 2], ready[i + 3], ready[i + 4]
            if items is ops and lo < seen:   # (a range of _ops: its head was seen unsettled)
                lo = seen
            if lo < hi:
                parts.append(items[lo + 1:hi:F])
        n = len(ops)
        lo = max(self._settled, seen)
        if lo < n:
            parts.append(ops[lo + 1:n:F])
        self._late_ready, self._late_ops = len(ready), n
        return parts

    def _give_late(self, parts: list) -> None:
        """The events among ``parts`` (op slots: ops, and the events that went into the run) to the
        late observers of their kinds (unstamped: they need not wait for the run to be built)."""
        late = self._kinds_late
        if not late:
            return
        by_kind, is_late = self._by_kind, late.__contains__
        for slots in parts:
            # picked out in C (a run holds ~60 ops for every few such events)
            for x in itertools.compress(slots, map(is_late, map(type, slots))):
                for fn in by_kind.get(type(x), ()):
                    fn(x)

    def _hand_over(self) -> None:
        self._handed_at = _perf_ns()
        with self._host.lock:
            self._settle()
            # (marked seen even with no late observer: positions kept from before would skip the
            # first events of one that subscribes later)
            parts = self._late_pending()
            flat, self._ready = self._ready, []
            own, self._own = self._own, []
            self._late_ready = 0
            s = self._settled
            taken = None
            if s:
                self._late_ops = max(self._late_ops - s, 0)
                # the settled ranges of _ops, taken (one copy a hand-over) and left out of the list
                ops = self._ops
                taken = ops[:s]
                del ops[:s]
                self._settled = 0
                _untrack(taken)
            # the segments as tuples, each over a list no longer added to
            it = iter(flat)
            segments = [(cpu, blocked, taken if items is self._ops else items, lo, hi, debt)
                        for cpu, blocked, items, lo, hi, debt in zip(it, it, it, it, it, it)]
        if not segments:
            self._give_late(parts)
            return
        _untrack(own)
        for x in segments:                   # here, together: one at a time, each cost ~5 us cold
            _untrack(x)
        observers = self._all + self._by_kind.get(OpAccumulated, ())
        if observers:
            # A log keeps every run as it came (each the stamps of up to HAND_OVER_NS of a loop):
            # tracked, the cyclic collector walked each list's items in the young collections the
            # run went through (when runs came ~4 a step: 20 ms a 3 s loop in a kernel, 0.8 s over
            # 40 rounds against 0.04 s plain).
            # A run cannot be part of a reference cycle (its lists hold numbers, strings, ops,
            # thread clocks and untracked events, and nothing refers back to it but the log), so it
            # is untracked with its lists, as events are (_gc_untracker). Reference counting frees it.
            run = OpRun(segments)
            _untrack(segments)
            _untrack(run)
            runs, many = self._runs, self._many
            for fn in observers:
                r = runs.get(fn)
                if r is not None:
                    r(run)
                    continue
                m = many.get(fn)
                if m is not None:
                    m(run.events())
                else:
                    for e in run.events():
                        fn(e)
        self._give_late(parts)               # what the late observers had not got yet

    def host_clock(self) -> Tuple[int, int]:
        """(cpu_ns, blocked_ns) of the host lane now, on the scale of the stamps (includes the
        calling thread's CPU since its last stamp)."""
        clock = getattr(self._tls, "clock", None)
        with self._host.lock:
            if clock is not None:
                self._catch_up(clock)
            c = thread_cpu()
            # (beyond what was credited already: a debt is paid first)
            mine = 0 if clock is None else max(c - clock.observers - clock.last_user, 0)
            return self._host.cpu + mine, self._host.blocked

    def wait_for_device(self, done: threading.Event) -> None:
        """Block until ``done`` is set (a host sync waiting for the device thread), without charging
        the CPU the waiting thread burns meanwhile to the user's host time. Blocked on the event,
        the thread still pays for handing the interpreter lock back and forth with the device
        thread that runs the recipe in Python: 30-75 us of system time per sync here, up to half
        of a small graph's modeled run on Gaudi (notebook 07's M9), and more under load. A real
        host blocked in a stream sync does no such work, and the Gaudi clock models the wait
        itself (perfmodel.timeline): that CPU is the emulator's, charged like an observer's."""
        if done.is_set():
            return
        if not self._listening:
            done.wait()
            return
        c0 = thread_cpu()
        done.wait()
        clock = getattr(self._tls, "clock", None)
        if clock is None:
            return
        with self._host.lock:
            self._catch_up(clock)
            clock.read_at = 0                # the next stamp reads the thread clock, not the wall time
            clock.observers += thread_cpu() - c0     # this bookkeeping too (slow on waking: cold caches)
        self._run_until = 0                  # nor does an op stamped next (op_accumulated)
        # the sync's event starts before the wait: no gap ends here for now() to note (a thread-clock
        # and a /proc read, 26 us after a wake-up, which the event's stamp then took for the user's)
        self._gap_seen = self._host.last_wall

    def muted(self):
        """``with recorder.muted():`` host events (from any thread: backward runs on autograd's)
        reach no observer; device events still do. perfmodel.estimate traces a function this way,
        so its ops are not shown as work that ran."""
        return _Muted(self)


class _Muted:
    def __init__(self, recorder):
        self._r = recorder

    def __enter__(self):
        with self._r._lock:
            self._r._muted += 1
            self._r._run_until = 0           # op_accumulated's short path closed (see _open_run)
        return self

    def __exit__(self, *exc):
        with self._r._lock:
            self._r._muted -= 1


recorder = Recorder()


def subscribe(fn: Observer, kinds=None, many=None, runs=None, stamps=True, late=False) -> Handle:
    """Call ``fn(event)`` for each event (of ``kinds`` only, if given; ``many``, ``runs``, ``stamps``,
    ``late``: see Recorder.subscribe). A recording starts only once the background warm-up
    (warmup.py) is over: torch's import would be a blank second in it."""
    warmup.wait()
    return recorder.subscribe(fn, kinds, many, runs, stamps, late)


wants = recorder.wants
emit = recorder.emit
emit_device = recorder.emit_device
emit_host = recorder.emit_host
op_accumulated = recorder.op_accumulated
flush = recorder.flush


class EventLog:
    """The events an observer keeps, in order, a run of op events (``OpRun``) kept as one item
    until the list is read: ``read()`` builds the runs' events in place and returns the list.
    ``subscribe(log.add, kinds, runs=log.add)`` fills it. Safe to read from any thread while
    events arrive (the device thread appends its own)."""

    def __init__(self, items: Optional[list] = None):
        self.items: list = [] if items is None else items   # events and OpRuns as they came
        self.add = self.items.append
        self._read_to = 0                # items before it hold no OpRun
        self._last_read = None           # the item just before _read_to, when it was set
        self._lock = threading.Lock()

    def read(self) -> list:
        items = self.items
        i = self._read_to
        if i and (i > len(items) or items[i - 1] is not self._last_read):
            # the list read out was changed in place (``c.events.clear()``, a slice deleted):
            # look at all of it again
            with self._lock:
                self._read_to, i = 0, 0
        if i < len(items):
            with self._lock:
                i, n = self._read_to, len(items)
                if any(type(x) is OpRun for x in items[i:n]):
                    out = []
                    for x in items[i:n]:
                        if type(x) is OpRun:
                            out += x.events()
                        else:
                            out.append(x)
                    items[i:n] = out     # one step: items appended meanwhile stay after them
                    n = i + len(out)
                self._read_to = n
                self._last_read = items[n - 1] if n else None
        return items


def _read_log(self) -> list:
    recorder.flush()                     # what is stamped but not yet handed over first
    return self.log.read()


def _replace_log(self, value: list) -> None:
    self.log = EventLog(value)


#: ``events = logged_events`` in a class that keeps its events in ``self.log`` (an EventLog): reading
#: builds the kept op runs' events in place; assigning a list starts a new log holding it.
logged_events = property(_read_log, _replace_log, doc="The events so far (op runs built when read).")


class Collector:
    """Keeps every event in a list while active: ``with Collector() as c: ...; c.events``. Op events
    are kept as runs (``OpRun``) and built when ``events`` is read (see EventLog)."""

    def __init__(self, kinds=None, log: Optional[EventLog] = None):
        self.log = log if log is not None else EventLog()
        self._kinds = kinds
        self._handle: Optional[Handle] = None

    @property
    def events(self) -> list:
        """The events so far (op events stamped but not yet handed over are handed over first)."""
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
