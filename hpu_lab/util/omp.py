"""OpenMP's idle workers sleep instead of spinning, in a process that hpu_lab starts.

torch's CPU kernels run on OpenMP (libgomp here), and every thread that runs kernels gets its own
team of workers: the user's thread, the emulator's device thread (which runs the recipes) and
autograd's thread (which runs backward). By default, a worker whose parallel region ended spins
for a while (GOMP_SPINCOUNT, ~300,000 iterations) before it sleeps, waiting for the next region.
With three teams on a laptop's cores, those spins take the cores that the emulator's own threads
are waiting for. The waste grows with every extra microsecond of host work, so a recording panel
showed it as its own overhead.

``OMP_WAIT_POLICY=PASSIVE`` makes idle workers sleep at once. It does not change which worker
computes which element, so results are unchanged. It only helps if it is set before torch loads
libgomp, which reads it once:
- `make lab`, `make test` and `make bench` export it, so every kernel they start has it.
- ``import hpu_lab`` sets it when torch is not imported yet, e.g. under ``python -m hpu_lab run``.
- A value the user set is kept.

Measured with the panel benchmark (`python -m hpu_lab.lab.bench.panel`, a Jupyter kernel on 2 cores,
3 runs of 30 rounds each, pooled). With the default policy, the plain 600-step loop took a median
1.41 s and the live panel added 15.3% [13.0, 17.1]. With PASSIVE, the plain loop took 1.36 s and
the panel added 12.7% [11.5, 14.3]. The device thread's added CPU fell from 44 to 36 ms, and other
threads' (OpenMP's workers) from 24 to 11 ms.
"""
from __future__ import annotations

import os
import sys

WAIT_POLICY = "PASSIVE"


def prefer_passive_wait() -> bool:
    """Set ``OMP_WAIT_POLICY`` to PASSIVE unless the user set it or torch is already loaded (then
    libgomp has read its environment). True: set now."""
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ:
        return False
    os.environ["OMP_WAIT_POLICY"] = WAIT_POLICY
    return True
