"""Writes into part of a buffer, in place when nothing else can see the buffer's old value.

A write into a view of a storage (``flat[a:b].copy_(x)``, an optimizer step on a parameter that is a
view of ZeRO's flat buffer) is a ``scatter`` node: the storage's new value is the old one with the
view replaced. Run functionally, it copies the whole buffer: on a Gaudi the write costs the slice,
here it cost the buffer (3 writes of 100 floats into a 381 MB buffer: +1.5 GB of host memory at the
peak). So, when the graph is flushed, each ``scatter`` whose old value no one else can read becomes a
``scatter_into`` (compiler/graph.py), which writes into the old buffer itself and returns it.

The old value is free when (``donations``):

- no node after the write reads it, or any view of it, and no graph output is it or a view of it;
- it is an output of this graph made of fresh memory (an op whose schema returns no alias, another
  scatter), or a device buffer (``Inp``) that nothing outside this graph refers to: its Python
  reference count is exactly what the graph's own references make (a storage still holding it, a
  view's read cache, a graph not yet run, an HPU Graph capture: each is one more, and the scatter
  stays a copy);
- no HPU Graph is being captured (a replay binds the same buffers again).

At run time ``scatter_into`` still copies when the buffer's memory is shared with another tensor
(a zero-copy view made on the host), so a wrong decision here costs a copy, never a value.
"""
from __future__ import annotations

import sys

import torch

from ..compiler.graph import CastTo, InplaceOnClone, InplaceOnStorages, as_dtype, from_dtype, restride, scatter, scatter_into, view
from ..tensor import Inp, Out

_INTO = "scatter_into"
_ALIASING_HELPERS = (view, as_dtype, from_dtype, scatter_into)
_FRESH_HELPERS = (scatter, scatter_into, restride)


def _returns_alias(op) -> bool:
    s = getattr(op, "_schema", None)
    if s is None:
        return True
    return any(r.alias_info is not None for r in s.returns)


def _aliasing(op) -> bool:
    """May an output of ``op`` share memory with an input?"""
    if op in _ALIASING_HELPERS or type(op) is CastTo:
        return True
    if op in _FRESH_HELPERS or type(op) in (InplaceOnClone, InplaceOnStorages):
        return False
    return _returns_alias(op)


def _fresh(op) -> bool:
    """Are ``op``'s outputs memory of their own (a ``scatter_into``'s: the buffer it was given, which
    no one else reads)?"""
    if op in _FRESH_HELPERS or type(op) in (InplaceOnClone, InplaceOnStorages):
        return True
    return isinstance(op, torch._ops.OpOverload) and not _returns_alias(op)


def donations(nodes, outs, externals, pg, capturing: bool) -> int:
    """Turn each ``scatter`` of ``nodes`` (the graph about to launch, in order) whose old value is
    free into a ``scatter_into``; returns how many."""
    if capturing:
        return 0
    readers: dict = {}
    for i, n in enumerate(nodes):
        for r in n.refs:
            readers.setdefault(id(r), []).append(i)
    out_ids = {id(o) for o in outs}
    done = 0
    for i, n in enumerate(nodes):
        if n.op is not scatter:
            continue
        base = n.args[0]
        if not _free_after(base, i, nodes, readers, out_ids):
            continue
        if type(base) is Out:
            m = base.node
            if m.graph is not pg or m.launched is not None or not _fresh(m.op):
                continue
        elif type(base) is not Inp or base.regen is not None or not _only_here(base, nodes, externals, pg):
            continue
        n.op = scatter_into
        n.sig = (_INTO,) + n.sig[1:]
        n.h = hash(n.sig)
        done += 1
    return done


def _free_after(base, i, nodes, readers, out_ids) -> bool:
    """No node after position ``i`` reads ``base`` or a view of it, node ``i`` reads it only as the
    written base (not as the value written too), and no graph output is it or a view of it."""
    stack, seen = [base], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in out_ids:
            return False
        for j in readers.get(id(v), ()):
            if j > i:
                return False
            m = nodes[j]
            if j == i:
                if v is not base or any(r is base for r in m.refs[1:]):
                    return False
                continue
            if _aliasing(m.op):
                stack.extend(m.outs)
    return True


def _only_here(inp, nodes, externals, pg) -> bool:
    """Is this graph (its nodes, its list of inputs, the pending graph's slot table) all that holds
    ``inp``? Counted, not guessed: each reference anywhere else adds one to its reference count."""
    expected = 0
    for n in nodes:
        expected += _count(n.args, inp) + _count(tuple(n.kwargs.values()), inp) + _count(n.refs, inp)
    expected += _count(externals, inp) + _count(pg.inps, inp)
    # here: the argument ``inp``, the caller's name ``base``, getrefcount's own argument
    return sys.getrefcount(inp) - 3 == expected


def _count(seq, x) -> int:
    n = 0
    for a in seq:
        if a is x:
            n += 1
        elif type(a) is list or type(a) is tuple:
            n += _count(a, x)
    return n
