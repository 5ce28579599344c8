"""Panel overhead (issue 14, point 5): a 600-step seed-style MLP loop in a Jupyter kernel, plain and
inside ``widgets.section(...)`` with its live panel, alternately, in the same kernel.

Two figures per run of the loop with the panel: the loop itself (to the end of the ``with`` body:
what live redraws and the panel's subscriptions cost while the loop runs) and the whole cell (plus
the final redraw when the section ends). Medians over ``rounds`` rounds; the ratio to the plain
loop is the overhead. Target: loop <= 10% over plain. Wall time is the honest measure here (it is
what a learner waits for); run it on a quiet machine, the figures move with other load.
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

# the garbage collector's time (a full collection walks every object of the kernel: events kept by
# a panel make them happen, and each costs a noticeable share of the loop)
_gc = [0.0, 0, 0.0]     # seconds in collections, full collections, start of the current one

def _gc_hook(phase, info):
    if phase == "start":
        _gc[2] = time.perf_counter()
    else:
        _gc[0] += time.perf_counter() - _gc[2]
        _gc[1] += info["generation"] == 2

gc.callbacks.append(_gc_hook)

def _plain(n):
    _gc[:2] = [0.0, 0]
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        _step()
    torch.hpu.synchronize()
    return time.perf_counter() - t, time.process_time() - c, _gc[0], _gc[1]

def _panel(n):
    _gc[:2] = [0.0, 0]
    t, c = time.perf_counter(), time.process_time()
    with widgets.section("bench: panel overhead"):
        for _ in range(n):
            _step()
        torch.hpu.synchronize()
        loop, loop_cpu, loop_gc = time.perf_counter() - t, time.process_time() - c, tuple(_gc[:2])
    return loop, time.perf_counter() - t, loop_cpu, *loop_gc
"""


def measure(steps: int = 600, rounds: int = 3, batch: int = 64, timeout: float = 600) -> dict:
    """{"plain_s", "plain_cpu_s", "loop_s", "cell_s", "loop_cpu_s"}: medians over ``rounds`` (plain,
    then with the panel)."""
    from jupyter_client.manager import start_new_kernel
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
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
        for _ in range(rounds):
            out.clear()
            run(f"print(json.dumps([*_plain({steps}), *_panel({steps})]))")
            rows.append(json.loads("".join(out).strip().splitlines()[-1]))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    # each row: plain wall, plain CPU, plain GC s, plain full GCs, loop wall, cell wall, loop CPU,
    # loop GC s, loop full GCs (CPU: the kernel process's, every thread: steadier than wall time on a
    # loaded machine; GC: time in the garbage collector, and its full collections)
    med = [statistics.median(r[i] for r in rows) for i in range(9)]
    keys = ("plain_s", "plain_cpu_s", "plain_gc_s", "plain_full_gcs", "loop_s", "cell_s", "loop_cpu_s",
            "loop_gc_s", "loop_full_gcs")
    return {**dict(zip(keys, med)), "rows": rows, "steps": steps, "load": os.getloadavg()}


def main(argv=None) -> dict:
    try:
        r = measure()
    except ImportError as e:
        print(f"\n== Panel overhead: not available ({e}) ==")
        return {}
    p, l, c = r["plain_s"], r["loop_s"], r["cell_s"]
    print(f"\n== Panel overhead: {r['steps']} seed-style MLP steps in a Jupyter kernel, median of {len(r['rows'])} ==")
    print(f"plain loop                         {p:6.2f} s")
    print(f"loop inside widgets.section(...)   {l:6.2f} s   (+{100 * (l / p - 1):.0f}%; target <= "
          f"{100 * TARGET:.0f}%: {l / p - 1 <= TARGET})")
    print(f"whole cell, with the final redraw  {c:6.2f} s   (+{100 * (c / p - 1):.0f}%)")
    pc, lc = r["plain_cpu_s"], r["loop_cpu_s"]
    print(f"process CPU time: plain {pc:.2f} s, loop in the section {lc:.2f} s (+{100 * (lc / pc - 1):.0f}%)")
    print(f"garbage collector: plain {r['plain_gc_s']:.2f} s ({r['plain_full_gcs']:.0f} full), loop in the section "
          f"{r['loop_gc_s']:.2f} s ({r['loop_full_gcs']:.0f} full)")
    print("load average at the end: " + " ".join(f"{x:.1f}" for x in r["load"]))
    return r


if __name__ == "__main__":
    main()
