"""The recorder's cost per event: ``python -m hpu_lab.bench recorder``.

A lazy loop of small ops (``x = x + 1``, left pending, flushed by one mark_step afterwards) is timed
three ways in this process: nobody listening (no event is built: ``events.wants`` is false), a
``Collector`` recording through the fast recorder (events/recorder.py: op events kept as flat runs),
and the same under the reference recorder (events/reference.py: every event built and delivered at
once). The cost per event is the loop's extra time over the quiet one, divided by the op events it
recorded. Medians of ``repeats`` loops; wall time of this machine, a figure to compare, not a test.
"""
from __future__ import annotations

import statistics
import time

import torch


def _loop_ns(x, ops: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(ops):
        x = x + 1
    t = time.perf_counter_ns() - t0
    import hpu_lab.core as htcore
    htcore.mark_step()
    return t


def main(ops: int = 400, repeats: int = 7) -> dict:
    import hpu_lab  # noqa: F401
    from .. import events as ev
    from ..events.reference import ReferenceRecorder

    x = torch.zeros(4, device="hpu")
    _loop_ns(x, ops)                                  # compiles the graph once: every loop after hits the cache

    def timed(listen) -> tuple:
        times, recorded = [], []
        for _ in range(repeats):
            if listen is None:
                times.append(_loop_ns(x, ops))
                continue
            with listen():
                with ev.Collector(kinds=[ev.OpAccumulated]) as c:
                    times.append(_loop_ns(x, ops))
            recorded.append(len(c.events))
        return statistics.median(times), (statistics.median(recorded) if recorded else 0)

    class _same:                                      # the recorder in use (the fast one)
        def __enter__(self):
            return None

        def __exit__(self, *exc):
            return False

    quiet, _ = timed(None)
    fast, n_fast = timed(_same)
    ref, n_ref = timed(lambda: ev.use(ReferenceRecorder()))
    per_fast = (fast - quiet) / max(n_fast, 1)
    per_ref = (ref - quiet) / max(n_ref, 1)
    print(f"\n== The recorder: a lazy loop of {ops} ops, median of {repeats} ==")
    print(f"nobody listening:     {quiet / ops / 1e3:7.2f} us / op")
    print(f"fast recorder:        {fast / ops / 1e3:7.2f} us / op, {per_fast / 1e3:6.2f} us per event "
          f"({n_fast:.0f} op events)")
    print(f"reference recorder:   {ref / ops / 1e3:7.2f} us / op, {per_ref / 1e3:6.2f} us per event "
          f"({n_ref:.0f} op events)")
    return {"ops": ops, "quiet_ns_per_op": quiet / ops, "fast_ns_per_event": per_fast,
            "reference_ns_per_event": per_ref, "events": n_fast}


if __name__ == "__main__":
    main()
