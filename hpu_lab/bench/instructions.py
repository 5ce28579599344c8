"""What observing a loop costs, in machine instructions (issue 14, point 5): the instructions the
user's thread runs per step of the seed-style MLP loop (batch 64, Adadelta), plain and observed
(a bare ``events.Collector``, a live ``widgets.SectionPanel``), counted by valgrind's callgrind.

Why: the kernel timing (panel.py) spreads over tens of points from one loop to the next on a shared
VM, and the bytecode count (reccost.py) weighs every bytecode alike, where the recorder's cost
more (big integers, allocations, C calls). Instructions are what the CPU runs, and callgrind counts
the same ones on a busy or idle machine: two versions of the recorder compare to a fraction of a
percent in one run each (session 11: plain 9.34 M a step, a live panel +6.0%).

How: each kind runs in its own process under ``valgrind --tool=callgrind``, which counts only
inside ``functools.reduce`` (``--toggle-collect``): the measured steps run as one reduce on the
user's thread, so imports, warm-up and the other threads (the device thread, autograd's) are left
out. The recorder takes some paths by wall time (a thread-clock reading due every
``CPU_READ_NS``, ...); valgrind runs a step ~50-200x slower, so those thresholds are scaled by the
slowdown measured in that process (its warm-up steps against the same steps timed here), as
reccost.py scales them for tracing. The count leaves out what is not instructions: cache misses,
system calls, waits (docs/gaudi_clock.md, section 7). Needs ``valgrind`` on PATH; without it this
says so and measures nothing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

KINDS = ("plain", "collector", "panel")

# Run under valgrind: argv kind, steps, the native seconds a step. The counted part is the reduce.
CHILD = """
import functools, gc, sys, time
import torch, hpu_lab
from hpu_lab import events as ev
from hpu_lab.bench import reccost as rc
kind, steps, native = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
step = rc._loop(64)
t = time.perf_counter()
for _ in range(3):
    step()
torch.hpu.synchronize()
scale = max((time.perf_counter() - t) / 3 / native, 1.0)
for name in rc._SCALED:
    setattr(ev, name, int(getattr(ev, name) * scale))
stop = rc._observer(kind)
for _ in range(3):
    step()
torch.hpu.synchronize()
gc.collect()
functools.reduce(lambda _a, _b: step(), range(steps), None)
torch.hpu.synchronize()
stop()
print(f"slowdown {scale:.0f}")
"""


def command(kind: str, steps: int, native_s: float, out: str) -> list:
    """The valgrind command line that counts ``kind``'s ``steps`` into the callgrind file ``out``."""
    return ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
            f"--callgrind-out-file={out}", sys.executable, "-c", CHILD, kind, str(steps), repr(native_s)]


def total(callgrind_out: str) -> int:
    """The instructions counted in a callgrind output file (its ``summary:`` line)."""
    for line in callgrind_out.splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise ValueError("no 'summary:' line: not a callgrind output file, or the run did not finish")


def _native_step_s(steps: int = 20) -> float:
    """Seconds a step of the loop takes here, unobserved (after warm-up)."""
    import torch
    from hpu_lab.bench import reccost as rc
    step = rc._loop(64)
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.hpu.synchronize()
    return (time.perf_counter() - t) / steps


def measure(steps: int = 20, kinds=("plain", "panel"), timeout: float = 1800) -> dict:
    """Instructions a step on the user's thread for each kind (the kinds run two at a time)."""
    native = _native_step_s()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = {"steps": steps, "native_step_ms": 1000 * native, "per_step": {}, "slowdown": {}}
    with tempfile.TemporaryDirectory() as d:
        pending = list(kinds)
        while pending:
            batch, pending = pending[:2], pending[2:]
            procs = {k: subprocess.Popen(command(k, steps, native, os.path.join(d, k)), env=env, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in batch}
            for k, p in procs.items():
                out, err = p.communicate(timeout=timeout)
                if p.returncode != 0:
                    raise RuntimeError(f"callgrind run of {k!r} failed ({p.returncode}): {err[-2000:]}")
                with open(os.path.join(d, k)) as f:
                    result["per_step"][k] = total(f.read()) / steps
                result["slowdown"][k] = out.strip().split()[-1]
    return result


def report(r: dict) -> None:
    print(f"\n== Recording cost in instructions: the user's thread, {r['steps']} seed-style MLP steps "
          f"under callgrind (a plain step {r['native_step_ms']:.1f} ms natively) ==")
    base = r["per_step"].get("plain")
    for k, n in r["per_step"].items():
        extra = f"({100 * (n / base - 1):+.1f}%)" if base and k != "plain" else ""
        print(f"  {k:9s} {n / 1e6:8.3f} M instructions a step {extra:9s}  (slowdown {r['slowdown'][k]}x)")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m hpu_lab.bench.instructions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--kinds", nargs="+", default=["plain", "panel"], choices=KINDS)
    args = p.parse_args(argv if argv is not None else [])
    if shutil.which("valgrind") is None:
        print("\n== Recording cost in instructions: not available (valgrind is not installed) ==")
        return {}
    if "plain" not in args.kinds:
        args.kinds.insert(0, "plain")
    r = measure(args.steps, tuple(args.kinds))
    report(r)
    return r


if __name__ == "__main__":
    main(sys.argv[1:])
