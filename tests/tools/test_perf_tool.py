"""habana_perf_tool: the console script scans a trace hpu_lab's profiler wrote, lists its metrics and
gives the advisor's guidance; a file it cannot read is refused with a message naming the problem."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab.observe import profiler
from hpu_lab.tools import perf_tool
from helpers import into_closed_pipe, no_cyclic_gc, recorded, seed_setup

TOOL = Path(sys.executable).parent / "habana_perf_tool"      # the venv's console script (pyproject)


def run_tool(*args):
    assert TOOL.exists(), f"{TOOL}: the console script is not installed (make setup)"
    return subprocess.run([str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def small_batch_trace(tmp_path_factory):
    """Seed 000's model at batch 16 on Gaudi 2: the device finishes each step long before the host."""
    _, _, step = seed_setup(batch=16)
    with no_cyclic_gc():
        events = recorded(step, n=6, warm=2)
    return profiler.export_chrome_trace(str(tmp_path_factory.mktemp("pt") / "small.json"), events, device="gaudi2")


@pytest.fixture(scope="module")
def device_bound_trace(tmp_path_factory):
    """Eight 1024x1024 matmuls a step on first-gen Gaudi: the device's time outlasts the host's."""
    a = torch.randn(1024, 1024).to("hpu")

    def step():
        b = a
        for _ in range(8):
            b = b @ a
        htcore.mark_step()
        return b
    step().cpu()                                     # compiled outside the window
    with no_cyclic_gc(), ev.Collector() as c:
        for _ in range(4):
            b = step()
        b.cpu()
    return profiler.export_chrome_trace(str(tmp_path_factory.mktemp("pt") / "big.json"), c.events, device="gaudi")


def test_small_batch_trace_is_host_bound_and_gets_the_batch_size_advice(small_batch_trace):
    r = run_tool("--trace", small_batch_trace)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Gaudi clock: GAUDI2 (modeled)" in out
    for metric in ("device utilization", "host work / device work", "mark_steps", "graph sizes (nodes)",
                   "compiles", "host syncs"):
        assert metric in out
    assert "verdict                  host-bound" in out
    guidance = out.split("Guidance:")[1]
    assert guidance.strip().startswith("- host-bound") and "increase the batch size" in guidance
    assert "mark_steps               12" in out          # 6 steps of 2 mark_steps, from the trace


def test_device_bound_trace_gets_no_batch_size_advice(device_bound_trace):
    r = run_tool("--trace", device_bound_trace)
    assert r.returncode == 0, r.stderr
    guidance = r.stdout.split("Guidance:")[1]
    assert guidance.strip().startswith("- device-bound") and "would not make this faster" in guidance
    assert "increase the batch size" not in r.stdout
    assert "compiles                 0 (0 recompiles)" in r.stdout


def test_the_tool_and_the_panel_share_one_rule_set(small_batch_trace):
    # the same advice from the same events: the rules are hpu_lab.perfmodel.advice's, only the
    # window's measurement differs (the trace's times against the panel's re-timing)
    import widgets.advisor as adv
    from hpu_lab.perfmodel import advice
    assert adv.RULES is advice.RULES
    events = perf_tool.events_of(perf_tool.load_trace(small_batch_trace))
    tips = perf_tool.guidance(events, "trace")
    assert [t.split(" ")[0] for t in tips] == ["host-bound:"]


@pytest.mark.parametrize("content, problem", [
    ('{"traceEvents": [{"ph": "X", ', "is not a valid JSON trace: Expecting property name"),
    ("\x80\x81 not text", "is not a JSON trace: not UTF-8 text"),
    ('{"name": "a config file"}', 'is JSON but not a Chrome trace: no "traceEvents" list'),
    ('{"traceEvents": [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}',
     "holds no hpu_lab events"),
])
def test_a_bad_file_is_refused_with_the_problem_named(tmp_path, content, problem):
    p = tmp_path / "trace_example.json"
    p.write_bytes(content.encode("latin-1"))
    r = run_tool("--trace", p)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("habana_perf_tool: error: ") and problem in r.stderr and str(p) in r.stderr


def test_missing_file_and_missing_option(tmp_path):
    r = run_tool("--trace", tmp_path / "nope.json")
    assert r.returncode == 1 and "not found" in r.stderr and "nope.json" in r.stderr
    r = run_tool()
    assert r.returncode == 2 and "--trace" in r.stderr


def test_a_measured_clock_trace_is_read_on_its_own_clock(tmp_path, small_batch_trace):
    events = perf_tool.events_of(perf_tool.load_trace(small_batch_trace))
    path = profiler.export_chrome_trace(str(tmp_path / "cpu.json"), events, clock="measured")
    r = run_tool("--trace", path)
    assert r.returncode == 0, r.stderr
    assert "measured on this CPU" in r.stdout and "mark_steps               12" in r.stdout


def test_a_reader_leaving_early_ends_the_tool_quietly(small_batch_trace):
    """`habana_perf_tool --trace t.json | head -3`: no BrokenPipeError traceback, exit 141 (128 +
    SIGPIPE) as coreutils' tools in the same place; the whole report when the reader stays."""
    r = into_closed_pipe([str(TOOL), "--trace", small_batch_trace])
    assert (r.returncode, r.stderr) == (141, ""), r.stderr
    assert run_tool("--trace", small_batch_trace).stdout.rstrip().splitlines()[-1].startswith("  - ")
