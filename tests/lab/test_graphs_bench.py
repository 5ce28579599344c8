"""The payoff benchmark runs, and what it counts per step is the mechanism (facts, not times)."""
from hpu_lab.lab.bench import graphs as bench_graphs


def test_bench_counts_per_step(capsys):
    r = bench_graphs.report(bench_graphs.measure(steps=2, rounds=1, warmup=2))
    c = {m: r[m]["counts"] for m in bench_graphs.MODES if m != "eager CPU"}
    # capture/replay: nothing traced, built or compiled; one replay, one launch per step
    assert c["capture/replay"] == {"OpAccumulated": 0, "GraphBuilt": 0, "Compile": 0, "Replay": 1, "Launch": 1}
    # lazy: the whole step is traced every time, two graphs (mark_step twice), no graph replayed
    assert c["lazy"]["OpAccumulated"] > 40 and c["lazy"]["GraphBuilt"] == 2 and c["lazy"]["Replay"] == 0
    # the wrappers replay a forward and a backward graph; the loss and the optimizer are still traced
    for m in ("make_graphed_callables", "ModuleCacher"):
        assert c[m]["Replay"] == 2 and c[m]["Compile"] == 0
        assert 0 < c[m]["OpAccumulated"] < c["lazy"]["OpAccumulated"]
    assert all(r[m]["host_ms"] > 0 and r[m]["wall_ms"] > 0 for m in bench_graphs.MODES)
    assert "capture / replay" in capsys.readouterr().out


def test_host_cpu_counts_the_autograd_thread():
    import torch
    import hpu_lab.core as htcore
    x = torch.randn(64, 64).to("hpu").requires_grad_(True)
    h0 = bench_graphs.host_cpu_ns()
    (x @ x).sum().backward()                 # backward is traced on autograd's thread
    htcore.mark_step()
    assert bench_graphs.host_cpu_ns() > h0
