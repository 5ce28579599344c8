"""Seed 000 and the host model: the calibration of ``HOST.op_ns`` and its check.

Seed 000 ("HPU Graphs for Training") measured one MNIST training step on first-generation Gaudi in
three modes: 4.8 ms of host time without HPU Graphs, 3.9 ms with make_graphed_callables, 1.3 ms
with capture and replay. The lazy figure calibrates the cost of an op traced (``calibrate_op_ns``);
the other two are the check (``check_rows``), kept out of the fit.
"""
from __future__ import annotations

from .. import events as ev
from .host import MS, SEED_HOST_MS, with_op_ns
from .timeline import retime


def seed_modes():
    """Seed 000's MNIST training step in the seed's three modes, ``{mode: step(data, target)}``,
    each on its own freshly built model: lazy mode, make_graphed_callables, capture and replay."""
    import torch
    from ..lab.examples import Net, capture_train_step, train_step

    def build(mode):
        torch.manual_seed(0)
        model = Net().to("hpu")
        opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
        if mode == "capture/replay":
            static_x = torch.randn(200, 1, 28, 28, device="hpu")
            static_t = torch.randint(0, 10, (200,), device="hpu")
            return capture_train_step(model, opt, static_x, static_t)[0]
        if mode == "make_graphed_callables":
            model = torch.hpu.make_graphed_callables(model, (torch.randn(200, 1, 28, 28, device="hpu"),))
        return lambda x, t: train_step(model, opt, x, t)
    return {m: build(m) for m in SEED_HOST_MS}


def record_seed(step, steps: int = 8, warm: int = 3) -> list:
    """The events of ``steps`` warm steps of a seed-000 ``step`` on random MNIST-shaped batches
    (the closing ``torch.hpu.synchronize()``, which waits for the device events, left out: it is
    no part of a step)."""
    import torch
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(200, 1, 28, 28, generator=g), torch.randint(0, 10, (200,), generator=g))
               for _ in range(4)]
    for i in range(warm):
        step(*batches[i % 4])
    torch.hpu.synchronize()
    with ev.Collector() as c:
        for i in range(steps):
            step(*batches[i % 4])
        torch.hpu.synchronize()
    es = c.events
    last = max(i for i, e in enumerate(es) if type(e) is ev.HostSync)
    return es[:last] + es[last + 1:]


def calibrate_op_ns(lazy_events, steps: int) -> int:
    """``op_ns`` such that seed 000's lazy step (``lazy_events``: ``steps`` recorded steps) costs
    the seed's 4.8 ms of host time on first-generation Gaudi: the seed's figure less every other
    modeled cost of the step, over its traced ops."""
    ops = sum(1 for e in lazy_events if type(e) is ev.OpAccumulated) / steps
    from .cards import GAUDI
    rest = retime(lazy_events, GAUDI, host=with_op_ns(0)).host_ns / steps
    return round((SEED_HOST_MS["lazy"] * MS - rest) / ops)


def check_rows(recordings: dict = None, steps: int = 8) -> list:
    """Seed 000's three modes re-timed on first-generation Gaudi against the seed's host figures:
    [{mode, seed ms, modeled ms, ratio}]. ``recordings``: {mode: events of ``steps`` steps}."""
    if recordings is None:
        recordings = {m: record_seed(s, steps) for m, s in seed_modes().items()}
    rows = []
    for mode, seed in SEED_HOST_MS.items():
        from .cards import GAUDI
        ms = retime(recordings[mode], GAUDI).host_ns / steps / MS
        rows.append({"mode": mode, "seed ms": seed, "modeled ms": round(ms, 3), "ratio": round(ms / seed, 2),
                     "role": "calibration" if mode == "lazy" else "held-out"})
    return rows
