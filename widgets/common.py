"""Small helpers every view shares: time origin, the step of an event, short names, colours.

Everything here is a pure function of a list of ``hpu_lab.events`` dataclasses.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from hpu_lab import events as ev

# One palette for every view, so "MME orange" means the same thing on the graph and the legend.
COLORS = {
    "MME": "#f28e2b",          # matrix engine: matmul / conv
    "TPC": "#4e79a7",          # tensor processor cores: everything else
    "CPU": "#e15759",          # CPU fallback
    "view": "#a0cbe8",         # alias of another tensor: no kernel runs
    "input": "#d4d4d4",
    "output": "#9d9d9d",
    "cast": "#b07aa1",
    # timeline kinds: every kind its own hue, at least 20 CIELAB units from every other (a 64-colour
    # PNG palette merged the old near-oranges and near-reds; tests/widgets/test_widgets_timeline.py checks).
    # Enclosing spans (capture, replay, CPU fallback, compiled call) are light and opaque, so the
    # legend swatch is the colour drawn.
    "trace": "#59a14f",        # ops traced (lazy or eager)
    "graph build": "#b8e186",
    "cache lookup": "#8c564b",
    "compile": "#f1ce63",
    "launch": "#1f4e99",
    "host sync": "#d62728",
    "copy H2D": "#17becf",
    "collective": "#e377c2",
    "capture": "#fcbba1",
    "replay": "#9ecae1",
    "cpu fallback": "#d4b9da",
    "compiled call": "#c7e9c0",
    "execute": "#f28e2b",
    "earlier": "#ffbb78",      # an earlier step's recipe still running in a step range's window
    "idle": "#eeeeee",
    "your code": "#bab0ac",     # UserCode: measured on this CPU
    "copy D2H": "#9467bd",
    "error": "#000000",
    "first compile": "#f1ce63",  # markers: the compile's own yellow; a recompile red
    "recompile": "#d62728",
    "replay marker": "#2171b5",
}


# Which clock the views draw and judge by: "gaudi" (the Gaudi clock, hpu_lab.perfmodel: the
# recorded work re-timed on a card; deterministic on any machine) or "measured" (wall time on
# this CPU). ``device``: the card ("gaudi", "gaudi2", "gaudi3"; None: HPU_LAB_DEVICE).
CLOCK = {"clock": "gaudi", "device": None}
CLOCKS = ("gaudi", "measured")


def set_clock(clock: str = "gaudi", device: Optional[str] = None) -> None:
    """The default clock of every view: ``set_clock("measured")`` or ``set_clock("gaudi", "gaudi3")``."""
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r}: expected one of {', '.join(CLOCKS)}")
    if device is not None:
        from hpu_lab import perfmodel
        perfmodel.card(device)                 # a clear error for an unknown card, now
    CLOCK.update(clock=clock, device=device)


def on_clock(events: Sequence[ev.Event], clock: Optional[str] = None, device=None):
    """(events to draw, clock label, Retimed or None): ``events`` re-timed on the Gaudi clock, or as
    measured. The label names the card ("Gaudi clock: GAUDI2") or "measured on this CPU"."""
    clock = clock or CLOCK["clock"]
    if clock == "measured":
        return list(events), "measured on this CPU", None
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r}: expected one of {', '.join(CLOCKS)}")
    from hpu_lab import perfmodel
    card = perfmodel.card(device if device is not None else CLOCK["device"])
    events = events if isinstance(events, list) else list(events)
    r = _retimed(events, card)
    note = "; FP32 matrix rate assumed" if r.fp32_assumed else ""
    return r.events, f"Gaudi clock: {r.card.device_name} (modeled{note})", r


# Re-timings kept for lists that grow: one panel refresh asks for the same list in several tabs, and
# a live panel's next refresh sees the same events plus new ones. A list whose first events are the
# ones a kept Retimer was fed is re-timed from where that one stopped (only the new tail). A few
# are kept (the section's list, the tail a live timeline draws), the oldest dropped first.
_RETIMED: dict = {}          # (card name, id(first event)) -> [Retimer, first event, Retimed or None]
_KEEP = 4


def _retimed(events: list, card):
    from hpu_lab.perfmodel.timeline import Retimer
    if not events:
        return Retimer(card).result()
    key = (card.name, id(events[0]))
    hit = _RETIMED.get(key)
    if hit is None or hit[1] is not events[0] or not hit[0].continues(events):
        hit = [Retimer(card), events[0], None]
    _RETIMED.pop(key, None)
    _RETIMED[key] = hit                        # most recently used last
    while len(_RETIMED) > _KEEP:
        _RETIMED.pop(next(iter(_RETIMED)))
    retimer = hit[0]
    if retimer.n < len(events) or hit[2] is None:
        retimer.feed(events[retimer.n:])
        hit[2] = retimer.result()
    return hit[2]


def ns_origin(events: Sequence[ev.Event]) -> int:
    """The earliest ``t_start`` of the list (the zero of every "ms since section start" axis)."""
    return min((e.t_start for e in events), default=0)


def ms(t_ns: int, t0: int) -> float:
    return (t_ns - t0) / 1e6


# one definition for the views and the rule set habana_perf_tool shares (hpu_lab.perfmodel.advice)
from hpu_lab.perfmodel.advice import launch_steps, pretty_src, step_of  # noqa: E402,F401


# ----------------------------------------------------------------------------- the window's own steps
#
# An event's ``step`` counts mark_steps since the process started: lazy mode's training step has two
# (forward+backward, optimizer), a replayed step none, and a section that starts late in a notebook
# starts at step 187. The views count the recorded window's own *training* steps from 1 instead:
# a step ends at a mark_step or at an HPU Graph replay (outside a capture), and a loop's steps repeat
# their call sites, so a step ends where the next boundary's call site was already seen in it (the
# loop went round), or where a mark_step is followed by a replay (warm-up steps, then replays).

STEP_BOUNDARIES = (ev.MarkStep, ev.Replay, ev.CaptureBegin, ev.CaptureEnd)


def step_ends(events: Sequence[ev.Event]) -> List[int]:
    """Indices in ``events`` of the mark_steps and replays that end the window's training steps."""
    bounds = []                         # (index, call-site signature, kind)
    capturing = 0
    for i, e in enumerate(events):
        t = type(e)
        if t is ev.CaptureBegin:
            capturing += 1
        elif t is ev.CaptureEnd:
            capturing = max(0, capturing - 1)
        elif capturing == 0 and t is ev.MarkStep:
            bounds.append((i, ("mark_step", e.src), t))
        elif capturing == 0 and t is ev.Replay:
            bounds.append((i, ("replay", e.src, e.graph_id), t))
    ends: List[int] = []
    seen: set = set()
    for j, (i, sig, t) in enumerate(bounds):
        seen.add(sig)
        if j + 1 == len(bounds):
            ends.append(i)
            break
        nxt_sig, nxt_t = bounds[j + 1][1], bounds[j + 1][2]
        if nxt_sig in seen or (t is ev.MarkStep and nxt_t is ev.Replay):
            ends.append(i)
            seen = set()
    return ends


def own_steps(events: Sequence[ev.Event]) -> Tuple[List[int], int]:
    """(the window's own step of each event, 1-based, by index; the number of steps). Events after
    the last step's end go with it (a final sync); a device execution goes with the step that
    launched it, another device-lane event (a lazy collective) with the execution on its lane that
    contains it, else the one before it."""
    ends = step_ends(events)
    n = max(len(ends), 1)
    out: List[int] = []
    prev = 0
    for k, end in enumerate(ends, 1):
        out.extend([k] * (end + 1 - prev))
        prev = end + 1
    out.extend([n] * (len(events) - prev))
    launch_step: Dict[int, int] = {}
    execs: Dict[str, List[Tuple[int, int, int]]] = {}
    others = []                                   # device-lane events other than executions
    Launch, DeviceExecution = ev.Launch, ev.DeviceExecution
    for i, e in enumerate(events):
        t = type(e)
        if t is Launch:
            launch_step[e.launch_id] = out[i]
        elif t is DeviceExecution:
            others.append(i)
        elif e.lane != "host":
            others.append(i)
    for i in others:
        e = events[i]
        if type(e) is DeviceExecution:
            out[i] = launch_step.get(e.launch_id, out[i])
            execs.setdefault(e.lane, []).append((e.t_start, e.t_end, out[i]))
    for i in others:
        e = events[i]
        if type(e) is DeviceExecution:
            continue
        lid = getattr(e, "launch_id", 0)
        if lid and lid in launch_step:          # a queued copy: the step that queued it
            out[i] = launch_step[lid]
        elif e.lane in execs:
            before = [x for x in execs[e.lane] if x[0] <= e.t_start]
            inside = [x for x in before if e.t_start <= x[1]]
            if inside or before:
                out[i] = max(inside or before)[2]
    return out, (len(ends) if ends else (1 if events else 0))


def step_count(events: Sequence[ev.Event]) -> int:
    """How many training steps the window holds (see step_ends; 1 when it has no mark_step)."""
    return own_steps(events)[1] if events else 0


def resolve_steps(step_range: Optional[Tuple[int, int]], n: int) -> Optional[Tuple[int, int]]:
    """``step_range`` of the window's own steps (1..n, inclusive; negative counts from the end, as
    Python's indices: (-2, -1) are the last two), as (lo, hi) in 1..n; a clear error otherwise."""
    if step_range is None:
        return None
    try:
        lo, hi = step_range
    except (TypeError, ValueError):
        raise ValueError(f"step_range {step_range!r}: expected (first, last), e.g. (2, 4)") from None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi)):
        raise ValueError(f"step_range {step_range!r}: expected two ints")
    lo2, hi2 = (lo + n + 1 if lo < 0 else lo), (hi + n + 1 if hi < 0 else hi)
    if not 1 <= lo2 <= hi2 <= n:
        raise ValueError(f"step_range {step_range!r}: this window has {n} step{'s' if n != 1 else ''}, "
                         f"counted from 1 (its own training steps, as the timeline labels them; "
                         f"(-2, -1): the last two)")
    return lo2, hi2


def in_steps(events: Sequence[ev.Event], step_range: Optional[Tuple[int, int]]) -> List[ev.Event]:
    """The events of the window's own steps ``step_range`` (1-based, inclusive; all if None)."""
    if step_range is None:
        return list(events)
    steps, n = own_steps(events)
    lo, hi = resolve_steps(step_range, n)
    return [e for e, k in zip(events, steps) if lo <= k <= hi]


def short_op(op: str) -> str:
    """'aten::addmm' -> 'addmm'; 'aten::_log_softmax_backward_data' -> '_log_softmax_bwd_data'."""
    name = op.split("::", 1)[-1]
    return name.replace("backward", "bwd")


def short_key(key: str, n: int = 8) -> str:
    return key[:n]


def fmt_shape(shape: Sequence[int]) -> str:
    if not shape:
        return "scalar"
    return "\u00d7".join(str(s) for s in shape)


def steps_seen(events: Sequence[ev.Event]) -> List[int]:
    """Sorted distinct steps of the list (by the events' own step)."""
    return sorted({e.step for e in events})


from hpu_lab.perfmodel.timeline import union_ns  # noqa: E402,F401  (one union for the clock and the views)
