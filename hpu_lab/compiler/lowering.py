"""Lowering a recipe's fx graph to TorchScript, so the device runs it in C++.

The graph compiler's last step: the fx GraphModule is traced by ``torch.jit.trace`` on zero
tensors of the recipe's input layouts. The traced graph runs each op without Python between
them, about twice as fast as the fx code, and holds the interpreter lock for far fewer handoffs
while the host traces the next step (the executor is a thread of this process). Tracing is
exact here: a recipe has static shapes, no data-dependent control flow and no random ops
(random numbers are drawn on the host), so the trace records every op the fx code runs.
``HPU_LAB_RECIPE_EXECUTOR=fx`` keeps the fx code; a graph that cannot be traced keeps it too.
"""
from __future__ import annotations

import operator
import warnings

import torch

from .. import config


def example_inputs(gm):
    out = []
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            size, stride, dtype = n.meta["hpu_meta"]
            out.append(torch.zeros(size, dtype=dtype).as_strided(size, stride) if not stride or
                       _dense(size, stride) else torch.empty_strided(size, stride, dtype=dtype).zero_())
    return out


def _dense(size, stride):
    expect = 1
    for s, st in sorted(zip(size, stride), key=lambda p: p[1]):
        if s > 1 and st != expect:
            return False
        expect *= max(s, 1)
    return True


def _traceable(gm) -> bool:
    """Only aten ops and hpu_lab's own helpers are traced: an op written in Python may read a
    value on the host (``.item()`` would be baked into the trace as a constant) or return nothing
    (the trace would drop it): those graphs keep the fx code."""
    from ..graph import CastTo, InplaceOnClone, restride, scatter, view
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if type(t) in (CastTo, InplaceOnClone):
            t = t.op
        elif t is operator.getitem or t in (view, scatter, restride):
            continue
        if not (isinstance(t, torch._ops.OpOverload) and t.namespace == "aten"):
            return False
    return True


# torch.jit.trace announces its own deprecation on every call; recipes are traced all the time
# (an implementation detail of the emulator, not the user's call): keep that one notice quiet
# without touching the rest of the process's warning filters
warnings.filterwarnings("ignore", message=r"`torch\.jit\.trace(_method)?` is deprecated",
                        category=DeprecationWarning)


def lower(gm, quiet: bool = True):
    """(callable, backend name): the traced function, or gm.forward if tracing is off/fails.

    ``quiet`` silences the tracer's warnings with ``warnings.catch_warnings``, which swaps the
    process-wide filters: only the host thread may use it. A background thread passes False."""
    if config.get("HPU_LAB_RECIPE_EXECUTOR") != "torchscript" or not _traceable(gm):
        return gm.forward, "fx"
    try:
        if quiet:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traced = _trace(gm)
        else:
            traced = _trace(gm)
        return traced, "torchscript"
    except Exception:          # an op TorchScript cannot trace: the fx code is just as correct
        return gm.forward, "fx"


def _trace(gm):
    return torch.jit.trace(gm, tuple(example_inputs(gm)), check_trace=False, strict=False)
