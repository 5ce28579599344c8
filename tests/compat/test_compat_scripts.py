"""Gaudi-style scripts (tests/compat/) run unchanged with ``python -m hpu_lab run`` and give the
numbers the same script gives on the CPU (issue 11)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "compat")

# script -> (args for the hpu run, args for the CPU run)
SCRIPTS = {
    "mnist_hello_world.py": (["--hpu"], []),
    "inference_tutorial.py": ([], ["--cpu"]),
    "dynamic_shapes.py": ([], ["--cpu"]),
    "hpu_graphs_training.py": ([], ["--cpu"]),
}


def _start(script, args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, "-m", "hpu_lab", "run", os.path.join(HERE, script), *args],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p):
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), out


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_gaudi_script_runs_unchanged_and_matches_cpu(script, tmp_path):
    hpu_args, cpu_args = SCRIPTS[script]
    (tmp_path / "hpu").mkdir()
    (tmp_path / "cpu").mkdir()
    ph = _start(script, hpu_args, tmp_path / "hpu")          # both at once: two cores
    pc = _start(script, cpu_args, tmp_path / "cpu")
    hpu, hpu_out = _result(ph)
    cpu, _ = _result(pc)
    if script == "mnist_hello_world.py":
        assert hpu == cpu                                     # bit for bit, dropout included
    elif script == "inference_tutorial.py":
        assert hpu["correct"] == cpu["correct"] and hpu["device"] == "hpu"
        assert "Accuracy:" in hpu_out
    elif script == "dynamic_shapes.py":
        assert hpu["outs"] == pytest.approx(cpu["outs"], rel=1e-6) and hpu["shapes"] == cpu["shapes"] == 2
        assert hpu["comments"] == ["Already processed input shape still recompiled", "Recompiled due to new input shape"]
    elif script == "hpu_graphs_training.py":
        assert hpu["losses"] == pytest.approx(cpu["losses"], rel=1e-6)
        assert hpu["accuracy"] == pytest.approx(cpu["accuracy"])
        assert hpu["stats"] == {"graphs": 1, "hits": len(hpu["losses"])}
