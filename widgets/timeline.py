"""The host/device timeline: what the host did, what each device stream did, and when.

    rows = timeline_rows(events)        # pure: one Bar per span, per lane
    fig = draw_timeline(events)         # matplotlib Figure; step_range=(3, 5) zooms on steps 3..5
    verdict(events).text                # "host-bound: device idle 78% of the window ..."

Lanes: ``user`` (your own code: DataLoader fetches, sleep, print, blocks marked with
``events.user_code``; measured on this CPU on either clock), ``host`` (the bridge's host work: op
tracing, graph build, cache lookup, compile, launch, host syncs, copies, HPU Graph capture and replay;
modeled on the Gaudi clock, the emulator's own time on the measured clock) and one lane per device
stream ``hpu:N`` (recipe executions and the idle gaps between them). Times are milliseconds since
the first event of the list.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from hpu_lab import events as ev
from hpu_lab.perfmodel.timeline import bound as _bound

from .common import (COLORS, launch_steps, ms, on_clock, own_steps, resolve_steps, short_key, short_op,
                     step_ends, step_of, union_ns)
from .timeline_labels import (_CHAR_EM, _DRAW_ORDER, _LEGEND_NAME, FONT_MIN, GAP_LABEL_FRACTION,  # noqa: F401
                              _fmt_ms, _patch, _short_label, gap_text, idle_gaps, lane_title, legend_columns,
                              legend_handles)

# Ops are zero-length events; consecutive ones form one "trace" bar unless the host did
# nothing for longer than this between two of them (then the gap is not tracing).
TRACE_GAP_NS = 2_000_000

@dataclass(frozen=True)
class Bar:
    """One span of the timeline."""
    lane: str            # "user" (your code), "host" or "hpu:<stream>"
    kind: str            # "trace", "graph build", "cache lookup", "compile", "launch", "host sync",
                         # "copy H2D", "capture", "replay", "collective", "error", "execute", "idle"
    start_ms: float
    end_ms: float
    step: int
    label: str = ""
    level: int = 0       # 0: work; 1: an enclosing span (capture / replay) drawn behind the work

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


_HOST_KIND = {
    ev.GraphBuilt: "graph build",
    ev.CacheLookup: "cache lookup",
    ev.Compile: "compile",
    ev.Launch: "launch",
    ev.HostSync: "host sync",
    ev.HostToDevice: "copy H2D",
    ev.Collective: "collective",
    ev.Error: "error",
    ev.Replay: "replay",
    ev.UserCode: "your code",
    ev.DeviceToHost: "copy D2H",
    ev.CPUFallback: "cpu fallback",
    ev.CompiledCall: "compiled call",
}

# Kinds that contain other host events (the fallback's sync and compile, the replay's launches): drawn
# as a taller light band behind the work they contain, labelled above it, never over it.
ENCLOSING = ("capture", "replay", "cpu fallback", "compiled call")

# Host kinds that are not bars at all (markers or boundaries) but still end a trace run.
_NOT_A_BAR = (ev.MarkStep, ev.MemorySample, ev.CaptureBegin, ev.CaptureEnd, ev.StreamRecord, ev.StreamWait,
              ev.CopyQueued)


def _label(e: ev.Event) -> str:
    if isinstance(e, ev.Compile):
        what = "compile" if e.reason == "first compile" else "recompile"
        return f"{what} {short_key(e.key, 6)} ({e.node_count} nodes)"
    if isinstance(e, ev.CacheLookup):
        return ("hit " if e.hit else "miss ") + short_key(e.key, 6)
    if isinstance(e, ev.GraphBuilt):
        return f"build {e.node_count} nodes"
    if isinstance(e, ev.HostSync):
        return f"sync {e.reason}"
    if isinstance(e, ev.Launch):
        return f"launch {short_key(e.key, 6)}"
    if isinstance(e, ev.Replay):
        return f"replay graph {e.graph_id}"
    if isinstance(e, ev.Collective):
        return e.op
    if isinstance(e, ev.Error):
        return f"error {e.op}"
    if isinstance(e, (ev.HostToDevice, ev.DeviceToHost)):
        return f"copy {e.nbytes / 1e6:.2g} MB"
    if isinstance(e, ev.UserCode):
        return f"your code: {e.what}"
    if isinstance(e, ev.CPUFallback):
        return f"CPU fallback {short_op(e.op)}"
    if isinstance(e, ev.CompiledCall):
        return "compiled call"
    return e.kind


def lanes_of(events: Sequence[ev.Event]) -> List[str]:
    """'host' first, then every device stream seen (executions or launches), in stream order."""
    dev = {e.lane for e in events if isinstance(e, ev.DeviceExecution)}
    dev |= {f"hpu:{e.stream}" for e in events if isinstance(e, ev.Launch)}
    # every other device-lane event too: queued copies, a lazy collective on its comm stream
    dev |= {e.lane for e in events if e.lane.startswith("hpu:")}
    return ["host"] + sorted(dev, key=lambda s: (len(s), s))


def op_cost_ns(retimed) -> int:
    """What an op traced costs the host on the clock drawn: on the Gaudi clock an op's event is an
    instant at the end of its modeled cost (perfmodel.HOST.op_ns), so its work began that much
    earlier; as measured, an op's event is where it was recorded (0)."""
    if retimed is None:
        return 0
    from hpu_lab.perfmodel import HOST
    return HOST.op_ns


def window_start(events: Sequence[ev.Event], op_ns: int = 0) -> int:
    """Where the window's work begins (ns): its first event, or the start of its first op's work.
    A device execution without a span (on the Gaudi clock, one whose launch was before the window:
    the clock did not place it) is no work of the window."""
    return min((e.t_start - op_ns if type(e) is ev.OpAccumulated else e.t_start for e in events
                if not _unplaced(e)), default=0)


def _unplaced(e: ev.Event) -> bool:
    return type(e) is ev.DeviceExecution and e.t_end == e.t_start


def timeline_rows(events: Sequence[ev.Event], t0: Optional[int] = None, op_ns: int = 0,
                  earlier: frozenset = frozenset()) -> List[Bar]:
    """Every bar of the timeline, host lane first, each lane in time order. Pure.

    ``t0`` (ns) is the zero of the time axis; by default where the window's work begins. ``op_ns``:
    the host's cost of one op traced (op_cost_ns), so a trace bar starts where its first op's work
    began. Device lanes also get "idle" bars for the gaps between executions inside the window.
    ``earlier``: launch ids of executions of steps before the window, still running in it ("earlier").
    """
    if not events:
        return []
    t0 = window_start(events, op_ns) if t0 is None else t0
    launches = launch_steps(events)
    host: List[Bar] = []
    run: List[ev.OpAccumulated] = []

    def close_run():
        if run:
            host.append(Bar("host", "trace", ms(run[0].t_start - op_ns, t0), ms(run[-1].t_end, t0),
                            run[0].step, f"trace {len(run)} ops"))
            run.clear()

    open_captures: Dict[int, ev.CaptureBegin] = {}
    t_last = max(e.t_end for e in events)
    device = []
    for e in sorted(events, key=lambda e: e.t_start):
        if isinstance(e, ev.DeviceExecution):
            if not (_unplaced(e) and e.launch_id not in launches):
                device.append(e)
            continue
        if isinstance(e, ev.OpAccumulated):
            if run and e.t_start - run[-1].t_end > TRACE_GAP_NS:
                close_run()
            run.append(e)
            continue
        if isinstance(e, ev.MemorySample):
            continue                      # a sample, not host work: the trace run goes on
        close_run()
        if isinstance(e, ev.CaptureBegin):
            open_captures[e.graph_id] = e
        elif isinstance(e, ev.CaptureEnd):
            b = open_captures.pop(e.graph_id, None)
            start = b.t_start if b is not None else e.t_start
            host.append(Bar(e.lane, "capture", ms(start, t0), ms(e.t_end, t0), b.step if b else e.step,
                            f"capture graph {e.graph_id} ({e.node_count} nodes)", level=1))
        elif isinstance(e, _NOT_A_BAR):
            continue
        else:
            kind = _HOST_KIND.get(type(e), e.kind.lower())
            lane = "user" if kind == "your code" else e.lane
            host.append(Bar(lane, kind, ms(e.t_start, t0), ms(e.t_end, t0), e.step, _label(e),
                            level=1 if kind in ENCLOSING else 0))
    close_run()
    for b in open_captures.values():      # a capture still running when the list was taken
        host.append(Bar(b.lane, "capture", ms(b.t_start, t0), ms(t_last, t0), b.step,
                        f"capture graph {b.graph_id} (open)", level=1))
    host.sort(key=lambda b: (b.start_ms, -b.level))

    rows = host
    w0, w1 = ms(window_start(events, op_ns), t0), ms(t_last, t0)
    for lane in lanes_of(events)[1:]:
        execs = sorted((e for e in device if e.lane == lane), key=lambda e: e.t_start)
        lane_rows: List[Bar] = []
        cursor = w0
        for e in execs:
            a, b = ms(e.t_start, t0), ms(e.t_end, t0)
            step = step_of(e, launches)
            if a > cursor:
                lane_rows.append(Bar(lane, "idle", cursor, a, step, "idle"))
            label = f"{short_key(e.key, 6)} ({e.node_count} nodes)" + ("" if e.ok else " FAILED")
            lane_rows.append(Bar(lane, "earlier" if e.launch_id in earlier else "execute", a, b, step, label))
            cursor = max(cursor, b)
        if w1 > cursor:
            last_step = lane_rows[-1].step if lane_rows else max(e.step for e in events)
            lane_rows.append(Bar(lane, "idle", cursor, w1, last_step, "idle"))
        rows.extend(lane_rows)
    return rows


def step_ends_in(events: Sequence[ev.Event]) -> List[int]:
    """id() of each event of ``events`` that ends one of the window's own steps."""
    return [id(events[i]) for i in step_ends(events)]


# ----------------------------------------------------------------------------- the verdict

@dataclass(frozen=True)
class Verdict:
    bound: str               # "host-bound", "device-bound" or "no device work"
    window_ms: float         # first to last event
    device_busy_ms: float    # union of the device executions of every stream, in the window
    clock: str = ""          # "Gaudi clock: GAUDI2 (modeled)" or "measured on this CPU"
    host_busy_ms: float = 0.0  # the host's time in the window not spent waiting for the device

    @property
    def busy_fraction(self) -> float:
        return self.device_busy_ms / self.window_ms if self.window_ms > 0 else 0.0

    @property
    def idle_fraction(self) -> float:
        return 1.0 - self.busy_fraction

    @property
    def text(self) -> str:
        # the verdict rests on the FP32 matrix rate, which no source publishes (perfmodel/cards.py)
        note = " (FP32 matrix rate assumed)" if "FP32 matrix rate assumed" in self.clock else ""
        if self.bound == "host-bound":
            return (f"host-bound: device idle {self.idle_fraction:.0%} of the window "
                    f"(busy {_fmt_ms(self.device_busy_ms)} of {_fmt_ms(self.window_ms)}){note}")
        if self.bound == "device-bound":
            return (f"device-bound: device busy {self.busy_fraction:.0%} of the window "
                    f"({_fmt_ms(self.device_busy_ms)} of {_fmt_ms(self.window_ms)}){note}")
        return "no device work in this window"

    def __str__(self) -> str:
        return self.text


def classify(host_busy_ms: float, device_busy_ms: float) -> str:
    """Host-bound when the host's work outlasts the device's (the Gaudi clock's rule,
    perfmodel.timeline.bound): the device waits for the host to trace, compile and launch, and HPU
    Graphs help (seed 000). Otherwise the device is the bottleneck and removing host work buys
    nothing (claim G10)."""
    return _bound(host_busy_ms, device_busy_ms)


def verdict(events: Sequence[ev.Event], clock: Optional[str] = None, device=None) -> Verdict:
    """Device busy time (all streams, overlaps counted once) against the window of ``events``, on
    the Gaudi clock (default; see common.set_clock) or as measured (``clock="measured"``)."""
    if not events:
        return Verdict("no device work", 0.0, 0.0)
    events, label, retimed = on_clock(events, clock, device)
    v = _verdict(events, op_cost_ns(retimed))
    return Verdict(v.bound, v.window_ms, v.device_busy_ms, label, v.host_busy_ms)


def _verdict(events: Sequence[ev.Event], op_ns: int = 0) -> Verdict:
    """The verdict of a window: from where its work begins (window_start: on the Gaudi clock, the
    clock's zero for a whole recording, so the window is perfmodel.retime's wall) to its last span."""
    if not events:
        return Verdict("no device work", 0.0, 0.0)
    w0 = window_start(events, op_ns)
    w1 = max(e.t_end for e in events)
    busy = union_ns((max(e.t_start, w0), min(e.t_end, w1)) for e in events
                    if isinstance(e, ev.DeviceExecution) and min(e.t_end, w1) > max(e.t_start, w0))
    window = (w1 - w0) / 1e6
    if not any(isinstance(e, ev.DeviceExecution) for e in events):
        return Verdict("no device work", window, 0.0)
    busy_ms = busy / 1e6
    # the host's time not spent waiting for the device (Retimed.host_ns's definition): from the
    # window's start to its last host event, less its syncs' waits (gaps are host time: Python)
    host_end = max((e.t_end for e in events if not isinstance(e, ev.DeviceExecution)
                    and getattr(e, "lane", "host") == "host"), default=w0)
    waits = union_ns((b.start_ms, b.end_ms) for b in timeline_rows(events, t0=w0, op_ns=op_ns)
                     if b.lane == "host" and b.kind == "host sync")
    host_ms = max(0.0, (host_end - w0) / 1e6 - waits)
    return Verdict(classify(host_ms, busy_ms), window, busy_ms, host_busy_ms=host_ms)


# ----------------------------------------------------------------------------- drawing

def _window_note(all_events, own, shown, steps, t0) -> str:
    """Why a step range's window differs from its steps' time as lab.step_times counts it (both are
    right, they measure from different points): the window starts where the first step's own work
    begins; a step's wall time runs from the end of the step before it (host and device both done
    with it), which, the device still busy, can be later (or, the host idle, earlier)."""
    if not steps or steps[0] == 1 or not shown:
        return ""
    before = [e.t_end for e, k in zip(all_events, own) if k < steps[0] and not _unplaced(e)]
    if not before:
        return ""
    end_before = max(before)
    end = max([end_before] + [e.t_end for e in shown])
    window, wall = (end - t0) / 1e6, (end - end_before) / 1e6
    if abs(window - wall) <= 0.005 * max(window, 1e-9):
        return ""
    prev = steps[0] - 1
    when = (f"{_fmt_ms(window - wall)} before step {prev} ends" if window > wall
            else f"{_fmt_ms(wall - window)} after step {prev} ends")
    which = f"step {steps[0]}" if steps[0] == steps[1] else f"steps {steps[0]}\u2013{steps[1]}"
    return (f"\nwindow {_fmt_ms(window)}: it starts {when}; {which} end{'s' if steps[0] == steps[1] else ''} "
            f"{_fmt_ms(wall)} after step {prev} (lab.step_times' wall)")


MIN_BAR_PT = 2.5         # the narrowest bar drawn, in points (3.5 px at the stored 100 dpi)
MERGE_ABOVE = 3000       # rows; above this, bars of one kind closer than ~1 pixel are drawn as one
DENSE_ABOVE = 600        # rows; above this, no minimum bar width and no white bar edges


def _merge_close(bars: List[Bar], gap_ms: float) -> List[Bar]:
    """Same-kind bars separated by less than ``gap_ms`` joined into one (drawing only: the picture
    is the same at screen resolution, with far fewer rectangles to render)."""
    out: List[Bar] = []
    for b in sorted(bars, key=lambda b: b.start_ms):
        if out and b.start_ms - out[-1].end_ms < gap_ms:
            last = out[-1]
            out[-1] = Bar(last.lane, last.kind, last.start_ms, max(last.end_ms, b.end_ms), last.step, "", last.level)
        else:
            out.append(b)
    return out


def draw_timeline(events: Sequence[ev.Event], step_range: Optional[Tuple[int, int]] = None, ax=None,
                  title: Optional[str] = None, compact: bool = False, clock: Optional[str] = None, device=None):
    """Draw the timeline of ``events`` and return the matplotlib Figure.

    Steps are the recorded window's own training steps, counted from 1 (common.step_ends: lazy
    mode's two mark_steps a step are one step; a replay is one): dotted lines mark where each ends,
    labelled "end of step k". ``step_range=(3, 5)`` draws steps 3 to 5 (inclusive; ``(-2, -1)``:
    the last two), cut out of the whole window's timeline (so on the Gaudi clock the device work the
    steps before left running is still there), with the time axis starting at 0 where they start.
    Compile markers: yellow = first compile, red = recompile; host syncs are red bars with a red
    diamond; blue dots are HPU Graph replays. Device-idle gaps of at least 10% of the window are
    labelled with what the host did meanwhile. ``clock``: "gaudi" (the Gaudi clock of ``device``,
    the default) or "measured"; the clock and card are named in the title."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.collections import LineCollection
    from matplotlib import transforms

    all_events, clock_label, retimed = on_clock(list(events), clock, device)
    measured = retimed is None
    own, n_steps = own_steps(all_events)
    steps = resolve_steps(step_range, n_steps)
    if steps is None:
        shown, shown_steps = list(all_events), own
    else:
        pairs = [(e, k) for e, k in zip(all_events, own) if steps[0] <= k <= steps[1]]
        shown, shown_steps = [e for e, _ in pairs], [k for _, k in pairs]
    op_ns = op_cost_ns(retimed)
    t0 = window_start(shown, op_ns)      # the window's origin: where the work of the steps drawn begins
    carry = []
    if steps is not None and steps[0] > 1:
        # the device work of earlier steps still running when the window starts is drawn (from the
        # window's start): the device is not idle then, though the work is not the window's steps'
        carry = [dataclasses.replace(e, t_start=max(e.t_start, t0))
                 for e, k in zip(all_events, own) if k < steps[0] and isinstance(e, ev.DeviceExecution)
                 and e.t_end > t0 and not _unplaced(e)]
    own_shown = shown                    # the verdict weighs these steps' own work (as lab.step_times)
    if carry:
        shown = carry + shown
        shown_steps = [steps[0] - 1] * len(carry) + shown_steps
    rows = timeline_rows(shown, t0=t0, op_ns=op_ns, earlier=frozenset(e.launch_id for e in carry))
    lanes = lanes_of(shown) if shown else ["host"]
    if any(b.lane == "user" for b in rows):
        lanes = ["user"] + lanes
    own_figure = ax is None
    left_in = 1.35 if compact else 1.75                      # room for the lane names
    if own_figure:                       # margins set by hand below (constrained layout draws twice)
        h = (0.6 * len(lanes) + 1.0) if compact else (0.85 * len(lanes) + 2.3)
        fig = Figure(figsize=(6.5, h) if compact else (10, h))
        ax = fig.add_subplot()
        axes_w_in = fig.get_size_inches()[0] - left_in - 0.2
    else:
        axes_w_in = ax.get_position().width * ax.figure.get_size_inches()[0]
    fig = ax.figure
    ypos = {lane: -i for i, lane in enumerate(lanes)}
    x0 = min((b.start_ms for b in rows), default=0.0)
    x1 = max((b.end_ms for b in rows), default=1.0)
    span = max(x1 - x0, 1e-3)
    pt_per_ms = axes_w_in * 72 / (span * 1.02)
    dense = len(rows) > DENSE_ABOVE
    # a bar narrower than MIN_BAR_PT (zero-length spans too) is drawn that wide, without the white
    # edge that would cover it, so it stays visible; the numbers (labels, verdict) keep its real
    # length. Not when the window is dense: a sliver per bar would paint over everything (there,
    # sub-pixel bars blend in proportion to their time)
    min_w = 0.0 if dense else MIN_BAR_PT / pt_per_ms

    groups: Dict[tuple, List[Bar]] = {}
    for b in rows:
        groups.setdefault((b.lane, b.kind, b.level), []).append(b)
    if len(rows) > MERGE_ABOVE:             # thousands of bars: join the ones closer than a pixel
        groups = {k: _merge_close(v, span / 2000) for k, v in groups.items()}
    kinds_present = []
    for kind in _DRAW_ORDER + sorted({k for _, k, _ in groups} - set(_DRAW_ORDER)):
        for (lane, k, level), bars in groups.items():
            if k != kind:
                continue
            hgt = 0.8 if level else 0.5
            y = ypos[lane] - hgt / 2
            edges = ["none" if dense or b.duration_ms < 2 * min_w else "white" for b in bars]
            style = dict(facecolors=COLORS.get(kind, "#999999"), edgecolors=edges, linewidth=0.4)
            if kind == "idle":
                style.update(edgecolors="#bbbbbb", hatch="////", linewidth=0)
            ax.broken_barh([(b.start_ms, max(b.duration_ms, min_w)) for b in bars], (y, hgt),
                           gid=f"{lane}/{kind}", **style)
            if kind not in kinds_present:
                kinds_present.append(kind)

    # labels inside bars, only where the label fits (else a shorter one, else none) and does not
    # run into its neighbour's; enclosing spans are labelled in their band above the work
    fs = max(FONT_MIN, 8.0 if not compact else FONT_MIN)
    taken: Dict[tuple, List[Tuple[float, float]]] = {}
    for b in rows:
        if b.kind == "idle" or not b.label or (compact and b.kind not in ENCLOSING + ("your code", "compile")):
            continue
        width_pt = max(b.duration_ms, min_w) * pt_per_ms
        for text in (b.label, _short_label(b)):
            text_pt = len(text) * fs * _CHAR_EM + 4
            if text_pt > width_pt:
                continue
            mid = (b.start_ms + b.end_ms) / 2
            half = text_pt / 2 / pt_per_ms
            slot = taken.setdefault((b.lane, 0 if compact else b.level), [])   # compact: one row of text
            if any(a < mid + half and mid - half < z for a, z in slot):
                break
            slot.append((mid - half, mid + half))
            dy = 0.31 if b.level else 0.0
            ax.text(mid, ypos[b.lane] + dy, text, ha="center", va="center", fontsize=fs, clip_on=True,
                    color="black", gid="bar label")
            break

    host_y = ypos["host"]
    legend = [_patch(k) for k in kinds_present]
    marker_s = 60 if not compact else 30

    # compile markers above the host lane
    compiles = [e for e in shown if isinstance(e, ev.Compile)]
    for first, name in ((True, "first compile"), (False, "recompile")):
        xs = [ms(e.t_start, t0) for e in compiles if (e.reason == "first compile") == first]
        if xs:
            ax.scatter(xs, [host_y + 0.45] * len(xs), marker="v", s=marker_s, color=COLORS[name],
                       zorder=5, edgecolor="black", linewidth=0.5, gid=name)
            legend.append(Line2D([], [], marker="v", linestyle="none", color=COLORS[name], markeredgecolor="black",
                                 label=f"{name} ({len(xs)})"))
    # replays: a dot each above the host lane (a replay's own host work is a sliver at this scale)
    replays = [b for b in rows if b.kind == "replay"]
    if replays and len(replays) <= 400:
        ax.scatter([b.start_ms for b in replays], [host_y + 0.45] * len(replays), marker="o", s=marker_s * 0.6,
                   color=COLORS["replay marker"], zorder=5, edgecolor="white", linewidth=0.5, gid="replay")
        legend.append(Line2D([], [], marker="o", linestyle="none", color=COLORS["replay marker"],
                             label=f"HPU Graph replay ({len(replays)})"))
    # host syncs below the host lane
    syncs = [e for e in shown if isinstance(e, ev.HostSync)]
    if syncs:
        ax.scatter([ms(e.t_start, t0) for e in syncs], [host_y - 0.42] * len(syncs), marker="D",
                   s=30 if not compact else 14, color=COLORS["host sync"], zorder=5, gid="host sync")
        legend.append(Line2D([], [], marker="D", linestyle="none", color=COLORS["host sync"],
                             label=f"host sync ({len(syncs)})"))

    # device-idle gaps that decide the verdict: what the host did meanwhile
    for gap, fillers in idle_gaps(rows, GAP_LABEL_FRACTION * span):
        width_pt = gap.duration_ms * pt_per_ms
        for most in (3, 2, 1, 0):
            text = gap_text(gap, fillers, most)
            if len(text) * fs * _CHAR_EM + 8 <= width_pt:
                ax.text((gap.start_ms + gap.end_ms) / 2, ypos[gap.lane], text, ha="center", va="center",
                        fontsize=fs, color="#333333", gid="gap label", clip_on=True,
                        bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="#bbbbbb", alpha=0.9))
                break

    # launch -> execution: the host returns at once, the device starts later (async, claim T9)
    execs = {e.launch_id: e for e in shown if isinstance(e, ev.DeviceExecution)}
    segs = [((ms(l.t_start, t0), host_y - 0.25), (ms(execs[l.launch_id].t_start, t0), ypos[execs[l.launch_id].lane] + 0.25))
            for l in shown if isinstance(l, ev.Launch) and l.launch_id in execs]
    if segs and len(segs) <= 400:
        ax.add_collection(LineCollection(segs, colors="#555555", linewidths=0.6, alpha=0.5, gid="launch links"))
        legend.append(Line2D([], [], color="#555555", alpha=0.6, lw=0.8, label="launch \u2192 device start"))

    # where each of the window's own steps ends (a mark_step or a replay), numbered from 1
    ends = set(step_ends_in(all_events))
    marks = sorted((ms(e.t_end, t0), k) for e, k in zip(shown, shown_steps) if id(e) in ends)
    if marks:
        trans = transforms.blended_transform_factory(ax.transData, ax.transAxes)
        last_end = -1e18                                    # where the last label drawn ends
        labelled = []
        for x, step in marks:
            text = f" end of step {step}"
            text_ms = len(text) * fs * _CHAR_EM / pt_per_ms
            gap = 4 / pt_per_ms
            # right of its line; at the right edge (the last step) left of it, rather than cut off
            ha = "left" if x + text_ms <= x1 + span * 0.01 else "right"
            start = x if ha == "left" else x - text_ms
            if start > last_end + gap:
                if not compact:
                    ax.text(x, 1.0, text if ha == "left" else text + " ", transform=trans, fontsize=fs,
                            color="#555555", ha=ha, va="bottom", rotation=0, clip_on=False, gid="step label")
                labelled.append(x)
                last_end = start + text_ms
        # every boundary when they are few; only the labelled ones when they would grey the picture
        lines = [x for x, _ in marks] if len(marks) <= 150 else labelled
        ax.vlines(lines, 0, 1, transform=trans, colors="#777777", linestyles=":", linewidth=0.8,
                  zorder=0, gid="mark_step")
        how = " / ".join(n for n, kind in (("mark_step", ev.MarkStep), ("replay", ev.Replay))
                         if any(isinstance(e, kind) and id(e) in ends for e in shown))
        legend.append(Line2D([], [], color="#777777", linestyle=":", label=f"end of a step ({how})"))
    # the other mark_steps (inside a step: lazy mode's first of two), fainter and unlabelled
    inner = [ms(e.t_end, t0) for e in shown if type(e) is ev.MarkStep and id(e) not in ends]
    if inner and len(inner) <= 150:
        trans = transforms.blended_transform_factory(ax.transData, ax.transAxes)
        ax.vlines(inner, 0, 1, transform=trans, colors="#c4c4c4", linestyles=":", linewidth=0.7,
                  zorder=0, gid="inner mark_step")
        legend.append(Line2D([], [], color="#c4c4c4", linestyle=":", label="mark_step inside a step"))

    ax.set_yticks([ypos[l] for l in lanes], [lane_title(l, measured) for l in lanes], fontsize=8 if compact else 9)
    ax.set_ylim(-len(lanes) + 0.4, 0.65)
    ax.set_xlim(x0 - span * 0.01, x1 + span * 0.01)
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)

    v = _verdict(own_shown, op_ns)
    has_steps = any(isinstance(e, (ev.MarkStep, ev.Replay)) for e in shown)
    if title is None:
        where = (f"steps {steps[0]}\u2013{steps[1]} of {n_steps}" if steps else
                 f"{n_steps} step{'s' if n_steps != 1 else ''}" if has_steps else "no mark_step")
        title = f"Host and device timeline ({where}, {_fmt_ms(span)})"
    title = f"{title} \u2014 {clock_label}"
    since = "the window's start" if steps is None else f"step {steps[0]} began"
    yours = "; your code measured" if any(b.lane == "user" for b in rows) else ""
    note = "" if compact else _window_note(all_events, own, shown, steps, t0)
    ax.set_xlabel((f"time since {since} (ms)" if retimed is None else
                   f"modeled time on {retimed.card.device_name} (ms since {since}{yours})") + note,
                  fontsize=8 if compact else (8.5 if note else 10))
    vcolor = {"host-bound": "#c0392b", "device-bound": "#1e7b34"}.get(v.bound, "#555555")
    ncol = 1
    if compact:
        ax.set_title(f"{title}\n{v.text}", fontsize=9, loc="left", color="black")
        ax.tick_params(labelsize=8)
    else:
        # a long title (section name, clock, card) shrinks to the figure's width rather than run off it
        title_fs = max(9.0, min(12.0, (fig.get_size_inches()[0] - left_in) * 72 / (len(title) * _CHAR_EM)))
        ax.set_title(title, fontsize=title_fs, loc="left", pad=30)
        ax.annotate(v.text + (" (own recipes)" if carry else ""), xy=(0, 1), xycoords="axes fraction", xytext=(0, 13), textcoords="offset points",
                    fontsize=10, color=vcolor, fontweight="bold", ha="left", va="bottom", gid="verdict")
        ncol = legend_columns(legend, fig.get_size_inches()[0], 8.5)
        ax.legend(handles=legend, loc="lower center", bbox_to_anchor=(0.5, 0.005), bbox_transform=fig.transFigure,
                  ncol=ncol, fontsize=8.5, frameon=False)
    if own_figure:
        fw, fh = fig.get_size_inches()
        top_in = 0.45 if compact else 0.8                        # title (+ verdict and step labels)
        extra = 0.2 if note else 0.0                              # the x-label's second line
        bottom_in = 0.42 if compact else 0.6 + extra + 0.2 * -(-len(legend) // ncol) + 0.05
        fig.set_size_inches(fw, fh + (0 if compact else extra + 0.2 * -(-len(legend) // ncol) - 0.6))
        fh = fig.get_size_inches()[1]
        fig.subplots_adjust(left=left_in / fw, right=1 - 0.2 / fw, top=1 - top_in / fh, bottom=bottom_in / fh)
    return fig
