"""What a timeline says in words and colours: the legend (one entry per kind drawn), lane names,
bar labels short enough to fit, and the labels of the device-idle gaps that decide the verdict.
Pure helpers of timeline.draw_timeline (split out to keep that module short)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple

from hpu_lab.observe.profiler import lane_name

from .common import COLORS

if TYPE_CHECKING:
    from .timeline import Bar


def _fmt_ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.3g} ms"


_DRAW_ORDER = ["capture", "replay", "cpu fallback", "compiled call", "idle", "trace", "graph build", "cache lookup",
               "compile", "launch", "copy H2D", "copy D2H", "your code", "collective", "host sync", "earlier", "execute", "error"]
_LEGEND_NAME = {
    "trace": "ops traced", "graph build": "graph build", "cache lookup": "recipe cache lookup",
    "compile": "compile", "launch": "launch", "host sync": "host waits (sync)", "copy H2D": "copy host\u2192device",
    "collective": "collective", "capture": "HPU Graph capture", "replay": "HPU Graph replay",
    "cpu fallback": "CPU fallback (its sync inside)", "compiled call": "torch.compile call",
    "execute": "device executes a recipe", "idle": "device idle", "error": "error",
    "earlier": "device runs an earlier step's recipe",
    "your code": "your code (measured on this CPU)", "copy D2H": "copy device\u2192host",
}
# What filled a device-idle gap, as a gap label names it
_GAP_NAME = {"your code": "your code (measured)", "host sync": "sync wait", "trace": "ops traced",
             "cache lookup": "cache lookup", "copy H2D": "copy H\u2192D", "copy D2H": "copy D\u2192H"}

# Text sizes, in points: at the stored 100 dpi (static.STORED_DPI) the smallest is 10 px high.
FONT_MIN = 7.5
GAP_LABEL_FRACTION = 0.1   # device-idle gaps at least this part of the window are labelled with their fillers
_CHAR_EM = 0.62            # a character's width in ems (DejaVu Sans, generous): for "does this label fit"


def legend_handles(kinds, compiles=True, syncs=True, replays=False, step_lines=False, inner_marks=False):
    """Legend entries for bar ``kinds`` (in drawing order), plus the compile, replay and sync markers
    and the step lines (the end of a step; a mark_step inside one)."""
    from matplotlib.lines import Line2D
    out = [_patch(k) for k in sorted(set(kinds), key=lambda k: _DRAW_ORDER.index(k) if k in _DRAW_ORDER else 99)]
    if compiles:
        out += [Line2D([], [], marker="v", linestyle="none", color=COLORS[n], markeredgecolor="black", label=n)
                for n in ("first compile", "recompile")]
    if replays:
        out.append(Line2D([], [], marker="o", linestyle="none", color=COLORS["replay marker"], label="HPU Graph replay"))
    if syncs:
        out.append(Line2D([], [], marker="D", linestyle="none", color=COLORS["host sync"], label="host sync"))
    if step_lines:
        out.append(Line2D([], [], color="#777777", linestyle=":", label="end of a step"))
    if inner_marks:
        out.append(Line2D([], [], color="#c4c4c4", linestyle=":", label="mark_step inside a step"))
    return out


def legend_columns(handles, width_in: float, fontsize: float) -> int:
    """As many legend columns as fit in ``width_in`` inches: a legend wider than its figure is cut
    off at both edges."""
    if not handles:
        return 1
    widest = max(len(h.get_label()) for h in handles) * fontsize * _CHAR_EM + fontsize * 4.5   # text + swatch
    return max(1, min(len(handles), int(width_in * 72 * 0.96 // widest)))


def _patch(kind):
    from matplotlib.patches import Patch
    return Patch(facecolor=COLORS.get(kind, "#999999"), hatch="////" if kind == "idle" else None,
                 edgecolor="#bbbbbb" if kind == "idle" else "none", label=_LEGEND_NAME.get(kind, kind))


def lane_title(lane: str, measured: bool = False) -> str:
    """What a lane is: your code (always measured), the bridge's host work (modeled on the Gaudi
    clock; the emulator's own Python on the measured clock) or a device stream."""
    return lane_name(lane, measured, sep="\n")


def _short_label(b: Bar) -> str:
    """A shorter label for a bar too narrow for its full one."""
    if b.kind == "your code":
        return b.label.split(": ", 1)[-1]
    if b.kind == "compile":
        return b.label.split(" ", 1)[0]                 # "compile" or "recompile"
    if b.kind == "host sync":
        return "sync"
    return _LEGEND_NAME.get(b.kind, b.kind).split(" (")[0]


def idle_gaps(rows: Sequence[Bar], min_ms: float) -> List[Tuple[Bar, List[Tuple[str, float]]]]:
    """Each device-idle bar at least ``min_ms`` long, with what the host did meanwhile: a list of
    (kind, ms of the gap it covered), largest first (host and your-code lanes, enclosing spans left
    out: their contents are counted)."""
    work = [b for b in rows if b.lane in ("host", "user") and not b.level and b.duration_ms > 0]
    out = []
    for gap in rows:
        if gap.kind != "idle" or gap.duration_ms < min_ms:
            continue
        per: Dict[str, float] = {}
        for b in work:
            overlap = min(b.end_ms, gap.end_ms) - max(b.start_ms, gap.start_ms)
            if overlap > 0:
                per[b.kind] = per.get(b.kind, 0.0) + overlap
        out.append((gap, sorted(per.items(), key=lambda kv: -kv[1])))
    return out


def gap_text(gap: Bar, fillers: List[Tuple[str, float]], most: int = 3) -> str:
    """'device idle 64 ms: your code (measured) 44 ms, compile 20 ms' (fillers under 5% left out)."""
    named = [f"{_GAP_NAME.get(k, _LEGEND_NAME.get(k, k))} {_fmt_ms(t)}" for k, t in fillers[:most]
             if t >= 0.05 * gap.duration_ms]
    return f"device idle {_fmt_ms(gap.duration_ms)}" + (": " + ", ".join(named) if named else "")
