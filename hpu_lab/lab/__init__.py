"""Lab tools for the notebooks: timing steps, curves, and exercises a learner can check.

    from hpu_lab import lab
    t = lab.step_times(step, steps=8, warmup=3, card="gaudi2")   # per-step host/device/wall, verdict
    lab.compare({"lazy": t, "replay": t2})                        # one table, speed-ups
    c = lab.width_curve([256, 1024, 4096], batch=64)              # recorded runs, every card
    lab.check("03.2", my_run, answer=...)                         # right / wrong / not yet, and why

Nothing here is imported by ``import hpu_lab``; this package imports no plotting or widget
library (widgets/curves.py draws the curves). docs/lab.md is the reference.
"""
from __future__ import annotations

import importlib

_WHERE = {
    "step_times": "timing", "step_times_of": "timing", "compare": "timing", "StepTimes": "timing",
    "Step": "timing", "Comparison": "timing", "MODELED": "timing", "MEASURED": "timing",
    "sweep": "curves", "width_curve": "curves", "batch_curve": "curves", "Curve": "curves",
    "Point": "curves",
    "check": "checking", "judge": "checking", "record": "practice", "Result": "practice",
    "EXERCISES": "checking",
}

__all__ = sorted(_WHERE)


def __getattr__(name):           # imported on first use: a notebook pays only for what it uses
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'hpu_lab.lab' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
