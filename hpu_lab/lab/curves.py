"""Curves from recorded runs on the Gaudi clock: where a loop turns device-bound, where HPU Graphs
stop paying, and what a bigger batch buys.

``sweep(make_step, sizes, modes=("lazy", "replay"))`` records, for each size, ``steps`` steps of
each mode after ``warmup`` (``timing.step_times``: the emulator really runs them), and re-times each
recording on every card (a recording is re-timed for free: the Gaudi clock is a pure function of
the events). So one run per size and mode gives the curve on Gaudi, Gaudi 2 and Gaudi 3.

``width_curve(widths, batch)`` and ``batch_curve(batches, width)`` sweep the lab's MLP
(``Linear(width, width) -> ReLU -> Linear(width, 10)``, fp32, SGD, the batch kept on the device):
its host work a step is the same at any size (the same ops are traced), its device work grows with
``batch * width**2``: small, the loop is host-bound; big, device-bound. ``Curve.crossover(card)`` is
the first size the Gaudi clock calls device-bound, ``Curve.predicted_crossover(card)`` the first
``perfmodel.estimate`` (which traces the step without running it) calls so, and
``Curve.graphs_stop_paying(card)`` the first size where a replay's step is less than ``below``
times faster than lazy mode's. widgets/curves.py draws them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .timing import MODELED, StepTimes, step_times

CARDS = ("gaudi", "gaudi2", "gaudi3")
MODES = ("lazy", "replay")


@dataclass(frozen=True)
class Point:
    card: str
    size: int
    mode: str
    host_ms: float       # modeled
    device_ms: float     # modeled
    wall_ms: float       # modeled
    verdict: str
    samples: int         # samples a step (the batch)

    @property
    def samples_per_s(self) -> float:
        return self.samples / (self.wall_ms / 1e3)


@dataclass
class Curve:
    """Step times against a size (model width or batch) for each card and mode; all figures are
    modeled on the Gaudi clock from recorded runs (``runs``: the StepTimes on the first card)."""
    x_name: str                              # "width" or "batch"
    points: List[Point]
    runs: Dict[Tuple[int, str], StepTimes] = field(repr=False, default_factory=dict)
    estimates: Dict[Tuple[str, int], object] = field(repr=False, default_factory=dict)

    @property
    def sizes(self) -> List[int]:
        return sorted({p.size for p in self.points})

    @property
    def cards(self) -> List[str]:
        return list(dict.fromkeys(p.card for p in self.points))

    def series(self, card: str, mode: str = "lazy") -> List[Point]:
        return sorted((p for p in self.points if p.card == card and p.mode == mode), key=lambda p: p.size)

    def point(self, card: str, size: int, mode: str = "lazy") -> Point:
        for p in self.points:
            if p.card == card and p.size == size and p.mode == mode:
                return p
        raise KeyError(f"no point for card {card!r}, {self.x_name} {size}, mode {mode!r}")

    def crossover(self, card: str, mode: str = "lazy") -> Optional[int]:
        """The first size at which ``mode`` is device-bound on ``card``, after a host-bound one
        (None: the sweep has no host-bound -> device-bound change)."""
        s = self.series(card, mode)
        for a, b in zip(s, s[1:]):
            if a.verdict == "host-bound" and b.verdict == "device-bound":
                return b.size
        return None

    def predicted_crossover(self, card: str) -> Optional[int]:
        """The same, from ``perfmodel.estimate`` of the lazy step (traced, not run; needs the sweep
        made with ``estimate=True``)."""
        if not self.estimates:
            raise ValueError("this curve was swept without estimate=True")
        v = [(size, self.estimates[(card, size)].verdict) for size in self.sizes]
        for (_, a), (size, b) in zip(v, v[1:]):
            if a == "host-bound" and b == "device-bound":
                return size
        return None

    def gain(self, card: str, size: int) -> float:
        """Lazy mode's wall time a step over a replay's (how much the HPU Graph speeds the step up)."""
        return self.point(card, size, "lazy").wall_ms / self.point(card, size, "replay").wall_ms

    def graphs_stop_paying(self, card: str, below: float = 1.5) -> Optional[int]:
        """The first size where a replay is less than ``below`` times faster than lazy mode on ``card``
        (None: not in the sweep). A replay removes the host's work, not the device's: once the device
        is busy half the step (the device-bound verdict) it can at most halve the step; below 1.5x it
        saves less than a third of it."""
        for size in self.sizes:
            if self.gain(card, size) < below:
                return size
        return None

    def table(self) -> str:
        modes = list(dict.fromkeys(p.mode for p in self.points))
        rows = [f"ms a step, {MODELED}, from recorded runs"]
        for card in self.cards:
            rows.append(f"{card}:")
            rows.append(f"  {self.x_name:>6} " + " ".join(f"{m + ' wall':>12} {m + ' verdict':>16}" for m in modes)
                        + ("  samples/s (lazy)" if self.x_name == "batch" else "")
                        + ("  replay gain" if "replay" in modes and "lazy" in modes else ""))
            for size in self.sizes:
                ps = [self.point(card, size, m) for m in modes]
                line = f"  {size:>6} " + " ".join(f"{p.wall_ms:12.3f} {p.verdict:>16}" for p in ps)
                if self.x_name == "batch":
                    line += f"  {self.point(card, size, modes[0]).samples_per_s:17.0f}"
                if "replay" in modes and "lazy" in modes:
                    line += f"  {self.gain(card, size):10.2f}x"
                rows.append(line)
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.table())


def sweep(make_step: Callable[[int, str], Tuple[Callable[[], object], int]], sizes: Sequence[int],
          modes: Sequence[str] = MODES, cards: Sequence[str] = CARDS, steps: int = 2, warmup: int = 1,
          x_name: str = "size", estimate: Optional[Callable[[int, str], object]] = None) -> Curve:
    """For each size and mode, ``make_step(size, mode)`` returns ``(step, samples_per_step)``; the step
    is recorded (``step_times``) and re-timed on each card. ``estimate(size, card)``, if given,
    returns the ``perfmodel.estimate`` of the same step (for ``predicted_crossover``)."""
    sizes = sorted(set(int(s) for s in sizes))
    if len(sizes) < 2:
        raise ValueError("a curve needs at least two sizes")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {bad}: expected {MODES}")
    points, runs, estimates = [], {}, {}
    for size in sizes:
        for mode in modes:
            step, samples = make_step(size, mode)
            st = step_times(step, steps=steps, warmup=warmup, card=cards[0], name=f"{mode} {x_name}={size}")
            runs[(size, mode)] = st
            for card in cards:
                t = st if card == cards[0] else st.on(card)
                points.append(Point(card, size, mode, t.host_ms, t.device_ms, t.wall_ms, t.verdict, samples))
            del step
        if estimate is not None:
            for card in cards:
                estimates[(card, size)] = estimate(size, card)
    return Curve(x_name, points, runs, estimates)


def mlp_step(width: int, batch: int, mode: str, seed: int = 0):
    """The lab's MLP training step (Linear(width, width) -> ReLU -> Linear(width, 10), fp32, SGD, the
    batch on the device) in ``mode``: "lazy" (two mark_steps a step) or "replay" (the same step
    captured once as an HPU Graph, then replayed). Returns ``(step, batch)``."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from .. import core as htcore
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)).to("hpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, width).to("hpu")
    t = torch.randint(0, 10, (batch,)).to("hpu")
    htcore.mark_step()
    if mode == "lazy":
        def step():
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), t).backward()
            htcore.mark_step()
            opt.step()
            htcore.mark_step()
        return step, batch
    if mode != "replay":
        raise ValueError(f"unknown mode {mode!r}: expected {MODES}")
    g = htcore.hpu.HPUGraph()
    opt.zero_grad(set_to_none=True)
    with htcore.hpu.graph(g):                  # x and t are the graph's static inputs
        F.cross_entropy(model(x), t).backward()
        opt.step()
    return g.replay, batch


def _mlp_estimate(width: int, batch: int, card: str):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from .. import core as htcore
    from .. import perfmodel as pm
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)).to("hpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, width).to("hpu")
    t = torch.randint(0, 10, (batch,)).to("hpu")
    htcore.mark_step()

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), t).backward()
        htcore.mark_step()
        opt.step()
        htcore.mark_step()
    return pm.estimate(step, device=card)


def width_curve(widths: Sequence[int], batch: int = 128, modes: Sequence[str] = MODES,
                cards: Sequence[str] = CARDS, steps: int = 2, warmup: int = 1, estimate: bool = True) -> Curve:
    """Step time against model width at a fixed batch, lazy mode and replay, on each card."""
    return sweep(lambda w, mode: mlp_step(w, batch, mode), widths, modes, cards, steps, warmup, "width",
                 (lambda w, card: _mlp_estimate(w, batch, card)) if estimate else None)


def batch_curve(batches: Sequence[int], width: int = 1024, modes: Sequence[str] = ("lazy",),
                cards: Sequence[str] = CARDS, steps: int = 2, warmup: int = 1, estimate: bool = True) -> Curve:
    """Step time and throughput (samples/s) against batch size at a fixed width, on each card."""
    return sweep(lambda b, mode: mlp_step(width, b, mode), batches, modes, cards, steps, warmup, "batch",
                 (lambda b, card: _mlp_estimate(width, b, card)) if estimate else None)
