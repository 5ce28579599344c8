"""``EventLog``: what a Collector, a panel and a section keep, a list whose op runs are built into
events only when it is read."""
from __future__ import annotations

import threading
from typing import Optional

from .recorder import OpRun


class EventLog:
    """The events an observer keeps, in order, a run of op events (``OpRun``) kept as one item
    until the list is read: ``read()`` builds the runs' events in place and returns the list.
    ``subscribe(log.add, kinds, runs=log.add)`` fills it. Safe to read from any thread while
    events arrive (the device thread appends its own)."""

    def __init__(self, items: Optional[list] = None):
        self.items: list = [] if items is None else items   # events and OpRuns as they came
        self.add = self.items.append
        self._read_to = 0                # items before it hold no OpRun
        self._last_read = None           # the item just before _read_to, when it was set
        self._lock = threading.Lock()

    def read(self) -> list:
        items = self.items
        i = self._read_to
        if i and (i > len(items) or items[i - 1] is not self._last_read):
            # the list read out was changed in place (``c.events.clear()``, a slice deleted):
            # look at all of it again
            with self._lock:
                self._read_to, i = 0, 0
        if i < len(items):
            with self._lock:
                i, n = self._read_to, len(items)
                if any(type(x) is OpRun for x in items[i:n]):
                    out = []
                    for x in items[i:n]:
                        if type(x) is OpRun:
                            out += x.events()
                        else:
                            out.append(x)
                    items[i:n] = out     # one step: items appended meanwhile stay after them
                    n = i + len(out)
                self._read_to = n
                self._last_read = items[n - 1] if n else None
        return items
