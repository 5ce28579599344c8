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
        try:
            return self.fn(*args)
        except (NotImplementedError, RuntimeError) as e:
            # a dtype Gaudi computes and the CPU kernel lacks (fp8, some bf16/fp16): widen that node
            from .. import widen
            if not widen.missing_kernel(e):
                raise
            return widen.rerun(self, args, e)

    def explain_failure(self, exc, inputs):
        """Find which node failed (re-running node by node) and name its op and user line."""
        if isinstance(exc, DeviceError):
            return exc
        failing = None

        class Finder(torch.fx.Interpreter):
            def run_node(self, n):
                nonlocal failing
                try:
                    return super().run_node(n)
                except Exception:
                    failing = failing or n
                    raise

        try:
            from ..runtime.executor import _resolve
            Finder(self.gm).run(*[_resolve(i) for i in inputs])
        except Exception:
            pass
        if failing is not None:
            op = failing.meta.get("op_name", str(failing.target))
            src = failing.meta.get("src", "?")
            return DeviceError(f"{op} failed on the device (op created at {src}): {type(exc).__name__}: {exc}")
        return DeviceError(f"recipe {self.short_key} failed on the device: {type(exc).__name__}: {exc}")
