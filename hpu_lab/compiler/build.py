"""Compile: pending nodes -> torch.fx graph -> passes -> Recipe.

Passes (the bridge's, seed 004 "Lowering Module"): dead-code elimination; engine assignment
(MME for matmul/conv-like ops, TPC for the rest); fusion clusters of elementwise chains; tensor
classes (persistent inputs/outputs, non-persistent intermediates, aliases); and a memory plan
giving the recipe's transient peak, which the memory manager checks against the device Limit.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .. import events as ev
from .. import ops
from .graph import HELPER_NAMES, target_name
from ..tensor import Inp, Out, _itemsize
from . import lowering, passes
from .recipe import Recipe


def _shape_str(meta):
    return tuple(meta[0]) if meta else ()


def build_fx(nodes, externals, outs):
    """The fx graph of ``nodes`` reading ``externals`` (placeholders) and returning ``outs``."""
    g = fx.Graph()
    env = {}
    for k, inp in enumerate(externals):
        p = g.placeholder(f"in{k}")
        p.meta["hpu_meta"] = inp.meta
        p.meta["op_name"] = "input"
        env[id(inp)] = p

    def arg(a):
        t = type(a)
        if t is Out or t is Inp:
            return env[id(a)]
        if t is list:
            return [arg(x) for x in a]
        if t is tuple:
            return tuple(arg(x) for x in a)
        return a

    for k, n in enumerate(nodes):
        f = g.call_function(n.op, tuple(arg(a) for a in n.args), {k: arg(v) for k, v in n.kwargs.items()})
        name = target_name(n.op)
        f.meta["op_name"] = name
        f.meta["src"] = n.src
        f.meta["node_index"] = k       # position in the pending graph: a launch's own source lines
        f.meta["helper"] = n.op in HELPER_NAMES
        if n.spec is None:
            f.meta["hpu_meta"] = n.outs[0].meta
            env[id(n.outs[0])] = f
        else:
            f.meta["hpu_meta"] = None
            for out, path in zip(n.outs, n.spec):
                cur = f
                for p in path:
                    cur = g.call_function(operator.getitem, (cur, p))
                    cur.meta["op_name"] = "getitem"
                    cur.meta["helper"] = True
                cur.meta["hpu_meta"] = out.meta
                cur.meta["src"] = n.src
                cur.meta["node_index"] = k
                env[id(out)] = cur
    g.output(tuple(env[id(o)] for o in outs))
    return g


def describe(nodes, externals):
    """What the recompile diff compares: input layouts and each node's op, constants and line."""
    node_desc = []
    for n in nodes:
        consts = tuple(_consts(n.sig[1])) + tuple(_consts(n.sig[2]))
        node_desc.append((target_name(n.op), consts, n.src))
    return ([i.meta for i in externals], node_desc)


def _consts(sig):
    for s in sig:
        if type(s) is tuple and s and s[0] in ("o", "i") and len(s) >= 3 and type(s[1]) is int:
            continue
        if type(s) is tuple and s and s[0] in (int, float, bool, complex):
            yield s                     # a number's signature (lazy.scalar_sig): one constant
        elif type(s) is tuple:
            yield from _consts(s)
        else:
            yield s


def compile_graph(nodes, externals, outs, key, src):
    """Compile the pending nodes into a Recipe (timed: this is the compile the metrics count)."""
    t0 = ev.now()
    g = build_fx(nodes, externals, outs)
    g.eliminate_dead_code()
    info = passes.run_all(g)
    gm = fx.GraphModule(torch.nn.Module(), g)
    fn, backend = lowering.lower(gm)
    t1 = ev.now()
    r = Recipe(key, gm, info["node_count"], info["clusters"], info["peak_bytes"], info["summary"],
               describe(nodes, externals), src, t1 - t0)
    r.fn, r.backend = fn, backend
    return r
