"""Several sections side by side (e.g. the four training modes of seed 000).

    compare_rows(sections)   # one dict per section: steps, compiles, syncs, host ms/step, device busy %
    draw_compare(sections)   # one small timeline per section, stacked, in one Figure
    compare(sections)        # both in a widget (a table and the figure), with a clock switch

``sections``: Section objects, (title, events) pairs, or a {title: events} dict. Times and verdicts
are on the Gaudi clock of the chosen card by default (``clock="measured"``: wall time on this CPU).
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

from .common import CLOCK, on_clock
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


def compare_rows(sections, clock=None, device=None) -> List[dict]:
    rows = []
    for title, events in _pairs(sections):
        m = section_metrics(events, clock, device)
        rows.append({"section": title, "steps": m["steps"], "compiles": m["compiles"],
                     "recompiles": m["recompiles"], "host syncs": m["host syncs"], "replays": m["replays"],
                     "host ms/step": m["host ms/step"], "device ms/step": m["device ms/step"],
                     "wall ms/step": round(m["window ms"] / max(m["steps"], 1), 3),
                     "device busy %": m["device busy %"], "verdict": m["verdict"].split(":")[0]})
    return rows


def draw_compare(sections, sharex: bool = False, clock=None, device=None):
    """A Figure with one compact timeline per section, top to bottom."""
    from matplotlib.figure import Figure
    pairs = _pairs(sections)
    fig = Figure(figsize=(11, 1.9 * max(len(pairs), 1) + 1.1), layout="constrained")
    axes = fig.subplots(max(len(pairs), 1), 1, sharex=sharex, squeeze=False)[:, 0]
    kinds = set()
    label = "measured on this CPU"
    for ax, (title, events) in zip(axes, pairs):
        timed, label, _ = on_clock(events, clock, device)
        draw_timeline(timed, ax=ax, compact=True, title=title, clock="measured")
        ax.set_xlabel("ms" if label.startswith("measured") else "modeled ms (host: CPU time)", fontsize=8)
        kinds |= {b.kind for b in timeline_rows(timed)}
    fig.suptitle(f"Sections side by side, {label} (each from its own start: the time scales differ)",
                 fontsize=10, x=0.01, ha="left")
    fig.legend(handles=legend_handles(kinds), loc="outside lower center", ncol=6, fontsize=8, frameon=False)
    return fig


def compare_html(sections, clock=None, device=None) -> str:
    rows = compare_rows(sections, clock, device)
    label = on_clock([], clock, device)[1]
    cols = [("section", "section", False), ("steps", "steps", True), ("compiles", "compiles", True),
            ("recompiles", "recompiles", True), ("host syncs", "host syncs", True), ("replays", "replays", True),
            ("host ms/step", "host ms/step", True), ("device ms/step", "device ms/step", True),
            ("wall ms/step", "wall ms/step", True), ("device busy %", "device busy %", True),
            ("verdict", "verdict", False)]
    how = ("host ms/step: host time not waiting for the device, per step (CPU time of the host thread on this "
           "machine, plus its waits outside hpu_lab); device ms/step: the modeled time of the recipes launched"
           if not label.startswith("measured") else
           "host ms/step: wall time the host was not waiting for the device, per step")
    return (_CSS + f"<p style='margin:2px 0'><b>{label}</b></p>" + table_html(rows, cols) +
            f"<p style='font-size:11px;color:#555'>{how}.</p>")


def compare(sections: Sequence, dpi: int = 80, clock=None, device=None):
    """A widget with the comparison table and the stacked timelines, and a switch between the
    Gaudi clock (default) and the measured clock."""
    import ipywidgets as W
    from .panel import figure_bundle
    from .static import snapshot     # also a static table + picture, for viewers without a kernel
    pairs = _pairs(sections)
    table, out = W.HTML(), W.Output()
    options = [("Gaudi clock (modeled)", "gaudi"), ("measured on this CPU", "measured")]
    switch = W.ToggleButtons(options=options, value=clock or CLOCK["clock"], description="clock")

    def show(which):
        table.value = compare_html(pairs, which, device)
        out.outputs = (figure_bundle(draw_compare(pairs, clock=which, device=device), dpi),)
    switch.observe(lambda ch: show(ch["new"]), names="value")
    show(switch.value)
    return snapshot(W.VBox([switch, table, out]))
