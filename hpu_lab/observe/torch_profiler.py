"""torch.profiler shows the emulated HPU (issue 11, point 8).

On Gaudi, ``torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.HPU])`` (what
optimum-habana's ``HabanaProfile`` uses) writes a trace with the device's activity next to the CPU
ops. Kineto knows nothing of hpu_lab's device, so hpu_lab adds its own events to the trace the
profiler exports:

- while a profiler's trace is being recorded (``start_trace`` to ``stop_trace``: the active part of
  a ``schedule``, or the whole ``with`` block), every hpu_lab event is collected;
- ``export_chrome_trace`` (also reached through ``tensorboard_trace_handler``) writes Kineto's trace,
  then adds those events as one more process, "HPU 0 (hpu_lab emulated)", with a thread per lane:
  "host: emulator (measured, this CPU)" for graph builds, cache lookups, compiles, launches, host
  syncs, copies and mark_steps (your own code: "your code (measured, this CPU)"; the lanes are
  named as the panels name them, ``hpu_lab.observe.profiler.lane_name``), and one per device stream for the recipes' execution (with flow arrows from each
  launch to its execution), all on the trace's own clock: the times measured on this CPU, as
  Kineto's are (the Gaudi clock's modeled times are ``hpu_lab.observe.profiler.export_chrome_trace``'s).

They are in the exported trace (TensorBoard, Perfetto, chrome://tracing); ``prof.key_averages()``
still lists only the CPU ops Kineto recorded. The events are collected whatever ``activities`` say
(they only add a process to the file).
"""
from __future__ import annotations

import gzip
import json
import time

from .. import events as ev

HPU_PID = 1_000_000           # a pid Kineto's own processes (OS pids, device ids) do not use
_FLOW_BASE = 1 << 40          # keeps hpu_lab's flow ids apart from Kineto's
_installed = False


def _to_kineto(events, base_ns: int) -> list:
    """hpu_lab events as Chrome trace events on Kineto's clock (unix time, ``base_ns`` origin)."""
    from .profiler import chrome_trace
    if not events:
        return []
    offset = time.time_ns() - time.perf_counter_ns()        # event clock (perf_counter) -> unix
    t0 = min(e.t_start for e in events)
    shift = (t0 + offset - base_ns) / 1000.0                 # µs: where the first event lands
    out = []
    # measured, not the Gaudi clock: Kineto's CPU ops beside them are this machine's times, and the
    # Gaudi clock's modeled host lane (a compile, a launch...) would place the device's work apart
    # from the CPU ops that caused it
    for e in chrome_trace(events, clock="measured")["traceEvents"]:
        e = dict(e, pid=HPU_PID)
        if e.get("ph") == "M":
            if e["name"] == "process_name":
                e["args"] = {"name": "HPU 0 (hpu_lab emulated)"}
        else:
            e["ts"] = round(e["ts"] + shift, 3)
        if e.get("ph") in ("s", "f"):
            e["id"] = _FLOW_BASE + e["id"]
        out.append(e)
    out.append({"ph": "M", "pid": HPU_PID, "name": "process_sort_index", "args": {"sort_index": HPU_PID}})
    return out


def merge_into(path: str, events) -> None:
    """Add ``events`` to the Chrome trace Kineto wrote at ``path`` (.json or .json.gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    trace.setdefault("traceEvents", []).extend(_to_kineto(events, int(trace.get("baseTimeNanoseconds", 0))))
    with opener(path, "wt") as f:
        json.dump(trace, f)


def install() -> None:
    """Wrap torch.profiler's trace start/stop/export (idempotent; ``import hpu_lab`` calls it)."""
    global _installed
    if _installed:
        return
    from torch.profiler import profiler as tp
    cls = tp._KinetoProfile
    start_trace, stop_trace, export = cls.start_trace, cls.stop_trace, cls.export_chrome_trace

    def start_trace_hpu(self):
        start_trace(self)
        self._hpu_lab_events = []
        self._hpu_lab_collector = ev.Collector().start()

    def stop_trace_hpu(self):
        c = getattr(self, "_hpu_lab_collector", None)
        if c is not None:
            c.stop()
            self._hpu_lab_events = c.events
            self._hpu_lab_collector = None
        stop_trace(self)

    def export_hpu(self, path, *args, **kwargs):
        result = export(self, path, *args, **kwargs)
        evs = getattr(self, "_hpu_lab_events", None)
        if evs:
            merge_into(path, evs)
        return result

    cls.start_trace, cls.stop_trace, cls.export_chrome_trace = start_trace_hpu, stop_trace_hpu, export_hpu
    _installed = True
