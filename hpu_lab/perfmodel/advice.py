"""The advisor's rules: read a recording's events and say what the seeds would say about them.

    advise(events, verdict)  # ["host-bound: device idle 78% of the step time ... consider HPU Graphs (seed 000)", ...]

One rule set, two readers: the panels' Advice tab (widgets.advisor, on live events) and the
``habana_perf_tool`` command (hpu_lab.tools.perf_tool, on the events of a Chrome trace file). Each
rule is a small function ``rule(events) -> list of strings`` (empty when it has nothing to say),
except ``host_or_device_bound(events, verdict)``, which is given how to measure the window; ``RULES``
lists them in the order the advice is shown. Rules read events only.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Dict, Iterable, List, Sequence

from .. import events as ev


def launch_steps(events: Iterable[ev.Event]) -> Dict[int, int]:
    """launch_id -> the step in which the host launched it."""
    return {e.launch_id: e.step for e in events if isinstance(e, ev.Launch)}


def step_of(e: ev.Event, launches: Dict[int, int]) -> int:
    """The step an event belongs to. A device execution belongs to the step that launched it
    (the executor may finish it while the host is already tracing the next step)."""
    if isinstance(e, ev.DeviceExecution):
        return launches.get(e.launch_id, e.step)
    return e.step


_CELL_FILE = re.compile(r"^(?:.*/)?\d{6,}\.py:(\d+)$")     # ipykernel names cells /tmp/ipykernel_N/123456789.py


def pretty_src(src: str) -> str:
    """'1591153720.py:3' (a notebook cell, as ipykernel names it) -> 'cell line 3'; others unchanged."""
    m = _CELL_FILE.match(src or "")
    return f"cell line {m.group(1)}" if m else src


# Host syncs that read a value back to Python (logging / printing), as opposed to an explicit
# synchronize or a data-dependent op.
VALUE_READS = (".item()", "print", ".tolist()", ".cpu()", "bool/float/int")

# A value read "every step" means: in at least this fraction of the steps (a training iteration
# often has 2-3 mark_steps, so one .item() per iteration is 1/3 to 1/2 of the steps).
EVERY_STEP_FRACTION = 1 / 3


def _compiles(events) -> List[ev.Compile]:
    return sorted((e for e in events if isinstance(e, ev.Compile)), key=lambda e: e.t_start)


def _recompiles(events) -> List[ev.Compile]:
    return [c for c in _compiles(events) if c.reason != "first compile"]


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def host_or_device_bound(events: Sequence[ev.Event], verdict: Callable) -> List[str]:
    """Steady state only: steps that compiled are left out (compiling always leaves the device
    idle; that is warm-up, seed 002 O3, not a property of the loop). ``verdict(events)`` measures
    the window (``.bound``, ``.busy_fraction``, ``.idle_fraction``, ``.clock``): the panels re-time
    live events on the Gaudi clock (widgets.timeline.verdict), habana_perf_tool reads the times a
    trace already holds (hpu_lab.tools.perf_tool)."""
    if not any(isinstance(e, ev.DeviceExecution) for e in events):
        return []
    launches = launch_steps(events)
    compiled = {e.step for e in events if isinstance(e, ev.Compile)}
    steady = [e for e in events if step_of(e, launches) not in compiled]
    note = "compile steps left out"
    if not any(isinstance(e, ev.DeviceExecution) for e in steady):
        steady, note = list(events), "including compilation: no step ran without compiling"
    v = verdict(steady)
    note = f"{note}; {v.clock}"
    if v.bound == "host-bound":
        if any(isinstance(e, ev.Replay) for e in steady):
            return [f"host-bound even with HPU Graph replay: device idle {v.idle_fraction:.0%} of the step time "
                    f"({note}) \u2014 the host time is outside the graph: data loading, logging, "
                    "Python between replays (seed 000)"]
        return [f"host-bound: device idle {v.idle_fraction:.0%} of the step time ({note}) \u2014 "
                "increase the batch size (more device work for the same host work per step, seed 003), "
                "or consider HPU Graphs, which replay the step without tracing it again (seed 000)"]
    return [f"device-bound: device busy {v.busy_fraction:.0%} of the step time ({note}) \u2014 "
            "the device is the bottleneck; HPU Graphs would not make this faster (seed 000)"]


def shape_recompiles(events: Sequence[ev.Event]) -> List[str]:
    shaped = [c for c in _recompiles(events) if "shape changed" in c.reason]
    if not shaped:
        return []
    return [f"recompiled {_times(len(shaped))}: input shapes vary (e.g. \"{shaped[0].reason}\" at step "
            f"{shaped[0].step}) \u2014 pad the last batch or use drop_last (seed 002)"]


def constant_recompiles(events: Sequence[ev.Event]) -> List[str]:
    const = [c for c in _recompiles(events) if "constant changed" in c.reason]
    if not const:
        return []
    return [f"loop variable became a graph constant (seed 003): recompiled {_times(len(const))}, e.g. "
            f"\"{const[0].reason}\" \u2014 keep it in a tensor on the device and update it with tensor "
            "ops (e.g. torch.roll) so the graph stays the same"]


def other_recompiles(events: Sequence[ev.Event]) -> List[str]:
    rest = [c for c in _recompiles(events)
            if "shape changed" not in c.reason and "constant changed" not in c.reason]
    if not rest:
        return []
    return [f"recompiled {_times(len(rest))} because the graph changed (e.g. \"{rest[0].reason}\") \u2014 "
            "keep each step's ops the same, or put a mark_step between the static and the dynamic "
            "part so only the small part recompiles (seed 003)"]


def value_read_syncs(events: Sequence[ev.Event]) -> List[str]:
    reads = [e for e in events if isinstance(e, ev.HostSync) and e.reason.startswith(VALUE_READS)]
    steps = {e.step for e in events if isinstance(e, ev.MarkStep)}
    if len(reads) < 3 or not steps:
        return []
    read_steps = {e.step for e in reads}
    if len(read_steps) < EVERY_STEP_FRACTION * len(steps):
        return []
    (reason, src), _ = Counter((e.reason, e.src) for e in reads).most_common(1)[0]
    where = f" at {pretty_src(src)}" if src else ""
    what = ".item() (e.g. loss.item())" if reason == ".item()" else reason
    return [f"{what}{where} forces a host sync in {len(read_steps)} of {len(steps)} steps "
            f"({len(reads)} syncs) \u2014 the host waits for the device each time; log every N steps "
            "instead (seed 003: print frequency)"]


def data_dependent_syncs(events: Sequence[ev.Event]) -> List[str]:
    dd = Counter(e.reason for e in events if isinstance(e, ev.HostSync) and e.reason.startswith("data-dependent"))
    return [f"{reason} forced a host sync {_times(n)}: its output shape depends on the values, so the graph "
            "is cut there (seed 000: dynamic ops stay outside the graph)" for reason, n in dd.most_common(3)]


def cpu_fallbacks(events: Sequence[ev.Event]) -> List[str]:
    fb = [e for e in events if isinstance(e, ev.CPUFallback)]
    by_op = Counter(e.op for e in fb)
    out = []
    for op, n in by_op.most_common(3):
        dtypes = sorted({d for e in fb if e.op == op for d in e.dtypes})
        dt = f" ({', '.join(dtypes)})" if dtypes else ""
        out.append(f"{n} CPU fallback{'s' if n != 1 else ''} of {op}{dt}: it runs on the CPU, with copies "
                   "to and from the device each time (seed 003)")
    return out


def errors(events: Sequence[ev.Event]) -> List[str]:
    errs = [e for e in events if isinstance(e, ev.Error)]
    if not errs:
        return []
    return [f"{len(errs)} error{'s' if len(errs) != 1 else ''} reported, first: {errs[0].message}"]


RULES: List[Callable[[Sequence[ev.Event]], List[str]]] = [
    errors, host_or_device_bound, shape_recompiles, constant_recompiles, other_recompiles,
    value_read_syncs, data_dependent_syncs, cpu_fallbacks,
]


def advise(events: Sequence[ev.Event], verdict: Callable) -> List[str]:
    """Every rule's advice, in RULES order (``verdict``: see host_or_device_bound)."""
    events = list(events)
    return [msg for rule in RULES
            for msg in (rule(events, verdict) if rule is host_or_device_bound else rule(events))]
