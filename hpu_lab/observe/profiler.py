"""Export what the emulator did: a Chrome trace of the event stream, and the compiled graphs as
DOT / GraphML / pbtxt / SVG text.

    from hpu_lab.observe import profiler
    with profiler.profile():                    # or profiler.start() ... profiler.stop()
        train()
    profiler.export_chrome_trace("trace.json")  # open in https://ui.perfetto.dev or chrome://tracing
    profiler.export_chrome_trace("cpu.json", clock="measured")   # the Gaudi clock is the default

    profiler.dump_graph(compile_event.graph, "step.graphml", "graphml")

With ``GRAPH_VISUALIZATION=true`` the runtime calls ``dump_graph_if_enabled`` for every compiled
graph, which writes ``./.graph_dumps/<PT_HPU_GRAPH_DUMP_PREFIX><name>.<PT_HPU_GRAPH_DUMP_FORMAT>``
like the real bridge (the graph writers live in compiler/graph_dump.py, re-exported here). Everything here
is plain text written by hand: no plotting or graph library is imported, so ``import hpu_lab`` stays
light.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Iterable, List, Optional, Sequence

from .. import events as ev
from ..compiler.graph_dump import FORMATS, GRAPH_DUMP_DIR, dump_graph, dump_graph_if_enabled, graph_to_dot, graph_to_graphml, graph_to_pbtxt, graph_to_svg

# --------------------------------------------------------------------------- collecting

_active: Optional[ev.Collector] = None
_last: List[ev.Event] = []


def start() -> ev.Collector:
    """Start collecting every event (a global collector; ``stop()`` ends it)."""
    global _active
    if _active is not None:
        raise RuntimeError("hpu_lab.observe.profiler: already started; call profiler.stop() first")
    _active = ev.Collector().start()
    return _active


def stop() -> List[ev.Event]:
    """Stop the global collector and return its events (also kept for export_chrome_trace)."""
    global _active, _last
    if _active is None:
        return list(_last)
    _active.stop()
    _last = _active.events
    _active = None
    return list(_last)


@contextlib.contextmanager
def profile():
    """``with profiler.profile() as c: ...``: collect the block's events (``c.events``)."""
    c = start()
    try:
        yield c
    finally:
        stop()


def collected() -> List[ev.Event]:
    """The events of the running collector, or of the last one stopped."""
    return list(_active.events) if _active is not None else list(_last)


# --------------------------------------------------------------------------- Chrome trace

def _jsonable(v):
    if isinstance(v, ev.GraphSummary):
        return {"nodes": len(v.nodes), "edges": len(v.edges)}
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def _args(e: ev.Event) -> dict:
    return {f.name: _jsonable(getattr(e, f.name)) for f in dataclasses.fields(e)
            if f.name not in ("t_start", "t_end", "lane")}


def _name(e: ev.Event) -> str:
    if isinstance(e, ev.OpAccumulated):
        return e.op
    if isinstance(e, ev.Compile):
        return "compile" if e.reason == "first compile" else "recompile"
    if isinstance(e, ev.CacheLookup):
        return "cache hit" if e.hit else "cache miss"
    if isinstance(e, ev.HostSync):
        return f"sync {e.reason}"
    if isinstance(e, ev.DeviceExecution):
        return f"recipe {e.key[:8]}"
    if isinstance(e, ev.CPUFallback):
        return f"CPU fallback {e.op}"
    if isinstance(e, ev.Collective):
        return e.op or "collective"
    return {"GraphBuilt": "graph build", "MarkStep": "mark_step", "Launch": "launch", "HostToDevice": "copy H2D",
            "CaptureBegin": "capture begin", "CaptureEnd": "capture", "Replay": "replay",
            "Error": "error"}.get(e.kind, e.kind)


def lane_name(lane: str, measured: bool = False, sep: str = " ") -> str:
    """What a lane is, as the trace and the panels (widgets/timeline.py) both name it: your code
    (``"user"``: UserCode events, always measured), the host (on the Gaudi clock the modeled Gaudi
    host, i.e. the bridge's work: docs/gaudi_clock.md section 3; on the measured clock the emulator on
    this CPU) or a device stream ``hpu:N``. ``sep`` goes before the parenthesis (a newline in a panel)."""
    if lane == "user":
        return f"your code{sep}(measured, this CPU)"
    if lane == "host":
        return f"host: emulator{sep}(measured, this CPU)" if measured else f"host: the bridge{sep}(modeled)"
    stream = lane.split(":")[-1]
    return f"{lane} device, stream {stream}{sep}({'emulated, measured' if measured else 'modeled'})"


def _lane_of(e: ev.Event) -> str:
    """Your own code gets its own lane, as in the panels: it is measured, the host lane modeled."""
    return "user" if isinstance(e, ev.UserCode) else e.lane


CLOCKS = ("gaudi", "measured")


def chrome_trace(events: Sequence[ev.Event], clock: str = "gaudi", device=None) -> dict:
    """The Chrome trace of ``events``: {"traceEvents": [...]}. Pure.

    ``clock``: "gaudi" (default: the events re-timed on the Gaudi clock of ``device``, default
    HPU_LAB_DEVICE; see hpu_lab.perfmodel) or "measured" (wall time on this CPU); the process
    name says which. Spans become complete events (ph "X", ts/dur in µs since the first event),
    zero-length events instants (ph "i"), memory samples a counter (ph "C"); each lane is a thread
    (pid 0) named by a metadata event; flow arrows (ph "s"/"f") join a launch to its device execution.
    """
    if clock not in CLOCKS:
        raise ValueError(f"chrome_trace: clock {clock!r}: expected one of {', '.join(CLOCKS)}")
    label = "measured on this CPU"
    if clock == "gaudi":
        from .. import perfmodel
        r = perfmodel.retime(list(events), device)
        events, label = r.events, f"Gaudi clock: {r.card.device_name} (modeled)"
    events = sorted(events, key=lambda e: e.t_start)
    t0 = min((e.t_start for e in events), default=0)
    lanes = ["host"] + (["user"] if any(isinstance(e, ev.UserCode) for e in events) else []) + \
        sorted({e.lane for e in events if e.lane != "host"}, key=lambda s: (len(s), s))
    tid = {lane: i for i, lane in enumerate(lanes)}
    out = [{"ph": "M", "pid": 0, "tid": 0, "name": "process_name", "args": {"name": f"hpu_lab \u2014 {label}"}}]
    for lane, i in tid.items():
        out.append({"ph": "M", "pid": 0, "tid": i, "name": "thread_name",
                    "args": {"name": lane_name(lane, measured=clock == "measured")}})
        out.append({"ph": "M", "pid": 0, "tid": i, "name": "thread_sort_index", "args": {"sort_index": i}})
    launched = {e.launch_id for e in events if isinstance(e, ev.DeviceExecution)}

    def us(t):
        return round((t - t0) / 1000.0, 3)

    for e in events:
        base = {"name": _name(e), "cat": e.kind, "pid": 0, "tid": tid[_lane_of(e)], "ts": us(e.t_start)}
        if isinstance(e, ev.MemorySample):
            out.append({**base, "ph": "C", "name": "memory",
                        "args": {"InUse": e.in_use, "MaxInUse": e.max_in_use}})
            continue
        if e.t_end > e.t_start:
            out.append({**base, "ph": "X", "dur": us(e.t_end) - us(e.t_start), "args": _args(e)})
        else:
            out.append({**base, "ph": "i", "s": "t", "args": _args(e)})
        if isinstance(e, ev.Launch) and e.launch_id in launched:
            out.append({"ph": "s", "id": e.launch_id, "name": "launch", "cat": "flow", "pid": 0,
                        "tid": tid[e.lane], "ts": us(e.t_start)})
        elif isinstance(e, ev.DeviceExecution):
            out.append({"ph": "f", "bp": "e", "id": e.launch_id, "name": "launch", "cat": "flow", "pid": 0,
                        "tid": tid[e.lane], "ts": us(e.t_start)})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def export_chrome_trace(path: str, events: Optional[Iterable[ev.Event]] = None, clock: str = "gaudi",
                        device=None) -> str:
    """Write ``events`` (default: the profiler's collected events) as Chrome trace JSON on the
    Gaudi clock (default) or the measured clock (``clock="measured"``); return path."""
    evs = collected() if events is None else list(events)
    if events is None and not evs:
        raise RuntimeError("hpu_lab.observe.profiler.export_chrome_trace: no events; pass events=... or "
                           "profile first with profiler.start()/stop() or `with profiler.profile():`")
    with open(path, "w") as f:
        json.dump(chrome_trace(evs, clock, device), f)
    return path
