"""The metrics of one section, counted from its events (not from the global metrics, so two
sections never mix), and their HTML table."""
from __future__ import annotations

import html
from collections import Counter
from typing import Sequence

from hpu_lab import events as ev

from .common import on_clock, step_count, union_ns
from .timeline import _verdict, op_cost_ns


def steps_of(events: Sequence[ev.Event]) -> int:
    """Training steps in the section, as its timeline counts them (common.step_ends: lazy mode's
    two mark_steps a step are one, a replay is one); at least 1 when anything happened."""
    return step_count(events)


def section_metrics(events: Sequence[ev.Event], clock=None, device=None) -> dict:
    """Counts and times of a section. Times are on the Gaudi clock by default (``clock``, see
    common.set_clock). ``host ms/step`` is the time the host was *not* waiting for the device
    (window minus host-sync waits) divided by the steps; ``device ms/step`` the device's busy time."""
    c = Counter(type(e) for e in events)
    timed, clock_label, retimed = on_clock(events, clock, device)
    compiles = [e for e in events if isinstance(e, ev.Compile)]
    lookups = [e for e in events if isinstance(e, ev.CacheLookup)]
    syncs = [e for e in events if isinstance(e, ev.HostSync)]
    fallbacks = [e for e in events if isinstance(e, ev.CPUFallback)]
    mem = [e for e in events if isinstance(e, ev.MemorySample)]
    v = _verdict(timed, op_cost_ns(retimed))
    steps = steps_of(events)
    wait_ms = union_ns((e.t_start, e.t_end) for e in timed if isinstance(e, ev.HostSync)) / 1e6
    return {
        "steps": steps,
        "ops accumulated": c[ev.OpAccumulated],
        "graphs built": c[ev.GraphBuilt],
        "compiles": len(compiles),
        "recompiles": sum(1 for e in compiles if e.reason != "first compile"),
        "clock": clock_label,
        "compile ms": round(sum(e.duration_ns for e in timed if isinstance(e, ev.Compile)) / 1e6, 3),
        "cache hits": sum(1 for e in lookups if e.hit),
        "cache misses": sum(1 for e in lookups if not e.hit),
        "launches": c[ev.Launch],
        "device executions": c[ev.DeviceExecution],
        "device busy ms": round(v.device_busy_ms, 3),
        "host syncs": len(syncs),
        "syncs by reason": dict(Counter(e.reason for e in syncs)),
        "host wait ms": round(wait_ms, 3),
        "CPU fallbacks": len(fallbacks),
        "fallbacks by op": dict(Counter(e.op for e in fallbacks)),
        "captures": c[ev.CaptureEnd],
        "replays": c[ev.Replay],
        "collectives": c[ev.Collective],
        "errors": c[ev.Error],
        "peak memory bytes": max((e.max_in_use for e in mem), default=0),
        "window ms": round(v.window_ms, 3),
        "host ms/step": round((v.window_ms - wait_ms) / steps, 3) if steps else 0.0,
        "device ms/step": round(v.device_busy_ms / steps, 3) if steps else 0.0,
        "device busy %": round(100 * v.busy_fraction, 1),
        "verdict": v.text,
    }


def _fmt(k: str, v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{html.escape(str(a))}: {b}" for a, b in sorted(v.items(), key=lambda kv: -kv[1])) or "none"
    if k == "peak memory bytes":
        return f"{v / 2**20:.2f} MiB" if v else "no sample"
    return html.escape(str(v))


def metrics_html(events: Sequence[ev.Event], clock=None, device=None) -> str:
    m = section_metrics(events, clock, device)
    rows = "".join(f"<tr><th style='text-align:left;padding:2px 8px;background:#f3f3f3'>{html.escape(k)}</th>"
                   f"<td style='padding:2px 8px'>{_fmt(k, v)}</td></tr>" for k, v in m.items())
    return ("<p>Counted from this section's events only.</p>"
            f"<table style='border-collapse:collapse;font-size:12px' border='1'>{rows}</table>")
