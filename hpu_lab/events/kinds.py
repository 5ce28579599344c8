"""The event kinds: what every layer of hpu_lab reports, one small frozen dataclass each.

Every event has ``t_start`` / ``t_end`` (``time.perf_counter_ns``, one monotonic clock), ``lane``
(``"host"`` or ``"hpu:<stream>"``) and ``step`` (the number of mark_steps seen when it began),
then fields of its own. The Gaudi clock (``hpu_lab.perfmodel``) re-times them: a host event's
modeled cost comes from its kind and fields (docs/gaudi_clock.md, "The host lane"), not from how
long this machine took; ``UserCode`` is the one kind whose measured duration counts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ._record import record


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


@record
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


@record
class OpAccumulated(Event):
    """One aten op appended to the pending lazy graph (or run at once in eager mode)."""
    op: str = ""
    shapes: Tuple[tuple, ...] = ()
    dtype: str = ""
    src: str = ""          # user's file:line


@record
class MarkStep(Event):
    src: str = ""
    pending_nodes: int = 0


@record
class GraphBuilt(Event):
    """The pending graph (or the part a sync needed) turned into a torch.fx graph."""
    graph_id: int = 0
    node_count: int = 0
    input_count: int = 0
    output_count: int = 0
    trigger: str = ""      # "mark_step", ".item()", ...
    src: str = ""


@record
class CacheLookup(Event):
    hit: bool = False
    key: str = ""
    source: str = "memory"   # "memory" or "disk"


@record
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


@record
class Launch(Event):
    launch_id: int = 0
    recipe_id: int = 0
    key: str = ""
    stream: int = 0
    graph: Optional[GraphSummary] = None
    # launches on other streams whose outputs this one reads: its stream waits for them first
    # (the runtime's implicit cross-stream wait, lazy/launch.py; the Gaudi clock orders by it)
    waits_for: Tuple[int, ...] = ()


@record
class DeviceExecution(Event):
    """The recipe running on the device (the executor's worker thread)."""
    launch_id: int = 0
    recipe_id: int = 0
    key: str = ""
    node_count: int = 0
    ok: bool = True


@record
class HostSync(Event):
    """The host waited for the device. reason: '.item()', '.cpu()', 'print', 'data-dependent op aten::nonzero', ...

    ``launch_id``: the launch waited for, a queued copy's (``CopyQueued.launch_id``) or a recorded
    event's marker (``StreamRecord.marker``) (0: every stream's work, or no device work at all when
    the event has no duration: the value was already on the host)."""
    reason: str = ""
    src: str = ""
    launch_id: int = 0


@record
class HostToDevice(Event):
    """One host-to-device transfer (hpu_lab/runtime/transfers.py says which path each kind takes).
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


@record
class CopyQueued(Event):
    """The host queued a host-to-device copy on ``stream`` (a pinned ``non_blocking=True`` copy,
    runtime/transfers.py) and went on: an instant on the host lane, emitted before the stream can run it.
    The copy's run is the ``HostToDevice`` with the same ``launch_id``, emitted by the stream when it
    runs (a busy stream makes it later than host events after the queue point); a recipe or a sync
    that reads the copy names ``launch_id`` (``Launch.waits_for``, ``HostSync.launch_id``). The Gaudi
    clock starts the copy's DMA here, on the host's clock."""
    launch_id: int = 0
    stream: int = 0
    nbytes: int = 0
    src: str = ""


@record
class DeviceToHost(Event):
    """A device-to-host copy of ``nbytes`` (fields as HostToDevice)."""
    nbytes: int = 0
    src: str = ""
    pinned: bool = False
    non_blocking: bool = False


@record
class CPUFallback(Event):
    op: str = ""
    dtypes: Tuple[str, ...] = ()
    src: str = ""


@record
class CaptureBegin(Event):
    graph_id: int = 0
    src: str = ""


@record
class CaptureEnd(Event):
    graph_id: int = 0
    recipes: int = 0
    node_count: int = 0
    src: str = ""


@record
class Replay(Event):
    graph_id: int = 0
    recipes: int = 0
    src: str = ""


@record
class MemorySample(Event):
    in_use: int = 0
    max_in_use: int = 0
    limit: int = 0


@record
class Collective(Event):
    op: str = ""
    nbytes: int = 0
    src: str = ""
    world_size: int = 0      # ranks taking part (0: unknown)


@record
class StreamRecord(Event):
    """An hpu Event recorded on ``stream`` (graphs/streams.py): a marker that completes once the work
    queued on that stream before it has run. ``marker`` names it for the StreamWaits on it."""
    marker: int = 0
    stream: int = 0
    src: str = ""


@record
class StreamWait(Event):
    """``stream`` waits for marker ``marker`` recorded on another stream (``Stream.wait_event``,
    ``wait_stream``, ``Event.wait``): work queued on ``stream`` afterwards starts after it."""
    marker: int = 0
    stream: int = 0
    src: str = ""


@record
class UserCode(Event):
    """Your own code on the host, measured on this CPU: a DataLoader fetch (``what`` "data loading"),
    a ``time.sleep`` ("sleep"), a ``print`` ("print"), or a block marked with
    ``hpu_lab.events.user_code(label)``. ``own_ns``: the block's wall time less hpu_lab's own work
    inside it (torch ops on hpu tensors inside are modeled by their own events). Everything else
    the host does between torch ops is the framework's, and the Gaudi clock models it per event."""
    what: str = ""
    src: str = ""
    own_ns: int = 0


@record
class CompiledCall(Event):
    """A call of a ``torch.compile(backend="hpu_backend")`` function that found its graph compiled
    (dynamo's guards, the compiled function's wrappers): its Launch follows."""
    key: str = ""
    src: str = ""


@record
class Error(Event):
    message: str = ""
    op: str = ""
    src: str = ""
