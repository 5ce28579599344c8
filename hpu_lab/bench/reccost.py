"""What observing a loop costs, counted instead of timed (issue 14, point 5): Python bytecode
instructions per training step of the seed-style MLP loop (batch 64, Adadelta), on the user's
thread and on the emulator's device thread, plain and observed by a bare ``events.Collector`` and
by a live ``widgets.SectionPanel``.

Why count: the panel benchmark (panel.py) times the loop in a kernel, and on a shared VM its
rounds spread over tens of points (the same code measured +10% and +19% an hour apart), so it
cannot show a change of a few percent. What a recording adds to the loop is Python run by the
recorder and the panel, and a count of the instructions run is the same on a busy or idle
machine: it shows the change the timing cannot. It is not the time itself: an instruction of the
recorder does not cost what an average instruction of the emulator does (callgrind counted ~110
machine instructions a bytecode in the plain loop), and the count leaves out system calls and
waits (docs/gaudi_clock.md, section 7).

How: ``sys.settrace`` with opcode events on the user's thread and the default stream's worker (the
device thread; autograd's thread, which runs backward, is not counted: ~15,000 of the ~100,000 a
step). Tracing makes the loop 7-15x slower, and the recorder takes some paths by wall time (a
thread-clock reading and a run-queue baseline due every ``CPU_READ_NS``, a hand-over every
``HAND_OVER_NS``): while counting, those thresholds are scaled by the measured slowdown, so that
the paths are taken as often per step as in the untraced loop. The thresholds are put back
afterwards. That is approximate: tracing slows the recorder's pure Python more than the loop's
average, so the scaled count still overstates how often a reading falls due (at session 9's code
it counted ~120 dues a step against 16 untraced). ``dues()`` counts them untraced, without
tracing, and is the better guide to them.

Also counted: the memory a recording keeps per step (``kept()``, tracemalloc: bytes allocated
during the steps and still alive after them). Every byte kept is fresh memory: each fresh 4 KiB
page costs a page fault on the thread that touches it first (~2.2 us here, timed on a fresh
mapping). The ~21 KB a live panel keeps per step came to ~4,000 faults of the user's thread per
600-step loop, ~9 ms (session 18, docs/gaudi_clock.md section 7), a cost the opcode count does
not see. Like the opcodes, the bytes are nearly the same on a busy or idle machine.
"""
from __future__ import annotations

import argparse
import functools
import gc
import sys
import threading
import time
import tracemalloc

KINDS = ("plain", "collector", "panel")
_SCALED = ("CPU_READ_NS", "BLOCKED_MIN_NS", "OBSERVER_EXACT_NS", "RUNQ_SLACK_NS", "HAND_OVER_NS")


def _loop(batch: int):
    import torch
    from hpu_lab.examples import Net, train_step
    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    step = functools.partial(train_step, model, opt, x, y)
    _steps(step, 5)
    return step


def _steps(step, n: int) -> None:
    """``n`` steps, then wait until the device has run them: a count starts and ends with nothing
    pending."""
    import torch
    for _ in range(n):
        step()
    torch.hpu.synchronize()


def _observer(kind: str):
    """Start observing as ``kind`` does; returns what stops it."""
    from hpu_lab import events as ev
    if kind == "collector":
        return ev.Collector().start().stop
    if kind == "panel":
        import widgets
        p = widgets.SectionPanel("reccost", min_interval=1e9)   # the live check, no redraw in the count
        p.attach(live=True)
        return p.detach
    return lambda: None


class _Counter:
    """Opcodes run per thread while ``on``."""

    def __init__(self, threads):
        self.threads = {t.ident: t.name for t in threads}
        self.counts = {name: 0 for name in self.threads.values()}
        self.on = False

    def trace(self, frame, event, arg):
        if not self.on or threading.get_ident() not in self.threads:
            return None
        frame.f_trace_opcodes = True
        return self._local

    def _local(self, frame, event, arg):
        if event == "opcode" and self.on:
            self.counts[self.threads[threading.get_ident()]] += 1
        return self._local


def _device_threads():
    return [t for t in threading.enumerate() if t.name.startswith("hpu_lab-hpu")]


def _on_device(fn) -> None:
    """Run ``fn`` on the default stream's worker thread, in stream order, and wait for it."""
    from hpu_lab.runtime import executor
    executor.stream(0).submit_fn(fn).done.wait()


def count(kind: str, step, steps: int, scale: float) -> dict:
    """Opcodes per step on the user's thread and the device thread(s) while ``kind`` observes."""
    import torch
    from hpu_lab import events as ev
    stop = _observer(kind)
    saved = {n: getattr(ev, n) for n in _SCALED}
    try:
        _steps(step, 2)
        # nothing of the warm-up left to settle: since session 19 a thread switch settles nothing
        # (the stamps and readings kept are settled at the next slow path or hand-over), and what
        # the warm-up left, its readings due by wall time, made the count move by ~1%
        ev.flush()
        gc.collect()
        for n in _SCALED:
            setattr(ev, n, int(saved[n] * scale))
        c = _Counter([threading.current_thread()] + _device_threads())
        _on_device(lambda: sys.settrace(c.trace))    # the worker traces the frames it runs next
        sys.settrace(c.trace)
        c.on = True
        for _ in range(steps):           # here, not in _steps: this frame is not traced, a new one would be
            step()
        torch.hpu.synchronize()
        # the steps' own stamps and readings settled, counted (a settle once a loop would do them
        # all the same); not the hand-over, once a loop, whose fixed part two steps would overstate
        with ev.recorder._host.lock:
            ev.recorder._settle()
        c.on = False
    finally:
        sys.settrace(None)
        _on_device(lambda: sys.settrace(None))
        for n, v in saved.items():
            setattr(ev, n, v)
        stop()
    main = threading.current_thread().name
    return {"user": c.counts[main] / steps,
            "device": sum(v for k, v in c.counts.items() if k != main) / steps}


def _slowdown(step, steps: int) -> float:
    """How much slower a traced step runs than an untraced one (wall time, one sample each)."""
    import torch
    t = time.perf_counter()
    _steps(step, steps)
    plain = time.perf_counter() - t
    c = _Counter([threading.current_thread()])
    sys.settrace(c.trace)
    c.on = True
    t = time.perf_counter()
    try:
        for _ in range(steps):           # (as in count: no traced frame of its own)
            step()
        torch.hpu.synchronize()
    finally:
        c.on = False
        sys.settrace(None)
    return max((time.perf_counter() - t) / plain, 1.0)


def dues(kind: str, step, steps: int = 100) -> dict:
    """How often the recorder's time-driven paths run per step, untraced: thread-clock readings and
    dues (``_after_observers``: the end of an emit, or of an op, that read the clock or refreshed
    the run-queue baseline or took long, each closing the op run). Wall time decides them, so these
    move with the machine's speed and load, unlike the counts; they are what the "as untraced"
    count stands for."""
    from hpu_lab import events as ev
    n = {"readings": 0, "dues": 0}
    rec, read = ev.recorder, ev.thread_cpu
    after = rec._after_observers

    def counted_read():
        n["readings"] += 1
        return read()

    def counted_after(*a):
        n["dues"] += 1
        return after(*a)
    stop = _observer(kind)
    try:
        _steps(step, 2)
        ev.thread_cpu, rec._after_observers = counted_read, counted_after
        _steps(step, steps)
    finally:
        ev.thread_cpu = read
        del rec._after_observers                  # the method again
        stop()
    return {k: v / steps for k, v in n.items()}


def kept(kind: str, step, steps: int = 100) -> dict:
    """Bytes allocated during ``steps`` steps while ``kind`` observes and still alive after them
    (the device synchronized, garbage collected), per step, with the lines that keep the most
    (``top``: [(file:line, bytes a step)]). Plain, what is kept is the loop's own live state (its
    tensors, warm caches: ~150 KB in all, the same after 100 or 600 steps), not a cost per step:
    the report gives what an observer keeps beyond it."""
    stop = _observer(kind)
    try:
        _steps(step, 2)
        gc.collect()
        was_tracing = tracemalloc.is_tracing()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            _steps(step, steps)
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            if not was_tracing:
                tracemalloc.stop()
    finally:
        stop()
    diff = after.compare_to(before, "lineno")
    top = [(f"{d.traceback[0].filename.rsplit('/', 2)[-1]}:{d.traceback[0].lineno}", d.size_diff / steps)
           for d in diff[:5] if d.size_diff > 0]
    return {"bytes": sum(d.size_diff for d in diff) / steps, "top": top}


# "none due": thresholds so long that no reading falls due inside the count: the recording's cost
# per event, the same in every run; "as untraced": scaled by the tracing slowdown, the readings as
# often per step as in the loop itself (within a few percent: the slowdown is one sample)
NONE_DUE = 10**6


def measure(steps: int = 5, batch: int = 64, kinds=KINDS) -> dict:
    import hpu_lab  # noqa: F401  (registers the device)
    step = _loop(batch)
    scale = _slowdown(step, steps)
    out = {"steps": steps, "scale": scale, "none_due": {}, "as_untraced": {}}
    out["dues"] = {}
    out["kept"] = {}
    for k in kinds:
        out["none_due"][k] = count(k, step, steps, NONE_DUE)
        out["as_untraced"][k] = count(k, step, steps, scale)
        if k != "plain":
            out["dues"][k] = dues(k, step)
        out["kept"][k] = kept(k, step)
    return out


def report(r: dict) -> None:
    print(f"\n== Recording cost, counted: Python opcodes per seed-style MLP step ({r['steps']} steps) ==")
    for how, label in (("none_due", "no thread-clock or run-queue reading due"),
                       ("as_untraced", f"readings due as often as untraced (thresholds x{r['scale']:.0f})")):
        kinds = r[how]
        plain = kinds["plain"]
        print(f"{label}:")
        for k, v in kinds.items():
            extra = "" if k == "plain" else (f"  ({100 * (v['user'] / plain['user'] - 1):+.1f}% on the user's thread, "
                                             f"{v['device'] - plain['device']:+.0f} on the device thread)")
            print(f"  {k:10s} user's thread {v['user']:9.0f}   device thread {v['device']:7.0f}{extra}")
    print("untraced, per step (wall time decides these: they move with the machine's speed and load):")
    for k, v in r.get("dues", {}).items():
        print(f"  {k:10s} {v['dues']:5.1f} dues, {v['readings']:5.1f} thread-clock readings")
    kept_ = r.get("kept", {})
    if kept_:
        plain = kept_["plain"]["bytes"]
        print("memory a recording keeps per step, beyond the plain loop's (tracemalloc, 100 steps; each fresh "
              "4 KiB page is a page fault, ~2 us):")
        for k, v in kept_.items():
            if k == "plain":
                continue
            where = ", ".join(f"{w} {b / 1e3:.1f} KB" for w, b in v["top"][:3])
            print(f"  {k:10s} {(v['bytes'] - plain) / 1e3:6.1f} KB   (most: {where})")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m hpu_lab.bench.reccost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args(argv if argv is not None else [])
    try:
        r = measure(args.steps)
    except ImportError as e:
        print(f"\n== Recording cost: not available ({e}) ==")
        return {}
    report(r)
    return r


if __name__ == "__main__":
    main(sys.argv[1:])
