"""torch.profiler traces show the emulated HPU (issue 11, point 8) and optimum-habana's utilities run
on hpu_lab (point 9; skipped when optimum-habana, the [optimum] extra, is not installed)."""
import glob
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import hpu_lab.core as htcore
from hpu_lab.observe.torch_profiler import HPU_PID

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _hpu_events(trace):
    return [e for e in trace["traceEvents"] if e.get("pid") == HPU_PID]


def test_profile_with_hpu_activity_shows_compiles_launches_executions_and_syncs(tmp_path):
    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.HPU]) as prof:
        h = x.to("hpu")
        y = (h @ h).relu().sum()
        htcore.mark_step()
        value = y.item()
    assert value == pytest.approx((x @ x).relu().sum().item(), rel=1e-5)
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    trace = json.load(open(path))
    hpu = _hpu_events(trace)
    cats = [e.get("cat") for e in hpu]
    for kind in ("Compile", "Launch", "DeviceExecution", "HostSync", "HostToDevice", "MarkStep"):
        assert kind in cats, kind
    names = {e["args"]["name"] for e in hpu if e.get("ph") == "M" and e["name"] == "thread_name"}
    # the trace's own clock is the measured one: the host lane is the emulator's (profiler.lane_name)
    assert "host: emulator (measured, this CPU)" in names and any(n.startswith("hpu:0") for n in names)
    # on the trace's own clock: the device execution lies within the CPU ops' span
    cpu = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    (ex,) = [e for e in hpu if e.get("cat") == "DeviceExecution"]
    assert min(e["ts"] for e in cpu) <= ex["ts"] <= max(e["ts"] + e["dur"] for e in cpu)
    # each launch has a flow arrow to its execution
    flows = [e for e in hpu if e.get("cat") == "flow"]
    assert sorted(e["ph"] for e in flows) == ["f", "s"] and flows[0]["id"] == flows[1]["id"]


def test_schedule_and_tensorboard_handler_keep_only_the_active_steps(tmp_path):
    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    handler = torch.profiler.tensorboard_trace_handler(str(tmp_path), use_gzip=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.HPU], schedule=sched,
                 on_trace_ready=handler) as prof:
        for n in (3, 4, 5):            # a new shape each step: one compile per step
            (torch.ones(n, device="hpu") * 2).sum().item()
            htcore.mark_step()
            prof.step()
    (path,) = glob.glob(str(tmp_path / "*.pt.trace.json.gz"))
    trace = json.load(gzip.open(path, "rt"))
    compiles = [e for e in _hpu_events(trace) if e.get("cat") == "Compile"]
    assert len(compiles) == 1          # the active step only (warm-up not recorded)


@pytest.mark.skipif(importlib.util.find_spec("optimum") is None
                    or importlib.util.find_spec("optimum.habana") is None,
                    reason="optimum-habana not installed (pip install 'hpu_lab[optimum]')")
def test_optimum_habana_utilities(tmp_path):
    script = tmp_path / "use_optimum.py"
    script.write_text(textwrap.dedent("""
        import glob, json, torch
        import habana_frameworks.torch.core as htcore
        import optimum.habana
        from optimum.habana.utils import set_seed, get_hpu_memory_stats, get_device_name, HabanaProfile

        set_seed(11)
        a = torch.randn(4, device="hpu").cpu()
        set_seed(11)
        assert torch.equal(torch.randn(4, device="hpu").cpu(), a)
        x = torch.zeros(1024, 1024, device="hpu") + 1
        htcore.mark_step()
        stats = get_hpu_memory_stats()
        assert stats["total_memory_available (GB)"] > 0 and stats["max_memory_allocated (GB)"] >= 0
        assert get_device_name() == "gaudi2"
        prof = HabanaProfile(warmup=1, active=1, output_dir="prof", name="run")
        prof.start()
        for n in (3, 4):
            (torch.ones(n, device="hpu") * 2).sum().item()
            htcore.mark_step()
            prof.step()
        prof.stop()
        (path,) = glob.glob("prof/run/*.json")
        cats = {e.get("cat") for e in json.load(open(path))["traceEvents"] if e.get("pid") == %d}
        assert {"Compile", "DeviceExecution", "HostSync"} <= cats, cats
        from optimum.habana.utils import misc
        print("driver", misc.get_driver_version())      # hl-smi, run as optimum-habana runs it
        print("optimum ok", optimum.habana.__version__)
    """ % HPU_PID))
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "hpu_lab", "run", str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "optimum ok" in r.stdout
    assert "driver 1.23.0" in r.stdout and "Could not run `hl-smi`" not in r.stderr
    assert "habana-frameworks v1.23.0 was found" in r.stderr or "validated for SynapseAI" not in r.stderr
