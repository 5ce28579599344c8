"""Graph passes over the fx graph: permutation placement (layouts.py), engines, fusion clusters,
tensor classes, memory plan."""
from __future__ import annotations

import operator

import torch

from .. import events as ev
from .. import ops
from .graph import as_dtype, from_dtype, scatter_into, view as _view_helper

# helpers whose output is (part of) an input's memory: no buffer of their own
_ALIAS_HELPERS = (_view_helper, as_dtype, from_dtype, scatter_into)
from ..tensor import _itemsize
from . import layouts


def _nbytes(meta) -> int:
    if not meta:
        return 0
    size, stride, dtype = meta
    n = 1
    for s in size:
        n *= s
    return n * _itemsize(dtype)


def _is_compute(n) -> bool:
    return n.op == "call_function" and n.target is not operator.getitem


def assign_engines(g) -> None:
    for n in g.nodes:
        if _is_compute(n):
            n.meta["engine"] = ops.engine_of(n.meta.get("op_name", ""))


def fuse_elementwise(g) -> int:
    """Group chains of elementwise ops into clusters (what the graph compiler would fuse)."""
    parent = {}

    def find(x):
        while parent[x] is not x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pw = [n for n in g.nodes if _is_compute(n) and ops.is_pointwise(n.target)]
    for n in pw:
        parent[n] = n
    for n in pw:
        for a in n.all_input_nodes:
            if a in parent and len(a.users) == 1:
                parent[find(a)] = find(n)
    groups: dict = {}
    for n in pw:
        groups.setdefault(find(n), []).append(n)
    cid = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        for n in members:
            n.meta["cluster"] = cid
        cid += 1
    return cid


def classify_tensors(g) -> None:
    out_node = next(n for n in reversed(g.nodes) if n.op == "output")
    outs = set(a for a in out_node.args[0] if hasattr(a, "op"))
    for n in g.nodes:
        if n.op == "placeholder" or n in outs:
            n.meta["tensor_class"] = "persistent"
        elif n.op == "call_function" and n.target is operator.getitem and n.meta.get("hpu_meta") \
                and not n.args[0].meta.get("hpu_meta"):
            # an output of a multi-output op (sort, native_layer_norm, fused attention): the op
            # node itself has no single buffer, so each output is counted where it is taken
            n.meta["tensor_class"] = "non-persistent"
        elif n.op == "call_function" and (n.target in _ALIAS_HELPERS or n.target is operator.getitem):
            n.meta["tensor_class"] = "alias"
        elif n.op == "call_function":
            n.meta["tensor_class"] = "non-persistent"


def memory_plan(g) -> int:
    """Peak bytes of non-persistent intermediates alive at once, walking the schedule."""
    order = [n for n in g.nodes if n.op == "call_function"]
    pos = {n: i for i, n in enumerate(order)}
    last_use = {}
    for n in order:
        for a in n.all_input_nodes:
            if a in pos:
                last_use[a] = pos[n]
    live = peak = 0
    frees: dict = {}
    for i, n in enumerate(order):
        b = _nbytes(n.meta.get("hpu_meta")) if n.meta.get("tensor_class") == "non-persistent" else 0
        n.meta["bytes"] = b
        live += b
        peak = max(peak, live)
        end = last_use.get(n, i)
        frees[end] = frees.get(end, 0) + b
        live -= frees.pop(i, 0)
    return peak


def summarize(g) -> ev.GraphSummary:
    index = {}
    nodes = []
    edges = []
    for n in g.nodes:
        if n.op == "call_function" and n.target is operator.getitem:
            index[n] = index[n.args[0]]       # draw a getitem as its producer
            continue
        i = len(nodes)
        index[n] = i
        meta = n.meta.get("hpu_meta")
        if n.op == "placeholder":
            op = "input"
        elif n.op == "output":
            op = "output"
        else:
            op = n.meta.get("op_name", str(n.target))
        ins = [a for a in n.all_input_nodes] if n.op == "call_function" else []
        dtype = str(meta[2]).replace("torch.", "") if meta else ""
        if meta:
            out_bytes = _nbytes(meta)
        else:                                # a multi-output op: the outputs are its getitems
            outs = [u.meta.get("hpu_meta") for u in n.users
                    if u.op == "call_function" and u.target is operator.getitem and u.meta.get("hpu_meta")]
            out_bytes = sum(_nbytes(m) for m in outs)
            if outs:
                dtype = str(outs[0][2]).replace("torch.", "")
        nodes.append(ev.NodeInfo(
            inputs=tuple(index[a] for a in ins),
            in_shapes=tuple(tuple(a.meta["hpu_meta"][0]) if a.meta.get("hpu_meta") else () for a in ins),
            in_bytes=tuple(_nbytes(a.meta.get("hpu_meta")) for a in ins),
            out_bytes=out_bytes,
            index=i, op=op, shape=tuple(meta[0]) if meta else (),
            dtype=dtype,
            engine=n.meta.get("engine", "TPC") if n.op == "call_function" else "",
            cluster=n.meta.get("cluster", -1),
            is_cast=op in ("aten::_to_copy", "aten::to", "aten::_autocast_to_reduced_precision",
                           "aten::_autocast_to_full_precision") or op.endswith("_to_copy"),
            src=n.meta.get("src", ""), tensor_class=n.meta.get("tensor_class", "")))
        for a in n.all_input_nodes:
            e = (index[a], i)
            if e[0] != i:
                edges.append(e)
    return ev.GraphSummary(tuple(nodes), tuple(dict.fromkeys(edges)))


def run_all(g) -> dict:
    layouts.place_permutes(g)        # first: the permutes it places are nodes the others see
    assign_engines(g)
    clusters = fuse_elementwise(g)
    classify_tensors(g)
    layouts.mark_views(g)
    peak = memory_plan(g)
    node_count = sum(1 for n in g.nodes if _is_compute(n))
    return {"clusters": clusters, "peak_bytes": peak, "node_count": node_count, "summary": summarize(g)}
