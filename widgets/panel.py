"""The section panel: a Tab (Graph | Timeline | Recompiles | Metrics | Advice) over a list of events.

The panel holds state only (the events, which graph and which steps are selected); every picture
and table comes from the pure views (graph_view, timeline, recompiles, metrics_view, advisor).

Live updates: while attached, each event is appended to the panel's ``EventLog`` (by ``list.append``
itself, as a bare Collector does; op events a run at a time, kept as the run until the events are
read: events.OpRun). It looks at the events of ``LIVE_KINDS`` (a few a step, ``_look``); once a
redraw may be due it watches them closely, and at the next one on the main thread (``_on_event``) redraws the *visible* tab when (1) at least ``min_interval``
seconds passed since the last redraw and (2) the time spent redrawing, counting the redraw about to
happen (estimated from the slowest redraw of that tab so far), stays within ``budget`` (BUDGET: 2%)
of the time the section has run. So the overhead is bounded from the first redraw on: with a first
guess of 0.25 s per redraw, a loop sees its first live redraw after ~12 s, short cells only the
final panel. (The budget was 5%:
a loop stretched past ~5 s by the load got a 0.25-0.5 s redraw, half of the 10% that observing a
loop may cost in all, issue 14 point 5; see docs/gaudi_clock.md, "What a recording costs".) ``panel.stats`` counts
redraws and their time; ``overhead()`` = live redraw time / section time.
"""
from __future__ import annotations

import base64
import io
import threading
import time
from typing import List, Optional, Sequence

import ipywidgets as W
from ipywidgets.widgets.widget_string import HTMLStyle

from hpu_lab import events as ev

from .advisor import advice_html
from .common import CLOCK, STEP_BOUNDARIES, short_key, step_ends
from .graph_view import draw_graph
from .metrics_view import metrics_html
from .recompiles import recompiles_html
from .static import STORED_DPI
from .timeline import draw_timeline

TABS = ("Graph", "Timeline", "Recompiles", "Metrics", "Advice")
BUDGET = 0.02                # live redraws take at most this share of the section's time
FIRST_COST_GUESS = 0.25      # seconds a redraw is assumed to take before one has been measured
LIVE_STEPS = 12              # a live timeline shows the latest steps only (cheaper, and what is new)
FINAL_STEPS = 60            # a finished section's timeline shows its latest steps (the slider shows others)
LIVE_DPI = 60                # live redraws are rendered smaller; the final redraw at full dpi
# the events on which a live panel looks whether a redraw is due: the user's thread making progress
# (a step, a launch, a sync, a compile, a replay), a few a step; every event reaches the log itself.
# Only when a redraw may be due does the panel watch them closely, until the next one on the main
# thread, where it redraws (attach, _look).
LIVE_KINDS = (ev.MarkStep, ev.Launch, ev.HostSync, ev.Compile, ev.Replay)


def figure_bundle(fig, dpi: int = STORED_DPI, scroll_above_px: int = 1400) -> dict:
    """A display_data output holding the figure as PNG (inside a scrollable box when it is wide)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    b64 = base64.b64encode(buf.getvalue()).decode("ascii")
    width_px, height_px = fig.get_size_inches() * dpi
    data = {"image/png": b64, "text/plain": f"<Figure {fig.get_size_inches()[0]:.0f}x{fig.get_size_inches()[1]:.0f} in>"}
    if width_px > scroll_above_px:
        # as tall as the figure (+ the horizontal scrollbar), so its bottom (the legend) is not cut off
        box_h = min(int(height_px) + 24, 1000)
        data["text/html"] = (f"<div style='overflow:auto;max-height:{box_h}px;border:1px solid #eee'>"
                             f"<img src='data:image/png;base64,{b64}' style='max-width:none'/></div>")
    return {"output_type": "display_data", "data": data, "metadata": {}}


def html_bundle(text: str) -> dict:
    return {"output_type": "display_data", "data": {"text/html": text, "text/plain": "(html)"}, "metadata": {}}


class GraphIndex:
    """The distinct recipes with a graph, fed incrementally (a live panel only reads new events)."""

    def __init__(self):
        self.found: dict = {}        # recipe key -> first Compile/Launch event carrying its graph
        self.launches: dict = {}     # recipe key -> launches seen
        self.boundaries: list = []   # the mark_steps, replays and captures: where the window's steps end
        self.n = 0                   # events consumed

    def add(self, events: Sequence[ev.Event]) -> "GraphIndex":
        for e in events:
            t = type(e)
            if t is ev.Launch:
                self.launches[e.key] = self.launches.get(e.key, 0) + 1
            if (t is ev.Compile or t is ev.Launch) and e.graph is not None and e.key not in self.found:
                self.found[e.key] = e
            if t in STEP_BOUNDARIES:
                self.boundaries.append(e)
        self.n += len(events)
        return self

    @property
    def steps(self) -> int:
        """The window's own training steps so far (common.step_ends; 1 before any mark_step)."""
        return max(len(step_ends(self.boundaries)), 1) if self.n else 0

    def items(self) -> List[tuple]:
        out = []
        for i, (key, e) in enumerate(self.found.items(), 1):
            n = len([x for x in e.graph.nodes if x.op not in ("input", "output")])
            how = f"step {e.step}: {e.reason}" if isinstance(e, ev.Compile) else \
                f"step {e.step}: cached before this section"
            out.append((f"{i}. recipe {short_key(key, 6)} \u00b7 {n} nodes \u00b7 launched "
                        f"\u00d7{self.launches.get(key, 0)} \u00b7 {how}", e.graph))
        return out


def graphs_seen(events: Sequence[ev.Event]) -> List[tuple]:
    """(label, GraphSummary) for every distinct recipe with a graph, in the order first seen:
    from Compile events (with their reason) and from Launch events of recipes compiled earlier."""
    return GraphIndex().add(events).items()


class SectionPanel:
    """Graph | Timeline | Recompiles | Metrics | Advice for the events of one section."""

    def __init__(self, title: str = "", events=None, min_interval: float = 0.5,
                 budget: float = BUDGET, dpi: int = STORED_DPI, build: bool = True):
        self.title = title
        # events: a list, or the EventLog of a section that is recording (shared with it)
        self.log = events if isinstance(events, ev.EventLog) else ev.EventLog(events)
        self.min_interval, self.budget, self.dpi = min_interval, budget, dpi
        # refreshes/refresh_s: every redraw; live_*: the redraws made while the section ran;
        # wall_s: time attached. overhead() = live_s / wall_s.
        self.stats = {"refreshes": 0, "refresh_s": 0.0, "live_refreshes": 0, "live_s": 0.0, "events": 0,
                      "wall_s": 0.0}
        self._handle = None
        self._live_handle = None            # LIVE_KINDS, late: looks whether a redraw is due (_look)
        self._awake = None                  # LIVE_KINDS at once while a redraw is due (_on_event)
        self._waking = threading.Lock()     # held while _look subscribes _awake
        self._attached_at = 0.0
        self._next_allowed = 0.0
        self._cost = {name: FIRST_COST_GUESS for name in TABS}    # seconds per redraw: the worst measured
        self._measured: dict = {}
        self._index = GraphIndex()          # graphs and steps seen so far (incremental)
        self._live_now = False              # True during a live redraw (smaller, latest steps only)
        self._dirty = set(TABS)
        self._graph_key = None
        self._quiet = False                 # set while the panel itself updates its selectors
        self.finished = False
        self._start_tab = None              # the tab to select when the widgets are built (attach)
        self._on_built = None               # called once the widgets exist (static.display_panel)

        # The status line is the panel's first widget; the rest (the tabs, their outputs, the
        # controls: 23 more comms, ~11 ms on a kernel's cell) is built when first needed, with
        # ``build=False`` at the first redraw (live, or when the section ends), not on entry: a
        # loop pays nothing for a panel that has nothing to draw yet (issue 14 point 5).
        self._plain, self._html_style = W.Layout(), HTMLStyle()
        self.status = W.HTML(layout=self._plain, style=self._html_style)
        if build:
            self._build()
        else:
            self._update_status()
        _warm_up()

    _WIDGETS = frozenset(("outputs", "graph_select", "collapse_select", "step_range", "clock_select", "tab", "widget"))

    def __getattr__(self, name):
        # (only for attributes not set yet) the widgets of a panel made with build=False
        if name in SectionPanel._WIDGETS and "_plain" in self.__dict__ and "widget" not in self.__dict__:
            self._build()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _build(self) -> None:
        """The tabs, their outputs and controls, under the status line."""
        # Every widget is a comm opened with the front end (~1 ms each in a kernel, on the cell's
        # time), and each one given no layout or style makes its own: those that keep the defaults
        # share one Layout (and the two HTML lines one style): 26 comms instead of 40.
        plain, html_style = self._plain, self._html_style
        self.outputs = {name: W.Output(layout=plain) for name in TABS}
        for out in self.outputs.values():
            out.outputs = (html_bundle("<p style='color:#777'>Waiting for events. While the cell runs this tab is "
                                       f"redrawn only as often as keeps the redraws under {100 * self.budget:.0f}% of the run time; "
                                       "it is drawn in full when the cell ends.</p>"),)
        self.graph_select = W.Dropdown(description="graph", options=[], layout=W.Layout(width="70%"))
        self.collapse_select = W.Dropdown(description="clusters",
                                          options=[("auto", "auto"), ("expanded", "expanded"), ("collapsed", "collapsed")],
                                          value="auto", layout=W.Layout(width="25%"))
        self.step_range = W.IntRangeSlider(description="steps", min=1, max=1, value=(1, 1),
                                           continuous_update=False, layout=W.Layout(width="60%"))
        # the Gaudi clock (the recorded work re-timed on the card) by default; measured one click away
        self.clock_select = W.ToggleButtons(options=[("Gaudi clock (modeled)", "gaudi"),
                                                     ("measured on this CPU", "measured")],
                                            value=CLOCK["clock"], description="clock",
                                            style={"button_width": "170px"}, layout=plain)
        pages = {
            "Graph": W.VBox([W.HBox([self.graph_select, self.collapse_select], layout=plain), self.outputs["Graph"]],
                            layout=plain),
            "Timeline": W.VBox([W.HBox([self.clock_select], layout=plain), self.step_range, self.outputs["Timeline"]],
                               layout=plain),
        }
        self.tab = W.Tab(children=[pages.get(n, self.outputs[n]) for n in TABS], layout=plain)
        self.tab.titles = TABS
        header = W.HTML(f"<h3 style='margin:4px 0'>{_esc(self.title)}</h3>" if self.title else "", layout=plain,
                        style=html_style)
        self.widget = W.VBox([header, self.status, self.tab], layout=plain)

        self.tab.observe(lambda ch: self._show(TABS[ch["new"]]), names="selected_index")
        self.graph_select.observe(lambda ch: self._on_control("Graph"), names="value")
        self.collapse_select.observe(lambda ch: self._on_control("Graph"), names="value")
        self.step_range.observe(lambda ch: self._on_control("Timeline"), names="value")
        self.clock_select.observe(lambda ch: self._on_clock(), names="value")
        if self._start_tab is not None:
            self._select_quietly(self._start_tab)
        self._update_status()
        if self._on_built is not None:
            self._on_built()

    def _select_quietly(self, name: str) -> None:
        quiet, self._quiet = self._quiet, True
        try:
            self.tab.selected_index = TABS.index(name)
        finally:
            self._quiet = quiet

    @property
    def built(self) -> bool:
        """Whether the tabs exist (a panel made with build=False builds them at its first redraw)."""
        return "widget" in self.__dict__

    def view(self):
        """The widget to display: the whole panel, or its status line until it is built."""
        return self.widget if self.built else self.status

    events = ev.logged_events     # op runs kept compact while the section runs, built when read

    # ------------------------------------------------------------------ live feed

    def attach(self, live: bool = True) -> "SectionPanel":
        """Subscribe to the event stream; with ``live`` redraw while events arrive (throttled)."""
        self.live = live
        if live:
            self._start_tab = "Timeline"    # what changes while a loop runs
            if self.built:
                self._select_quietly("Timeline")
        self._attached_at = time.perf_counter()
        self._next_allowed = self._attached_at + self.min_interval
        # Every event goes to the log as a bare Collector's does (list.append: no Python frame, so
        # the recorder's observer time stays short and the device thread's events run no panel
        # code); op events arrive in runs (events.op_accumulated), kept as one item a run until
        # read. Whether a redraw is due is looked at on a few kinds only (LIVE_KINDS, late).
        self._handle = ev.subscribe(self.log.add, runs=self.log.add)
        if live:
            self._live_handle = ev.subscribe(self._look, LIVE_KINDS)
        return self

    def detach(self) -> None:
        for name in ("_awake", "_live_handle"):
            h = getattr(self, name)
            if h is not None:
                setattr(self, name, None)
                h.remove()
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
            self.stats["wall_s"] += time.perf_counter() - self._attached_at

    def _due(self, now: float) -> bool:
        """Whether a live redraw may start at ``now``; if not, ``_next_allowed`` is when it may: at
        least 50 ms on, and not before the budget allows the visible tab's redraw (its slowest so
        far, or the first guess): live_s + cost <= budget * (time attached + cost)."""
        if now < self._next_allowed:
            return False
        cost = self._cost[self.current_tab]
        if self.stats["live_s"] + cost > self.budget * (now - self._attached_at + cost):
            self._next_allowed = max(now + 0.05,
                                     self._attached_at + (self.stats["live_s"] + cost) / self.budget - cost)
            return False
        return True

    def _look(self, e: ev.Event) -> None:
        """A LIVE_KINDS event (any thread): once a redraw may be due, watch LIVE_KINDS closely
        (_on_event) until the main thread emits one. One thread at a time: a second handle
        subscribed by another thread meanwhile would never be removed."""
        if time.perf_counter() < self._next_allowed or self._awake is not None or self._live_handle is None:
            return
        if not self._waking.acquire(blocking=False):    # another thread is subscribing it (or this
            return                                      # one, in the hand-over subscribe makes)
        try:
            if self._awake is None and self._live_handle is not None:
                h = ev.subscribe(self._on_event, LIVE_KINDS)
                if self._live_handle is None:           # detached meanwhile: detach found no _awake
                    h.remove()
                else:
                    self._awake = h
        finally:
            self._waking.release()

    def _on_event(self, e: ev.Event) -> None:
        """A LIVE_KINDS event, at once, already in the log, while a redraw may be due: redraw the
        visible tab if the budget allows, on the main thread only; then look again late."""
        if threading.current_thread() is not threading.main_thread():
            return                          # never draw on the device's worker thread
        now = time.perf_counter()
        due = self._due(now)
        if due:
            self._next_allowed = now + self.min_interval    # no second wake while drawing
        h, self._awake = self._awake, None
        if h is not None:
            h.remove()
        if not due:
            return
        self._dirty = set(TABS)
        self._live_now = True
        try:
            self.refresh([self.current_tab])
        finally:
            self._live_now = False
        self.stats["live_refreshes"] += 1
        self.stats["live_s"] += time.perf_counter() - now

    def finalize(self) -> None:
        """Stop listening and draw the visible tab with all the events; the other tabs are drawn
        when first shown (each costs a redraw the cell's user would otherwise wait for)."""
        self.detach()
        self.finished = True
        self._dirty = set(TABS)
        self.refresh([self.current_tab])

    # ------------------------------------------------------------------ drawing

    @property
    def current_tab(self) -> str:
        if not self.built:                  # (not built by asking: _due asks it in the loop)
            return self._start_tab or TABS[0]
        return TABS[self.tab.selected_index or 0]

    def refresh(self, tabs: Optional[Sequence[str]] = None) -> None:
        """Redraw ``tabs`` (default: all) from the events collected so far."""
        t0 = time.perf_counter()
        if not self.built:
            self._build()                   # (a section's panel: at its first redraw)
        if self._handle is not None:
            ev.flush()                      # the op events stamped so far (events.op_accumulated)
        events = list(self.events)          # a snapshot: the device thread may append meanwhile
        self._sync_controls(events)
        for name in (tabs or TABS):
            self._draw(name, events)
            self._dirty.discard(name)
        spent = time.perf_counter() - t0
        if tabs is not None and len(tabs) == 1:
            measured = self._measured.get(tabs[0], 0.0)
            self._measured[tabs[0]] = self._cost[tabs[0]] = max(measured, spent)
        self.stats["refreshes"] += 1
        self.stats["refresh_s"] += spent
        self.stats["events"] = len(events)
        self._next_allowed = time.perf_counter() + self.min_interval
        self._update_status()

    def _draw(self, name: str, events: list) -> None:
        out = self.outputs[name]
        if name == "Graph":
            graphs = self._index.items() if self._index.n == len(events) else graphs_seen(events)
            if not graphs:
                out.outputs = (html_bundle("<p>No compiled graph in this section yet.</p>"),)
                return
            idx = self.graph_select.value if self.graph_select.value is not None else 0
            label, summary = graphs[min(idx, len(graphs) - 1)]
            key = (label.split(" \u00b7 ")[0], self.collapse_select.value)
            if key == self._graph_key and out.outputs:
                return                      # the same graph is already drawn
            collapse = {"auto": None, "expanded": False, "collapsed": True}[self.collapse_select.value]
            fig = draw_graph(summary, collapse_clusters=collapse, title=label)
            out.outputs = (figure_bundle(fig, LIVE_DPI if self._live_now else self.dpi),)
            self._graph_key = key
        elif name == "Timeline":
            if not events:
                out.outputs = (html_bundle("<p>No events yet.</p>"),)
                return
            # the slider counts the window's own training steps from 1, as the picture's labels do
            lo, hi = self.step_range.value
            full = (lo, hi) == (1, self.step_range.max)
            title = f"{self.title}: host and device timeline" if self.title else None
            # A few steps are cut out of the whole section's timeline (re-timed incrementally as it
            # grows, common.on_clock), not re-timed alone: on the Gaudi clock a tail re-timed alone
            # would start on an idle device, without the work the steps before left running.
            steps = None if full else (lo, hi)
            if self._live_now and full and hi - lo >= LIVE_STEPS:
                steps = (hi - LIVE_STEPS + 1, hi)
                title = (f"Running: steps {steps[0]}\u2013{hi} (the latest {FINAL_STEPS} when the cell ends)")
            elif full and hi - lo >= FINAL_STEPS:
                # hundreds of steps are a blur at this width, and drawing them costs seconds
                steps = (hi - FINAL_STEPS + 1, hi)
                title = (f"{self.title + ': ' if self.title else ''}steps {steps[0]}\u2013{hi} "
                         f"of 1\u2013{hi} (move the steps slider for others)")
            fig = draw_timeline(events, step_range=steps, title=title, clock=self.clock_select.value)
            out.outputs = (figure_bundle(fig, LIVE_DPI if self._live_now else self.dpi),)
        elif name == "Recompiles":
            out.outputs = (html_bundle(recompiles_html(events)),)
        elif name == "Metrics":
            out.outputs = (html_bundle(metrics_html(events, clock=self.clock_select.value)),)
        elif name == "Advice":
            out.outputs = (html_bundle(advice_html(events)),)

    def _sync_controls(self, events: list) -> None:
        """Keep the graph list and the step slider in step with the events (without redrawing)."""
        self._quiet = True
        try:
            if len(events) < self._index.n:          # the list was replaced: index it again
                self._index = GraphIndex()
            self._index.add(events[self._index.n:])
            graphs = self._index.items()
            opts = [(label, i) for i, (label, _) in enumerate(graphs)]
            if opts != list(self.graph_select.options):
                keep = self.graph_select.value
                self.graph_select.options = opts
                self.graph_select.value = keep if keep is not None and keep < len(opts) else (0 if opts else None)
            hi = max(self._index.steps, 1)
            following = self.step_range.value == (1, self.step_range.max)
            if hi != self.step_range.max:
                self.step_range.max = hi          # (min stays 1: the window's first step)
                if following:
                    self.step_range.value = (1, hi)
        finally:
            self._quiet = False

    def _on_control(self, name: str) -> None:
        if self._quiet:
            return
        self._draw(name, list(self.events))

    def _on_clock(self) -> None:
        if self._quiet:
            return
        self._dirty |= {"Metrics"}
        self._draw("Timeline", list(self.events))

    def _show(self, name: str) -> None:
        if name in self._dirty and not self._quiet:
            self.refresh([name])

    def _update_status(self) -> None:
        if not self.built:                  # (a section's panel, attached right after it is shown)
            self.status.value = (f"<span style='color:#555;font-size:12px'>{_esc(self.title) + ': ' if self.title else ''}"
                                 "recording. The panel (Graph, Timeline, Recompiles, Metrics, Advice) is drawn at "
                                 "its first live redraw and when the cell ends.</span>")
            return
        s = self.stats
        state = "finished" if self.finished else ("live" if self._handle is not None else "idle")
        live = (f"; {s['live_refreshes']} live redraws took {1000 * s['live_s']:.0f} ms = "
                f"{100 * self.overhead():.1f}% of the {s['wall_s']:.2f} s the section ran" if s["wall_s"] > 0 else "")
        self.status.value = (f"<span style='color:#555;font-size:12px'>{state}: {len(self.events)} events"
                             f"{live}</span>")

    def timeline_png(self) -> Optional[bytes]:
        """The PNG of the Timeline tab as drawn when the section finished (None if it was not drawn
        then): the static picture of the section reuses it instead of drawing it again."""
        if not self.finished or "Timeline" in self._dirty:
            return None
        for out in self.outputs["Timeline"].outputs:
            b64 = out.get("data", {}).get("image/png")
            if b64:
                return base64.b64decode(b64)
        return None

    def overhead(self) -> float:
        """Fraction of the section's wall time spent on live redraws."""
        return self.stats["live_s"] / self.stats["wall_s"] if self.stats["wall_s"] else 0.0

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


_warm = False


def _warm_up() -> None:
    """Draw one tiny figure per process, so matplotlib's one-time start-up (imports, font cache,
    ~1 s) is paid when the panel is created, not inside the first live redraw of a loop."""
    global _warm
    if not _warm:
        from matplotlib.figure import Figure
        fig = Figure(figsize=(1, 1))
        fig.add_subplot().text(0.5, 0.5, "x")
        figure_bundle(fig, dpi=20)
        _warm = True


def _esc(s: str) -> str:
    import html
    return html.escape(s)
