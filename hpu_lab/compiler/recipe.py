"""A Recipe: what the graph compiler produces and the device runs."""
from __future__ import annotations

import itertools

import torch.fx

from ..runtime.executor import DeviceError


class GraphKey:
    """Structure + shapes + dtypes + constants of a graph, and which values leave it.

    Equality compares the full signatures, so two different graphs never share a recipe; the
    hash is precomputed from the per-node hashes taken while the ops accumulated.
    """
    __slots__ = ("sigs", "outs", "h")

    def __init__(self, sigs, outs, node_hashes):
        self.sigs, self.outs = sigs, outs
        self.h = hash((node_hashes, outs))

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        return self.h == other.h and self.outs == other.outs and self.sigs == other.sigs

    @property
    def short(self) -> str:
        return f"{self.h & 0xFFFFFFFFFFFF:012x}"


_ids = itertools.count(1)


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

    @property
    def code(self) -> str:
        return self.gm.code

    def run(self, args):
        return self.fn(*args)

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
        elif n.op == "call_function":
            try:
                env[n] = n.target(*torch.fx.node.map_arg(n.args, load), **torch.fx.node.map_arg(n.kwargs, load))
            except Exception as e:
                return n, e
    return None, None
