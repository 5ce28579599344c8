"""Import cost: ``import torch``, then ``import hpu_lab`` on top of it, in fresh processes.

Each run is a new interpreter that times the two import statements one after the other, then how
long the background warm-up (hpu_lab/warmup.py: what the first op needs from torch) keeps importing
after ``import hpu_lab`` has returned. Medians over ``runs`` processes. Target (issue 12):
``import hpu_lab`` adds at most 0.3 s to ``import torch``.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys

TARGET_S = 0.3

PROBE = """
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import hpu_lab
t2 = time.perf_counter()
hpu_lab.warmup.wait()
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def measure(runs: int = 5) -> dict:
    """{"torch_s", "hpu_lab_s", "warmup_s"}: medians over ``runs`` fresh processes, and "runs"."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                             check=True, timeout=300)
        rows.append(tuple(float(v) for v in out.stdout.split()[-3:]))
    med = [statistics.median(r[i] for r in rows) for i in range(3)]
    return {"torch_s": med[0], "hpu_lab_s": med[1], "warmup_s": med[2], "runs": rows}


def main(argv=None) -> dict:
    r = measure()
    t, h, w = r["torch_s"], r["hpu_lab_s"], r["warmup_s"]
    print(f"\n== Import time: fresh processes, median of {len(r['runs'])} ==")
    print(f"import torch                     {t:6.3f} s")
    print(f"import hpu_lab, after torch      {h:6.3f} s   (+{100 * h / t:.0f}% of import torch; "
          f"target <= {TARGET_S} s: {h <= TARGET_S})")
    print(f"background warm-up, after that   {w:6.3f} s   (torch.distributed.tensor and torch._dynamo, which "
          "the first op needs; it runs while the user's code goes on, and the first hpu tensor waits for it)")
    return r


if __name__ == "__main__":
    main()
