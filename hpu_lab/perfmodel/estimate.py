"""estimate(fn, *args): the Gaudi clock's host, device and wall time of a step, without running it.

``fn`` is traced in lazy mode into a private pending graph; its events go to a private recorder
that counts the ops traced (the event stream sees nothing). Every graph cut ``fn`` makes
(``mark_step``, the compound-op cap) ends a recipe, as it would at run time; each recipe goes
through the compiler's passes (engines, fusion clusters, memory plan, not the lowering) and is
costed by ``cost.recipe_cost``. The host lane is the host model's (host.py): the ops traced before
each cut, its mark_step, graph build, cache lookup (a hit: a steady step) and launch. The step is
then laid out on the Gaudi clock as a loop would run it (``timeline.retime`` of the same events,
repeated), so ``wall_ns`` is the steady-state step time, with the host's work of one step overlapping
the device's of the step before unless ``fn`` waits for the device (``sync_point``).

Nothing is compiled for the device, nothing is launched, and the runtime is left as it was:
storages ``fn`` wrote (parameters updated by an optimizer step) get their values back, and tensors
created inside ``fn`` hold no values (reading one raises an error saying so). A host read inside
``fn`` (``.item()``, printing a tensor) cannot be estimated without running: it raises
``EstimateError``; ``sync_point(reason)`` marks where a step waits for the device without needing
a value (outside ``estimate`` it is ``torch.hpu.synchronize()``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional

from .. import events as ev
from .. import lazy
from ..compiler import build, passes
from ..compiler.graph import PendingGraph
from ..runtime import memory
from ..runtime.executor import DeviceError, Launch
from ..tensor import Inp, Out
from . import cost
from .cards import Card


class EstimateError(RuntimeError):
    """``fn`` needs something estimate() cannot give without running it."""


@dataclass(frozen=True)
class Estimate:
    card: Card
    recipes: tuple          # one (GraphSummary, RecipeCost) per graph the run would launch
    total: cost.RecipeCost
    host_ns: int = 0        # the host's modeled work of one step (ops traced, graphs, launches)
    wall_ns: int = 0        # one step of a loop in steady state on the Gaudi clock
    segments: tuple = ()    # per recipe: (ops traced before its cut, whether the host waits after it)

    @property
    def device_ns(self) -> int:
        return self.total.ns

    @property
    def device_idle_fraction(self) -> float:
        return max(0.0, 1.0 - self.device_ns / self.wall_ns) if self.wall_ns else 1.0

    @property
    def verdict(self) -> str:
        from .timeline import bound
        return bound(self.host_ns, self.device_ns)

    @property
    def fp32_assumed(self) -> bool:
        """Whether the FP32 matrix rate (assumed on Gaudi and Gaudi 2) decides a tenth or more of the step's device time."""
        return self.total.fp32_assumed

    def __repr__(self) -> str:
        note = ", FP32 matrix rate assumed" if self.fp32_assumed else ""
        return (f"Estimate({self.card.device_name}: host {self.host_ns / 1e6:.3g} ms, device "
                f"{self.device_ns / 1e6:.3g} ms, wall {self.wall_ns / 1e6:.3g} ms a step, {self.verdict}{note})")


_sync_points = None     # the list a trace appends its sync points to (None: not tracing)


def sync_point(reason: str = "sync_point") -> None:
    """Where a step waits for the device without needing a value (the HF Trainer's
    ``torch.isnan(loss) or torch.isinf(loss)`` check, a logging read): inside ``estimate()`` the
    step's graph is cut there and the host waits for the device; outside, ``torch.hpu.synchronize()``."""
    if _sync_points is None:
        import torch
        torch.hpu.synchronize()
        return
    from .. import lazy
    _sync_points.append((len(lazy.S.pg.nodes), ev.recorder.n))     # (nodes, ops traced) so far


class _OpCounter:
    """The recorder a trace's events go to: it counts the ops traced and shows nothing to anyone."""

    def __init__(self):
        self.ops_wanted, self.user_wanted, self.step, self.n = True, False, 0, 0
        self.copies: list = []          # (ops traced before it, the HostToDevice) of the host's copies

    def op_accumulated(self, op, src) -> None:
        self.n += 1

    def emit(self, event) -> None:
        if type(event) is ev.HostToDevice and event.lane == "host":
            self.copies.append((self.n, event))

    def emit_host(self, cls, fields) -> None:
        if cls is ev.HostToDevice:
            self.emit(cls(*fields))

    emit_device = emit_host

    def wants(self, kind) -> bool:
        return kind is ev.HostToDevice

    def flush(self) -> None:
        pass

    def subscribe(self, *a, **kw):
        raise EstimateError("perfmodel.estimate(): nothing can subscribe to the event stream while it traces")

    def muted(self):
        import contextlib
        return contextlib.nullcontext()


def _segments(nodes, cuts):
    bounds = sorted({0, len(nodes), *[c for c in cuts if 0 < c < len(nodes)]})
    return [nodes[a:b] for a, b in zip(bounds, bounds[1:])]


def _graphs(pg: PendingGraph, cuts: List[int]):
    """(nodes, externals, outs) of each recipe the traced work would make."""
    segs = _segments(pg.nodes, cuts)
    seg_of = {}
    for k, seg in enumerate(segs):
        for n in seg:
            seg_of[id(n)] = k
    needed_later = set()                      # id(Out) read by a later recipe
    for k, seg in enumerate(segs):
        for n in seg:
            for r in n.refs:
                if type(r) is Out and seg_of.get(id(r.node), k) < k:
                    needed_later.add(id(r))
    final = set()                             # id(Out) held by a live storage at the end
    for w in pg.written:
        st = w()
        if st is not None and type(st.value) is Out:
            final.add(id(st.value))
    out = []
    for k, seg in enumerate(segs):
        externals, seen = [], set()
        for n in seg:
            for r in n.refs:
                if id(r) in seen:
                    continue
                if type(r) is Inp or (type(r) is Out and seg_of.get(id(r.node), k) != k):
                    seen.add(id(r))
                    externals.append(r)
        outs = [o for n in seg for o in n.outs if id(o) in needed_later or id(o) in final]
        out.append((seg, externals, outs))
    return out


def _poisoned(meta) -> Inp:
    launch = Launch(None, None, 0)
    launch.error = DeviceError("this tensor was made inside hpu_lab.perfmodel.estimate(), which traces "
                               "without running: it holds no values")
    launch.done.set()
    return Inp(None, meta, launch=launch, idx=0)


def trace(fn, args, kwargs, card: Card, fusion: bool = True, host=None) -> Estimate:
    global _sync_points
    S = lazy.S
    with S.lock:
        if S.capture is not None:
            raise EstimateError("perfmodel.estimate() cannot run during an HPU Graph capture")
        if S.pg.nodes:
            n = len(S.pg.nodes)
            raise EstimateError(f"perfmodel.estimate(): {n} op{'s are' if n > 1 else ' is'} pending; call "
                                "htcore.mark_step() first (estimate launches nothing, not even them)")
        old_step = ev.recorder.step
        cuts: List[int] = []
        ops_at: List[int] = []          # ops traced up to each cut
        syncs: List[int] = []
        saved = {}
        counter = _OpCounter()

        def on_write(t):
            st = t._st
            if id(st) not in saved:
                saved[id(st)] = (st, st.value)

        def on_flush(trigger, src, needed=None):
            if needed is not None:
                raise EstimateError(f"perfmodel.estimate(): the traced code needs a value on the host "
                                    f"({trigger} at {src or '?'}); a host sync cannot be estimated "
                                    "without running (perfmodel.sync_point marks a wait that needs no value)")
            if not cuts or cuts[-1] != len(S.pg.nodes):
                cuts.append(len(S.pg.nodes))
                ops_at.append(counter.n)
            return None

        with lazy.tracing(on_write, on_flush) as pg:
            _sync_points = syncs
            try:
                with ev.use(counter), memory.unbacked():     # nothing traced is allocated or shown
                    result = fn(*args, **kwargs)    # held while costing: what fn returns is an output
                for at, n in syncs:                  # a sync point cuts the graph there too
                    if at not in cuts:
                        k = sum(1 for c in cuts if c < at)
                        cuts.insert(k, at)
                        ops_at.insert(k, n)
                recipes = []
                total = cost.ZERO
                for nodes, externals, outs in _graphs(pg, cuts):
                    g = build.build_fx(nodes, externals, outs)
                    g.eliminate_dead_code()
                    summary = passes.run_all(g)["summary"]
                    c = cost.recipe_cost(summary, card, fusion=fusion)
                    recipes.append((summary, c))
                    total = total + c
                del result
            finally:
                _sync_points = None
                ev.set_step(old_step)
                for st, value in saved.values():
                    st.value = value
                for w in pg.written:
                    st = w()
                    if st is not None and type(st.value) is Out and st.value.node.graph is pg:
                        st.value = _poisoned(st.value.meta)
    segments = _segments_of(len(pg.nodes), cuts, ops_at, counter.n, {at for at, _ in syncs})
    host_ns, wall_ns = _on_the_clock(recipes, segments, counter.copies, card, host)
    return Estimate(card, tuple(recipes), total, host_ns, wall_ns, tuple(segments))


def _segments_of(n_nodes, cuts, ops_at, n_ops, syncs):
    """(ops traced up to the recipe's cut, the host waits for the device there) for each recipe, in
    order (the segments of ``_graphs``); ops traced after the last cut go with the last recipe."""
    marks: dict = {}
    for c, o in zip(cuts, ops_at):
        marks.setdefault(c, o)
    bounds = sorted({0, n_nodes, *[c for c in cuts if 0 < c < n_nodes]})
    out, prev = [], 0
    for end in bounds[1:]:
        o = marks.get(end, n_ops)
        out.append((o - prev, end in syncs))
        prev = o
    if out:
        out[-1] = (out[-1][0] + n_ops - prev, out[-1][1])
    return out


def _on_the_clock(recipes, segments, copies, card: Card, host=None, reps: int = 4):
    """(host ns, wall ns) of one step in a loop's steady state: the step's events as a run would
    emit them (copies to the device, ops, mark_step, graph built, cache hit, launch, the sync
    points), ``reps`` times, re-timed by the Gaudi clock; one step is what the last repetition adds."""
    from .host import HOST
    from .timeline import retime
    host = host or HOST
    t = [0]

    def at():
        t[0] += 1
        return t[0]
    es = []
    launch_id = 0
    for rep in range(reps):
        traced, pending = 0, list(copies)
        for (summary, _c), (ops, waits) in zip(recipes, segments):
            for _ in range(ops):
                while pending and pending[0][0] <= traced:
                    x = at()
                    es.append(dataclasses.replace(pending.pop(0)[1], t_start=x, t_end=at(), step=rep))
                x = at()
                es.append(ev.OpAccumulated(x, x, "host", rep))
                traced += 1
            t0 = at()
            n = sum(1 for x in summary.nodes if x.op not in ("input", "output"))
            es.append(ev.GraphBuilt(t0, at(), "host", rep, node_count=n, trigger="mark_step"))
            es.append(ev.CacheLookup(at(), at(), "host", rep, hit=True))
            launch_id += 1
            x = at()
            es.append(ev.Launch(x, x, "host", rep, launch_id=launch_id, key=f"r{id(summary)}", graph=summary))
            es.append(ev.MarkStep(t0, at(), "host", rep))
            if waits:
                es.append(ev.HostSync(at(), at(), "host", rep, reason="sync_point", launch_id=launch_id))
    n = len(es) // reps
    whole = retime(es, card, host=host)
    less = retime(es[:n * (reps - 1)], card, host=host)
    return whole.host_ns - less.host_ns, whole.wall_ns - less.wall_ns
