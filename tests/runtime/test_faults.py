"""Faults injected on purpose (issue 13): a failed device op, an over-limit copy, a bad setting or a
forged cache file never breaks or endangers the runtime. Each test injects one fault and checks
that it is reported clearly, once, and that the next, unrelated work runs and is right.

Related cases kept elsewhere: tests/compiler/test_disk_cache.py (damaged, forged and mismatched recipe
files; four processes sharing a small cache), tests/runtime/test_memory_oom.py (graph OOM and recovery),
tests/config/test_config.py (every setting validated when read), tests/config/test_faults_settings.py (every setting
set to a bad value with its companion flag), tests/graphs/test_graphs_capture.py.
"""
import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import config, lazy
from hpu_lab.compiler import disk_cache
from hpu_lab.runtime.executor import DeviceError
from hpu_lab.runtime.memory import HPUOutOfMemoryError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1 << 20


def _run(code: str, env=None, timeout=600):
    """Run ``code`` in a fresh Python process; return its last stdout line as JSON."""
    e = dict(os.environ, PYTHONPATH=ROOT)
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


# ---------------------------------------------------------------- device errors in ops

def _bad_gather(dev):
    return torch.arange(6.).reshape(2, 3).to(dev).gather(1, torch.tensor([[0, 5], [1, 2]]).to(dev))


def _bad_index_select(dev):
    return torch.arange(5.).to(dev).index_select(0, torch.tensor([1, 9]).to(dev))


def _bad_embedding(dev):
    return F.embedding(torch.tensor([[1, 11]]).to(dev), torch.randn(10, 4).to(dev))


def _bad_scatter_add(dev):
    return torch.zeros(4).to(dev).scatter_add(0, torch.tensor([0, 8]).to(dev), torch.ones(2).to(dev))


def _step(mode):
    if mode == "lazy":
        htcore.mark_step()


BAD = {"gather": _bad_gather, "index_select": _bad_index_select, "embedding": _bad_embedding,
       "scatter_add": _bad_scatter_add}
OP_NAME = {"gather": "aten::gather", "index_select": "aten::index_select", "embedding": "aten::embedding",
           "scatter_add": "aten::scatter_add"}


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@pytest.mark.parametrize("op", sorted(BAD))
def test_a_failed_op_names_itself_and_the_runtime_goes_on(op, mode):
    config.set(PT_HPU_LAZY_MODE="1" if mode == "lazy" else "0")
    y = BAD[op]("hpu") * 2
    _step(mode)
    with pytest.raises(DeviceError, match=rf"{OP_NAME[op]}.* failed on the device \(op created at test_faults.py:\d+\)"):
        y.cpu()
    torch.hpu.synchronize()                       # reported once: not again
    z = torch.arange(4.).to("hpu") * 3 + 1        # unrelated work runs and is right
    _step(mode)
    assert torch.equal(z.cpu(), torch.arange(4.) * 3 + 1)


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_a_failed_value_does_not_poison_unrelated_work(mode):
    config.set(PT_HPU_LAZY_MODE="1" if mode == "lazy" else "0")
    y = _bad_index_select("hpu")
    _step(mode)
    z = y * 2                          # pending work reading the failed value...
    del y, z                           # ...that the program drops: dead work
    w = torch.ones(3).to("hpu") + 1    # unrelated, in the same graph as the dead work (lazy)
    _step(mode)
    assert torch.equal(w.cpu(), torch.full((3,), 2.))
    with pytest.raises(DeviceError) as err:
        torch.hpu.synchronize()        # the fault itself is reported once, by the next sync...
    assert "input produced by a failed launch" not in str(err.value)
    assert str(err.value).count("failed on the device") == 1
    torch.hpu.synchronize()            # ...and never again
    _step(mode)
    torch.hpu.synchronize()


def test_a_sync_that_needs_a_failed_value_gets_its_error_each_time():
    y = _bad_index_select("hpu")
    z = y + 1
    htcore.mark_step()
    for t in (z, y, z * 2):            # every read of a spoiled value fails, with the op's error
        with pytest.raises(DeviceError, match="aten::index_select failed on the device"):
            t.cpu()
    torch.hpu.synchronize()            # already reported: synchronize does not raise it again


IMPORT_RACE = """
    import json, sys, threading, torch, torch.nn.functional as F, hpu_lab, hpu_lab.core as htcore
    first = []
    def hook(event, args):          # a module imported for the first time on a device thread
        if event == "import" and args[0] not in sys.modules and threading.current_thread().name.startswith("hpu_lab-hpu"):
            first.append(args[0])
    sys.addaudithook(hook)
    errors = []
    for make in (lambda: torch.arange(5.).to("hpu").index_select(0, torch.tensor([1, 9]).to("hpu")),
                 lambda: F.embedding(torch.tensor([11]).to("hpu"), torch.randn(10, 4).to("hpu")),
                 lambda: torch.arange(6.).reshape(2, 3).to("hpu").gather(1, torch.tensor([[0, 5]]).to("hpu"))):
        try:
            y = make() * 2
            htcore.mark_step()
            y.cpu()
        except Exception as e:
            errors.append(type(e).__name__)
    import torch._dynamo            # what the host imports next (torch.compile, prims decompositions)
    f = torch.compile(lambda a: a * 2 + 1, backend="eager")
    ok = torch.equal(f(torch.arange(3.)), torch.arange(3.) * 2 + 1)
    x = torch.arange(4.).to("hpu").cumsum(0)
    htcore.mark_step()
    print(json.dumps({"first_imports": first, "errors": errors, "ok": ok, "x": x.cpu().tolist()}))
"""


@pytest.mark.parametrize("mode", ["1", "0"])
def test_no_import_on_the_device_thread_after_an_error(mode):
    out, err = _run(IMPORT_RACE, {"PT_HPU_LAZY_MODE": mode})
    assert out["errors"] == ["DeviceError"] * 3
    assert out["first_imports"] == []                     # nothing to race with the host's imports
    assert out["ok"] and out["x"] == [0.0, 1.0, 3.0, 6.0]
    assert "partially initialized" not in err


# ---------------------------------------------------------------- device memory

def _limit(extra: int) -> None:
    gc.collect()
    config.set(HPU_LAB_MEMORY_LIMIT=str(torch.hpu.memory_allocated() + extra))


def test_a_host_to_device_copy_that_does_not_fit_raises_and_nothing_leaks():
    _limit(16 * MiB)
    before = torch.hpu.memory_allocated()
    big = torch.randn(5 * MiB // 4)                         # 5 MiB fits
    fits = big.to("hpu")
    with pytest.raises(HPUOutOfMemoryError, match=r"Device out of memory: allocating 20\.00 MiB .*Limit"):
        torch.randn(5 * MiB).to("hpu")                       # 20 MiB does not: this line fails
    assert torch.hpu.memory_allocated() == before + 5 * MiB  # the refused copy took nothing
    y = (fits * 2).sum()                                     # a later small graph is not blamed
    htcore.mark_step()
    assert y.item() == pytest.approx((big * 2).sum().item(), rel=1e-5)
    with pytest.raises(HPUOutOfMemoryError):
        torch.empty(20 * MiB // 4, device="hpu")             # torch.empty allocates the same way
    del fits
    host = torch.randn(3 * MiB)                              # 12 MiB fits once the 5 MiB are freed
    assert torch.equal(host.to("hpu").cpu(), host)


def test_a_graph_over_the_limit_ooms_and_the_runtime_recovers():
    _limit(8 * MiB)
    x = torch.randn(MiB // 4).to("hpu")                      # 1 MiB
    s = torch.stack([x * k for k in range(12)]).sum(0)       # 12 MiB of intermediates at once
    with pytest.raises(HPUOutOfMemoryError, match="Device out of memory"):
        htcore.mark_step()
    config.reload()
    y = (x * 2).sum()
    htcore.mark_step()
    assert y.item() == pytest.approx((x.cpu() * 2).sum().item(), rel=1e-5)


# ---------------------------------------------------------------- the disk cache

FORGED_CHILD = """
    import json, torch, hpu_lab, hpu_lab.core as htcore
    from hpu_lab.compiler import disk_cache
    y = (torch.arange(9, dtype=torch.float32).to("hpu") * 4 + 2).sin()
    htcore.mark_step()
    r = y.cpu()
    disk_cache.flush_writes()
    print(json.dumps({"ok": torch.equal(r, (torch.arange(9, dtype=torch.float32) * 4 + 2).sin())}))
"""


def test_a_forged_recipe_file_in_a_shared_folder_runs_nothing(tmp_path):
    import hashlib
    import pickle
    folder = tmp_path / "shared"
    env = {"PT_HPU_RECIPE_CACHE_CONFIG": f"{folder},false,64"}
    _run(FORGED_CHILD, env)                                   # a first process fills the cache
    (name,) = [f for f in os.listdir(folder) if f.endswith(".recipe")]
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    payload = pickle.dumps(Payload())
    for fmt in (1, disk_cache.FORMAT):                        # the old pickle format and the current one
        (folder / name).write_bytes(b"%s %d %d %s\n" % (disk_cache.MAGIC, fmt, len(payload),
                                                        hashlib.sha256(payload).hexdigest().encode()) + payload)
        out, err = _run(FORGED_CHILD, env)                    # another user's process reads it
        assert out["ok"] and not marker.exists()
        assert f"{name} is unusable" in err                   # reported, naming the file


def test_no_module_of_the_package_unpickles_or_evals_files():
    import re
    pat = re.compile(r"pickle\.loads?\(|torch\.load\((?![^)]*weights_only=True)|(?<![.\w])eval\(|(?<![.\w])exec\(|jit\.load\(|marshal\.loads?\(")
    hits = []
    for d in ("hpu_lab", "widgets"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if f.endswith(".py"):
                    text = open(os.path.join(dirpath, f)).read()
                    hits += [f"{f}: {m.group(0)}" for m in pat.finditer(text)]
    assert hits == []


# ---------------------------------------------------------------- HPU Graph capture misuse

@pytest.mark.parametrize("misuse", [lambda x: (x * 2).sum().item(), lambda x: (x * 2).cpu(),
                                     lambda x: x.nonzero(), lambda x: bool((x > 0).any())])
def test_capture_misuse_is_refused_and_the_runtime_goes_on(misuse):
    from hpu_lab.graphs import HPUGraph, HPUGraphError
    x = torch.randn(4).to("hpu")
    g = HPUGraph()
    with pytest.raises(HPUGraphError, match="not supported during HPU Graph capturing"):
        with torch.hpu.graph(g):
            misuse(x)
    with pytest.raises(HPUGraphError, match="abandoned"):
        g.replay()
    assert lazy.S.capture is None
    y = x * 3
    htcore.mark_step()
    assert torch.equal(y.cpu(), x.cpu() * 3)


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_an_error_names_the_line_of_the_launch_not_of_the_first_compile(mode):
    import inspect
    config.set(PT_HPU_LAZY_MODE="1" if mode == "lazy" else "0")
    x = torch.arange(5.).to("hpu")
    good = x.index_select(0, torch.tensor([1, 2]).to("hpu")) * 2      # compiles the recipe here
    _step(mode)
    assert good.cpu().tolist() == [2.0, 4.0]
    bad = x.index_select(0, torch.tensor([1, 9]).to("hpu")) * 2       # same recipe, this line
    line = inspect.currentframe().f_lineno - 1
    _step(mode)
    with pytest.raises(DeviceError, match=rf"aten::index_select failed on the device \(op created at test_faults.py:{line}\)"):
        bad.cpu()


def _writes(dev):
    """Index and mask writes, forward and backward: none is on an expanded tensor."""
    torch.manual_seed(0)
    x = torch.randn(6, 4).to(dev).requires_grad_()
    ids, m = torch.tensor([1, 3, 3]).to(dev), (torch.randn(6, 4) > 0).to(dev)
    y = x * 1
    y[m] = 0.0
    y[ids] = y[ids] * 2
    z = y.masked_fill(m, 1.0).index_put((ids,), torch.ones(3, 4).to(dev), accumulate=True)
    loss = z.sum() + F.embedding(ids, x).sum() + x[x > 0].sum()
    loss.backward()
    v = torch.zeros(5).to(dev)
    v.index_fill_(0, torch.tensor([0, 2]).to(dev), 3.0)
    v.masked_fill_(v > 1, 4.0)
    v[torch.tensor([1]).to(dev)] = 7.0
    if dev == "hpu":
        htcore.mark_step()
        torch.hpu.synchronize()
    return loss.item(), x.grad.cpu(), v.cpu()


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_the_device_warns_where_cpu_warns_and_nowhere_else(mode):
    config.set(PT_HPU_LAZY_MODE="1" if mode == "lazy" else "0")
    seen = {}
    for dev in ("cpu", "hpu"):
        with warnings.catch_warnings(record=True) as ws:      # records every thread's warnings
            warnings.simplefilter("always")
            result = _writes(dev)
        seen[dev] = (result, sorted({str(w.message) for w in ws if "mark_step" not in str(w.message)}))
    (cl, cg, cv), cpu_warnings = seen["cpu"]
    (hl, hg, hv), hpu_warnings = seen["hpu"]
    assert hpu_warnings == cpu_warnings
    assert hl == pytest.approx(cl, rel=1e-6) and torch.allclose(hg, cg) and torch.equal(hv, cv)
