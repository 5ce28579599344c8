"""``with widgets.section("Training loop with capture and replay"):`` -- record one block's events.

In a Jupyter kernel the block's panel (Graph | Timeline | Recompiles | Metrics | Advice) is shown
at once, redrawn while the block runs (throttled), and drawn in full when it ends. Anywhere else
(a plain script, pytest) the events are only collected; the views are still available from the
returned ``Section`` (``s.metrics``, ``s.advice``, ``s.timeline()``, ``s.panel``).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import List, Optional

from hpu_lab import events as ev

sections: List["Section"] = []      # every section recorded in this process, in order


def in_kernel() -> bool:
    """True inside a Jupyter kernel (where widgets can be displayed)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class Section:
    """The events of one recorded block and the views over them."""

    def __init__(self, title: str):
        self.title = title
        self.log = ev.EventLog()     # filled while the block runs (op runs built when read)
        self.wall_s = 0.0
        self._panel = None

    events = ev.logged_events     # op runs kept compact while the section runs, built when read

    @property
    def panel(self):
        """The SectionPanel (built on first use when the section ran without a kernel)."""
        if self._panel is None:
            from .panel import SectionPanel
            self._panel = SectionPanel(self.title, self.log)
            self._panel.finished = True
            self._panel.refresh()
        return self._panel

    @property
    def metrics(self) -> dict:
        from .metrics_view import section_metrics
        return section_metrics(self.events)

    @property
    def advice(self) -> List[str]:
        from .advisor import advise
        return advise(self.events)

    @property
    def verdict(self):
        from .timeline import verdict
        return verdict(self.events)

    def timeline(self, step_range=None, **kw):
        """draw_timeline of the section: ``step_range`` counts its own training steps from 1, as the
        picture labels them (``(-2, -1)``: the last two)."""
        from .timeline import draw_timeline
        return draw_timeline(self.events, step_range=step_range, title=kw.pop("title", f"{self.title}: timeline"), **kw)

    def graphs(self) -> list:
        from .panel import graphs_seen
        return graphs_seen(self.events)

    def of(self, kind) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def summary(self) -> str:
        m = self.metrics
        return (f"{self.title}: {m['steps']} steps, {m['compiles']} compiles ({m['recompiles']} recompiles), "
                f"{m['host syncs']} host syncs, {m['host ms/step']} host ms/step, device busy {m['device busy %']}%")

    def __repr__(self) -> str:
        return f"<Section {self.title!r}: {len(self.events)} events>"


def _await_device(events: list) -> None:
    """Launches of the block may still be running on the device when the block ends: wait
    (passively, without a sync) for their DeviceExecution events so the timeline is complete.
    Woken by the events themselves, not by polling. ``events``: the section's EventLog items (the
    op runs in it are not built: only launches count). No time limit: the device reports every
    launch it runs, failed or not, before the launch counts as done (runtime/executor.py), and a
    section cut at a fixed wait (it was 2 s) lost the last executions whenever the device took
    longer, on a loaded machine or a big recipe, so its counts and timeline depended on load."""
    done = threading.Event()

    def complete() -> bool:
        launched, finished = set(), set()
        for e in list(events):
            if isinstance(e, ev.Launch):
                launched.add(e.launch_id)
            elif isinstance(e, ev.DeviceExecution):
                finished.add(e.launch_id)
        return launched <= finished

    def on_execution(_e) -> None:
        if complete():
            done.set()

    with ev.subscribe(on_execution, [ev.DeviceExecution]):
        if not complete():
            done.wait()


@contextlib.contextmanager
def section(title: str = "", live: bool = True, display: Optional[bool] = None, min_interval: float = 0.5,
            picture: str = "timeline"):
    """Record the block's events into a ``Section`` (yielded). ``display``: show the panel
    (default: only inside a Jupyter kernel). ``live``: redraw while the block runs. ``picture``:
    what the panel's output also holds as a static PNG when the block ends, for viewers without
    a kernel ("timeline", "graph" for the first compiled graph, or "none"; see static.py)."""
    from .static import PICTURES
    if picture not in PICTURES:
        raise ValueError(f"picture must be one of {PICTURES}, got {picture!r}")
    s = Section(title)
    show = in_kernel() if display is None else display
    collector = None
    t0 = time.perf_counter()
    if show:
        from . import static
        from .panel import SectionPanel
        # the tabs are built at the first redraw (live, or at the end), not here: see SectionPanel
        s._panel = SectionPanel(title, s.log, min_interval=min_interval, build=False)
        handle = static.display_panel(s._panel)
        s._panel.attach(live=live)
    else:
        collector = ev.Collector(log=s.log)
        collector.start()
    try:
        yield s
    finally:
        s.wall_s = time.perf_counter() - t0
        _await_device(s.log.items)
        if collector is not None:
            collector.stop()
        else:
            s._panel.finalize()
            static.leave_picture(handle, s._panel, picture)
        sections.append(s)
