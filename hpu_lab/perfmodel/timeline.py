"""The Gaudi clock's timeline: recorded events re-timed on a card, a pure function of the events.

Host lane. The host's clock advances by the host thread's CPU time between events (the
``cpu_ns`` stamps, which leave out observers such as panels and collectors), so a loaded machine
does not stretch it, plus the time the thread was blocked *outside* hpu_lab (``blocked_ns``:
a DataLoader waiting for workers, a sleep, I/O), drawn as "host waits (outside hpu_lab)". The
emulator's own op tracing, graph building and compiling stay on the host lane at their measured
CPU time: they stand for the bridge's host work (op accumulation, graph passes, compilation),
which is what lazy mode costs on a real Gaudi host too (seed 000). Three kinds of host spans are
replaced by the model: a host sync lasts until the modeled completion of what it waits for; an
H2D copy the host did (``stream == -1``) lasts its modeled transfer (pageable: the staging memcpy
of ``staging_bytes`` + DMA; pinned: DMA); a collective lasts its ring-model time.

Device lanes. A pinned non_blocking copy queued on a stream (``stream >= 0``, lane ``hpu:N``) is
a DMA span on that lane, not host time: the host does not wait, and later launches on the stream
start after it. Each launch becomes a device span that starts at max(modeled launch time, the
lane's free time) and lasts the recipe's modeled cost (cost.recipe_cost of its graph).

Events recorded without stamps (``cpu_ns == -1``) fall back to wall-time gaps.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .. import events as ev
from . import cost
from .cards import Card

HOST_BOUND_IDLE = 0.5      # same threshold as the measured verdict: device idle >= 50% -> host-bound

# enclosing host spans: their start is where the host was when they began (they contain other events)
_ENCLOSING = (ev.MarkStep, ev.Replay, ev.CaptureEnd)


@dataclass(frozen=True)
class Span:
    lane: str
    kind: str
    start_ns: int
    end_ns: int
    step: int
    label: str = ""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class Retimed:
    """The events on the Gaudi clock of ``card``; times in ns from the first event (0)."""
    card: Card
    events: List[ev.Event]                       # copies of the input events, re-timed (+ HostWait, and
                                                 # DeviceExecution for launches the list did not see run)
    spans: Dict[str, List[Span]]                 # lane -> spans in time order
    host_ns: int = 0                             # host lane time not spent waiting for the device
    device_busy_ns: int = 0                      # union of device spans
    wall_ns: int = 0                             # first event to the end of the last host or device span
    sync_wait_ns: int = 0                        # host time waiting for the device (syncs)
    blocked_ns: int = 0                          # host time blocked outside hpu_lab
    compile_ns: int = 0
    launches: int = 0
    per_step: Dict[int, dict] = field(default_factory=dict)

    @property
    def device_idle_fraction(self) -> float:
        return 1.0 - self.device_busy_ns / self.wall_ns if self.wall_ns else 1.0

    @property
    def verdict(self) -> str:
        return "host-bound" if self.device_idle_fraction >= HOST_BOUND_IDLE else "device-bound"

    @property
    def verdict_text(self) -> str:
        if self.verdict == "host-bound":
            return (f"host-bound on {self.card.device_name}: device idle {self.device_idle_fraction:.0%} "
                    f"(busy {_ms(self.device_busy_ns)} of {_ms(self.wall_ns)})")
        return (f"device-bound on {self.card.device_name}: device busy {1 - self.device_idle_fraction:.0%} "
                f"({_ms(self.device_busy_ns)} of {_ms(self.wall_ns)})")

    def __repr__(self) -> str:
        return (f"Retimed({self.card.device_name}: host {_ms(self.host_ns)}, device busy "
                f"{_ms(self.device_busy_ns)}, wall {_ms(self.wall_ns)}, {self.verdict})")


def _ms(ns: int) -> str:
    x = ns / 1e6
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.3g} ms"


def _moved(e, start: int, end: int, lane: Optional[str] = None):
    """A copy of event ``e`` with new times (dataclasses.replace, ~10x faster: these are plain
    frozen dataclasses whose __init__ does nothing else)."""
    n = object.__new__(type(e))
    d = n.__dict__
    d.update(e.__dict__)
    d["t_start"], d["t_end"] = start, end
    if lane is not None:
        d["lane"] = lane
    return n


def union_ns(intervals) -> int:
    """Total length of the union of [a, b) intervals (the views use it too)."""
    total, a0, b0 = 0, None, None
    for a, b in sorted(intervals):
        if b0 is None or a > b0:
            if b0 is not None:
                total += b0 - a0
            a0, b0 = a, b
        else:
            b0 = max(b0, b)
    if b0 is not None:
        total += b0 - a0
    return total


class _CostCache:
    def __init__(self, card: Card, fusion: bool):
        self.card, self.fusion, self._c = card, fusion, {}

    def recipe(self, key: str, graph) -> int:
        k = (key, id(graph))
        c = self._c.get(k)
        if c is None:
            c = self._c[k] = cost.recipe_cost(graph, self.card, fusion=self.fusion).ns
        return c


def retime(events: Sequence[ev.Event], card: Card, fusion: bool = True) -> Retimed:
    events = list(events)
    if not events:
        return Retimed(card, [], {"host": []})
    t0 = min(e.t_start for e in events)
    costs = _CostCache(card, fusion)
    host_events = [e for e in events if e.lane == "host"]
    # copies queued on a stream (pinned + non_blocking): the DMA goes on that stream's lane, placed
    # in list order with the host's events, so later launches on that stream order after it
    queued = {id(e) for e in events if type(e) is ev.HostToDevice and e.lane != "host" and e.stream >= 0}
    walk = [e for e in events if e.lane == "host" or id(e) in queued]
    other = [e for e in events if e.lane != "host" and id(e) not in queued]

    new: Dict[int, ev.Event] = {}             # id(original) -> re-timed copy
    extra: List[ev.Event] = []
    spans: Dict[str, List[Span]] = {"host": []}
    launch_end: Dict[int, int] = {}           # launch_id -> modeled end
    launch_span: Dict[int, tuple] = {}        # launch_id -> (lane, start, end)
    free: Dict[str, int] = {}                 # device lane -> free at
    wall_marks: List[int] = []                # wall t_end of each host event (for enclosing spans)
    host_marks: List[int] = []                # modeled time at that event

    H = 0
    prev_cpu = prev_blocked = None
    prev_wall = t0
    sync_wait = blocked_total = compile_total = 0
    n_launch = 0
    per_step: Dict[int, dict] = {}

    def device_span(lane, kind, start, dur, step, label, launch=None):
        s = max(start, free.get(lane, 0))
        e_ = s + dur
        free[lane] = e_
        spans.setdefault(lane, []).append(Span(lane, kind, s, e_, step, label))
        return s, e_

    OpAcc = ev.OpAccumulated
    for e in walk:
        if e.lane != "host":                   # a queued copy: the host does not wait for it. It was
            # queued before it ran (when it was emitted): H, the host's place now, bounds that above
            s, f = device_span(e.lane, "copy H2D", H, cost.copy_ns(e.nbytes, card, pinned=True), e.step,
                               f"copy {e.nbytes / 1e6:.2g} MB")
            new[id(e)] = _moved(e, s, f)
            continue
        c, b = e.cpu_ns, e.blocked_ns
        if type(e) is OpAcc and c >= 0 and prev_cpu is not None and prev_cpu >= 0 and b == prev_blocked:
            # fast path for the most common event (an instant, no wait before it)
            end = H + max(c - prev_cpu, 0)
            new[id(e)] = _moved(e, end, end)
            st = per_step.get(e.step)
            if st is None:
                st = per_step[e.step] = {"host_ns": 0, "device_ns": 0, "sync_wait_ns": 0}
            st["host_ns"] += end - H
            H = end
            wall_marks.append(e.t_end)
            host_marks.append(end)
            prev_cpu, prev_wall = c, e.t_end
            continue
        wall_dur = e.t_end - e.t_start
        if e.cpu_ns >= 0 and prev_cpu is not None and prev_cpu >= 0:
            d_cpu = max(e.cpu_ns - prev_cpu, 0)
            cpu_span = min(wall_dur, d_cpu)
            gap = d_cpu - cpu_span
            blk = max(e.blocked_ns - prev_blocked, 0) if e.blocked_ns >= 0 and prev_blocked is not None \
                and prev_blocked >= 0 else 0
        else:                                  # no stamps: wall clock
            cpu_span = wall_dur
            gap = max(e.t_start - prev_wall, 0)
            blk = 0
        if blk:
            ws = H + gap
            extra.append(ev.HostWait(ws, ws + blk, "host", e.step, reason="blocked outside hpu_lab"))
            spans["host"].append(Span("host", "host wait", ws, ws + blk, e.step, "blocked outside hpu_lab"))
            blocked_total += blk
        start = H + gap + blk
        kind = type(e)
        wait = 0
        if kind is ev.HostSync:
            if e.launch_id:
                need = launch_end.get(e.launch_id, 0)
            elif wall_dur > 0:
                need = max(free.values(), default=0)
            else:
                need = 0
            end = max(start + cpu_span, need)
            wait = end - (start + cpu_span)
            sync_wait += wait
        elif kind is ev.HostToDevice:
            # the host did this copy and waited (stream -1; non_blocking from pageable memory cannot
            # help): its staging memcpy of a pageable source, then the DMA over the host link
            end = start + cost.copy_ns(e.nbytes, card, pinned=True) + cost.staging_ns(e.staging_bytes)
        elif kind is ev.DeviceToHost:
            end = start + cost.copy_ns(e.nbytes, card, pinned=e.pinned)
        elif kind is ev.Collective:
            end = start + cost.collective_ns(e.op, e.nbytes, e.world_size, card)
        elif isinstance(e, _ENCLOSING):
            i = bisect.bisect_right(wall_marks, e.t_start) - 1
            start = host_marks[i] if i >= 0 else start
            end = H + gap + blk + cpu_span
        else:
            end = start + cpu_span
            if kind is ev.Compile:
                compile_total += end - start
        if kind is ev.Launch:
            n_launch += 1
            lane = f"hpu:{e.stream}"
            dur = costs.recipe(e.key, e.graph) if e.graph is not None else card.recipe_launch_ns
            s, f = device_span(lane, "execute", end, dur, e.step, f"{e.key[:6]}")
            launch_end[e.launch_id] = f
            launch_span[e.launch_id] = (lane, s, f)
        new[id(e)] = _moved(e, start, end)
        st = per_step.setdefault(e.step, {"host_ns": 0, "device_ns": 0, "sync_wait_ns": 0})
        st["host_ns"] += max(end - H, 0) - wait
        st["sync_wait_ns"] += wait
        if kind is ev.Launch:
            st["device_ns"] += launch_end[e.launch_id] - launch_span[e.launch_id][1]
        H = max(H, end)
        wall_marks.append(e.t_end)
        host_marks.append(end)
        prev_cpu, prev_blocked, prev_wall = e.cpu_ns, e.blocked_ns, e.t_end
        spans["host"].append(Span("host", kind.__name__, start, end, e.step, ""))

    # device events: executions take their launch's modeled span; device-lane collectives queue
    seen_exec = set()
    for e in other:
        if isinstance(e, ev.DeviceExecution) and e.launch_id in launch_span:
            lane, s, f = launch_span[e.launch_id]
            new[id(e)] = _moved(e, s, f, lane)
            seen_exec.add(e.launch_id)
        elif isinstance(e, ev.Collective):
            s, f = device_span(e.lane, "collective", 0, cost.collective_ns(e.op, e.nbytes, e.world_size, card),
                               e.step, e.op)
            new[id(e)] = _moved(e, s, f)
        else:                                  # an execution whose launch is not in the list
            new[id(e)] = _moved(e, 0, 0)
    for e in host_events:
        if isinstance(e, ev.Launch) and e.launch_id not in seen_exec:
            lane, s, f = launch_span[e.launch_id]
            n = sum(1 for x in e.graph.nodes if x.op not in ("input", "output")) if e.graph is not None else 0
            extra.append(ev.DeviceExecution(s, f, lane, e.step, launch_id=e.launch_id, recipe_id=e.recipe_id,
                                            key=e.key, node_count=n))

    out = [new[id(e)] for e in events] + extra
    for lane_spans in spans.values():
        lane_spans.sort(key=lambda s: (s.start_ns, s.end_ns))
    dev = [(s.start_ns, s.end_ns) for lane, ls in spans.items() if lane != "host" for s in ls]
    busy = union_ns(dev)
    end_all = max([H] + [f for _, f in dev])
    r = Retimed(card, out, spans, host_ns=H - sync_wait, device_busy_ns=busy, wall_ns=end_all,
                sync_wait_ns=sync_wait, blocked_ns=blocked_total, compile_ns=compile_total, launches=n_launch)
    r.per_step = per_step       # step -> host_ns (without sync waits), device_ns (its launches), sync_wait_ns
    return r
