"""Benchmark of the hpex fused kernels: ``python -m hpu_lab.lab.bench.fused``.

Prints, in one run:
- nodes in the lazy graph of one optimizer update / gradient clipping, fused vs torch's own;
- host time of that update (tracing + launch; the device runs asynchronously), torch / fused;
- FusedSDPA forward + backward memory: torch.hpu.max_memory_allocated() above q, k, v and the
  recipes' memory plan (Compile.peak_bytes), recompute vs no-recompute vs unfused attention.

Counts and bytes come from hpu_lab's event stream and memory statistics; times are medians.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import hpu_lab  # noqa: F401  (registers the hpu device)
import hpu_lab.core as htcore
from hpu_lab import events
from hpu_lab.hpex.kernels import FusedSDPA
from hpu_lab.hpex.normalization import FusedClipNorm
from hpu_lab.hpex.optimizers import FusedAdamW, FusedSGD
from ...compiler.graph import HELPER_NAMES

HELPERS = {"input", "output", *HELPER_NAMES.values()}     # view, scatter, scatter_into, ...


def _mlp(layers, width):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods).to("hpu")


def _backward(model, x):
    model(x).square().mean().backward()
    htcore.mark_step()


def _update_graph_and_time(update, model, x, steps):
    """(compute nodes of the update's graph, ops other than view/scatter helpers, host ms of the
    update call, host ms of call + mark_step, compiles per update)."""
    for _ in range(3):                               # warm-up: state creation and first compiles
        _backward(model, x)
        update()
        htcore.mark_step()
    traces, times, graph, compiles = [], [], None, 0
    for i in range(steps):
        _backward(model, x)
        torch.hpu.synchronize()
        with events.Collector(kinds=[events.Launch, events.Compile]) as c:
            t0 = time.perf_counter()
            update()
            traces.append(time.perf_counter() - t0)
            htcore.mark_step()
            times.append(time.perf_counter() - t0)
        compiles += len(c.of(events.Compile))
        launched = [e.graph for e in c.of(events.Launch) if e.graph is not None]
        graph = launched[-1] if launched else graph
    torch.hpu.synchronize()
    nodes = [n for n in graph.nodes if n.op not in ("input", "output")]
    ops = [n for n in nodes if n.op not in HELPERS]
    return (len(nodes), len(ops), statistics.median(traces) * 1e3, statistics.median(times) * 1e3,
            compiles / steps)


def optimizer_rows(layers, width, steps):
    x = torch.randn(32, width).to("hpu")
    rows = []
    cases = [
        ("AdamW", lambda p: torch.optim.AdamW(p, eps=1e-6), lambda p: FusedAdamW(p)),
        ("SGD momentum", lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
         lambda p: FusedSGD(p, lr=0.01, momentum=0.9)),
    ]
    for name, make_torch, make_fused in cases:
        m = _mlp(layers, width)
        ot = make_torch(m.parameters())
        unfused = _update_graph_and_time(ot.step, m, x, steps)
        m = _mlp(layers, width)
        of = make_fused(m.parameters())
        fused = _update_graph_and_time(of.step, m, x, steps)
        rows.append((name, unfused, fused))
    m = _mlp(layers, width)
    unfused = _update_graph_and_time(lambda: torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0), m, x, steps)
    m = _mlp(layers, width)
    clip = FusedClipNorm(m.parameters(), 1.0)
    fused = _update_graph_and_time(lambda: clip.clip_norm(m.parameters()), m, x, steps)
    rows.append(("clip_grad_norm", unfused, fused))
    return rows


def attention_memory(batch, heads, seq, dim):
    """{kind: (max_memory_allocated above q,k,v, largest recipe memory plan)} for fwd + bwd."""
    out = {}
    for kind in ("recompute", "no-recompute", "unfused"):
        torch.manual_seed(0)
        q, k, v = [torch.randn(batch, heads, seq, dim).to("hpu").requires_grad_() for _ in range(3)]
        htcore.mark_step()
        torch.hpu.synchronize()
        base = torch.hpu.memory_allocated()
        torch.hpu.reset_peak_memory_stats()
        with events.Collector(kinds=[events.Compile, events.Launch]) as c:
            if kind == "unfused":
                o = F.scaled_dot_product_attention(q, k, v)
            else:
                o = FusedSDPA.apply(q, k, v, None, 0.0, False, None, "None", kind == "recompute")
            o.sum().backward()
            htcore.mark_step()
            torch.hpu.synchronize()
        plans = [e.peak_bytes for e in c.of(events.Compile)]
        out[kind] = (torch.hpu.max_memory_allocated() - base, max(plans) if plans else 0)
        del q, k, v, o
    return out


def _mib(n):
    return f"{n / 2**20:8.2f} MiB"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8, help="Linear layers of the MLP (2 parameters each)")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dim", type=int, default=64)
    a = ap.parse_args([] if argv is None else argv)     # as a section of hpu_lab.lab.bench: defaults

    print(f"hpex fused kernels: MLP of {a.layers} Linear layers ({2 * a.layers} parameters), width {a.width}")
    print(f"{'update':15s} {'nodes torch':>11s} {'(ops)':>6s} {'fused':>6s} {'(ops)':>6s} {'torch trace':>12s} "
          f"{'torch+launch':>13s} {'fused+launch':>13s} {'ratio':>6s} {'compiles/step':>14s}")
    for name, (tn, to, tt, tl, tc), (fn, fo, _, fl, fc) in optimizer_rows(a.layers, a.width, a.steps):
        print(f"{name:15s} {tn:11d} {to:6d} {fn:6d} {fo:6d} {tt:9.3f} ms {tl:10.3f} ms {fl:10.3f} ms "
              f"{tl / fl:5.1f}x {tc:6.2f} / {fc:.2f}")
    print("nodes: compute nodes of the update's recipe, ops: without view/scatter helpers. Host times are\n"
          "medians: 'torch trace' is the update call alone (the ops traced), '+launch' adds mark_step, with\n"
          "a compile when there is one. torch's AdamW passes its step size as a constant that changes every\n"
          "step, so its graph recompiles every step (compiles/step torch / fused); FusedAdamW passes a tensor.")
    print(f"\nFusedSDPA forward + backward, q/k/v ({a.batch}, {a.heads}, {a.seq}, {a.dim}) fp32, one graph")
    mem = attention_memory(a.batch, a.heads, a.seq, a.dim)
    print(f"{'attention':14s} {'max_memory_allocated':>22s} {'memory plan peak':>18s}")
    for kind, (peak, plan) in mem.items():
        print(f"{kind:14s} {_mib(peak):>22s} {_mib(plan):>18s}")
    r, n, u = (mem[k][0] for k in ("recompute", "no-recompute", "unfused"))
    print(f"max_memory_allocated: recompute / no-recompute = {r / n:.2f}, no-recompute / unfused = {n / u:.2f}")
    if mem["recompute"][1] == mem["no-recompute"][1]:
        print("note: the memory plan counts the outputs of multi-output nodes (the fused attention ops) as "
              "0 bytes (compiler/passes.memory_plan), so it cannot tell the two fused modes apart")


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
