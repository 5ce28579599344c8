"""HPU Graphs: capture once, replay with no tracing (seeds 000 and 001; REFERENCE.md section 1).

- ``hpugraph``: ``HPUGraph`` (capture_begin/capture_end/replay...) and the ``graph`` context manager
- ``recording``: what a capture records and how a replay runs it
- ``host_state``: host-side state a replay cannot repeat (CPU tensors updated, then read, in a capture)
- ``streams``: ``Stream``, ``stream``, ``current_stream``, ``default_stream``, ``Event``
- ``callables``: ``make_graphed_callables`` (forward and backward graphs, for training)
- ``module_cacher``: ``ModuleCacher`` (one graph pair per input signature, for training)
- ``wrap``: ``wrap_in_hpu_graph`` / ``wrap_in_hpu_graph_func`` (inference)

All of them are also ``torch.hpu.<name>`` and ``htcore.hpu.<name>``.
"""
from ._common import HPUGraphError
from .recording import HPUGraphWarning
from .hpugraph import HPUGraph, graph
from .streams import (Event, Stream, StreamContext, current_stream, default_stream, record_stream,
                      set_stream, stream)
from .callables import make_graphed_callables
from .module_cacher import ModuleCacher
from .wrap import wrap_in_hpu_graph, wrap_in_hpu_graph_func


def is_current_stream_capturing() -> bool:
    from .. import lazy
    return lazy.S.capture is not None


__all__ = ["HPUGraph", "graph", "Stream", "StreamContext", "stream", "set_stream", "current_stream",
           "default_stream", "record_stream", "Event", "make_graphed_callables", "ModuleCacher",
           "wrap_in_hpu_graph", "wrap_in_hpu_graph_func", "is_current_stream_capturing", "HPUGraphError",
           "HPUGraphWarning"]
