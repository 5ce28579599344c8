"""``habana_perf_tool --trace trace.json``: scan a trace file, list the metrics it holds, give guidance.

The real tool scans the log files written for TensorBoard and prints the metrics it measures, then
specific guidance (increase the batch size, ...). This one reads the Chrome trace hpu_lab's profiler
writes (``hpu_lab.observe.profiler.export_chrome_trace``: the Gaudi clock by default, or ``clock="measured"``):
every hpu_lab event is in it, its fields in ``args``, its times in ``ts``/``dur`` (µs) and its lane in
the thread's name. The events are rebuilt from the file and given to the advisor's rule set
(hpu_lab.perfmodel.advice, the panels' Advice tab's rules), the window measured on the trace's own
times (no re-timing: a Gaudi-clock trace already holds the modeled times).

The file is read as JSON only (never unpickled or evaluated). A missing, unreadable, corrupt or
foreign file (not a Chrome trace, or one with no hpu_lab events) is refused with a message naming
the problem, exit code 1; bad options exit 2 (argparse).

Installed as the ``habana_perf_tool`` command of the venv (pyproject ``[project.scripts]``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from typing import Dict, List, Optional, Sequence

from .. import events as ev
from ..perfmodel import advice
from ..perfmodel.timeline import bound, union_ns
from .closed_pipe import quiet_when_reader_leaves

PROG = "habana_perf_tool"
KINDS = {cls.__name__: cls for cls in vars(ev).values()
         if isinstance(cls, type) and issubclass(cls, ev.Event) and cls is not ev.Event}


class TraceError(ValueError):
    """The file is not a trace this tool can read (the message says why)."""


def load_trace(path: str) -> dict:
    """The JSON object of ``path`` (json only), or TraceError naming what is wrong with it."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise TraceError(f"trace file {path!r} not found") from None
    except IsADirectoryError:
        raise TraceError(f"trace file {path!r} is a directory") from None
    except OSError as e:
        raise TraceError(f"cannot read trace file {path!r}: {e.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise TraceError(f"{path!r} is not a JSON trace: not UTF-8 text (a .json.gz? unzip it first)") from None
    except json.JSONDecodeError as e:
        raise TraceError(f"{path!r} is not a valid JSON trace: {e.msg} at line {e.lineno} column {e.colno}") from None
    if isinstance(data, list):           # the Chrome trace format also allows a bare event array
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path!r} is JSON but not a Chrome trace: no \"traceEvents\" list")
    return data


def _field(cls, name: str, value):
    """A JSON value back as the event's field: lists were tuples; a graph was summarised to its
    node/edge counts (profiler._jsonable), which no rule reads, so it comes back as None."""
    if name == "graph":
        return None
    if isinstance(value, list):
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    return value


def events_of(trace: dict, path: str = "trace") -> List[ev.Event]:
    """The hpu_lab events of a Chrome trace, rebuilt (ns times; the "user" lane is the host's)."""
    lanes: Dict[tuple, str] = {}
    for r in trace["traceEvents"]:
        if isinstance(r, dict) and r.get("ph") == "M" and r.get("name") == "thread_name":
            name = str((r.get("args") or {}).get("name", ""))
            lanes[(r.get("pid"), r.get("tid"))] = name.split(" ")[0].rstrip(":")
    out: List[ev.Event] = []
    for r in trace["traceEvents"]:
        if not isinstance(r, dict) or r.get("ph") not in ("X", "i") or r.get("cat") not in KINDS:
            continue
        cls, args = KINDS[r["cat"]], r.get("args")
        if not isinstance(args, dict) or "step" not in args:
            continue                      # a Kineto op that happens to share a name: not ours
        try:
            t0 = round(float(r["ts"]) * 1000)
            t1 = t0 + round(float(r.get("dur", 0)) * 1000)
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"{path!r}: a {r['cat']} event has no valid ts/dur: {json.dumps(r)[:120]}") from None
        lane = lanes.get((r.get("pid"), r.get("tid")), "host")
        lane = "host" if lane in ("your", "host", "") else lane
        names = {f.name for f in dataclasses.fields(cls)} - {"t_start", "t_end", "lane"}
        kw = {k: _field(cls, k, v) for k, v in args.items() if k in names}
        try:
            out.append(cls(t_start=t0, t_end=t1, lane=lane, **kw))
        except TypeError as e:
            raise TraceError(f"{path!r}: a {r['cat']} event does not fit hpu_lab's events: {e}") from None
    if not out:
        raise TraceError(f"{path!r} holds no hpu_lab events (write one with "
                         "hpu_lab.observe.profiler.export_chrome_trace)")
    return sorted(out, key=lambda e: (e.t_start, e.t_end))


@dataclasses.dataclass
class TraceVerdict:
    """The window of a trace as the trace's clock timed it (the shape the rules read)."""
    bound: str
    window_ms: float
    device_busy_ms: float
    host_busy_ms: float
    clock: str

    @property
    def busy_fraction(self) -> float:
        return self.device_busy_ms / self.window_ms if self.window_ms > 0 else 0.0

    @property
    def idle_fraction(self) -> float:
        return 1.0 - self.busy_fraction


def measure(events: Sequence[ev.Event], clock: str = "") -> TraceVerdict:
    """Device busy (union of every stream's executions) against the window (first to last event);
    the host's work: from the window's start to its last host event, less the time it waited in
    host syncs (the gaps are host time too: Python). Work against work, as perfmodel.timeline.bound."""
    w0 = min(e.t_start for e in events)
    w1 = max(e.t_end for e in events)
    busy = union_ns((e.t_start, e.t_end) for e in events if isinstance(e, ev.DeviceExecution))
    host = [e for e in events if not isinstance(e, ev.DeviceExecution) and e.lane == "host"]
    host_end = max((e.t_end for e in host), default=w0)
    waits = union_ns((e.t_start, e.t_end) for e in host if isinstance(e, ev.HostSync))
    host_ns = max(0, host_end - w0 - waits)
    has_device = any(isinstance(e, ev.DeviceExecution) for e in events)
    return TraceVerdict(bound(host_ns, busy) if has_device else "no device work",
                        (w1 - w0) / 1e6, busy / 1e6, host_ns / 1e6, clock)


def clock_of(trace: dict) -> str:
    for r in trace["traceEvents"]:
        if isinstance(r, dict) and r.get("name") == "process_name":
            name = str((r.get("args") or {}).get("name", ""))
            if name.startswith("hpu_lab"):
                return name.split("\u2014", 1)[-1].strip()
    return "the trace's clock"


def metrics(events: Sequence[ev.Event], clock: str) -> List[tuple]:
    """(metric, value) rows: what the trace holds, counted from its events."""
    v = measure(events, clock)
    marks = sum(isinstance(e, ev.MarkStep) for e in events)
    compiles = [e for e in events if isinstance(e, ev.Compile)]
    recompiles = [c for c in compiles if c.reason != "first compile"]
    execs = [e for e in events if isinstance(e, ev.DeviceExecution)]
    sizes = sorted({e.node_count for e in execs})
    syncs = Counter(e.reason for e in events if isinstance(e, ev.HostSync))
    hits = [e.hit for e in events if isinstance(e, ev.CacheLookup)]
    h2d = sum(e.nbytes for e in events if isinstance(e, ev.HostToDevice))
    d2h = sum(e.nbytes for e in events if isinstance(e, ev.DeviceToHost))
    per = f" ({v.host_busy_ms / marks:.3f} / {v.device_busy_ms / marks:.3f} ms per mark_step)" if marks else ""
    rows = [
        ("clock", clock),
        ("window", f"{v.window_ms:.3f} ms"),
        ("device utilization", f"{v.busy_fraction:.1%} (busy {v.device_busy_ms:.3f} ms)"),
        ("host work / device work", f"{v.host_busy_ms:.3f} / {v.device_busy_ms:.3f} ms{per}"),
        ("verdict", v.bound),
        ("mark_steps", str(marks)),
        ("graph executions", f"{len(execs)} ({len({e.key for e in execs})} distinct recipes)"),
        ("graph sizes (nodes)", ", ".join(map(str, sizes)) or "-"),
        ("compiles", f"{len(compiles)} ({len(recompiles)} recompiles)"),
        ("recipe cache", f"{sum(hits)} hits, {len(hits) - sum(hits)} misses"),
        ("host syncs", ", ".join(f"{r} \u00d7{n}" for r, n in syncs.most_common()) or "0"),
        ("CPU fallbacks", str(sum(isinstance(e, ev.CPUFallback) for e in events))),
        ("copies", f"H2D {h2d} bytes, D2H {d2h} bytes"),
    ]
    return rows


def guidance(events: Sequence[ev.Event], clock: str) -> List[str]:
    """The advisor's rules, the window measured on the trace's own times."""
    return advice.advise(events, lambda evs: measure(evs, clock))


def report(path: str) -> str:
    trace = load_trace(path)
    events = events_of(trace, path)
    clock = clock_of(trace)
    rows = metrics(events, clock)
    width = max(len(k) for k, _ in rows)
    lines = [f"{PROG}: {path}: {len(events)} hpu_lab events", "", "Metrics:"]
    lines += [f"  {k:<{width}}  {val}" for k, val in rows]
    tips = guidance(events, clock)
    lines += ["", "Guidance:"] + ([f"  - {t}" for t in tips] or ["  - nothing to flag"])
    return "\n".join(lines)


@quiet_when_reader_leaves
def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description="Scan an hpu_lab Chrome trace (hpu_lab.observe.profiler."
                                "export_chrome_trace), list its metrics and give optimization guidance.")
    p.add_argument("--trace", required=True, metavar="FILE", help="the trace JSON file to scan")
    args = p.parse_args(argv)
    try:
        print(report(args.trace))
    except TraceError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
