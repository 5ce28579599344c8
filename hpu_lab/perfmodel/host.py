"""The host lane of the Gaudi clock: what each host event costs a Gaudi server's host.

A real Gaudi host runs the bridge's C++; the emulator runs Python on whatever machine it is on.
So the host lane is not this machine's time: each host event the emulator emits gets the modeled
cost of what the bridge does for it (below), and only ``UserCode`` events (your DataLoader
fetches, sleeps, prints, ``events.user_code`` blocks) take the time they took here. The emulator's
own time never enters the lane, so a loop of torch ops has the same host time on any machine,
busy or idle.

Every constant is assumed, with its reason in ``HostModel.notes`` and docs/gaudi_clock.md ("The
host lane"), except one: ``op_ns``, the cost of one op traced in lazy mode, calibrated on seed
000's lazy-mode host time (4.8 ms a step on first-generation Gaudi; seed000.py). Seed 000's
make_graphed_callables (3.9 ms) and capture-and-replay (1.3 ms) figures were kept out of the fit:
they are the check. One host model serves every card: the bridge's per-op
path is single-threaded, and the three generations' Xeon hosts are assumed equally fast at it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict

from .. import events as ev

US = 1_000
MS = 1_000_000

SEED_HOST_MS = {"lazy": 4.8, "make_graphed_callables": 3.9, "capture/replay": 1.3}   # seed 000, first-gen Gaudi


@dataclass(frozen=True)
class HostModel:
    op_ns: int                  # one op traced in lazy mode: PyTorch's dispatch and autograd, the bridge's lazy tensor
    eager_dispatch_ns: int      # an eager op handed to its cached one-op recipe (instead of a graph built)
    mark_step_ns: int           # the step marker's own bookkeeping
    graph_ns: int               # a graph built and hashed at mark_step: fixed part ...
    graph_node_ns: int          # ... and per node
    lookup_ns: int              # a recipe cache lookup in memory
    disk_lookup_ns: int         # ... served from the disk cache (read and deserialized)
    compile_ns: int             # the graph compiler: fixed part ...
    compile_node_ns: int        # ... and per node
    launch_ns: int              # a recipe launch: fixed part ...
    launch_tensor_ns: int       # ... and per input or output tensor (its patching-table entry)
    sync_ns: int                # the host side of a sync (the wait itself is modeled by the device lanes)
    replay_ns: int              # an HPU Graph replay beyond its launches
    copy_queue_ns: int          # queuing a non_blocking copy on a stream
    fallback_ns: int            # a CPU fallback's round trip beyond its sync and read-back
    compiled_call_ns: int       # a torch.compile'd call beyond its launch
    capture_ns: int             # beginning or ending an HPU Graph capture
    stream_op_ns: int           # recording or waiting for a stream event
    collective_ns: int          # the host side of an eager collective (its ring time is modeled)
    notes: Dict[str, str] = field(default_factory=dict, compare=False)

    def cost(self, e) -> int:
        """The modeled host time of event ``e``'s own work (ns): for an enclosing event (MarkStep,
        Replay, CPUFallback, a capture) only its own part, the events inside it have theirs; for a
        sync or a copy the part on the host, the wait and the transfer being timed by the clock."""
        k = type(e)
        f = _COST.get(k)
        return f(self, e) if f is not None else 0


def _graph(m, e):
    if e.trigger.startswith("eager op"):
        return m.eager_dispatch_ns
    return m.graph_ns + m.graph_node_ns * e.node_count


def _launch(m, e):
    return m.launch_ns + m.launch_tensor_ns * launch_tensors(e.graph)


def launch_tensors(g) -> int:
    """The input and output tensors of a recipe whose graph is ``g`` (a GraphSummary)."""
    if g is None:
        return 0
    ins = sum(1 for n in g.nodes if n.op == "input")
    outs = {n.index for n in g.nodes if n.op == "output"}
    return ins + sum(1 for _, b in g.edges if b in outs)


_COST = {
    ev.OpAccumulated: lambda m, e: m.op_ns,
    ev.MarkStep: lambda m, e: m.mark_step_ns,
    ev.GraphBuilt: _graph,
    ev.CacheLookup: lambda m, e: m.disk_lookup_ns if e.source == "disk" else m.lookup_ns,
    ev.Compile: lambda m, e: m.compile_ns + m.compile_node_ns * e.node_count,
    ev.Launch: _launch,
    ev.HostSync: lambda m, e: m.sync_ns,
    ev.Replay: lambda m, e: m.replay_ns,
    ev.CopyQueued: lambda m, e: m.copy_queue_ns,
    ev.CPUFallback: lambda m, e: m.fallback_ns,
    ev.CompiledCall: lambda m, e: m.compiled_call_ns,
    ev.CaptureBegin: lambda m, e: m.capture_ns,
    ev.CaptureEnd: lambda m, e: m.capture_ns,
    ev.StreamRecord: lambda m, e: m.stream_op_ns,
    ev.StreamWait: lambda m, e: m.stream_op_ns,
    ev.Collective: lambda m, e: m.collective_ns,
    ev.UserCode: lambda m, e: e.own_ns,
}

NOTES = {
    "op_ns": "calibrated: seed 000's lazy-mode host time, 4.8 ms a step on first-gen Gaudi, less the other modeled "
             "costs of the step, over its 61 traced ops (calibrate_op_ns); it covers the whole path of an op from "
             "the user's Python through PyTorch's dispatcher and autograd to the bridge's lazy tensor",
    "eager_dispatch_ns": "assumed: eager mode hands the op to its cached single-op recipe with no lazy graph to "
                         "build; a graph of one node would cost graph_ns + graph_node_ns",
    "mark_step_ns": "assumed: the step marker's call into the bridge and its bookkeeping; the graph it cuts is "
                    "costed by the GraphBuilt, CacheLookup and Launch it leads to",
    "graph_ns": "assumed: at the step marker the bridge builds a JIT IR graph of the pending ops, post-order, and "
                "hashes it node by node (seed 000: 'for each iteration, the entire graph is parsed')",
    "graph_node_ns": "assumed: one IR node created and hashed in C++",
    "lookup_ns": "assumed: a hash-map lookup of the graph key in the recipe cache, under its lock",
    "disk_lookup_ns": "assumed: a recipe file read from the disk cache and deserialized (seed 003)",
    "compile_ns": "assumed: the graph compiler's passes (fusion, layout, memory plan, kernel selection); Intel "
                  "publishes no compile time; seed 002: 'the first two or three training iterations may be slower "
                  "due to graph compilations'",
    "compile_node_ns": "assumed: compile time grows with the graph's size",
    "launch_ns": "assumed: submitting a recipe (synLaunch) and its bookkeeping",
    "launch_tensor_ns": "assumed value; the mechanism is the bridge's: each launch fills a patching table, one "
                        "entry per input and output tensor (RecipeValueSpec::update_patching_table, "
                        "backend/kernel/hpu_habana_cache.cpp, gaudi-pytorch-bridge 1.19.0)",
    "sync_ns": "assumed: recording the event waited for and waking up; the wait itself is the device's modeled time",
    "replay_ns": "assumed: HPUGraph::replay runs a step marker on what is pending, then ExecuteCachedGraph marks "
                 "each input and output tensor in flight and launches each captured graph "
                 "(backend/habana_device/HPUGraph.cpp, habana_lazy/hpu_lazy_tensors.cpp, 1.19.0); its launches are "
                 "Launch events of their own",
    "copy_queue_ns": "assumed value; the work is the bridge's: a pinned non_blocking H2D copy still runs on the host "
                     "the lazy copy's bookkeeping (copy_hpu_lazy_H2D: the destination's device buffer, marked as a graph "
                     "input) and its submission (habana_helpers::copy_data_to_device holds both tensors until a "
                     "done-callback; device::copy_data_to_device orders the DMA stream after pending writes of both "
                     "buffers; copy_data_to_device_ locks the destination's address, calls synMemCopyAsync and registers "
                     "the completion event), then returns; a blocking copy does the same, then waits for the transfer "
                     "(habana_kernels/lazy_kernels.cpp, backend/helpers/tensor_utils.cpp, "
                     "backend/synapse_helpers/device.cpp, 1.19.0); the transfer is on the stream",
    "fallback_ns": "assumed: the CPU kernel of a small op and the copy of its result to the device; the sync and "
                   "the read-back are events of their own",
    "compiled_call_ns": "assumed: dynamo's guards and the compiled function's runtime wrappers before its launch",
    "capture_ns": "assumed: the graph context's synchronize, gc.collect and bookkeeping at a capture's begin or end",
    "stream_op_ns": "assumed: an event recorded on, or waited for by, a stream",
    "collective_ns": "assumed: the host side of an eager HCCL call; its ring time is modeled (cost.collective_ns)",
}

HOST = HostModel(
    op_ns=72_309,
    eager_dispatch_ns=10 * US, mark_step_ns=10 * US, graph_ns=10 * US, graph_node_ns=2 * US, lookup_ns=5 * US,
    disk_lookup_ns=2 * MS, compile_ns=20 * MS, compile_node_ns=1 * MS, launch_ns=20 * US, launch_tensor_ns=1 * US,
    sync_ns=10 * US, replay_ns=20 * US, copy_queue_ns=10 * US, fallback_ns=50 * US, compiled_call_ns=30 * US,
    capture_ns=1 * MS, stream_op_ns=5 * US, collective_ns=20 * US, notes=NOTES)


def with_op_ns(op_ns: int) -> HostModel:
    return replace(HOST, op_ns=op_ns)
