"""The recorder's cost per event: ``python -m hpu_lab.lab.bench recorder``.

A lazy loop of small ops (``x = x + 1``, left pending, flushed by one mark_step afterwards) is timed
three ways in this process: nobody listening (no event is built: ``events.wants`` is false), a
``Collector`` recording through the fast recorder (events/recorder.py: op events kept as flat runs),
and the same under the reference recorder (events/reference.py: every event built and delivered at
once). The cost per event is the loop's extra time over the quiet one, divided by the op events it
recorded, paired round by round. CPU time of this machine's recording thread: a figure to compare,
not a test.
"""
from __future__ import annotations

import contextlib
import statistics
import time

import torch


def _loop_ns(x, ops: int) -> int:
    """CPU time of this thread for ``ops`` lazy ops: the recorder runs on the thread that records the
    op, and a CPU clock leaves out the time other processes take the core (the machine may be busy)."""
    t0 = time.thread_time_ns()
    for _ in range(ops):
        x = x + 1
    t = time.thread_time_ns() - t0
    import hpu_lab.core as htcore
    htcore.mark_step()
    return t


def main(ops: int = 2000, repeats: int = 9) -> dict:
    import hpu_lab  # noqa: F401
    from ... import events as ev
    from ...events.reference import ReferenceRecorder

    x = torch.zeros(4, device="hpu")
    _loop_ns(x, ops)                                  # compiles the graph once: every loop after hits the cache

    # "fast": the recorder in use, nothing to switch
    modes = {"quiet": None, "fast": contextlib.nullcontext, "reference": lambda: ev.use(ReferenceRecorder())}
    times = {m: [] for m in modes}
    recorded = {m: [] for m in modes}
    # Rounds interleave the three ways (quiet, fast, reference, then the next round), so a change of
    # load during the run falls on all three alike; each way's extra is taken against the quiet loop
    # of its own round.
    for _ in range(repeats):
        for mode, listen in modes.items():
            if listen is None:
                times[mode].append(_loop_ns(x, ops))
                continue
            with listen():
                with ev.Collector(kinds=[ev.OpAccumulated]) as c:
                    times[mode].append(_loop_ns(x, ops))
            recorded[mode].append(len(c.events))

    def per_event(mode):
        n = statistics.median(recorded[mode])
        return statistics.median(t - q for t, q in zip(times[mode], times["quiet"])) / max(n, 1), n

    quiet = statistics.median(times["quiet"])
    per_fast, n_fast = per_event("fast")
    per_ref, n_ref = per_event("reference")
    print(f"\n== The recorder: a lazy loop of {ops} ops, {repeats} interleaved rounds, CPU time of the "
          f"recording thread ==")
    print(f"nobody listening:     {quiet / ops / 1e3:7.2f} us / op")
    print(f"fast recorder:        {statistics.median(times['fast']) / ops / 1e3:7.2f} us / op, "
          f"{per_fast / 1e3:6.2f} us per event ({n_fast:.0f} op events)")
    print(f"reference recorder:   {statistics.median(times['reference']) / ops / 1e3:7.2f} us / op, "
          f"{per_ref / 1e3:6.2f} us per event ({n_ref:.0f} op events)")
    assert n_fast == n_ref, (n_fast, n_ref)          # both recorders saw the same ops
    return {"ops": ops, "quiet_ns_per_op": quiet / ops, "fast_ns_per_event": per_fast,
            "reference_ns_per_event": per_ref, "events": n_fast}


if __name__ == "__main__":
    main()
