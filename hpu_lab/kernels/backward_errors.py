"""An error raised by an "hpu" op during ``backward()`` reaches the user as that error, not a crash.

Why this exists: torch's Python device guard for PrivateUse1 (``torch._C._acc.DeviceGuard``) answers
``type()`` by calling back into Python, also from ``exchangeStream``, which is ``noexcept``. The
autograd engine runs each backward node under a stream guard for its device. When an op inside a
built-in backward node raises from ``__torch_dispatch__``, the Python error is still set while the C++
exception unwinds; the guard's destructor then calls into Python, that call fails, and the exception
thrown inside ``noexcept`` kills the process ("terminate called without an active exception", or
"run_backward returned NULL without setting an exception"). Nothing in Python can make that call
succeed while the error is set, so no error may leave ``__torch_dispatch__`` inside the engine.

So, inside the engine (``torch._C._current_graph_task_id() != -1``): the first error of an hpu op is
kept, and the op returns a placeholder on the "meta" device. A meta gradient can never pass the
engine's own check of a node's outputs (wrong device), so the engine stops with a C++ error of its own,
which unwinds cleanly; ``backward()`` / ``autograd.grad`` then raise the kept error (the engine's
message is its ``__context__``). If the placeholder is never used, the kept error is raised when the
engine returns. No result computed from a placeholder can reach the user: it is a meta tensor.

One more crash lives at interpreter exit. torch stashes a Python object (the caller's contextvars) in
every backward's GraphTask. The engine's hpu worker thread drops its reference to the GraphTask only
after it has woken the caller -- on an error, some time after. If the script ends in that window, the
drop needs the GIL while Python finalizes, and the thread is killed inside a ``noexcept`` destructor
("terminate called without an active exception"). So at exit, if a backward ran, ``_drain_workers``
hands the hpu worker one empty task and waits for it: the worker takes tasks in order, so by then it
has dropped every earlier GraphTask, while Python could still serve its GIL.
"""
from __future__ import annotations

import atexit
import threading

import torch
import torch.autograd
import torch.autograd.graph

from .. import tensor as _tensor

_lock = threading.Lock()
_kept: list = []                 # the first error of the running backward, if any
_backward_ran = False


def _placeholder(func):
    outs = []
    for r in func._schema.returns:
        t = str(r.type)
        if t.startswith("Tensor") and "[]" not in t:
            outs.append(torch.empty(0, device="meta"))
        elif "[]" in t:
            outs.append([])
        else:
            return None          # a scalar result (item(), ...): no safe stand-in
    if not outs:
        return ()
    return outs[0] if len(outs) == 1 else tuple(outs)


def _guard(inner):
    def dispatch(func, args, kwargs):
        try:
            return inner(func, args, kwargs)
        except Exception as e:  # noqa: BLE001 - kept and re-raised by backward(), see module doc
            if torch._C._current_graph_task_id() == -1:
                raise
            stand_in = _placeholder(func)
            if stand_in is None:
                raise
            with _lock:
                if not _kept:
                    _kept.append(e)
            return None if stand_in == () else stand_in
    dispatch.inner = inner
    return dispatch


def _run_backward_raising_kept(run):
    def engine_run_backward(*args, **kwargs):
        global _backward_ran
        _backward_ran = True
        with _lock:
            _kept.clear()
        try:
            result = run(*args, **kwargs)
        except Exception as engine_error:
            with _lock:
                kept = _kept.pop() if _kept else None
            if kept is not None:
                raise kept from engine_error
            raise
        with _lock:
            kept = _kept.pop() if _kept else None
        if kept is not None:
            raise kept
        return result
    engine_run_backward.inner = run
    return engine_run_backward


class _Drain(torch.autograd.Function):
    """A node that does nothing; its backward runs on the hpu worker because its gradient is on hpu."""

    @staticmethod
    def forward(ctx, x):
        return torch.empty((), device=x.device)

    @staticmethod
    def backward(ctx, grad):
        return None


def _drain() -> None:
    """Hand the hpu autograd worker an empty backward and wait for it (see module doc)."""
    leaf = torch.empty((), device="hpu", requires_grad=True)
    out = _Drain.apply(leaf)
    # Called below torch's _engine_run_backward, so no Python object rides in this GraphTask, and
    # with no inputs= it returns nothing: what the worker drops last holds no Python object.
    torch.autograd.Variable._execution_engine.run_backward(
        (out,), (torch.empty((), device="hpu"),), False, False, (), True, True)


@atexit.register
def _drain_workers() -> None:
    if _backward_ran:
        try:
            _drain()
        except Exception:  # noqa: BLE001 - at exit, a runtime that cannot drain must not mask the real exit
            pass


def install() -> None:
    """Idempotent: wrap hpu_lab's dispatch and torch's backward entry point."""
    if not hasattr(_tensor._dispatch, "inner"):
        _tensor.set_dispatch(_guard(_tensor._dispatch))
    for mod in (torch.autograd.graph, torch.autograd):
        if not hasattr(mod._engine_run_backward, "inner"):
            mod._engine_run_backward = _run_backward_raising_kept(mod._engine_run_backward)
