"""The disk recipe cache, PT_HPU_RECIPE_CACHE_CONFIG (seed 003 "Disk Caching Eviction Policy", M7)."""
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import config, events as ev, lazy
from hpu_lab.compiler import disk_cache

from helpers import counts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# a small lazy workload: one graph per shape; prints what compiling cost and the results
CHILD = textwrap.dedent("""
    import json, sys, torch, hpu_lab, hpu_lab.core as htcore
    from hpu_lab import events as ev
    from hpu_lab.compiler import disk_cache
    shapes = json.loads(sys.argv[1])
    out = {}
    with ev.Collector() as c:
        for n in shapes:
            x = torch.arange(n, dtype=torch.float32).to("hpu")
            y = ((x * 2 + 1).sin() * 3).sum()
            htcore.mark_step()
            out[str(n)] = y.item()
            assert out[str(n)] == ((torch.arange(n, dtype=torch.float32) * 2 + 1).sin() * 3).sum().item()
    disk_cache.flush_writes()
    print(json.dumps({"compiles": len(c.of(ev.Compile)), "results": out,
                      "disk_hits": sum(1 for e in c.of(ev.CacheLookup) if e.source == "disk" and e.hit)}))
""")


def _child(folder, shapes, delete="false", max_mb=64, log=5):
    env = dict(os.environ, PYTHONPATH=ROOT, PT_HPU_RECIPE_CACHE_CONFIG=f"{folder},{delete},{max_mb}",
               LOG_LEVEL_PT_HABHELPER=str(log))
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(shapes)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p):
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def _recipes(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".recipe")) if os.path.isdir(folder) else []


def _size(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in _recipes(folder))


@pytest.fixture
def cache_dir(tmp_path):
    d = tmp_path / "recipes"
    config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{d},false,64")
    yield d
    disk_cache.flush_writes()
    config.reload()


def _graph(n=7, k=2.0):
    x = torch.arange(n, dtype=torch.float32).to("hpu")
    y = (x * k + 1).cos()
    htcore.mark_step()
    disk_cache.flush_writes()
    return y


def test_a_second_process_skips_compilation(tmp_path):
    folder = tmp_path / "rc"
    first, _ = _result(_child(folder, [5, 6, 7], delete="true"))
    assert first["compiles"] == 3 and first["disk_hits"] == 0 and len(_recipes(folder)) == 3
    second, _ = _result(_child(folder, [5, 6, 7]))
    assert second["compiles"] == 0 and second["disk_hits"] == 3          # keys are stable
    assert second["results"] == first["results"]
    third, _ = _result(_child(folder, [5, 8]))                            # 8: a new graph
    assert third["compiles"] == 1 and third["disk_hits"] == 1


def test_disk_hit_event_and_metric(cache_dir, collect):
    y = _graph()
    assert len(_recipes(cache_dir)) == 1
    hpu_lab.compiler.cache.clear()                   # a fresh process, as far as memory goes
    collect.events.clear()
    y2 = _graph()
    disk = [e for e in collect.of(ev.CacheLookup) if e.source == "disk"]
    assert [e.hit for e in disk] == [True] and collect.of(ev.Compile) == []
    assert counts("disk_cache")["TotalHit"] == 1
    assert torch.equal(y2.cpu(), y.cpu())
    assert torch.equal(y2.cpu(), (torch.arange(7, dtype=torch.float32) * 2.0 + 1).cos())


def test_keys_are_stable_texts_of_the_graph(cache_dir):
    keys = []
    hook = hpu_lab.compiler.find.on_compile(lambda r: keys.append(r.key))
    try:
        _graph(k=2.0)
        hpu_lab.compiler.cache.clear()
        _graph(k=3.0)                              # another constant: another recipe
        hpu_lab.compiler.cache.clear()
        _graph(n=9, k=2.0)                         # another shape: another recipe
    finally:
        hook.remove()
    texts = [disk_cache.key_text(k) for k in keys]
    assert len(set(texts)) == 3 and "str:'aten::mul.Tensor'" in texts[0] and f"fn:builtins.float,str:'{(2.0).hex()}'" in texts[0]
    assert len(_recipes(cache_dir)) == 3
    assert {disk_cache.digest(t) + ".recipe" for t in texts} == set(_recipes(cache_dir))


@pytest.mark.parametrize("damage", ["truncate", "flip", "other_key", "garbage"])
def test_corrupt_file_is_detected_removed_and_recompiled(damage, cache_dir, collect):
    y = _graph()
    (name,) = _recipes(cache_dir)
    path = cache_dir / name
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    elif damage == "other_key":                    # a valid file for a different graph
        hpu_lab.compiler.cache.clear()
        _graph(k=5.0)
        other = [f for f in _recipes(cache_dir) if f != name][0]
        path.write_bytes((cache_dir / other).read_bytes())
    else:
        path.write_bytes(b"not a recipe at all")
    hpu_lab.compiler.cache.clear()
    collect.events.clear()
    with pytest.warns(disk_cache.DiskCacheWarning, match=f"{name} is unusable .* compiles again"):
        y2 = _graph()
    assert len(collect.of(ev.Compile)) == 1                              # never executed: recompiled
    assert torch.equal(y2.cpu(), y.cpu())
    assert disk_cache.deserialize(path.read_bytes())["key"]             # rewritten, whole again


def test_delete_true_clears_the_folder_at_start(tmp_path):
    d = tmp_path / "rc"
    d.mkdir()
    (d / "old.recipe").write_bytes(b"x" * 100)
    (d / "keep.txt").write_text("not ours")
    config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{d},true,64")
    try:
        _graph()
        assert len(_recipes(d)) == 1 and "old.recipe" not in _recipes(d)
        assert (d / "keep.txt").exists()
    finally:
        config.reload()


def test_eviction_removes_the_oldest_first_and_logs(tmp_path, capfd):
    d = tmp_path / "rc"
    config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{d},false,64", LOG_LEVEL_PT_HABHELPER="2")
    try:
        names = []
        for n in range(3, 8):
            hpu_lab.compiler.cache.clear()
            before = set(_recipes(d))
            _graph(n=n)
            names += sorted(set(_recipes(d)) - before)
        one = max(os.path.getsize(d / f) for f in names)
        cap_mb = 2.5 * one / (1024 * 1024)         # room for two recipes
        config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{d},false,{cap_mb}")
        hpu_lab.compiler.cache.clear()
        _graph(n=20)
        left = _recipes(d)
        assert _size(d) <= 0.99 * cap_mb * 1024 * 1024
        assert names[-1] in left and names[0] not in left                # oldest gone first
        err = capfd.readouterr().err
        assert f"Removed {names[0][:-len('.recipe')]} successfully. Disk cache size after removal: " in err
    finally:
        config.reload()


def test_eviction_waits_for_the_lock_another_process_holds(tmp_path):
    # seed 003: "only one process may perform eviction at a time ... an eviction.lock file ... locking
    # it using flock". flock locks belong to an open file: this test's own open of the lock file stands
    # for another process in the middle of its eviction.
    import fcntl
    import time
    d = tmp_path / "rc"
    config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{d},false,64")
    try:
        for n in (3, 4, 5):
            hpu_lab.compiler.cache.clear()
            _graph(n=n)
        old = set(_recipes(d))
        cap_mb = 1.5 * max(os.path.getsize(d / f) for f in old) / (1024 * 1024)     # room for one recipe
        config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{d},false,{cap_mb}")
        hpu_lab.compiler.cache.clear()
        with open(d / disk_cache.LOCK, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            x = torch.arange(9, dtype=torch.float32).to("hpu")
            y = (x * 2.0 + 1).cos()             # held: a graph with an output (dead ops compile nothing)
            htcore.mark_step()                      # compiled; the writer stores it, then must wait
            deadline = time.monotonic() + 120
            while set(_recipes(d)) <= old and time.monotonic() < deadline:
                time.sleep(0.01)                    # until the new recipe is on disk (not a timing assert)
            assert set(_recipes(d)) > old, "the new recipe was not written"
            assert old <= set(_recipes(d))          # written, but nothing evicted while the lock is held
            fcntl.flock(lock, fcntl.LOCK_UN)
        disk_cache.flush_writes()
        assert not old <= set(_recipes(d)) and _size(d) <= 0.99 * cap_mb * 1024 * 1024
    finally:
        disk_cache.flush_writes()
        config.reload()


def test_serialization_runs_off_the_launch_path(cache_dir, monkeypatch):
    threads = []
    write = disk_cache.Folder.write

    def spy(self, dig, data):
        threads.append(threading.current_thread().name)
        return write(self, dig, data)
    monkeypatch.setattr(disk_cache.Folder, "write", spy)
    _graph()
    assert threads == ["hpu_lab-disk-cache"]


def test_graphs_without_a_stable_key_are_not_stored(cache_dir):
    class Odd:
        pass
    with pytest.raises(disk_cache.Uncacheable):
        disk_cache._text((1, Odd()), [])


def test_disabled_by_an_empty_path(tmp_path, collect):
    config.set(PT_HPU_RECIPE_CACHE_CONFIG="")
    _graph()
    assert [e for e in collect.of(ev.CacheLookup) if e.source == "disk"] == []


def test_processes_sharing_one_small_cache(tmp_path):
    folder = tmp_path / "shared"
    warm, _ = _result(_child(folder, [3], delete="true"))
    one = _size(folder)
    cap_mb = 6 * one / (1024 * 1024)               # about six recipes fit
    shapes = [[3, 4, 5, 6, 7, 8, 9], [5, 6, 7, 10, 11, 12], [3, 9, 13, 14, 15, 16], [4, 8, 12, 16, 17, 18]]
    procs = [_child(folder, s, max_mb=cap_mb, log=2) for s in shapes]
    results = [_result(p) for p in procs]
    assert _size(folder) <= cap_mb * 1024 * 1024                       # within the limit
    for f in _recipes(folder):                                         # no corrupt file left behind
        disk_cache.deserialize((folder / f).read_bytes())
    assert not [f for f in os.listdir(folder) if f.startswith(".tmp-")]
    assert all("unusable" not in err for _, err in results)           # no corrupt read (a warning)
    assert any("Removed " in err for _, err in results)               # eviction happened
    assert sum(r["compiles"] + r["disk_hits"] for r, _ in results) == sum(len(s) for s in shapes)


# ---------------------------------------------------------------- hostile files (issue 13)

class _Marker:
    """Unpickling this creates a file: proof that a recipe file ran code."""
    path = ""

    def __reduce__(self):
        return (open, (self.path, "w"))


def _forge(payload: bytes, fmt: int = disk_cache.FORMAT) -> bytes:
    import hashlib
    return b"%s %d %d %s\n" % (disk_cache.MAGIC, fmt, len(payload), hashlib.sha256(payload).hexdigest().encode()) + payload


@pytest.mark.parametrize("fmt", [1, disk_cache.FORMAT])
def test_a_forged_pickle_never_runs(fmt, cache_dir, tmp_path, collect):
    import pickle
    y = _graph()
    (name,) = _recipes(cache_dir)
    text = disk_cache.deserialize((cache_dir / name).read_bytes())["key"]
    marker = tmp_path / "pwned"
    _Marker.path = str(marker)
    # a checksummed file (format 1 was pickle) whose payload would create the marker if unpickled
    (cache_dir / name).write_bytes(_forge(pickle.dumps({"key": text, "graph": _Marker()}), fmt))
    hpu_lab.compiler.cache.clear()
    collect.events.clear()
    with pytest.warns(disk_cache.DiskCacheWarning, match=f"{name} is unusable .* compiles again"):
        y2 = _graph()
    assert not marker.exists()                                      # never unpickled
    assert len(collect.of(ev.Compile)) == 1 and torch.equal(y2.cpu(), y.cpu())
    assert disk_cache.deserialize((cache_dir / name).read_bytes())["key"] == text   # replaced


def test_a_file_can_only_describe_the_pending_graph(cache_dir, collect):
    y = _graph()
    (name,) = _recipes(cache_dir)
    body = disk_cache.deserialize((cache_dir / name).read_bytes())
    # right key and checksum, but a graph of other ops: the graph is always built from the
    # program's own pending ops; a file whose records disagree with them is corrupt
    body["nodes"][1][1] = "aten::exp"
    (cache_dir / name).write_bytes(_forge(json.dumps(body).encode()))
    hpu_lab.compiler.cache.clear()
    collect.events.clear()
    with pytest.warns(disk_cache.DiskCacheWarning, match="does not match the pending graph"):
        y2 = _graph()
    assert len(collect.of(ev.Compile)) == 1 and torch.equal(y2.cpu(), y.cpu())


@pytest.mark.parametrize("field,value", [("peak_bytes", -1), ("node_count", "3"), ("extra", 1), ("nodes", {})])
def test_malformed_records_are_corrupt(field, value, cache_dir):
    _graph()
    (name,) = _recipes(cache_dir)
    body = disk_cache.deserialize((cache_dir / name).read_bytes())
    body[field] = value
    with pytest.raises(disk_cache.Corrupt):
        disk_cache.deserialize(_forge(json.dumps(body).encode()))


def test_a_loaded_recipe_is_lowered_off_the_launch_path(cache_dir):
    y = _graph()
    hpu_lab.compiler.cache.clear()
    n = disk_cache.lowered["recipes"]
    y2 = _graph()                                   # flush_writes also waits for the lowering
    (r,) = hpu_lab.compiler.cache.recipes()
    assert r.from_disk and r.backend == "torchscript" and disk_cache.lowered["recipes"] == n + 1
    x = torch.arange(7, dtype=torch.float32)
    assert torch.equal(r.run([x])[0], (x * 2.0 + 1).cos()) and torch.equal(y2.cpu(), y.cpu())
