"""Flush: the pending graph (or the part a value needs) compiled or found, and launched; the host
syncs that read values back; ``mark_step`` and ``synchronize``.
"""
from __future__ import annotations

import torch

from .. import events as ev
from ..compiler import find
from ..compiler.graph import PendingGraph, op_key, ref_sig
from ..compiler.recipe import graph_key, live_nodes
from ..events import user_time as _user_time
from ..runtime import executor, readback
from ..tensor import Inp, Out, Storage
from ..util._source import user_src
from . import donation, state
from .launch import launch_recipe
from .state import S, _default_dtype
from .storage import scalar_sig


def _ancestors(root_nodes):
    seen = set()
    stack = list(root_nodes)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for r in n.refs:
            if type(r) is Out and r.node.launched is None:
                stack.append(r.node)
    return seen


def flush(trigger: str, src: str, needed=None):
    """Compile (or fetch from cache) and launch the pending graph, or only the part ``needed``.

    Returns the Launch, or None if nothing was pending.
    """
    if state._trace is not None:
        return state._trace[1](trigger, src, needed)
    with S.lock:
        pg = S.pg
        if not pg.nodes:
            return None
        t0 = ev.now()
        if needed is None:
            nodes = pg.nodes
            in_subset = None
        else:
            in_subset = _ancestors([o.node for o in needed])
            nodes = [n for n in pg.nodes if id(n) in in_subset]
            if len(nodes) == len(pg.nodes):
                in_subset = None
        # outputs: every pending value still held by a live storage (+ what the rest still needs)
        outs = {}
        for w in pg.written:
            st = w()
            if st is None:
                continue
            v = st.value
            if type(v) is Out and v.node.graph is pg and v.node.launched is None and \
                    (in_subset is None or id(v.node) in in_subset):
                outs[id(v)] = v
        rest = []
        if in_subset is not None:
            for o in needed:
                outs[id(o)] = o
            rest = [n for n in pg.nodes if id(n) not in in_subset]
            for n in rest:
                for r in n.refs:
                    if type(r) is Out and id(r.node) in in_subset:
                        outs[id(r)] = r
        outs = sorted(outs.values(), key=lambda o: (o.node.index, o.idx))
        traced = len(nodes)
        nodes = live_nodes(nodes, outs, Out)      # the key and the recipe are the live graph's
        if not nodes:                   # nothing pending is held or has effects: nothing to run
            if in_subset is None:
                S.pg = PendingGraph()
                _release(pg.nodes)
                pg.nodes, pg.inps, pg.slots, pg.written = [], [], {}, []
            return None
        # external inputs in first-use order
        externals, seen = [], set()
        for n in nodes:
            for r in n.refs:
                if type(r) is Inp and id(r) not in seen:
                    seen.add(id(r))
                    externals.append(r)
        # writes into part of a buffer nothing else reads go in place (lazy/donation.py counts the
        # references to each buffer: none may be left in this frame's loop names)
        if pg.scatters:
            r = v = st = w = None
            donation.donations(nodes, outs, externals, pg, S.capture is not None)
        key = graph_key(nodes, outs, externals, pg.slots, _default_dtype())
        site = src
        if ev.wants(ev.GraphBuilt):
            # positional, in the event's field order (emit_host: built when a recording reads it)
            ev.emit_host(ev.GraphBuilt, (t0, ev.now(), "host", ev.recorder.step, pg.id, traced,
                                         len(externals), len(outs), trigger, src))
        recipe = find.get_recipe(key, nodes, externals, outs, site)
        cap = S.capture
        launch = launch_recipe(recipe, externals, S.stream, srcs=[n.src for n in nodes]) if cap is None else \
            cap.launch(recipe, externals)
        # rebind: the outputs now live in device buffers that this launch produces
        produced = {}
        for k, o in enumerate(outs):
            inp = Inp(None, o.meta, launch=launch, idx=k)
            produced[id(o)] = inp
        for w in pg.written:
            st = w()
            if st is not None and type(st.value) is Out:
                new = produced.get(id(st.value))
                if new is not None:
                    st.value = new
        if cap is not None:
            cap.on_flush(recipe, externals, produced, pg.written)   # what replay binds and rebinds
        if in_subset is None:
            S.pg = PendingGraph()
            _release(pg.nodes)
            pg.nodes, pg.inps, pg.slots, pg.written = [], [], {}, []
        else:
            _keep_rest(pg, rest, produced, in_subset)
            _release(nodes)
        return launch


def _release(launched_nodes) -> None:
    """Launched nodes are garbage, but each is in cycles (node <-> its outs, graph <-> its nodes)
    holding its inputs' buffers, and through their launches every output those launches made. Left
    to the cyclic collector, a loop's buffers piled up (64 MB copies: gigabytes) and were freed all
    at once wherever the user's thread was: tens of ms of munmap, counted as the user's host time.
    Broken here, each graph is freed by reference counting when its last tensor lets go."""
    for n in launched_nodes:
        n.outs = ()


def _keep_rest(pg, rest, produced, done_ids):
    """After a partial flush: the rest of the graph reads the launched values as inputs."""
    for n in pg.nodes:
        if id(n) in done_ids:
            n.launched = True
    for n in rest:
        if any(type(r) is Out and id(r.node) in done_ids for r in n.refs):
            n.args = tuple(_launched_as_input(a, produced, done_ids) for a in n.args)
            n.kwargs = {k: _launched_as_input(v, produced, done_ids) for k, v in n.kwargs.items()}
            n.refs = tuple(_launched_as_input(r, produced, done_ids) for r in n.refs)
            n.sig = (op_key(n.op), tuple(_resigned(pg, a) for a in n.args),
                     tuple((k, _resigned(pg, v)) for k, v in n.kwargs.items()))
            n.h = hash(n.sig)
    pg.nodes = rest
    pg.written = [w for w in pg.written if w() is not None and type(w().value) is Out]


# module functions, not closures: a recursive closure is a cycle (function -> cell -> function) that
# kept the pending graph, and the buffers it reads, alive until a cyclic collection (see _release)
def _launched_as_input(a, produced, done_ids):
    """``a`` with each Out of a launched node replaced by the device buffer the launch produces."""
    t = type(a)
    if t is Out and id(a.node) in done_ids:
        return produced[id(a)]
    if t is list:
        return [_launched_as_input(x, produced, done_ids) for x in a]
    if t is tuple:
        return tuple(_launched_as_input(x, produced, done_ids) for x in a)
    return a


def _resigned(pg, a):
    """The signature of argument ``a``, as ``_walk`` signs it."""
    t = type(a)
    if t is Out or t is Inp:
        return ref_sig(pg, a)
    if t is list or t is tuple:
        return tuple(_resigned(pg, x) for x in a)
    if t is int or t is float or t is bool or t is complex:
        return scalar_sig(a)
    return a


# ---------------------------------------------------------------- host syncs

def materialize(t, reason: str, src: str):
    """Make t's storage value a device buffer (flushing what it needs); return the Inp."""
    return _materialize(t._st, reason, src)


def _materialize(st, reason: str, src: str):
    v = st.value
    if type(v) is Out:
        flush(reason, src, needed=[v])
        v = st.value
    return v


def to_cpu(t, reason: str, whole_storage: bool = False):
    """A host copy of t's values (a host sync); with ``whole_storage``, of its whole storage, laid
    out as the storage (host ops give the tensors that share it views of that one copy)."""
    if _user_time.open_blocks and not _user_time.emulating:     # inside your own timed code
        return _user_time.as_emulator(to_cpu, t, reason, whole_storage)
    base, t0, src = _synced(t, reason)
    st = t._st
    if whole_storage:
        return readback.copied(t0, torch.empty_strided(st.size, st.stride, dtype=st.dtype).copy_(base), src)
    return readback.copied(t0, base.as_strided(t._size, t._stride, t._offset).clone(), src)


def read_item(t, reason: str):
    """The Python number held by one-element tensor ``t`` (``.item()``, ``float(t)``, ``bool(t)``):
    to_cpu's host sync and DeviceToHost of its one element, read straight from the device buffer
    (no host tensor made for a 4-byte copy: the Gaudi clock times the copy by its size anyway)."""
    if _user_time.open_blocks and not _user_time.emulating:     # inside your own timed code
        return _user_time.as_emulator(read_item, t, reason)
    base, t0, src = _synced(t, reason)
    if t._offset == 0 and base.dim() == 0:
        v = base.item()                      # a 0-d storage (a loss): the buffer is the value
    else:
        v = base.as_strided((), (), t._offset).item()
    if ev.wants(ev.DeviceToHost):
        readback.report(t0, t.element_size(), src)
    return v


def _synced(t, reason: str):
    """(t's device buffer laid out as its storage, the start of the copy out, the user's line),
    after the host sync that makes its values available (flushing what they need; a HostSync event
    even when they already were). The copy out (a DeviceToHost from that start) begins as soon as
    the sync returns: laying the buffer out as its storage is the emulator's memcpy, which the Gaudi
    clock replaces by the modeled transfer, not the user's host work."""
    reason = S.sync_reason or reason
    S.sync_reason = None
    st = t._st
    seen_as = None
    if type(st) is not Storage:     # a view of another dtype (dispatch/dtype_views.py): its base's buffer
        seen_as, st = st, st.base
    v = st.value
    # the user's line names the events and the recipe's call site: found only when one is made
    src = user_src(4) if (type(v) is Out or S.capture is not None or ev.wants(ev.HostSync)
                          or ev.wants(ev.DeviceToHost)) else ""
    if S.capture is not None:
        S.capture.refuse(reason, src)       # "<op> is not supported during HPU Graph capturing"
    if type(v) is Out:
        v = _materialize(st, reason, src)
    base = v.tensor
    if base is None:
        base = v.get(reason, src)
    elif ev.wants(ev.HostSync):
        tt = ev.now()
        ev.emit(ev.HostSync(tt, tt, "host", ev.recorder.step, reason=reason, src=src))
    t0 = ev.now()
    base = build_layout(base, st)
    return (base if seen_as is None else seen_as.host_view(base)), t0, src


def build_layout(base, st):
    if tuple(base.stride()) != st.stride or base.storage_offset() != 0:
        out = torch.empty_strided(st.size, st.stride, dtype=st.dtype)
        out.copy_(base)
        return out
    return base


# ---------------------------------------------------------------- mark_step and synchronize

def mark_step(device_str: str = "", sync: bool = False):
    src = user_src(2)
    t0 = ev.now()
    n = len(S.pg)
    launch = flush("mark_step", src)
    ev.next_step()
    ev.emit(ev.MarkStep(t0, ev.now(), "host", ev.recorder.step - 1, src=src, pending_nodes=n))
    closures, S.step_closures = S.step_closures, []
    if sync and launch is not None:
        launch.wait("mark_step(sync=True)", src)
    for fn, a in closures:
        fn(*a)
    return launch


def synchronize(reason: str = "synchronize") -> None:
    """Wait for all work on every stream (pending lazy ops are not launched by this)."""
    executor.synchronize_all(reason, user_src(3))


def _set_reason(reason: str) -> None:
    S.sync_reason = reason


def _install():
    from .. import tensor
    tensor.set_host_reads(to_cpu, read_item, _set_reason)


_install()
state.set_eager_switch(flush)
