"""hpu_lab/util/omp.py: a process that imports hpu_lab before torch gets OMP_WAIT_POLICY=PASSIVE (idle
OpenMP workers sleep rather than spin on the cores the emulator's threads need); a user's value is
kept, and nothing is set once torch is loaded (libgomp has read its environment by then)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRINT = "import os; print(os.environ.get('OMP_WAIT_POLICY'))"


def _policy(imports: str, **env) -> str:
    e = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    e.update(env, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", f"{imports}; {PRINT}"], env=e, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def test_importing_hpu_lab_first_sets_passive():
    assert _policy("import hpu_lab") == "PASSIVE"


def test_a_users_policy_is_kept():
    assert _policy("import hpu_lab", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"


def test_nothing_is_set_once_torch_is_loaded():
    assert _policy("import torch, hpu_lab") == "None"


def test_the_make_targets_export_it():
    with open(os.path.join(ROOT, "Makefile")) as f:
        text = f.read()
    assert "OMP_WAIT_POLICY ?= PASSIVE" in text and "OMP_WAIT_POLICY=$(OMP_WAIT_POLICY)" in text
