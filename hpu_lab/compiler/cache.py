"""The in-memory recipe cache, and the last recipe compiled at each call site (for diffs)."""
from __future__ import annotations

import threading

_lock = threading.Lock()
_recipes: dict = {}        # GraphKey -> Recipe
_by_site: dict = {}        # call site -> most recent Recipe compiled there


def lookup(key):
    return _recipes.get(key)


def store(key, recipe, site) -> None:
    with _lock:
        _recipes[key] = recipe
        _by_site[site] = recipe


def last_at(site):
    return _by_site.get(site)


def recipes() -> list:
    return list(_recipes.values())


def clear() -> None:
    """Forget every compiled recipe (the next graphs compile again)."""
    with _lock:
        _recipes.clear()
        _by_site.clear()
