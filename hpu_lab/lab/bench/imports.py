"""Import cost: ``import torch``, then ``import hpu_lab`` on top of it, in fresh processes.

Each run is a new interpreter that times the two import statements one after the other, then how
long the background warm-up (hpu_lab/util/warmup.py: what the first op needs from torch) keeps importing
after ``import hpu_lab`` has returned. Medians over ``runs`` processes. Target (issue 12):
``import hpu_lab`` adds at most 0.3 s to ``import torch``.

Measured as a user imports it: with Python's bytecode cache (a private ``PYTHONPYCACHEPREFIX``,
filled by one run that is not counted), also where the environment sets ``PYTHONDONTWRITEBYTECODE``
(without a cache every import compiles hpu_lab's ~80 modules from source: ~0.3 s more, reported
on its own line).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

TARGET_S = 0.3

PROBE = """
import time
t0, c0 = time.perf_counter(), time.thread_time()
import torch
t1, c1 = time.perf_counter(), time.thread_time()
import hpu_lab
t2, c2 = time.perf_counter(), time.thread_time()
hpu_lab.util.warmup.wait()
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, c1 - c0, c2 - c1)
"""


def measure(runs: int = 5, bytecode_cache: bool = True) -> dict:
    """Wall seconds {"torch_s", "hpu_lab_s", "warmup_s"} and the importing thread's CPU seconds
    {"torch_cpu_s", "hpu_lab_cpu_s"}: medians over ``runs`` fresh processes; "runs": every row.
    ``bytecode_cache=False``: every module compiled from source (PYTHONDONTWRITEBYTECODE, no cache)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory(prefix="hpu_lab_pycache_") as cache:
        if bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = cache
            _probe(env)                         # fills the cache; not counted
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env["PYTHONPYCACHEPREFIX"] = cache  # empty: no cached bytecode is found
        rows = [_probe(env) for _ in range(runs)]
    med = [statistics.median(r[i] for r in rows) for i in range(5)]
    return {"torch_s": med[0], "hpu_lab_s": med[1], "warmup_s": med[2], "torch_cpu_s": med[3],
            "hpu_lab_cpu_s": med[4], "runs": rows}


def _probe(env) -> tuple:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    return tuple(float(v) for v in out.stdout.split()[-5:])


def main(argv=None) -> dict:
    r = measure()
    t, h, w = r["torch_s"], r["hpu_lab_s"], r["warmup_s"]
    print(f"\n== Import time: fresh processes, median of {len(r['runs'])} ==")
    print(f"import torch                     {t:6.3f} s")
    print(f"import hpu_lab, after torch      {h:6.3f} s   (+{100 * h / t:.0f}% of import torch; "
          f"target <= {TARGET_S} s: {h <= TARGET_S})")
    print(f"background warm-up, after that   {w:6.3f} s   (torch.distributed.tensor and torch._dynamo, which "
          "the first op needs; it runs while the user's code goes on, and the first hpu tensor waits for it)")
    print(f"CPU time of the importing thread: torch {r['torch_cpu_s']:.3f} s, hpu_lab {r['hpu_lab_cpu_s']:.3f} s "
          "(less sensitive than wall time to other processes on the machine)")
    u = measure(runs=3, bytecode_cache=False)
    print(f"without a bytecode cache (every module compiled from source, median of 3): import hpu_lab "
          f"{u['hpu_lab_s']:.3f} s, CPU {u['hpu_lab_cpu_s']:.3f} s")
    r["no_bytecode_cache"] = u
    return r


if __name__ == "__main__":
    main()
