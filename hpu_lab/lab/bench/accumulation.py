"""Lazy accumulation: host cost per op of a 40-op elementwise chain, hpu lazy mode (with a recording
on, as in a lab section, and without) vs plain eager CPU vs PyTorch's own lazy tensor core
(``torch._lazy`` with its TorchScript backend), measured in one run, interleaved.
Target (DESIGN.md): hpu lazy mode with recording on within 1.5x of torch._lazy.
``python -m hpu_lab.lab.bench lazy`` runs it alone."""
from __future__ import annotations

import statistics
import time

import torch

CHAIN = 40


def chain(x):
    """40 elementwise ops, each depending on the previous one."""
    for _ in range(CHAIN // 2):
        x = x * 1.0001
        x = x + 0.5
    return x


def _per_op_us(device: str, step_end, iters: int, record: bool = False, size=(64, 64)):
    """(wall time per op, host thread CPU time per op) of one timed run, in microseconds."""
    import contextlib
    from hpu_lab import events
    x = torch.randn(*size).to(device)
    for _ in range(3):                       # warm-up: compile, caches
        step_end(chain(x))
    with events.Collector() if record else contextlib.nullcontext():
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(iters):
            step_end(chain(x))
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
    return (w1 - w0) / iters / CHAIN / 1000, (c1 - c0) / iters / CHAIN / 1000


def main(iters: int = 100, repeats: int = 7) -> dict:
    import hpu_lab.core as htcore
    import torch._lazy
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()

    def hpu_end(y):
        htcore.mark_step()

    def lazy_end(y):
        torch._lazy.mark_step()

    modes = {
        "eager CPU": ("cpu", lambda y: None, False),
        "torch._lazy (TS backend)": ("lazy", lazy_end, False),
        "hpu lazy (mark_step)": ("hpu", hpu_end, False),
        "hpu lazy, recording on": ("hpu", hpu_end, True),
    }
    for dev, end, rec in modes.values():       # warm-up of every mode before any timing
        _per_op_us(dev, end, 10, rec)
    runs = {k: [] for k in modes}
    for _ in range(repeats):                   # interleaved: the machine's load hits every mode alike
        for k, (dev, end, rec) in modes.items():
            runs[k].append(_per_op_us(dev, end, iters, rec))
    r = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    print(f"\n== Lazy accumulation: {CHAIN}-op elementwise chain on a 64x64 tensor, per op "
          f"(median of {repeats} interleaved runs) ==")
    print(f"{'mode':28s} {'wall us/op':>11s} {'host CPU us/op':>15s}")
    for k, (w, c) in r.items():
        print(f"{k:28s} {w:11.2f} {c:15.2f}")
    lazy = r["torch._lazy (TS backend)"][0]
    ratio = r["hpu lazy, recording on"][0] / lazy
    print(f"hpu lazy with recording on / torch._lazy: {ratio:.2f}x wall (target <= 1.5x); without recording "
          f"{r['hpu lazy (mark_step)'][0] / lazy:.2f}x; vs eager CPU {r['hpu lazy (mark_step)'][0] / r['eager CPU'][0]:.2f}x")
    r["ratio_recording"], r["ratio"] = ratio, r["hpu lazy (mark_step)"][0] / lazy
    return r


if __name__ == "__main__":
    main()
