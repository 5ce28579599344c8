"""Lowering a recipe's fx graph to TorchScript, so the device runs it in C++.

The graph compiler's last step: the fx GraphModule is traced by ``torch.jit.trace`` on zero
tensors of the recipe's input layouts. The traced graph runs each op without Python between
them, about twice as fast as the fx code, and holds the interpreter lock for far fewer handoffs
while the host traces the next step (the executor is a thread of this process). Tracing is
possible here: a recipe has static shapes, no data-dependent control flow and no random ops
(random numbers are drawn on the host). But a trace can silently differ from the code it traced:
an op the tracer does not see (e.g. a convolution traced inside dynamo's runtime, where the Python
dispatch keys are on) is baked into the trace as a constant tensor, and a Python branch on a
layout (``graph._layout_ok``) is baked for the example inputs' layouts. A recipe executor must never
change a result, so the lowering is used only when it is known to be equal: traced in a clean
dispatch state, holding no tensor constant and at least as many aten ops as the fx code, and run
only on inputs laid out as the trace's examples were (``Recipe.run`` checks; else the fx code runs).
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
    from .graph import CastTo, InplaceOnClone, restride, scatter, view
    from .layouts import HELPERS
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if type(t) in (CastTo, InplaceOnClone):
            t = t.op
        elif t is operator.getitem or t in (view, scatter, restride) or t in HELPERS:
            continue
        if not (isinstance(t, torch._ops.OpOverload) and t.namespace == "aten"):
            return False
    return True


# torch.jit.trace announces its own deprecation on every call; recipes are traced all the time
# (an implementation detail of the emulator, not the user's call): keep that one notice quiet
# without touching the rest of the process's warning filters
warnings.filterwarnings("ignore", message=r"`torch\.jit\.trace(_method)?` is deprecated",
                        category=DeprecationWarning)


def _aten_ops(gm) -> int:
    """How many aten ops the fx code calls (helpers and wrapped in-place ops included)."""
    n = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            n += 1
    return n


def faithful(traced, gm) -> bool:
    """Does the trace record the fx code's computation? It must hold no tensor constant (a value
    the tracer saw computed without recording the op) and no fewer ops than the fx code calls."""
    n_ops = 0
    literals = None
    for node in traced.inlined_graph.nodes():
        kind = node.kind()
        if kind == "prim::Constant":
            for o in node.outputs():
                if isinstance(o.type(), torch._C.TensorType):
                    # a Python number argument (mul(x, 2)) is traced as a 0-dim tensor constant
                    literals = _literals(gm) if literals is None else literals
                    v = o.toIValue()
                    if isinstance(v, torch.Tensor):
                        v = v.item() if v.dim() == 0 else None
                    if v is None or v not in literals:
                        return False
        elif kind.startswith("aten::"):
            n_ops += 1
    return n_ops >= _aten_ops(gm)


def _literals(gm) -> set:
    """The numbers written in the fx code's op arguments."""
    out = set()

    def walk(a):
        if isinstance(a, (list, tuple)):
            for x in a:
                walk(x)
        elif isinstance(a, (int, float, bool)):
            out.add(a)

    for node in gm.graph.nodes:
        if node.op == "call_function":
            walk(node.args)
            walk(tuple(node.kwargs.values()))
    return out


def input_layouts(gm):
    """The (size, stride) of each input the trace was made with: it is valid only for those."""
    return tuple((tuple(x.shape), tuple(x.stride())) for x in example_inputs(gm))


def _clean_dispatch():
    """No Python dispatch key while tracing: with one on (a recipe compiled while dynamo's runtime
    runs), some ops dispatch past the tracer and would be recorded as constants."""
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | \
        torch._C.DispatchKeySet(torch._C.DispatchKey.PythonTLSSnapshot)
    return torch._C._ExcludeDispatchKeyGuard(keys)


def lower(gm, quiet: bool = True):
    """(callable, backend name): the traced function, or gm.forward if tracing is off, fails, or
    its trace is not known to compute what the fx code computes.

    ``quiet`` silences the tracer's warnings with ``warnings.catch_warnings``, which swaps the
    process-wide filters: only the host thread may use it. A background thread passes False."""
    if config.get("HPU_LAB_RECIPE_EXECUTOR") != "torchscript" or not _traceable(gm):
        return gm.forward, "fx"
    try:
        with _clean_dispatch():
            if quiet:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    traced = _trace(gm)
            else:
                traced = _trace(gm)
    except Exception:          # an op TorchScript cannot trace: the fx code is just as correct
        return gm.forward, "fx"
    if not faithful(traced, gm):
        return gm.forward, "fx"
    return traced, "torchscript"


def _trace(gm):
    # _store_inputs=False: a traced module otherwise keeps its example inputs (zero tensors of the
    # recipe's input layouts) for as long as the recipe is cached: a 381 MB buffer's recipe kept
    # 381 MB, one more for every recipe compiled for it (each slice written is a recipe of its own)
    return torch.jit.trace(gm, tuple(example_inputs(gm)), check_trace=False, strict=False, _store_inputs=False)
