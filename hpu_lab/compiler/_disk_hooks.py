"""The disk recipe cache's two hooks into the lazy path (PT_HPU_RECIPE_CACHE_CONFIG, seed 003).

They import ``disk_cache`` on first use, so that ``python -m hpu_lab.compiler.disk_cache`` runs it as a fresh
module; and they are not in ``hpu_lab/__init__.py``, which dynamo does not skip (it traces
``hpu_lab.lab.examples`` like user code, and would try to trace these when a graph break compiles a recipe).
"""
from __future__ import annotations


def lookup(key, nodes, externals, outs, site):
    from .disk_cache import lookup
    return lookup(key, nodes, externals, outs, site)


def store(recipe):
    from .disk_cache import store
    store(recipe)


def install() -> None:
    """Recipes shared across processes: ``compiler.find`` asks the disk after a miss in memory, and
    hands it each new recipe."""
    from . import find
    find.add_lookup(lookup)
    find.on_compile(store)
