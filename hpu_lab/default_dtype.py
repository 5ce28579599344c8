"""``torch.set_default_dtype`` leaves what was already traced with the dtypes it was traced with.

torch's default dtype is global, and kernels read it when they run: a factory's dtype, an integer
tensor's true division, an integer tensor times a Python float. A Gaudi's lazy graph holds the
dtypes resolved when each op was traced, so changing the default later changes nothing already
traced. Here the device runs a graph's kernels later, on its own thread, under whatever the default
is then: a graph traced under float32 and run after ``torch.set_default_dtype(torch.float64)``
returned float64 and failed at the next sync, or did not, depending on how far behind the device
was.

So before the default changes, the ops traced under the old one are launched (a graph whose
GraphBuilt says ``trigger="torch.set_default_dtype"``: the one graph boundary the emulator adds to
the user's) and the device runs everything launched. An HPU Graph replayed after the default
changed is the limit left: it fails at the next sync, naming both dtypes (runtime/executor.py).
"""
from __future__ import annotations

import torch

_orig_set_default_dtype = None


def _settle_before(d) -> None:
    """Launch what is pending and wait for the device, if ``d`` would change the default."""
    if not isinstance(d, torch.dtype) or not d.is_floating_point or d is torch.get_default_dtype():
        return                       # no change, or torch refuses it (its message, untouched)
    from . import lazy
    from .runtime import executor
    from ._source import user_src
    lazy.flush("torch.set_default_dtype", user_src(3))
    executor.wait_all_quietly()


def set_default_dtype(d) -> None:
    _settle_before(d)
    _orig_set_default_dtype(d)


def install() -> None:
    """Idempotent: wrap ``torch.set_default_dtype`` once."""
    global _orig_set_default_dtype
    if _orig_set_default_dtype is not None:
        return
    _orig_set_default_dtype = torch.set_default_dtype
    set_default_dtype.__wrapped__ = _orig_set_default_dtype
    set_default_dtype.__doc__ = _orig_set_default_dtype.__doc__
    torch.set_default_dtype = set_default_dtype
