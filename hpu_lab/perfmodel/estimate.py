"""estimate(fn, *args): the Gaudi clock's time for what ``fn`` would launch, without running it.

``fn`` is traced in lazy mode into a private pending graph, with the event stream muted. Every
graph cut ``fn`` makes (``mark_step``, the compound-op cap) ends a recipe, as it would at run
time; each recipe goes through the compiler's passes (engines, fusion clusters, memory plan,
not the lowering) and is costed by ``cost.recipe_cost``. Nothing is compiled for the device,
nothing is launched, and the runtime is left as it was: storages ``fn`` wrote (parameters updated
by an optimizer step) get their values back, and tensors created inside ``fn`` hold no values
(reading one raises an error saying so). A host sync inside ``fn`` (``.item()``, printing a
tensor) cannot be estimated without running: it raises ``EstimateError``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from .. import events as ev
from .. import lazy
from ..compiler import build, passes
from ..graph import PendingGraph
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

    @property
    def device_ns(self) -> int:
        return self.total.ns


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


def trace(fn, args, kwargs, card: Card, fusion: bool = True) -> Estimate:
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
        saved = {}

        def on_write(t):
            st = t._st
            if id(st) not in saved:
                saved[id(st)] = (st, st.value)

        def on_flush(trigger, src, needed=None):
            if needed is not None:
                raise EstimateError(f"perfmodel.estimate(): the traced code needs a value on the host "
                                    f"({trigger} at {src or '?'}); a host sync cannot be estimated "
                                    "without running")
            cuts.append(len(S.pg.nodes))
            return None

        with lazy.tracing(on_write, on_flush) as pg:
            try:
                with ev.recorder.muted(), memory.unbacked():     # nothing traced is allocated
                    result = fn(*args, **kwargs)    # held while costing: what fn returns is an output
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
                ev.recorder.step = old_step
                for st, value in saved.values():
                    st.value = value
                for w in pg.written:
                    st = w()
                    if st is not None and type(st.value) is Out and st.value.node.graph is pg:
                        st.value = _poisoned(st.value.meta)
    return Estimate(card, tuple(recipes), total)
