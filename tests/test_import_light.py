"""``import hpu_lab`` stays light: torch's heavy packages are imported by the background warm-up
(hpu_lab/util/warmup.py), never by the import itself nor by the first ops (which would stall them).
Facts about which thread imported which module, in a fresh process; no wall time."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# what the warm-up imports (the first op needs them)
WARMED = ["torch.distributed.tensor", "torch._dynamo", "sympy"]
# what nothing in an import and a first training step needs
NEVER = ["torch._inductor.compile_fx", "matplotlib", "ipywidgets", "networkx", "IPython", "jupyter_client",
         "widgets", "hpu_lab.lab.bench", "hpu_lab.lab.examples"]

PROBE = """
import json, sys, threading
WATCH = set(json.loads(sys.argv[1]))
phase = ["torch"]
seen = {}

class Spy:                       # records who looks for a watched module first, and when
    def find_spec(self, name, path=None, target=None):
        if name in WATCH and name not in seen:
            seen[name] = [phase[0], threading.current_thread().name]
        return None

sys.meta_path.insert(0, Spy())
import torch
phase[0] = "import hpu_lab"
import hpu_lab
phase[0] = "after import"
hpu_lab.util.warmup.wait()
phase[0] = "first ops"
import torch.nn.functional as F
model = torch.nn.Linear(4, 3).to("hpu")
x = torch.randn(2, 4).to("hpu")
F.cross_entropy(model(x), torch.tensor([0, 2]).to("hpu")).backward()
y = (x * 2 + 1).relu().cpu()
torch.hpu.synchronize()
print(json.dumps({"seen": seen, "loaded": [n for n in WATCH if n in sys.modules]}))
"""


def _run_probe():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(WARMED + NEVER)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_import_and_first_ops_leave_heavy_modules_to_the_warm_up_thread():
    r = _run_probe()
    seen, loaded = r["seen"], r["loaded"]
    for name in WARMED:               # imported, and by the warm-up thread
        assert name in loaded and seen[name][1] == "hpu_lab-warmup", (name, seen.get(name))
    assert not set(NEVER) & set(loaded), loaded
    # nothing heavy is imported by the user's thread: not by the import, not by the first ops
    assert not [n for n, (_, thread) in seen.items() if thread == "MainThread"], seen


def test_fork_waits_for_the_warm_up():
    """A child forked right after the import does not inherit half-held import locks: it can import."""
    code = ("import os, sys, torch, hpu_lab\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    import torch._dynamo, torch.distributed.tensor\n"
            "    os._exit(0 if hpu_lab.util.warmup._thread is None else 3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "sys.exit(os.waitstatus_to_exitcode(status))\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_recording_starts_after_the_warm_up():
    """A Collector (a %%hpu_section, the profiler) started right after the import waits for the
    warm-up, so torch's imports never fall inside what it records."""
    code = ("import sys, torch, hpu_lab\n"
            "from hpu_lab import events as ev\n"
            "with ev.Collector() as c:\n"
            "    done = hpu_lab.util.warmup._thread is None\n"
            "    loaded = all(m in sys.modules for m in hpu_lab.util.warmup.MODULES)\n"
            "sys.exit(0 if done and loaded and not hpu_lab.util.warmup.errors else 1)\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_failed_import_leaves_the_garbage_collector_unfrozen():
    """The import freezes the collector's objects meanwhile (hpu_lab/__init__.py); an import that
    fails part-way (here: a malformed setting, refused at import) unfreezes them all the same, and a
    process that froze objects itself keeps its own freeze."""
    code = ("import gc, json, sys\n"
            "out = []\n"
            "for pre in (False, True):\n"
            "    if pre:\n"
            "        gc.freeze()\n"
            "    try:\n"
            "        import hpu_lab\n"
            "    except Exception as e:\n"
            "        out.append([type(e).__name__, gc.get_freeze_count() > 0 if pre else gc.get_freeze_count() == 0])\n"
            "    for m in [m for m in sys.modules if m == 'hpu_lab' or m.startswith('hpu_lab.')]:\n"
            "        del sys.modules[m]\n"
            "print(json.dumps(out))\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PT_HPU_LAZY_MODE="banana")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [["ConfigError", True], ["ConfigError", True]]
