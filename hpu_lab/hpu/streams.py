"""``habana_frameworks.torch.hpu.streams``: the stream API (implemented in ``hpu_lab/graphs/streams.py``,
next to the executor queues it drives)."""
from ..graphs.streams import (Stream, StreamContext, current_stream, default_stream, record_stream,  # noqa: F401
                              set_stream, stream)

__all__ = ["Stream", "StreamContext", "stream", "set_stream", "current_stream", "default_stream",
           "record_stream"]
