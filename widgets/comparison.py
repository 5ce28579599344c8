"""Several sections side by side (e.g. the four training modes of seed 000).

    compare_rows(sections)   # one dict per section: steps, compiles, syncs, host ms/step, device busy %
    draw_compare(sections)   # one small timeline per section, stacked, in one Figure
    compare(sections)        # both in a widget (a table and the figure)

``sections``: Section objects, (title, events) pairs, or a {title: events} dict.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

from .metrics_view import section_metrics
from .recompiles import table_html, _CSS
from .timeline import draw_timeline, legend_handles, timeline_rows


def _pairs(sections) -> List[Tuple[str, list]]:
    if isinstance(sections, dict):
        return [(str(k), list(v)) for k, v in sections.items()]
    out = []
    for s in sections:
        if isinstance(s, tuple):
            out.append((str(s[0]), list(s[1])))
        else:
            out.append((s.title, list(s.events)))
    return out


def compare_rows(sections) -> List[dict]:
    rows = []
    for title, events in _pairs(sections):
        m = section_metrics(events)
        rows.append({"section": title, "steps": m["steps"], "compiles": m["compiles"],
                     "recompiles": m["recompiles"], "host syncs": m["host syncs"], "replays": m["replays"],
                     "host ms/step": m["host ms/step"], "wall ms/step": round(m["window ms"] / max(m["steps"], 1), 3),
                     "device busy %": m["device busy %"], "verdict": m["verdict"].split(":")[0]})
    return rows


def draw_compare(sections, sharex: bool = False):
    """A Figure with one compact timeline per section, top to bottom."""
    from matplotlib.figure import Figure
    pairs = _pairs(sections)
    fig = Figure(figsize=(11, 1.9 * max(len(pairs), 1) + 1.1), layout="constrained")
    axes = fig.subplots(max(len(pairs), 1), 1, sharex=sharex, squeeze=False)[:, 0]
    kinds = set()
    for ax, (title, events) in zip(axes, pairs):
        draw_timeline(events, ax=ax, compact=True, title=title)
        kinds |= {b.kind for b in timeline_rows(events)}
    fig.suptitle("Sections side by side (each from its own start: the time scales differ)", fontsize=10, x=0.01,
                 ha="left")
    fig.legend(handles=legend_handles(kinds), loc="outside lower center", ncol=6, fontsize=8, frameon=False)
    return fig


def compare_html(sections) -> str:
    rows = compare_rows(sections)
    cols = [("section", "section", False), ("steps", "steps", True), ("compiles", "compiles", True),
            ("recompiles", "recompiles", True), ("host syncs", "host syncs", True), ("replays", "replays", True),
            ("host ms/step", "host ms/step", True), ("wall ms/step", "wall ms/step", True),
            ("device busy %", "device busy %", True), ("verdict", "verdict", False)]
    return _CSS + table_html(rows, cols) + ("<p style='font-size:11px;color:#555'>host ms/step: wall time the host "
                                            "was not waiting for the device, per step.</p>")


def compare(sections: Sequence, dpi: int = 80):
    """A widget with the comparison table and the stacked timelines."""
    import ipywidgets as W
    from .panel import figure_bundle
    out = W.Output()
    out.outputs = (figure_bundle(draw_compare(sections), dpi),)
    from .static import snapshot     # also a static table + picture, for viewers without a kernel
    return snapshot(W.VBox([W.HTML(compare_html(sections)), out]))
