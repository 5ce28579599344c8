"""Panel overhead (issue 14, point 5): a 600-step seed-style MLP loop in a Jupyter kernel, plain and
inside ``widgets.section(...)`` with its live panel, alternately, in the same kernel.

Two figures per run of the loop with the panel: the loop itself (to the end of the ``with`` body:
what live redraws and the panel's subscriptions cost while the loop runs) and the whole cell (plus
the final redraw when the section ends). Wall time is what a learner waits for; the kernel
process's CPU time (every thread) is steadier on a loaded machine. The overhead is the median over
``rounds`` rounds of each round's ratio (a plain loop and a panel loop run back to back, in turns
first, so that a change of load between rounds cancels). Target: loop <= 10% over plain.

The garbage collector's time is reported: a full collection walks every object of the kernel
(0.3-0.7 s here). One falls due once enough objects have survived since the last one (a quarter
of the kernel's), so it lands in whichever loop tips the count, and a loop that keeps many objects
(a recording's events, if the collector tracked them) brings them on more often: the totals over
all rounds, per kind of loop, show it where a median would not; so does the ratio of total CPU
times. Each loop starts right after a full collection (``gc.collect()``, outside the timing), so
that a collection the previous cell made due does not land in whichever loop comes next: a loop
pays for the collections its own allocations bring on. One round is run first and reported apart: the kernel's first panel pays one-time imports
(matplotlib's start-up, ~1 s) that no later section pays.
"""
from __future__ import annotations

import json
import os
import statistics

TARGET = 0.10

SETUP = """
import functools, gc, json, time, torch, hpu_lab, widgets
from hpu_lab.examples import Net, train_step
torch.manual_seed(0)
_model = Net().to("hpu")
_opt = torch.optim.Adadelta(_model.parameters(), lr=0.1)
_x, _y = torch.randn({batch}, 1, 28, 28), torch.randint(0, 10, ({batch},))
_step = functools.partial(train_step, _model, _opt, _x, _y)
for _ in range(5):
    _step()
torch.hpu.synchronize()

# the garbage collector's time (a full collection walks every object of the kernel, a noticeable
# share of the loop; what a loop keeps brings the next one on)
_gc = [0.0, 0, 0.0]     # seconds in collections, full collections, start of the current one

def _gc_hook(phase, info):
    if phase == "start":
        _gc[2] = time.perf_counter()
    else:
        _gc[0] += time.perf_counter() - _gc[2]
        _gc[1] += info["generation"] == 2

gc.callbacks.append(_gc_hook)

def _plain(n):
    gc.collect()            # each loop starts with nothing pending: it pays only the collections it brings on
    _gc[:2] = [0.0, 0]
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        _step()
    torch.hpu.synchronize()
    return time.perf_counter() - t, time.process_time() - c, _gc[0], _gc[1]

def _panel(n):
    gc.collect()
    _gc[:2] = [0.0, 0]
    t, c = time.perf_counter(), time.process_time()
    with widgets.section("bench: panel overhead") as s:
        entered = time.perf_counter() - t
        for _ in range(n):
            _step()
        torch.hpu.synchronize()
        loop, loop_cpu, loop_gc = time.perf_counter() - t, time.process_time() - c, tuple(_gc[:2])
        live = s._panel.stats["live_refreshes"], s._panel.stats["live_s"]
    return loop, time.perf_counter() - t, loop_cpu, *loop_gc, entered, *live

def _round(n, panel_first):
    if panel_first:
        w = _panel(n)
        return [*_plain(n), *w]
    return [*_plain(n), *_panel(n)]
"""


KEYS = ("plain_s", "plain_cpu_s", "plain_gc_s", "plain_full_gcs", "loop_s", "cell_s", "loop_cpu_s",
        "loop_gc_s", "loop_full_gcs", "entry_s", "live_redraws", "live_s")


def measure(steps: int = 600, rounds: int = 5, batch: int = 64, timeout: float = 600) -> dict:
    """Medians over ``rounds`` (after a first round reported apart as ``first``) of KEYS, and of each
    round's overheads: ``loop_over`` (loop wall / plain wall - 1), ``cell_over``, ``cpu_over``."""
    from jupyter_client.manager import start_new_kernel
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load_before = os.getloadavg()
    km, kc = start_new_kernel(kernel_name="python3", env=env)
    out = []

    def run(code):
        def hook(msg):
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
        reply = kc.execute_interactive(code, output_hook=hook, timeout=timeout)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"benchmark cell failed in the kernel: {reply['content'].get('evalue')}")
    try:
        run(SETUP.format(batch=batch))
        rows = []
        for i in range(rounds + 1):
            out.clear()
            run(f"print(json.dumps(_round({steps}, {i % 2 == 1})))")
            rows.append(dict(zip(KEYS, json.loads("".join(out).strip().splitlines()[-1]))))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    # each row: plain wall, plain CPU, plain GC s, plain full GCs, loop wall, cell wall, loop CPU,
    # loop GC s, loop full GCs (CPU: the kernel process's, every thread; GC: time in the garbage
    # collector, and its full collections), time to enter the section (the panel built and shown),
    # the live redraws inside the loop and their time
    first, rows = rows[0], rows[1:]
    for r in rows:
        r["loop_over"] = r["loop_s"] / r["plain_s"] - 1
        r["cell_over"] = r["cell_s"] / r["plain_s"] - 1
        r["cpu_over"] = r["loop_cpu_s"] / r["plain_cpu_s"] - 1
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    total = {f"total_{k}": sum(r[k] for r in rows) for k in KEYS}
    return {**med, **total, "rows": rows, "first": first, "steps": steps, "load_before": load_before,
            "load": os.getloadavg()}


def main(argv=None) -> dict:
    try:
        r = measure()
    except ImportError as e:
        print(f"\n== Panel overhead: not available ({e}) ==")
        return {}
    p, l, c = r["plain_s"], r["loop_s"], r["cell_s"]
    print(f"\n== Panel overhead: {r['steps']} seed-style MLP steps in a Jupyter kernel, median of {len(r['rows'])} "
          "rounds ==")
    print(f"plain loop                         {p:6.2f} s")
    print(f"loop inside widgets.section(...)   {l:6.2f} s   ({100 * r['loop_over']:+.0f}%; target <= "
          f"{100 * TARGET:.0f}%: {r['loop_over'] <= TARGET})")
    print(f"  of which entering the section (the panel built and shown): {1000 * r['entry_s']:.0f} ms; "
          f"live redraws over all rounds: {r['total_live_redraws']:.0f}, {r['total_live_s']:.2f} s")
    print(f"whole cell, with the final redraw  {c:6.2f} s   ({100 * r['cell_over']:+.0f}%)")
    pc, lc = r["plain_cpu_s"], r["loop_cpu_s"]
    print(f"process CPU time: plain {pc:.2f} s, loop in the section {lc:.2f} s ({100 * r['cpu_over']:+.0f}%)")
    tp, tl = r["total_plain_cpu_s"], r["total_loop_cpu_s"]
    print(f"  over all rounds: plain {tp:.2f} s, loop in the section {tl:.2f} s ({100 * (tl / tp - 1):+.0f}%)")
    print(f"garbage collector over all rounds: plain loops {r['total_plain_gc_s']:.2f} s "
          f"({r['total_plain_full_gcs']:.0f} full collections), loops in a section {r['total_loop_gc_s']:.2f} s "
          f"({r['total_loop_full_gcs']:.0f} full)")
    print("per round (loop / cell / CPU over plain): " + ", ".join(
        f"{100 * x['loop_over']:+.0f}/{100 * x['cell_over']:+.0f}/{100 * x['cpu_over']:+.0f}%" for x in r["rows"]))
    f = r["first"]
    print(f"first round, with the kernel's one-time imports: plain {f['plain_s']:.2f} s, loop {f['loop_s']:.2f} s, "
          f"cell {f['cell_s']:.2f} s")
    print("load average before: " + " ".join(f"{x:.1f}" for x in r["load_before"]) +
          "; after: " + " ".join(f"{x:.1f}" for x in r["load"]))
    return r


if __name__ == "__main__":
    main()
