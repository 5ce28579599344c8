"""Lazy accumulation: host cost per op of a 40-op elementwise chain, hpu lazy mode vs plain eager
CPU vs PyTorch's own lazy tensor core (``torch._lazy`` with its TorchScript backend).
``python -m hpu_lab.bench lazy`` runs it alone."""
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


def _per_op_us(device: str, step_end, iters: int, repeats: int = 5, size=(64, 64)):
    """Median over repeats of (wall time per op, host thread CPU time per op), in microseconds."""
    x = torch.randn(*size).to(device)
    for _ in range(10):                      # warm-up: compile, caches
        step_end(chain(x))
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(iters):
            step_end(chain(x))
        walls.append((time.perf_counter_ns() - w0) / iters / CHAIN / 1000)
        cpus.append((time.thread_time_ns() - c0) / iters / CHAIN / 1000)
    return statistics.median(walls), statistics.median(cpus)


def main(iters: int = 100) -> dict:
    import hpu_lab.core as htcore
    import torch._lazy
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()

    def hpu_end(y):
        htcore.mark_step()

    def hpu_end_sync(y):
        htcore.mark_step()
        torch.hpu.synchronize()

    def lazy_end(y):
        torch._lazy.mark_step()

    def lazy_end_sync(y):
        torch._lazy.mark_step()
        torch._lazy.wait_device_ops()

    r = {
        "eager CPU": _per_op_us("cpu", lambda y: None, iters),
        "torch._lazy (TS backend)": _per_op_us("lazy", lazy_end, iters),
        "torch._lazy + wait": _per_op_us("lazy", lazy_end_sync, iters),
        "hpu lazy (mark_step)": _per_op_us("hpu", hpu_end, iters),
        "hpu lazy + synchronize": _per_op_us("hpu", hpu_end_sync, iters),
    }
    print(f"\n== Lazy accumulation: {CHAIN}-op elementwise chain on a 64x64 tensor, per op ==")
    print(f"{'mode':28s} {'wall us/op':>11s} {'host CPU us/op':>15s}")
    for k, (w, c) in r.items():
        print(f"{k:28s} {w:11.2f} {c:15.2f}")
    ratio_w = r["hpu lazy (mark_step)"][0] / r["torch._lazy (TS backend)"][0]
    ratio_c = r["hpu lazy (mark_step)"][1] / r["torch._lazy (TS backend)"][1]
    ratio_s = r["hpu lazy + synchronize"][0] / r["torch._lazy + wait"][0]
    print(f"hpu / torch._lazy: wall {ratio_w:.2f}x, host CPU {ratio_c:.2f}x, with device wait {ratio_s:.2f}x "
          f"(target <= 1.5x)")
    print(f"hpu / eager CPU: wall {r['hpu lazy (mark_step)'][0] / r['eager CPU'][0]:.2f}x")
    r["ratio_wall"], r["ratio_cpu"], r["ratio_sync"] = ratio_w, ratio_c, ratio_s
    return r


if __name__ == "__main__":
    main()
