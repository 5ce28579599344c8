"""Permutation placement on the Gaudi clock: what ``compiler/layouts.py``'s placement changes in the
recipes a function would launch, estimated (nothing runs).

    from hpu_lab.perfmodel import placement
    r = placement.compare(model, x)   # {"placed": ..., "per convolution": ...}
    r["placed"]["permutes"], r["placed"]["device us"], r["per convolution"]["graphs"][0]
"""
from __future__ import annotations

from typing import Dict

from ..compiler import layouts
from . import estimate


def compare(fn, *args, device=None, **kwargs) -> Dict[str, dict]:
    """What placement changes in the recipes ``fn(*args, **kwargs)`` would launch, on the Gaudi
    clock (perfmodel.estimate: nothing runs). {"placed": ..., "per convolution": ...}, each with
    the permutes in the recipes, how many of them are transposes (the others are views), the
    recipes' modeled device time (us) and their graphs (GraphSummary, for widgets.draw_graph)."""
    out = {}
    for name, on in (("placed", True), ("per convolution", False)):
        with layouts.placement(on):
            r = estimate(fn, *args, device=device, **kwargs)
        perm = [n for g, _ in r.recipes for n in g.nodes if n.op == "aten::permute"]
        out[name] = {"permutes": len(perm), "transposes": sum(1 for n in perm if n.tensor_class != "alias"),
                     "device us": round(r.device_ns / 1e3, 3), "graphs": [g for g, _ in r.recipes]}
    return out
