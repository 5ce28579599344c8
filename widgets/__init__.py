"""hpu_lab's visualiser: views over the event stream (graph, timeline, recompiles, metrics, advice).

    import widgets
    with widgets.section("Training loop with capture and replay") as s:
        train()                                   # panel shown and redrawn live in Jupyter
    s.advice, s.metrics, s.timeline()             # the same views, also outside Jupyter
    widgets.compare(widgets.sections, steps=8)    # sections side by side (a capture: its own one-time row)

    %load_ext widgets
    %%hpu_section "Lazy mode" --as lazy           # the same, as a cell magic

Views are pure functions of a list of events (``draw_graph``, ``draw_timeline``, ``timeline_rows``,
``verdict``, ``recompile_rows``, ``cache_per_step``, ``advise``, ``section_metrics``); widgets only
hold state. widgets imports hpu_lab; hpu_lab never imports widgets.

Times, verdicts and timelines are on the Gaudi clock (hpu_lab.perfmodel: the recorded work re-timed
on the card HPU_LAB_DEVICE names) unless a view is given ``clock="measured"`` or
``widgets.set_clock("measured")`` is called; the panel and ``compare`` have a switch.
"""
from __future__ import annotations

import shlex

from .advisor import advise
from .common import set_clock
from .comparison import compare, compare_rows, draw_compare
from .curves import draw_step_curve, draw_throughput
from .graph_view import draw_graph, fusion_counts, to_networkx
from .metrics_view import section_metrics
from .panel import SectionPanel, graphs_seen
from .recompiles import cache_per_step, recompile_rows, recompiles_html
from .recording import Section, in_kernel, section, sections
from .timeline import Bar, draw_timeline, timeline_rows, verdict

__all__ = ["advise", "compare", "compare_rows", "draw_compare", "draw_graph", "fusion_counts", "to_networkx", "section_metrics",
           "SectionPanel", "graphs_seen", "cache_per_step", "recompile_rows", "recompiles_html", "Section",
           "section", "sections", "Bar", "draw_timeline", "timeline_rows", "verdict", "load_ipython_extension",
           "hpu_section", "set_clock", "draw_step_curve", "draw_throughput"]


def _parse_magic_line(line: str):
    """'"Training loop" --as lazy --no-live --picture graph' -> (title, name, live, picture)."""
    words = shlex.split(line)
    title, name, live, picture = [], None, True, "timeline"
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("--as", "--picture") and i + 1 < len(words):
            if w == "--as":
                name = words[i + 1]
            else:
                picture = words[i + 1]
            i += 2
            continue
        if w == "--no-live":
            live = False
        else:
            title.append(w)
        i += 1
    return " ".join(title), name, live, picture


def hpu_section(line: str, cell: str):
    """%%hpu_section "title" [--as NAME] [--no-live] [--picture timeline|graph|none]: run the cell
    inside ``section(title)``; ``--picture``: what its output keeps as a static image (static.py)."""
    from IPython import get_ipython
    ip = get_ipython()
    title, name, live, picture = _parse_magic_line(line)
    with section(title, live=live, picture=picture) as s:
        result = _run_as_this_cell(ip, line, cell)
    if name:
        ip.user_ns[name] = s
    err = result.error_in_exec or result.error_before_exec
    if err is not None:      # already shown by run_cell: fail the cell without a second traceback
        raise SectionCellError(f"{type(err).__name__}: {err}") from err


def _run_as_this_cell(ip, line: str, body: str):
    """Run the magic's body so that what names its lines (tracebacks, hpu_lab's 'cell [5], line 18')
    names the cell the learner sees: with that cell's execution count (IPython counted the cell
    before running it, so a nested run_cell would take the next count) and its line numbers (the
    body starts on the cell's second line: the magic's line goes first as a comment, since IPython
    drops leading blank lines)."""
    ip.execution_count -= 1
    try:
        return ip.run_cell(f"# %%hpu_section {line}\n" + body)
    finally:
        ip.execution_count += 1


class SectionCellError(Exception):
    """Raised by %%hpu_section when its cell failed (so the cell counts as failed)."""

    def _render_traceback_(self):  # IPython shows this instead of a second full traceback
        return [f"(the error above was raised inside %%hpu_section: {self})"]


def load_ipython_extension(ip) -> None:
    """``%load_ext widgets`` registers the %%hpu_section cell magic."""
    ip.register_magic_function(hpu_section, magic_kind="cell", magic_name="hpu_section")
