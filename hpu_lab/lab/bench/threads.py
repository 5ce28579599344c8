"""CPU time of this process by thread role, for the panel benchmark (panel.py): where a recording's
added time goes.

Measured on a 600-step loop, the wall time a recording adds follows the process's added CPU time
nearly millisecond for millisecond (medians of the wall and CPU time added): the user's,
autograd's and the device's threads share one interpreter lock and two cores, so CPU added on any
of them is waited for. The split says which thread pays.

Linux only (``/proc/self/task/<tid>/schedstat``: nanoseconds on the CPU per thread); elsewhere
``cpu_by_role()`` is empty and the benchmark reports no split.
"""
from __future__ import annotations

import os
import threading

ROLES = ("user", "autograd", "device", "other")
_TASKS = "/proc/self/task"


def _role(tid: int, comm: str, user: int, device: set) -> str:
    if tid == user:
        return "user"
    if comm.startswith("pt_autograd"):      # torch's autograd engine's device threads (backward)
        return "autograd"
    if tid in device:                       # the emulator's streams (runtime/executor.py)
        return "device"
    return "other"                          # torch's intra-op workers, a kernel's own threads


def cpu_by_role() -> dict:
    """Nanoseconds on the CPU so far per role (``ROLES``), summed over the role's live threads;
    {} where /proc has no per-thread schedstat. Threads that ended meanwhile are not counted: take
    both readings of a difference while the same threads run."""
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return {}
    user = threading.main_thread().native_id
    device = {t.native_id for t in threading.enumerate() if t.name.startswith("hpu_lab-hpu")}
    out = dict.fromkeys(ROLES, 0)
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"{_TASKS}/{tid}/schedstat") as f:
                run_ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):   # the thread ended, or no schedstat
            continue
        out[_role(int(tid), comm, user, device)] += run_ns
    return out if any(out.values()) else {}


def since(before: dict, after: dict) -> dict:
    """Seconds on the CPU per role between two ``cpu_by_role()`` readings ({} if either is empty)."""
    if not before or not after:
        return {}
    return {r: (after[r] - before[r]) / 1e9 for r in ROLES}
