"""Step times on the Gaudi clock: the one way the lab times and compares training steps.

``step_times(step, steps=8, warmup=3, card="gaudi2")`` runs ``step()`` ``warmup`` times (so its
recipes are compiled; the last of them recorded as a lead-in, not reported), then ``steps`` times
under the same recording, and re-times it on ``card`` with ``hpu_lab.perfmodel.retime``. Each
step's figures are the Gaudi clock's:

- **host** (modeled): what the bridge does for the step's events on a Gaudi server's host
  (ops traced, graphs built, lookups, launches, replays, copies), without its waits for the device;
- **your code** (measured on this CPU): the step's ``UserCode`` events (data loading, sleep,
  print, ``events.user_code`` blocks) -- the one measured part;
- **device** (modeled): device time the step's launches and copies add;
- **wall** (modeled, plus your code if any): how much later the step ends than the one before,
  an end being when both the host and the device are done with it.

A step's figures are differences of re-timings of the recording up to each step's end: the Gaudi
clock's state at an event depends only on the events before it (perfmodel.timeline), so step k's
figures are exactly what step k added, the overlap with the steps before it included.

``step_times_of(events, steps=n)`` reads a recording you made yourself (a ``Collector``, a
``%%hpu_section``) as ``n`` steps and gives the same figures averaged over them (it cannot tell
where one step of your loop ends). ``compare({...})`` puts several of them in one table.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence

MODELED = "modeled (Gaudi clock)"
MEASURED = "measured (your code on this CPU)"


@dataclass(frozen=True)
class Step:
    """One step's figures, in ns."""
    host_ns: int          # modeled host work, waits for the device left out
    user_ns: int          # your code, measured on this CPU (part of the host lane, not of host_ns)
    device_ns: int        # modeled device time the step added (union of the device lanes)
    wall_ns: int          # how much later the step ended than the step before it
    sync_wait_ns: int     # modeled time the host waited for the device in the step
    compiles: int         # recipes compiled in the step (0 once warm)
    launches: int

    @property
    def verdict(self) -> str:
        from ..perfmodel.timeline import bound      # the host's work (your code too) against the device's
        return bound(self.host_ns + self.user_ns, self.device_ns)


@dataclass
class StepTimes:
    """Per-step host, device and wall time of a loop on one card (see the module docstring)."""
    name: str
    card: object                      # perfmodel.Card
    warmup: Optional[int]             # unrecorded steps run first (None: not known, a recording you made)
    steps: List[Step]
    retimed: object                   # the whole recording's perfmodel.Retimed
    events: list = field(repr=False, default_factory=list)
    split: bool = True                # False: the recording was averaged over its steps, not split
    bounds: List[int] = field(repr=False, default_factory=list)   # event count at each step's end
    skipped: int = 0                  # steps of the recording left out by after()
    split_at: Optional[tuple] = field(repr=False, default=None)   # (every, kind) of step_times_of
    lead_in: bool = False             # the recording starts with the last warm-up step, not reported

    # -- means over the recorded steps, in ms --------------------------------------------------
    def _mean(self, attr: str) -> float:
        return sum(getattr(s, attr) for s in self.steps) / len(self.steps) / 1e6 if self.steps else 0.0

    @property
    def host_ms(self) -> float:
        """Mean modeled host work a step (your measured code not included)."""
        return self._mean("host_ns")

    @property
    def user_ms(self) -> float:
        """Mean time of your own code a step, measured on this CPU."""
        return self._mean("user_ns")

    @property
    def device_ms(self) -> float:
        return self._mean("device_ns")

    @property
    def wall_ms(self) -> float:
        return self._mean("wall_ns")

    @property
    def compiles(self) -> int:
        return sum(s.compiles for s in self.steps)

    @property
    def sync_wait_ms(self) -> float:
        """Mean modeled time a step the host waited for the device (host syncs)."""
        return self._mean("sync_wait_ns")

    @property
    def device_busy_fraction(self) -> float:
        wall = sum(s.wall_ns for s in self.steps)
        return sum(s.device_ns for s in self.steps) / wall if wall else 0.0

    @property
    def verdict(self) -> str:
        """host-bound / device-bound over the steps (the Gaudi clock's rule, perfmodel.timeline.bound:
        the host's work, your code included, against the device's)."""
        from ..perfmodel.timeline import bound
        return bound(sum(s.host_ns + s.user_ns for s in self.steps), sum(s.device_ns for s in self.steps))

    @property
    def verdict_text(self) -> str:
        busy = self.device_busy_fraction
        note = f" [{self.card.fp32_note}]" if self.retimed.fp32_assumed else ""
        return (f"{self.verdict} on {self.card.device_name}: device busy {busy:.0%} of the wall time "
                f"(device {self.device_ms:.3f} of {self.wall_ms:.3f} ms a step, modeled){note}")

    def after(self, n: int) -> "StepTimes":
        """The same steps without the first ``n`` (a warm-up left out of the means, as
        ``throughput_warmup_steps`` does)."""
        if not self.split:
            raise ValueError("after(): this recording was averaged, not split into steps")
        if not 0 <= n < len(self.steps):
            raise ValueError(f"after({n}): there are {len(self.steps)} steps")
        return replace(self, steps=self.steps[n:], warmup=(self.warmup or 0) + n, 
                       skipped=self.skipped + n)

    @property
    def measured(self) -> bool:
        """Whether any figure includes your own code, measured on this CPU (then wall is part measured)."""
        return any(s.user_ns for s in self.steps)

    @property
    def labels(self) -> Dict[str, str]:
        """What each figure is: modeled on the Gaudi clock, or measured on this CPU."""
        return {"host": f"host work, {MODELED}", "user": f"your code, {MEASURED}",
                "device": f"device, {MODELED}",
                "wall": f"wall, {MODELED}" + (" + your code measured" if self.measured else "")}

    def per_second(self, samples_per_step: int) -> float:
        """Throughput: samples a second at this wall time a step."""
        return samples_per_step / (self.wall_ms / 1e3) if self.wall_ms else float("inf")

    def on(self, card) -> "StepTimes":
        """The same recording on another card (a what-if: label it so in a notebook)."""
        full = _from_events(self.events, self.bounds, card, self.warmup - self.skipped if self.skipped else
                            self.warmup, self.name, self.split, len(self.steps) + self.skipped, self.lead_in)
        full.split_at = self.split_at
        return full.after(self.skipped) if self.skipped else full

    # -- printing ---------------------------------------------------------------------------
    def table(self) -> str:
        c = self.card.device_name
        wu = ("warm-up: not recorded here" if self.warmup is None
              else f"after {self.warmup} warm-up step{'s' if self.warmup != 1 else ''}")
        head = (f"{self.name}: {len(self.steps)} steps on {c}, {wu}"
                + ("" if self.split else " (recording averaged over its steps)"))
        rows = [head,
                f"{'step':>5} {'host ms':>9} {'your code':>10} {'device ms':>10} {'wall ms':>9}  verdict",
                f"{'':>5} {'modeled':>9} {'measured':>10} {'modeled':>10} {'modeled':>9}"]
        for i, s in enumerate(self.steps if self.split else [], start=self.skipped):
            note = f"  ({s.compiles} compile{'s' if s.compiles != 1 else ''})" if s.compiles else ""
            rows.append(f"{i:>5} {s.host_ns / 1e6:9.3f} {s.user_ns / 1e6:10.3f} {s.device_ns / 1e6:10.3f} "
                        f"{s.wall_ns / 1e6:9.3f}  {s.verdict}{note}")
        rows.append(f"{'mean':>5} {self.host_ms:9.3f} {self.user_ms:10.3f} {self.device_ms:10.3f} "
                    f"{self.wall_ms:9.3f}  {self.verdict}")
        rows.append(self.verdict_text)
        if self.compiles:
            rows.append(f"note: {self.compiles} recipe compile(s) inside the recorded steps: the loop was not warm")
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (f"StepTimes({self.name!r} on {self.card.device_name}: {len(self.steps)} steps, host {self.host_ms:.3f}, "
                f"device {self.device_ms:.3f}, wall {self.wall_ms:.3f} ms a step, {self.verdict})")

    def _repr_pretty_(self, p, cycle) -> None:        # IPython prints the table
        p.text(self.table())


def step_times(step: Callable[[], object], steps: int = 8, warmup: int = 3, card=None,
               name: str = "step") -> StepTimes:
    """Run ``step()`` ``warmup`` times, then ``steps`` times, and time each of the ``steps`` on
    ``card``'s Gaudi clock (default: HPU_LAB_DEVICE's, gaudi2). The last warm-up step is recorded
    too, not reported: the first reported step then starts, like every other, where the step before
    it ended, its device work still running (in a steady loop the host traces a step while the device
    runs the one before). With ``warmup=0`` the first step starts on an idle device, compiles and all.
    A step should end its own graph (``mark_step``, ``replay()``, a sync): ops left pending run in
    the next step's launch."""
    import torch
    from .. import events as ev
    from .practice import flush_pending
    _check_counts(steps, warmup)
    flush_pending()                    # ops left pending by earlier code are not the steps' work
    for _ in range(warmup - 1):
        step()
    torch.hpu.synchronize()
    bounds: List[int] = []
    with ev.Collector() as c:
        if warmup:                     # the last warm-up step, recorded as the lead-in (see below)
            step()
            bounds.append(len(c.events))
        for _ in range(steps):
            step()
            bounds.append(len(c.events))
    events = c.events
    torch.hpu.synchronize()
    return _from_events(events, bounds, card, warmup, name, True, steps, lead_in=bool(warmup))


def step_times_of(events: Sequence, steps: Optional[int] = None, card=None, name: str = "recording",
                  warmup: Optional[int] = None, every: Optional[int] = None, at=None) -> StepTimes:
    """A recording you made (``c.events`` of a Collector, a section's ``.events``).

    ``every=2``: split it into steps, one ending at every 2nd ``MarkStep`` (``at``: another event
    kind, e.g. ``events.Replay``); the events after the last end go with the last step. Otherwise
    ``steps=n``: the recording's totals divided by ``n`` (it cannot tell where a step ends).
    ``warmup``: how many steps ran before the recording, to print (None: not stated)."""
    events = list(events)
    if every is not None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive int, got {every!r}")
        bounds = _split_bounds(events, every, at)
        if not bounds:
            kind = getattr(at, "__name__", "MarkStep")
            raise ValueError(f"{name}: the recording has fewer than {every} {kind} events: no step to split")
        if steps is not None and steps != len(bounds):
            raise ValueError(f"{name}: steps={steps}, but the recording splits into {len(bounds)} steps")
        st = _from_events(events, bounds, card, warmup, name, True, len(bounds))
        st.split_at = (every, at)
        return st
    if steps is None:
        raise ValueError("step_times_of() needs steps=n (the recording averaged) or every=k (split at mark_steps)")
    _check_counts(steps, 0)
    return _from_events(events, [len(events)], card, warmup, name, False, steps)


def _split_bounds(events, every, at) -> List[int]:
    from .. import events as ev
    kind = at or ev.MarkStep
    ends = [i + 1 for i, e in enumerate(events) if isinstance(e, kind)][every - 1::every]
    if ends:
        ends[-1] = len(events)
    return ends


def _check_counts(steps, warmup) -> None:
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")


def _from_events(events, bounds, card, warmup, name, split, n_steps, lead_in=False) -> StepTimes:
    from .. import events as ev
    from .. import perfmodel as pm
    card = pm.card(card)
    if not events:
        raise ValueError(f"{name}: the recording holds no event (did the step run on 'hpu'?)")
    cum = []
    for b in bounds:
        cum.append(pm.retime(events[:b], card))
    whole = cum[-1] if bounds[-1] == len(events) else pm.retime(events, card)
    counts = []
    prev = 0
    for b in bounds:
        seg = events[prev:b]
        counts.append((sum(1 for e in seg if isinstance(e, ev.Compile)),
                       sum(1 for e in seg if isinstance(e, ev.Launch))))
        prev = b
    out: List[Step] = []
    last = None
    for r, (compiles, launches) in zip(cum, counts):
        def d(attr):
            return getattr(r, attr) - (getattr(last, attr) if last is not None else 0)
        out.append(Step(host_ns=d("host_ns") - d("user_ns"), user_ns=d("user_ns"), device_ns=d("device_busy_ns"),
                        wall_ns=d("wall_ns"), sync_wait_ns=d("sync_wait_ns"), compiles=compiles,
                        launches=launches))
        last = r
    if not split:                      # one segment: spread its totals over n_steps equal steps
        s = out[0]
        n = n_steps
        out = [Step(s.host_ns // n, s.user_ns // n, s.device_ns // n, s.wall_ns // n, s.sync_wait_ns // n,
                    s.compiles if i == 0 else 0, s.launches // n) for i in range(n)]
    if lead_in:                        # the lead-in step is not reported
        out = out[1:]
    return StepTimes(name, card, warmup, out, whole, events, split, list(bounds), lead_in=lead_in)


@dataclass
class Comparison:
    """Several StepTimes of one card in one table, each against the first (``baseline``)."""
    runs: Dict[str, StepTimes]

    @property
    def baseline(self) -> StepTimes:
        return next(iter(self.runs.values()))

    def speedup(self, name: str) -> float:
        """Baseline wall time a step over ``name``'s (> 1: ``name`` is faster)."""
        return self.baseline.wall_ms / self.runs[name].wall_ms

    def host_ratio(self, name: str) -> float:
        """``name``'s modeled host work a step over the baseline's."""
        return self.runs[name].host_ms / self.baseline.host_ms

    def table(self) -> str:
        b = self.baseline
        card = b.card.device_name
        w = max(len(n) for n in self.runs)
        rows = [f"on {card}; host and device {MODELED}; your code {MEASURED}; ms a step",
                f"{'':{w}} {'host':>8} {'your code':>10} {'device':>8} {'wall':>8}  {'verdict':12s} {'speed-up':>8}  steps"]
        for n, s in self.runs.items():
            wu = "?" if s.warmup is None else str(s.warmup)
            rows.append(f"{n:{w}} {s.host_ms:8.3f} {s.user_ms:10.3f} {s.device_ms:8.3f} {s.wall_ms:8.3f}  "
                        f"{s.verdict:12s} {self.speedup(n):7.2f}x  {len(s.steps)} after {wu} warm-up"
                        + (f", {s.compiles} compiles!" if s.compiles else ""))
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.table())


def compare(runs: Mapping[str, StepTimes]) -> Comparison:
    """``compare({"lazy": a, "replay": b})``: one table, the first run the baseline. The runs must be
    on one card (a cross-card figure is a what-if: re-time with ``StepTimes.on(card)`` and say so)."""
    runs = dict(runs)
    if not runs:
        raise ValueError("compare() needs at least one StepTimes")
    for n, s in runs.items():
        if not isinstance(s, StepTimes):
            raise TypeError(f"compare(): {n!r} is a {type(s).__name__}, not a StepTimes (use step_times())")
    cards = {s.card.name for s in runs.values()}
    if len(cards) > 1:
        raise ValueError(f"compare(): the runs are on different cards ({', '.join(sorted(cards))}); "
                         "compare on one card, and show other cards as a labelled what-if")
    return Comparison(runs)
