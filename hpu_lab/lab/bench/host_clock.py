"""The Gaudi clock's host lane on the seeds' figures: ``python -m hpu_lab.lab.bench host_clock``.

Seed 000's training step recorded in its three modes and re-timed on first-generation Gaudi, the
seed's card, against the seed's host times (the lazy figure calibrates the host model's one fitted
constant, the other two are the check), and the end-to-end rows: whole Hugging Face Trainer runs
against the whole clock (the modeled host lane, the device, their overlap). Modeled figures: the
same on any machine, busy or idle.
"""
from __future__ import annotations


def main() -> dict:
    from ...perfmodel import seed000, validation
    rows = seed000.check_rows()
    print("\n== The host clock: seed 000's step in its three modes on first-gen Gaudi (modeled host ms / step) ==")
    print(validation._table(rows))
    lazy, mgc, replay = (r["modeled ms"] for r in rows)
    print(f"the seed's order lazy > make_graphed_callables > capture/replay: {lazy > mgc > replay}; "
          "target 0.67x-1.5x of each seed figure (lazy is the calibration)")
    e2e = validation.end_to_end_rows()
    print("\n== End to end: whole HF Trainer runs against the whole clock (target 0.67x-1.5x) ==")
    print(validation._table(e2e))
    return {"seed": rows, "end_to_end": e2e}


if __name__ == "__main__":
    main()
