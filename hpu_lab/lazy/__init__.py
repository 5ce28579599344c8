"""Lazy mode: ops accumulate in the pending graph; mark_step or a value access runs them.

``route.dispatch`` decides where each op goes (docs/ARCHITECTURE.md, "The op path"); the generic
ops land here (``lazy_op``). This package owns the runtime state ``S``: other modules change it
only through the named functions of lazy/state.py. Its modules, in import order:

- state.py: ``S`` and its named writers (``begin_capture``, ``set_stream``, ``tracing``, ...);
- storage.py: reading a tensor's value into the graph, writing one back (``read_ref``, ``write``);
- flushing.py: pending graph -> recipe -> launch; host syncs (``to_cpu``); ``mark_step``;
- trace.py: the generic lazy op (``functional_op``, ``inplace_op``, ``lazy_op``).

What other modules use is importable from ``hpu_lab.lazy`` itself.
"""
from __future__ import annotations

from .state import (S, add_step_closure, begin_capture, drop_pending, eager_suspended,  # noqa: F401
                    end_capture, set_stream, tracing)
from .storage import _full, read_ref, scalar_sig, wrap_new, write, write_concrete  # noqa: F401
from .flushing import (build_layout, flush, mark_step, materialize, read_item,  # noqa: F401
                       synchronize, to_cpu)
from .trace import (CPU, _same_device_error, functional_op, inplace_on_aliases, inplace_op,  # noqa: F401
                    lazy_op, set_meta_failure_handler)
