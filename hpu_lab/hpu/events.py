"""``habana_frameworks.torch.hpu.events``: ``Event`` (implemented in ``hpu_lab/graphs/streams.py``)."""
from ..graphs.streams import Event  # noqa: F401

__all__ = ["Event"]
