"""Eager mode (``PT_HPU_LAZY_MODE=0``): every op runs at once, as a one-op graph.

The real bridge's eager backend still hands each op to the graph compiler and caches the result
per op signature; hpu_lab does the same by reusing the lazy machinery: the op is appended to the
(empty) pending graph and flushed as soon as the op returns. So a new op signature compiles once,
every later call hits the recipe cache, and each op is one launch (claim T1).

``route.dispatch`` calls ``run`` when ``lazy.S.eager`` is set. Ops that call other ops (an ``out=``
variant computing its functional form, say) flush only when the outermost one returns.
"""
from __future__ import annotations

import threading

from .. import lazy, ops
from ..util._source import user_src
from ..tensor import Out

_local = threading.local()      # nesting depth per thread (autograd may run ops on its own thread)


def run(handler, func, args, kwargs):
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        res = handler(func, args, kwargs)
    except BaseException:
        if depth == 0 and lazy.S.pg.nodes and not _has_live_outputs(lazy.S.pg):
            lazy.drop_pending()          # e.g. a view node read for an op that then failed
        raise
    finally:
        _local.depth = depth
    if depth == 0 and lazy.S.pg.nodes:
        launch_pending(func)
    return res


def launch_pending(func) -> None:
    """Compile (or reuse) and launch what ``func`` left in the pending graph."""
    S = lazy.S
    with S.lock:
        if not _has_live_outputs(S.pg):
            # e.g. the empty buffer of torch.randn that the host draw then overwrote: an allocation
            # is not a kernel, and a graph whose outputs nobody holds computes nothing
            lazy.drop_pending()
            return
        try:
            lazy.flush(f"eager op {ops.op_name(func)}", user_src(3))
        except BaseException:
            lazy.drop_pending()      # the op failed as a whole (e.g. out of memory): nothing waits
            raise


def _has_live_outputs(pg) -> bool:
    for w in pg.written:
        st = w()
        if st is not None and type(st.value) is Out and st.value.node.graph is pg:
            return True
    return False
