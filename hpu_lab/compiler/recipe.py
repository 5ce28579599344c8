"""A Recipe: what the graph compiler produces and the device runs."""
from __future__ import annotations

import itertools

import torch
import torch.fx

from ..ops import widen    # imported here, never first on the device thread (its error path runs there)
from ..runtime.executor import DeviceError


class GraphKey:
    """Structure + shapes + dtypes + constants of a graph, and which values leave it.

    Equality compares the full signatures, so two different graphs never share a recipe; the
    hash is precomputed from the per-node hashes taken while the ops accumulated.
    """
    __slots__ = ("sigs", "outs", "h", "default_dtype")

    def __init__(self, sigs, outs, node_hashes, default_dtype=None):
        self.sigs, self.outs = sigs, outs
        # torch's default dtype when the graph was built: an op's signature holds its arguments,
        # and with the same arguments a factory (torch.ones(3)) or an integer tensor's true
        # division gives the default dtype, which the recipe's kernels read when they run. On a
        # Gaudi the lazy graph holds the resolved dtypes; here a recipe cached under float32,
        # found again after torch.set_default_dtype(torch.float64), ran and returned float64 where
        # it had predicted float32 (an OutputMismatch at the next sync)
        self.default_dtype = default_dtype
        self.h = hash((node_hashes, outs, default_dtype))

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        return (self.h == other.h and self.default_dtype == other.default_dtype and self.outs == other.outs
                and self.sigs == other.sigs)

    @property
    def short(self) -> str:
        return f"{self.h & 0xFFFFFFFFFFFF:012x}"


def live_nodes(nodes, outs, out_type):
    """The nodes of ``nodes`` the graph runs: those an output in ``outs`` reads (through any chain),
    and those with effects of their own (fx's ``is_impure``: a mutable schema, an effectful op) with
    what they read. The rest is dead: ops whose results nothing holds any more (a loss of the last
    step of a finished loop). The compiler's dead-code elimination drops them from the recipe; left
    in the key, they made the same program after them another graph: a second identical training
    run recompiled its first step, which had the first run's leftovers ahead of it. The bridge
    builds a graph from the live tensors' ops alone. ``out_type``: the class of a node's output
    reference (tensor.Out). Returns ``nodes`` itself when every node is live."""
    live = {id(o.node) for o in outs}
    dead = 0
    for n in reversed(nodes):          # a node reads only nodes before it
        if id(n) not in live:
            if not _impure(n.op):
                dead += 1
                continue
            live.add(id(n))
        for r in n.refs:
            if type(r) is out_type:
                live.add(id(r.node))
    if not dead:
        return nodes
    return [n for n in nodes if id(n) in live]


_IMPURE: dict = {}


def _impure(op) -> bool:
    found = _IMPURE.get(op)
    if found is None:
        from torch._library.utils import is_impure
        try:
            found = _IMPURE[op] = bool(is_impure(op))
        except TypeError:               # an op that cannot be looked up by value: kept, never dropped
            return True
    return found


class _Unnumbered(Exception):
    """A reference the graph being keyed does not number (see graph_key)."""


def graph_key(nodes, outs, externals, slots, default_dtype=None) -> GraphKey:
    """The key of the graph of ``nodes`` (reading ``externals``, in first-use order; ``outs`` sorted),
    numbered from that graph alone.

    A node's signature names the values it reads by their numbers in the pending graph: a node's
    index, an input's slot (``slots``: id(Inp) -> slot). A graph flushed alone from its pending graph
    is numbered from 0 already. One flushed after part of its pending graph (a sync's subset, the
    rest after it) or as a part (the subset a sync needs, with dead nodes before it) kept its
    pending graph's numbers, so the same program after other ops got another key and recompiled
    ("different graph outputs"; a second identical training run compiled everything again). Such a
    graph's references are numbered again, from its first node and first-read input: the bridge's
    graph hash, too, is that of the graph it compiles. Numbering is one-to-one, so different graphs
    keep different keys."""
    n_nodes = len(nodes)
    if nodes[-1].index == n_nodes - 1 and all(slots.get(id(e)) == k for k, e in enumerate(externals)):
        return GraphKey(tuple(n.sig for n in nodes), tuple((o.node.index, o.idx) for o in outs),
                        tuple(n.h for n in nodes), default_dtype)
    node_pos = {n.index: k for k, n in enumerate(nodes)}
    slot_pos = {}
    for k, e in enumerate(externals):
        s = slots.get(id(e))
        if s is not None:
            slot_pos[s] = k
    try:
        sigs = tuple(_numbered(n.sig, node_pos, slot_pos) for n in nodes)
    except _Unnumbered:     # its own numbers are one-to-one too: a key, only not shared with others
        return GraphKey(tuple(n.sig for n in nodes), tuple((o.node.index, o.idx) for o in outs),
                        tuple(n.h for n in nodes), default_dtype)
    return GraphKey(sigs, tuple((node_pos[o.node.index], o.idx) for o in outs),
                    tuple(hash(s) for s in sigs), default_dtype)


def _numbered(sig, node_pos, slot_pos):
    """``sig`` with each reference (graph.ref_sig: ("o", node index, output) or ("i", slot, layout))
    numbered by ``node_pos`` / ``slot_pos``. A number in a signature is a scalar's (int, value): a bare
    int after "o"/"i" is a reference's."""
    if type(sig) is not tuple:
        return sig
    if len(sig) == 3 and type(sig[0]) is str and type(sig[1]) is int:
        if sig[0] == "o" and type(sig[2]) is int:
            pos = node_pos.get(sig[1])
            if pos is None:
                raise _Unnumbered
            return ("o", pos, sig[2])
        if sig[0] == "i":
            pos = slot_pos.get(sig[1])
            if pos is None:
                raise _Unnumbered
            return ("i", pos, sig[2])
    return tuple(_numbered(x, node_pos, slot_pos) for x in sig)


_ids = itertools.count(1)


def _layout(size, stride):
    """Sizes and the strides that matter (a size-1 dimension's stride addresses nothing)."""
    return tuple(size), tuple(st for sz, st in zip(size, stride) if sz != 1)


class Recipe:
    def __init__(self, key, gm: torch.fx.GraphModule, node_count, clusters, peak_bytes, summary,
                 desc, src, compile_ns):
        self.id = next(_ids)
        self.key = key
        self.short_key = key.short if key is not None else f"r{self.id}"
        self.gm = gm
        self.fn = gm.forward        # compile_graph swaps in the TorchScript lowering
        self.backend = "fx"
        self.node_count = node_count
        self.clusters = clusters
        self.peak_bytes = peak_bytes
        self.summary = summary
        self.desc = desc            # (input metas, per-node (name, consts, src)) for recompile diffs
        self.src = src
        self.compile_ns = compile_ns
        self.launches = 0
        self._layouts = None        # the TorchScript trace's input layouts (see run)

    @property
    def code(self) -> str:
        return self.gm.code

    def run(self, args):
        fn = self.fn
        if self.backend == "torchscript" and not self._traced_layouts(args):
            # the trace baked the layout branches of its example inputs: for any other layout
            # (a launch output that came out laid out differently) only the fx code is right
            fn = self._fx_forward()
        try:
            return fn(*args)
        except (NotImplementedError, RuntimeError) as e:
            # a dtype Gaudi computes and the CPU kernel lacks (fp8, some bf16/fp16): widen that node
            if not widen.missing_kernel(e, widen.ANY_NODE):
                raise
            return widen.rerun(self, args, e)

    def _fx_forward(self):
        """The fx code (a recipe from the disk cache holds its graph, and the trace as forward)."""
        if isinstance(self.gm, torch.fx.GraphModule):
            return self.gm.forward
        fx_gm = self.__dict__.get("_fx_gm")
        if fx_gm is None:
            fx_gm = self._fx_gm = torch.fx.GraphModule(torch.nn.Module(), self.gm.graph)
        return fx_gm.forward

    def _traced_layouts(self, args) -> bool:
        want = self._layouts
        if want is None:
            metas = [n.meta.get("hpu_meta") for n in self.gm.graph.nodes if n.op == "placeholder"]
            want = self._layouts = [_layout(m[0], m[1]) if m else None for m in metas]
        if len(want) != len(args):
            return False
        for a, w in zip(args, want):
            if w is None or not isinstance(a, torch.Tensor) or _layout(a.shape, a.stride()) != w:
                return False
        return True

    def explain_failure(self, exc, args, srcs=None):
        """Find which node failed (re-running node by node) and name its op and user line.

        This runs on the device thread, so it may import nothing: not ``fx.Interpreter.run``,
        whose progress bar imports multiprocessing and whose error path imports
        ``torch._inductor`` (while the host may be importing ``torch._dynamo``: a circular,
        partially initialized import that broke the user's next op). A plain loop instead."""
        if isinstance(exc, DeviceError):
            return exc
        failing = None
        if args is not None:               # the recipe's input values (None: they were not ready)
            try:
                failing, own = _failing_node(self.gm.graph, args)
                exc = own or exc           # the op's own error, not TorchScript's wrapper of it
            except Exception:
                failing = None
        if failing is not None:
            op = failing.meta.get("op_name", str(failing.target))
            src = failing.meta.get("src", "?")
            k = failing.meta.get("node_index")
            if srcs is not None and k is not None and k < len(srcs) and srcs[k]:
                src = srcs[k]          # this launch's line, not the one the recipe was compiled at
            return DeviceError(f"{op} failed on the device (op created at {src}): {type(exc).__name__}: {exc}")
        return DeviceError(f"recipe {self.short_key} failed on the device: {type(exc).__name__}: {exc}")


def _failing_node(graph, args):
    """(node, exception) of the first call_function node of ``graph`` that raises on ``args``
    ((None, None) if none does)."""
    env = {}
    it = iter(args)
    load = env.__getitem__
    for n in graph.nodes:
        if n.op == "placeholder":
            env[n] = next(it)
        elif n.op == "get_attr":          # a constant the graph holds (a lifted torch.tensor(...))
            obj = graph.owning_module
            for part in n.target.split("."):
                obj = getattr(obj, part)
            env[n] = obj
        elif n.op == "call_function":
            try:
                env[n] = n.target(*torch.fx.node.map_arg(n.args, load), **torch.fx.node.map_arg(n.kwargs, load))
            except Exception as e:
                return n, e
    return None, None
