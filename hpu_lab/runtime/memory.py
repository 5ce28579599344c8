"""Device memory accounting: InUse / MaxInUse / Limit, as the bridge's memory_stats().

Every Storage allocates its bytes here while any view of it is alive. A running recipe adds its
transient peak (from the compiler's memory plan) on top, so MaxInUse is the real high-water mark
of what the device would have needed. A recipe whose plan does not fit under Limit is refused with
an out-of-memory error before it runs, and nothing is lost.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from .. import config
from .. import events as ev


class HPUOutOfMemoryError(RuntimeError):
    """The device would exceed its memory Limit."""


_lock = threading.Lock()
_s = {"InUse": 0, "MaxInUse": 0, "NumAllocs": 0, "NumFrees": 0, "ActiveAllocs": 0,
      "MaxAllocSize": 0, "TotalSystemAllocs": 0, "TotalSystemFrees": 0, "TotalActiveAllocs": 0}


def limit() -> int:
    return config.get("HPU_LAB_MEMORY_LIMIT")


def alloc(nbytes: int) -> None:
    with _lock:
        s = _s
        u = s["InUse"] = s["InUse"] + nbytes
        if u > s["MaxInUse"]:
            s["MaxInUse"] = u
        s["NumAllocs"] += 1
        s["ActiveAllocs"] += 1
        if nbytes > s["MaxAllocSize"]:
            s["MaxAllocSize"] = nbytes


def free(nbytes: int) -> None:
    with _lock:
        s = _s
        s["InUse"] -= nbytes
        s["NumFrees"] += 1
        s["ActiveAllocs"] -= 1


def in_use() -> int:
    return _s["InUse"]


# The emulated device keeps its buffers in this machine's RAM. Buffers the Limit allows (96 GB on a
# Gaudi 2) may add up to more than the host can hold, and the kernel's OOM killer would end the
# process without a word (Intel's test_huge_tensor: 8 GiB tensors). So large requests are also
# checked against the host: device memory in use may not pass a share of the host's RAM.
_HOST_CHECK_MIN = 64 << 20         # smaller requests cannot matter; skip reading /proc for them
_HOST_SHARE = 0.85                 # of MemTotal: leave the host, Python and torch the rest


def host_ram():
    """The host's RAM in bytes (Linux MemTotal), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


_unbacked = [0]                    # > 0 inside perfmodel.estimate(): traced tensors are never allocated


@contextmanager
def unbacked():
    """perfmodel.estimate() traces a step and never runs it: the tensors it makes get no host
    memory, so the host-RAM check does not apply to them (a BERT-Large step at the published batch
    keeps ~20 GB of activations for backward: it fits a Gaudi's HBM, and it costs this machine
    nothing when only traced). The device Limit still applies."""
    _unbacked[0] += 1
    try:
        yield
    finally:
        _unbacked[0] -= 1


def check_host(nbytes: int, what: str) -> None:
    """Refuse a buffer that would take device memory in use past what the host can back."""
    if nbytes < _HOST_CHECK_MIN or _unbacked[0]:
        return
    ram = host_ram()
    if ram is None:
        return
    cap = int(_HOST_SHARE * ram)
    if _s["InUse"] + nbytes > cap:
        raise HPUOutOfMemoryError(
            f"Host out of memory: hpu_lab keeps the emulated device's memory in this machine's RAM, "
            f"and allocating {_fmt(nbytes)} for {what} on top of InUse {_fmt(_s['InUse'])} is more "
            f"than the host can back ({_fmt(cap)}, {int(_HOST_SHARE * 100)}% of its "
            f"{_fmt(ram)}). It fits the emulated device (Limit {_fmt(limit())}), not this machine: "
            f"use smaller tensors here.")


def check_fits(nbytes: int, what: str) -> None:
    """Refuse (OOM) a new device buffer that does not fit under Limit; nothing is allocated then.
    Host->device copies and ``torch.empty(..., device="hpu")`` allocate through here: a copy that
    does not fit fails at its own line, not in a later, unrelated graph."""
    check_host(nbytes, what)
    lim = limit()
    with _lock:
        if _s["InUse"] + nbytes > lim:
            raise HPUOutOfMemoryError(
                f"Device out of memory: allocating {_fmt(nbytes)} for {what} on top of InUse "
                f"{_fmt(_s['InUse'])} but the Limit is {_fmt(lim)} (MaxInUse {_fmt(_s['MaxInUse'])}). "
                f"Free tensors you no longer need, lower the batch size, or raise HPU_LAB_MEMORY_LIMIT.")


def reserve_transient(peak_bytes: int, what: str, held: int = 0) -> None:
    """Account a recipe's transient peak; refuse it (OOM) if it cannot fit under Limit.

    ``held``: bytes of input buffers only the graph still holds (their tensors were freed while it
    was pending), needed on the device until it runs."""
    check_host(peak_bytes, what)
    lim = limit()
    with _lock:
        need = _s["InUse"] + peak_bytes + held
        if need > lim:
            kept = f" and {_fmt(held)} of inputs whose tensors were freed" if held else ""
            raise HPUOutOfMemoryError(
                f"Device out of memory: {what} needs {_fmt(peak_bytes)} of working memory{kept} on "
                f"top of InUse {_fmt(_s['InUse'])} but the Limit is {_fmt(lim)} "
                f"(MaxInUse {_fmt(_s['MaxInUse'])}). Break the graph with mark_step(), lower the "
                f"batch size, or raise HPU_LAB_MEMORY_LIMIT.")
        if need > _s["MaxInUse"]:
            _s["MaxInUse"] = need
    if ev.wants(ev.MemorySample):
        t = ev.now()
        # positional, in the event's field order (emit_host: built when a recording reads it)
        ev.emit_host(ev.MemorySample, (t, t, "host", ev.recorder.step, _s["InUse"], _s["MaxInUse"], lim))


def stats() -> dict:
    with _lock:
        d = dict(_s)
    # the emulated allocator has one system allocation per tensor: derive the rest
    d["TotalActiveAllocs"] = d["ActiveAllocs"]
    d["TotalSystemAllocs"], d["TotalSystemFrees"] = d["NumAllocs"], d["NumFrees"]
    d["Limit"] = limit()
    return {k: d[k] for k in ("Limit", "InUse", "MaxInUse", "NumAllocs", "NumFrees", "ActiveAllocs",
                              "MaxAllocSize", "TotalSystemAllocs", "TotalSystemFrees", "TotalActiveAllocs")}


def reset_peak() -> None:
    with _lock:
        _s["MaxInUse"] = _s["InUse"]


def reset_accumulated() -> None:
    with _lock:
        for k in ("NumAllocs", "NumFrees", "TotalSystemAllocs", "TotalSystemFrees"):
            _s[k] = 0


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def summary() -> str:
    s = stats()
    lines = ["|" + "=" * 60 + "|", "|" + " HPU memory summary (hpu_lab emulated device) ".center(60) + "|",
             "|" + "=" * 60 + "|"]
    for k, v in s.items():
        val = _fmt(v) if k in ("Limit", "InUse", "MaxInUse", "MaxAllocSize") else str(v)
        lines.append(f"| {k:<28s}{val:>30s} |")
    lines.append("|" + "=" * 60 + "|")
    return "\n".join(lines)
