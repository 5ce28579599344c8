"""What an HPU Graph capture must provide to the op path (graphs/recording.py's ``Capture``).

While ``lazy.S.capture`` is set (``lazy.begin_capture``), the lazy path reports what the graph
reads and makes, hands it each recipe instead of launching it, and asks it to refuse what a
capture cannot hold (a host sync, a CPU fallback, an in-place write into a view).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class GraphCapture(Protocol):
    def saw(self, inp, storage) -> None:
        """A pending op read the device buffer ``inp`` through ``storage`` (bound again at replay)."""

    def created(self, inp, source=None) -> None:
        """A host buffer became a device value (a constant of the graph, or redrawn: ``inp.regen``);
        ``source``: the CPU tensor it was copied from (an H2D copy, a CPU operand of an hpu op)."""

    def note_random(self) -> None:
        """A random op drew on the host."""

    def launch(self, recipe, externals):
        """Launch (or, for a dry run, only record) ``recipe``; returns the ``executor.Launch``."""

    def on_flush(self, recipe, externals, produced, written) -> None:
        """A flush launched ``recipe``: what its inputs were and which storages it rebinds."""

    def refuse(self, op: str, src: str, fallback: bool = False):
        """``op`` cannot be captured: abandon the capture and raise ``HPUGraphError``."""

    def refuse_view_write(self, t, op: str, src: str):
        """An in-place write into a view of ``t``'s storage: abandon and raise."""

    def abandon(self, message: str, op: str, src: str) -> None:
        """Abandon the capture (the runtime stays usable), reporting ``message``."""
