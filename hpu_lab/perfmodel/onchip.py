"""Which bytes of a recipe reach HBM: kernel boundaries the graph compiler keeps on chip.

A kernel of a recipe (``cost.kernels``) reads its operands and writes its results. Without this
model every boundary goes through HBM: a tensor is written once by its producer and read once by
each consumer. Gaudi's graph compiler instead slices a producer and its consumers and pipelines the
slices through on-die SRAM (docs/gaudi_clock.md §2, "On-chip reuse"), so a tensor all of whose
readers run soon after it is produced never reaches HBM. Here "soon" is a window of kernels in the
recipe's order (``cost.ONCHIP_WINDOW``, assumed):

- a read of a tensor produced at most ``window`` kernels earlier is served on chip;
- a tensor is written to HBM only if a reader runs later than that, or the recipe outputs it;
- a graph input is read from HBM once per run of readers less than ``window`` kernels apart.

``window=0`` returns every kernel's bytes as ``cost.kernels`` counted them.
"""
from __future__ import annotations

from typing import Dict, List

# ops that only re-describe memory (strides, offsets): no kernel runs for them on a Gaudi
VIEW_OPS = {"aten::view", "aten::_unsafe_view", "aten::expand", "aten::squeeze", "aten::unsqueeze", "aten::alias",
         "aten::as_strided", "aten::slice", "aten::select", "aten::unbind", "aten::split", "aten::split_with_sizes",
         "aten::detach", "aten::lift_fresh", "aten::_reshape_alias", "aten::reshape", "aten::flatten",
         "aten::unflatten", "aten::chunk", "aten::narrow", "aten::diagonal", "aten::view_as", "view", "getitem"}


def is_view(n) -> bool:
    """A node that is a view of its input: it moves no bytes."""
    return n.op in VIEW_OPS or n.tensor_class == "alias"


def hbm_bytes(plans, by_index, consumers, out_nodes, window: int) -> List[int]:
    """The HBM bytes of each planned kernel (``plans``: cost.kernels' list, in graph order of its
    first member; each entry ``(name, engine, flops, bytes, members, ...)``)."""
    moved = [p[3] for p in plans]
    if window <= 0 or not plans:
        return moved
    # kernels run in the graph's order: a kernel's place is its last member (a fusion cluster
    # runs when its last member's inputs are ready)
    order = sorted(range(len(plans)), key=lambda k: max(plans[k][4]))
    place = {k: i for i, k in enumerate(order)}
    owner: Dict[int, int] = {m: k for k, p in enumerate(plans) for m in p[4]}

    def source(i):
        """The node whose value input ``i`` is (through views and layout changes no kernel runs)."""
        seen = 0
        m = by_index.get(i)
        while m is not None and m.index not in owner and m.op not in ("input",) and len(m.inputs) == 1 \
                and seen < 10_000:
            m = by_index.get(m.inputs[0])
            seen += 1
        return m
    reads: Dict[int, Dict[int, int]] = {}      # tensor (node index) -> {kernel: bytes read}
    for k, p in enumerate(plans):
        if p[1] == "NIC":
            continue
        for mi in p[4]:
            n = by_index[mi]
            for i, b in zip(n.inputs, n.in_bytes):
                src = source(i)
                if src is None or owner.get(src.index) == k:
                    continue
                r = reads.setdefault(src.index, {})
                r[k] = max(r.get(k, 0), b)
    outputs = set()                 # what the recipe outputs (through views): written whatever reads it
    for i, cs in consumers.items():
        if cs & out_nodes:
            src = source(i)
            if src is not None:
                outputs.add(src.index)
    for t, r in reads.items():
        pk = owner.get(t)
        if pk is None:                                   # a graph input: read, then reused nearby
            last = None
            for k in sorted(r, key=place.get):
                if last is not None and place[k] - last <= window:
                    moved[k] -= r[k]
                else:
                    last = place[k]
            continue
        far = False
        for k, b in r.items():
            if 0 < place[k] - place[pk] <= window:
                moved[k] -= b                             # served on chip
            else:
                far = True
        if not far and t not in outputs and plans[pk][1] != "NIC":
            moved[pk] -= by_index[t].out_bytes             # never leaves the chip
    return [max(b, 0) for b in moved]


def minimum_bytes(summary) -> int:
    """The least a recipe must move through HBM, whatever the compiler does: each graph input
    read once, each output written once, and each forward tensor the backward pass reads (a saved
    activation; backward nodes carry ``src == "<backward>"``) written once and read once. A
    yardstick for the traffic model (``cost.kernels``), not a cost."""
    nodes = summary.nodes
    by_index = {n.index: n for n in nodes}

    def source(i):
        m = by_index.get(i)
        while m is not None and is_view(m) and len(m.inputs) == 1:
            m = by_index.get(m.inputs[0])
        return m
    inputs: Dict[int, int] = {}
    saved: Dict[int, int] = {}
    outputs: Dict[int, int] = {}
    out_nodes = {n.index for n in nodes if n.op == "output"}
    for a, b in summary.edges:
        m = source(a) if b in out_nodes else None
        if m is not None and m.op != "input":
            outputs[m.index] = m.out_bytes
    for n in nodes:
        if n.op == "input" or is_view(n):
            continue
        for i, b in zip(n.inputs, n.in_bytes):
            m = source(i)
            if m is None:
                continue
            if n.op == "output":
                continue
            if m.op == "input":
                inputs[m.index] = max(inputs.get(m.index, 0), b)
            elif n.src == "<backward>" and m.src != "<backward>":
                saved[m.index] = max(saved.get(m.index, 0), b)
    return sum(inputs.values()) + 2 * sum(b for i, b in saved.items() if i not in outputs) + sum(outputs.values())
