"""What the first op needs from torch, imported in the background right after ``import hpu_lab``.

The first ops on "hpu" tensors make torch import two large packages (~1.5 s together here):
``torch.distributed.tensor`` (sympy, mpmath), which torch's C++ dispatcher imports the first time an
op reaches any tensor subclass's ``__torch_dispatch__`` (its DTensor fast path asks "is this a
DTensor?" before calling the subclass), and ``torch._dynamo``, which the Python meta kernels of
elementwise ops import on their first call (``torch._prims_common.wrappers`` wraps them in
``torch._disable_dynamo``). Neither can be avoided: both are torch's own code on the first call.

Importing them inside ``import hpu_lab`` made the import ~0.85 s slower; importing them on the
first op put a blank second into a lesson's timeline. So one daemon thread imports them after
``import hpu_lab``, and ``wait()`` joins it wherever they are about to be needed or must not be
mid-import: before the first "hpu" tensor is made (integration/device.py), when a recording subscribes to the
event stream (events.subscribe: a %%hpu_section, a Collector, the profiler), and before a fork (a
child process must not inherit import locks held by a thread that does not exist in it). In a
notebook the import is long done by the first op, so nothing waits.
"""
from __future__ import annotations

import importlib
import os
import sys
import threading

MODULES = ("torch.distributed.tensor", "torch._dynamo")
errors: dict = {}             # module -> exception, for a torch built without one of them
_thread = None                # the warm-up thread while it runs


def _run() -> None:
    global _thread
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:          # the first op will raise the real error if it needs the module
            errors[name] = e
    _thread = None


def start() -> None:
    """Start the warm-up (``import hpu_lab`` does; idempotent)."""
    global _thread
    if _thread is not None or all(m in sys.modules for m in MODULES):
        return
    _thread = threading.Thread(target=_run, name="hpu_lab-warmup", daemon=True)
    _thread.start()


def wait() -> None:
    """Return once the warm-up is over (at once if it is, or if called from the warm-up itself)."""
    t = _thread
    if t is not None and t is not threading.current_thread():
        t.join()


os.register_at_fork(before=wait)
