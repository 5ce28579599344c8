"""The in-memory recipe cache, and the last recipe compiled at each call site (for diffs)."""
from __future__ import annotations

import threading

from ..util._source import call_site

_lock = threading.Lock()
_recipes: dict = {}        # GraphKey -> Recipe
# call site -> recipes compiled there, oldest first (at most _PER_SITE). Keyed by call_site(site):
# the code behind the name ('cell [5], line 18' names a notebook line by an execution count that
# changes when the cell is re-run, and is [1] for every cell nbval runs)
_by_site: dict = {}
_PER_SITE = 16


def lookup(key):
    return _recipes.get(key)


def store(key, recipe, site) -> None:
    with _lock:
        _recipes[key] = recipe
        lst = _by_site.setdefault(call_site(site), [])
        lst.append(recipe)
        del lst[:-_PER_SITE]


def last_at(site):
    lst = _by_site.get(call_site(site))
    return lst[-1] if lst else None


def nearest(site, desc):
    """The recipe compiled at ``site`` most like ``desc`` (longest common run of ops, then the
    closest node count, then the most recent). One line can cut several different graphs (a
    helper that calls mark_step twice an iteration): diffing against the last one compiled there
    would compare the forward graph with the optimizer's."""
    lst = _by_site.get(call_site(site))
    if not lst:
        return None
    ops = [n[0] for n in desc[1]]

    def score(item):
        i, r = item
        rops = [n[0] for n in r.desc[1]]
        common = 0
        for a, b in zip(ops, rops):
            if a != b:
                break
            common += 1
        return (common, -abs(len(rops) - len(ops)), i)

    return max(enumerate(lst), key=score)[1]


def recipes() -> list:
    return list(_recipes.values())


def clear() -> None:
    """Forget every compiled recipe (the next graphs compile again)."""
    with _lock:
        _recipes.clear()
        _by_site.clear()
