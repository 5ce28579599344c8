"""The recorder benchmark runs and counts what it records (facts, not times)."""
from hpu_lab.lab.bench import recorder


def test_recorder_bench_records_one_event_per_op(capsys):
    r = recorder.main(ops=30, repeats=2)
    assert r["ops"] == 30 and r["events"] == 30           # one OpAccumulated per op, fast and reference alike
    assert {"quiet_ns_per_op", "fast_ns_per_event", "reference_ns_per_event"} <= set(r)
    out = capsys.readouterr().out
    assert "2 interleaved rounds" in out and "(30 op events)" in out
