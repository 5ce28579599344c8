"""Several sections side by side (e.g. the four training modes of seed 000).

    compare_rows(sections, steps=8)   # one dict per row: steps, compiles, syncs, host ms/step, ...
    draw_compare(sections)            # one small timeline per section, stacked, in one Figure
    compare(sections, steps=8)        # both in a widget (a table and the figure), with a clock switch

``sections``: Section objects, (title, events) pairs, or a {title: events} dict. The table's times
come from the lab's one timing helper, ``hpu_lab.lab.step_times_of``, on the Gaudi clock of the chosen
card: host and device modeled, your own code (DataLoader fetches, sleep, print, ``user_code``
blocks) measured on this CPU and shown in its own column, apart from the modeled host work. The
pictures can also be drawn as measured (``clock="measured"``); the table cannot: a step's time on
this CPU is the emulator's, not a Gaudi's.

A section that captures an HPU Graph and then replays it gets two rows: the one-time work
(warm-up and capture, everything up to the end of the capture that precedes the first replay),
shown as totals and labelled so, and the replays, per replay. Dividing the capture over the steps
would make replay look like the most expensive mode, when it is the cheapest per step.

``steps``: how many training steps each section ran (an int for all, or {title: int}), so that
"per step" means the same in every row; without it a step is a replay, or a training step as the
timeline counts them (common.step_ends: lazy mode's two mark_steps make one), and the "a step is"
column says which.

The replays' row is timed from the end of the capture: the capture's context synchronizes as it
ends (hpu.graph), so the replays start on an idle device, as re-timing them alone assumes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

from hpu_lab import events as ev

from .common import CLOCK, on_clock, step_count, step_ends
from .metrics_view import section_metrics
from .recompiles import table_html, _CSS
from .static import STORED_DPI
from .timeline import draw_timeline, legend_columns, legend_handles, timeline_rows

ONCE = "once"           # the "a step is" of a one-time row (warm-up + capture): its times are totals


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


@dataclass
class Phase:
    """Part of a section that gets its own row: its (already timed) events and what a step is."""
    title: str
    events: list
    steps: int
    per: str            # "training step", "replay", "step (counted)", "whole section" or ONCE


def capture_cut(events: Sequence[ev.Event]) -> Optional[int]:
    """The end (ns) of the capture that precedes the section's first replay: where its one-time
    work stops and its replayed steps start. None when nothing is replayed, or the graph was
    captured elsewhere (then every replay is a step and there is nothing one-time to separate)."""
    first = min((e.t_start for e in events if isinstance(e, ev.Replay)), default=None)
    if first is None:
        return None
    ends = [e.t_end for e in events if isinstance(e, ev.CaptureEnd) and e.t_end <= first]
    return max(ends) if ends else None


def split_at(events: Sequence[ev.Event], cut: int) -> Tuple[list, list]:
    """(before, after) ``cut``: host events by their start; a device execution goes with the
    launch that queued it (it may run after the cut, it is still work of the part that launched it)."""
    before_launches = {e.launch_id for e in events if isinstance(e, ev.Launch) and e.t_start < cut}
    before, after = [], []
    for e in events:
        if isinstance(e, ev.DeviceExecution):
            early = e.launch_id in before_launches
        else:
            early = e.t_start < cut
        (before if early else after).append(e)
    return before, after


def _given(steps, title) -> Optional[int]:
    n = steps.get(title) if isinstance(steps, dict) else steps
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"steps for section {title!r}: expected a positive int, got {n!r}")
    return n


def phases(title: str, timed: list, steps=None) -> List[Phase]:
    """The rows of one section (its events as recorded)."""
    replays = sum(1 for e in timed if isinstance(e, ev.Replay))
    cut = capture_cut(timed)
    if cut is not None:
        once, rest = split_at(timed, cut)
        return [Phase(f"{title}: warm-up + capture (once)", once, 1, ONCE),
                Phase(f"{title}: replays", rest, replays, "replay")]
    given = _given(steps, title) if steps is not None else None
    if given is not None:
        return [Phase(title, timed, given, "training step")]
    if replays:                        # a replayed step needs no mark_step (claim I8)
        return [Phase(title, timed, replays, "replay")]
    if any(isinstance(e, ev.MarkStep) for e in timed):
        return [Phase(title, timed, step_count(timed), "step (counted)")]
    return [Phase(title, timed, 1 if timed else 0, "whole section")]


def _row(p: Phase, device=None) -> dict:
    from hpu_lab import lab
    m = section_metrics(p.events, clock="measured")    # the counts only (they are the same on any clock)
    if not p.events:
        return {"section": p.title, "a step is": p.per, "steps": 0, **{k: 0 for k, *_ in _COLS[3:-1]},
                "verdict": "no events"}
    t = lab.step_times_of(p.events, steps=max(p.steps, 1), card=device, name=p.title)
    return {"section": p.title, "a step is": p.per, "steps": p.steps, "compiles": m["compiles"],
            "recompiles": m["recompiles"], "host syncs": m["host syncs"], "replays": m["replays"],
            "host ms/step": round(t.host_ms, 3), "your code ms/step": round(t.user_ms, 3),
            "device ms/step": round(t.device_ms, 3), "wall ms/step": round(t.wall_ms, 3),
            "device busy %": round(100 * t.device_busy_fraction, 1), "verdict": t.verdict}


def compare_rows(sections, clock=None, device=None, steps: Union[int, Dict[str, int], None] = None) -> List[dict]:
    """One dict per row, timed by ``hpu_lab.lab.step_times_of`` on the Gaudi clock of ``device``
    (host and device modeled; "your code ms/step" measured on this CPU, apart). A row whose "a step
    is" reads ``"once"`` holds totals (warm-up + capture). ``clock`` must be the Gaudi clock (or
    None): a measured step time would be the emulator's, not a Gaudi's."""
    if (clock or "gaudi") != "gaudi":
        raise ValueError(f"compare_rows(clock={clock!r}): the table's step times are the Gaudi clock's "
                         "(hpu_lab.lab.step_times); draw_compare(clock='measured') draws the measured timelines")
    rows = []
    for title, events in _pairs(sections):
        rows.extend(_row(p, device) for p in phases(title, list(events), steps))
    return rows


def draw_compare(sections, sharex: bool = False, clock=None, device=None):
    """A Figure with one compact timeline per section, top to bottom; a dashed line marks where a
    section's capture ends and its replays begin."""
    from matplotlib.figure import Figure
    pairs = _pairs(sections)
    fig = Figure(figsize=(10, 2.1 * max(len(pairs), 1) + 1.3), layout="constrained")
    axes = fig.subplots(max(len(pairs), 1), 1, sharex=sharex, squeeze=False)[:, 0]
    kinds = set()
    replays = has_ends = inner = False
    label = "measured on this CPU"
    for ax, (title, events) in zip(axes, pairs):
        timed, label, _ = on_clock(events, clock, device)
        draw_timeline(events, ax=ax, compact=True, title=title, clock=clock, device=device)   # names its clock
        yours = any(isinstance(e, ev.UserCode) for e in timed)
        ax.set_xlabel("ms" if label.startswith("measured") else
                      "modeled ms" + (" (your code: measured)" if yours else ""), fontsize=8)
        kinds |= {b.kind for b in timeline_rows(timed)}
        replays = replays or any(isinstance(e, ev.Replay) for e in timed)
        ends = step_ends(timed)
        has_ends = has_ends or bool(ends)
        inner = inner or sum(isinstance(e, ev.MarkStep) for e in timed) > sum(
            isinstance(timed[i], ev.MarkStep) for i in ends)
        cut = capture_cut(timed)
        if cut is not None:
            x = (cut - min(e.t_start for e in timed)) / 1e6
            right = x > 0.6 * ax.get_xlim()[1]           # the label on the side with room
            ax.axvline(x, color="#333333", ls="--", lw=1, gid="capture-cut")
            ax.annotate("capture ends, replays begin " if right else " capture ends, replays begin",
                        (x, 1), xycoords=("data", "axes fraction"), fontsize=8, va="top",
                        ha="right" if right else "left")
    fig.suptitle(f"Sections side by side, {label} (each from its own start: the time scales differ)",
                 fontsize=10, x=0.01, ha="left")
    handles = legend_handles(kinds, replays=replays, step_lines=has_ends, inner_marks=inner)
    fig.legend(handles=handles, loc="outside lower center", ncol=legend_columns(handles, fig.get_size_inches()[0], 8.5),
               fontsize=8.5, frameon=False)
    return fig


_COLS = [("section", "section", False), ("a step is", "a step is", False), ("steps", "steps", True),
         ("compiles", "compiles", True), ("recompiles", "recompiles", True), ("host syncs", "host syncs", True),
         ("replays", "replays", True), ("host ms/step", "host ms/step", True),
         ("your code ms/step", "your code ms/step", True),
         ("device ms/step", "device ms/step", True), ("wall ms/step", "wall ms/step", True),
         ("device busy %", "device busy %", True), ("verdict", "verdict", False)]


_ONCE_CSS = "<style>.hpu-t tr.once td{background:#f6f6f6;font-style:italic}</style>"


def compare_html(sections, clock=None, device=None, steps=None) -> str:
    """The table (always on the Gaudi clock: ``clock`` only names the pictures' clock beside it)."""
    rows = compare_rows(sections, None, device, steps)
    label = on_clock([], "gaudi", device)[1]
    yours = any(r["your code ms/step"] for r in rows)
    how = ("times from hpu_lab.lab.step_times; host ms/step: the bridge's modeled host work a step, its waits "
           "for the device left out; device ms/step: the modeled time of the recipes launched; wall ms/step: "
           "how much later each step ends, modeled" +
           ("; your code ms/step: your own code (data loading, print, sleep), measured on this CPU, part of the "
            "host's time and of the wall time" if yours else ""))
    if (clock or CLOCK["clock"]) == "measured":
        how += "; the timelines below are as measured on this CPU, the table stays on the Gaudi clock"
    once = ("; a row whose step is 'once' is one-time work (warm-up and capture) and shows its totals, "
            "not a per-step cost" if any(r["a step is"] == ONCE for r in rows) else "")
    return (_CSS + _ONCE_CSS + f"<p style='margin:2px 0'><b>{label}</b></p>" +
            table_html(rows, [c for c in _COLS if yours or c[0] != "your code ms/step"], row_class=lambda r: "once" if r["a step is"] == ONCE else "") +
            f"<p style='font-size:11px;color:#555'>{how}{once}.</p>")


def compare(sections: Sequence, dpi: int = STORED_DPI, clock=None, device=None, steps=None):
    """A widget with the comparison table and the stacked timelines, and a switch between the
    Gaudi clock (default) and the measured clock. ``steps``: training steps per section (see above)."""
    import ipywidgets as W
    from .panel import figure_bundle
    from .static import snapshot     # also a static table + picture, for viewers without a kernel
    pairs = _pairs(sections)
    for title, _ in pairs:                 # a bad ``steps`` fails now, not inside a widget callback
        if steps is not None:
            _given(steps, title)
    table, out = W.HTML(), W.Output()
    options = [("Gaudi clock (modeled)", "gaudi"), ("measured on this CPU", "measured")]
    switch = W.ToggleButtons(options=options, value=clock or CLOCK["clock"], description="timelines")

    def show(which):                       # the table is the Gaudi clock's; the switch redraws the timelines
        table.value = compare_html(pairs, which, device, steps)
        out.outputs = (figure_bundle(draw_compare(pairs, clock=which, device=device), dpi),)
    switch.observe(lambda ch: show(ch["new"]), names="value")
    show(switch.value)
    return snapshot(W.VBox([switch, table, out]))
