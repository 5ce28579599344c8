"""Finding a recipe: the in-memory cache, then the registered lookups (the disk cache), else compile.

As the bridge's "Recipe cache: mem cache, then in disk cache". Other caches plug in through
``add_lookup`` and ``on_compile``, which return a handle whose ``remove()`` takes the hook out.
"""
from __future__ import annotations

from collections import OrderedDict

from torch.utils.hooks import RemovableHandle

from .. import config
from .. import events as ev
from . import build, cache
from .reasons import diff

_compile_hooks = OrderedDict()      # handle id -> fn(recipe): e.g. the disk cache storing a new recipe
_lookup_hooks = OrderedDict()       # handle id -> fn(key, nodes, externals, outs, site) -> Recipe | None


def on_compile(fn) -> RemovableHandle:
    """Call ``fn(recipe)`` after every new compile."""
    h = RemovableHandle(_compile_hooks)
    _compile_hooks[h.id] = fn
    return h


def add_lookup(fn) -> RemovableHandle:
    """Ask ``fn(key, nodes, externals, outs, site)`` for a recipe after an in-memory miss."""
    h = RemovableHandle(_lookup_hooks)
    _lookup_hooks[h.id] = fn
    return h


def get_recipe(key, nodes, externals, outs, site):
    t0 = ev.now()
    recipe = cache.lookup(key)
    hit = recipe is not None
    if hit:
        if ev.wants(ev.CacheLookup):
            ev.emit(ev.CacheLookup(t0, ev.now(), "host", ev.recorder.step, hit=True, key=key.short))
        return recipe
    recipe = _find_elsewhere(key, nodes, externals, outs, site)
    if recipe is not None:
        return recipe
    if ev.wants(ev.CacheLookup):
        ev.emit(ev.CacheLookup(t0, ev.now(), "host", ev.recorder.step, hit=False, key=key.short))
    recipe = build.compile_graph(nodes, externals, outs, key, site)
    prev = cache.nearest(site, recipe.desc)
    if prev is not None and _unrelated(prev.desc, recipe.desc):
        prev = None          # another graph cut at the same line (e.g. the optimizer's): not a recompile
    reason = diff(prev.desc if prev is not None else None, recipe.desc,
                  (getattr(prev.key, "default_dtype", None), key.default_dtype) if prev is not None else None)
    recipe.reason = reason
    cache.store(key, recipe, site)
    t1 = ev.now()
    ev.emit(ev.Compile(t1 - recipe.compile_ns, t1, "host", ev.recorder.step, key=key.short,
                       recipe_id=recipe.id, node_count=recipe.node_count, reason=reason, src=site,
                       peak_bytes=recipe.peak_bytes, clusters=recipe.clusters, graph=recipe.summary))
    for hook in tuple(_compile_hooks.values()):
        hook(recipe)
    if config.get("GRAPH_VISUALIZATION"):
        from .graph_dump import dump_graph_if_enabled
        dump_graph_if_enabled(recipe.summary, f"recipe_{recipe.id}_{key.short}")
    return recipe


def _unrelated(a, b) -> bool:
    """No op in common at the start and a different number of inputs: a different graph. Leading
    views are not compared: a graph reads an input through one whatever it computes (a flatten, a
    gradient's reshape), so two unrelated graphs of one line can both start with one."""
    (ain, anodes), (bin_, bnodes) = a, b
    aop, bop = _first_compute_op(anodes), _first_compute_op(bnodes)
    first_same = aop is not None and aop == bop
    return not first_same and len(ain) != len(bin_)


def _first_compute_op(nodes):
    return next((n[0] for n in nodes if n[0] != "view"), None)


def _find_elsewhere(key, nodes, externals, outs, site):
    for hook in tuple(_lookup_hooks.values()):
        r = hook(key, nodes, externals, outs, site)
        if r is not None:
            cache.store(key, r, site)
            return r
    return None
