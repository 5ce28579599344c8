"""The disk recipe cache: ``PT_HPU_RECIPE_CACHE_CONFIG=<path>,<delete>,<max MB>`` (seed 003).

A recipe compiled in one process is found by the next one on disk: the bridge looks "first in
mem cache, then in disk cache". Here ``compiler.find`` asks ``lookup`` after an in-memory
miss, and its ``on_compile`` hook hands every new recipe to ``store``, which only queues it: a
background thread serializes it and evicts, so graph launch is not delayed.

- Key: a sha256 of a canonical text of the graph key (ops by name, shapes, dtypes, constants),
  the same in every process; the text itself is stored and compared, so a digest collision can
  never run the wrong recipe. Graphs whose key holds anything without a stable text are not cached.
- File: ``<digest>.recipe``, written to a temporary name and renamed (readers never see half a
  file), with a header carrying the payload's length and sha256, then a JSON record: the key
  text and the graph compiler's pass results (engines, fusion clusters, tensor classes, memory
  plan). Nothing in the folder is executed: no pickle, no TorchScript, no code text. A loaded
  recipe's fx graph is built from the program's own pending ops and the record must match it
  node by node; its TorchScript is traced again on this module's thread, off the launch path
  (the fx code runs until then). A truncated, corrupt or forged file is detected, reported
  (a ``DiskCacheWarning`` naming the file), removed and recompiled. docs/disk_cache_trust.md
  says what the cache trusts and what it does not.
- Eviction: after each store, under ``flock`` on ``eviction.lock`` (one process at a time),
  oldest files first (creation time; modification time where the file system has none) until the
  folder is at most 0.99 x max. ``LOG_LEVEL_PT_HABHELPER=2`` logs "Removed <recipe id>
  successfully. Disk cache size after removal: <size>".
- ``delete=true`` clears the folder when the process first uses it.

``hpu_lab/compiler/_disk_hooks.py`` holds the two hooks (importing this module on first use, so that
``python -m hpu_lab.compiler.disk_cache --measure``, which times a cold and a warm start of seed 000's
training step, runs it as a fresh module).
"""
from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import queue
import sys
import threading
import warnings

import torch
import torch.fx as fx

from .. import config
from .. import events as ev
from . import build, layouts, lowering, passes
from .recipe import Recipe

FORMAT = 2
MAGIC = b"HPULABRECIPE"
SUFFIX = ".recipe"
LOCK = "eviction.lock"


class Uncacheable(Exception):
    """The graph key holds a value with no stable text."""


# ---------------------------------------------------------------- stable keys

def _text(x, out: list) -> None:
    t = type(x)
    if t is tuple or t is list:
        out.append("(" if t is tuple else "[")
        for y in x:
            _text(y, out)
            out.append(",")
        out.append(")" if t is tuple else "]")
    elif t in (str, int, float, bool, complex, type(None)):
        out.append(f"{t.__name__}:{x!r}")        # float repr round-trips exactly
    elif t in (torch.dtype, torch.device, torch.layout, torch.memory_format):
        out.append(f"{t.__name__}:{x}")
    elif isinstance(x, torch._ops.OpOverload):
        out.append(f"op:{x._schema.name}.{x._overloadname}")
    elif callable(x) and getattr(x, "__module__", None) and getattr(x, "__qualname__", None):
        out.append(f"fn:{x.__module__}.{x.__qualname__}")
    else:
        raise Uncacheable(f"{t.__name__} in a graph key")


def key_text(key) -> str:
    out = [f"hpu_lab-recipe/{FORMAT}/torch-{torch.__version__}/{config.get('HPU_LAB_RECIPE_EXECUTOR')}|"]
    _text(key.sigs, out)
    out.append("|")
    _text(key.outs, out)
    out.append("|")
    _text(key.default_dtype, out)
    return "".join(out)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:40]


# ---------------------------------------------------------------- serialization

# A file holds data only: the graph key's text and the graph compiler's pass results, as JSON.
# Nothing read from the folder is unpickled, loaded as TorchScript or turned into code: the fx
# graph of a loaded recipe is built from the program's own pending ops (the same build_fx a
# compile runs), the file's pass results are checked against it node by node, and the
# TorchScript lowering is traced again here, off the launch path (see ``_lower``).
_NODE_META = {"engine": str, "cluster": int, "tensor_class": str, "bytes": int}
_ENGINES = frozenset({"MME", "TPC", "CPU"})
_CLASSES = frozenset({"persistent", "non-persistent", "alias"})


def _node_record(n) -> list:
    meta = {k: n.meta[k] for k in _NODE_META if k in n.meta}
    return [n.op, n.meta.get("op_name", ""), meta]


def serialize(recipe, text: str) -> bytes:
    body = {"key": text, "node_count": recipe.node_count, "clusters": recipe.clusters,
            "peak_bytes": recipe.peak_bytes, "nodes": [_node_record(n) for n in recipe.gm.graph.nodes]}
    payload = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    return b"%s %d %d %s\n" % (MAGIC, FORMAT, len(payload), hashlib.sha256(payload).hexdigest().encode()) + payload


class Corrupt(Exception):
    pass


def _int(v, what: str, lo: int) -> int:
    if type(v) is not int or v < lo:
        raise Corrupt(f"{what}: expected an integer >= {lo}")
    return v


def _check_body(body) -> dict:
    if type(body) is not dict or set(body) != {"key", "node_count", "clusters", "peak_bytes", "nodes"}:
        raise Corrupt("not a recipe record")
    if type(body["key"]) is not str:
        raise Corrupt("key: expected a string")
    _int(body["node_count"], "node_count", 0)
    _int(body["clusters"], "clusters", 0)
    _int(body["peak_bytes"], "peak_bytes", 0)
    if type(body["nodes"]) is not list:
        raise Corrupt("nodes: expected a list")
    for rec in body["nodes"]:
        if type(rec) is not list or len(rec) != 3 or type(rec[0]) is not str or type(rec[1]) is not str \
                or type(rec[2]) is not dict:
            raise Corrupt("nodes: malformed record")
        for k, v in rec[2].items():
            if k not in _NODE_META or type(v) is not _NODE_META[k]:
                raise Corrupt(f"nodes: unexpected field {k!r}")
        m = rec[2]
        if m.get("engine", "TPC") not in _ENGINES or m.get("tensor_class", "alias") not in _CLASSES:
            raise Corrupt("nodes: unknown engine or tensor class")
        _int(m.get("cluster", -1), "cluster", -1)
        _int(m.get("bytes", 0), "bytes", 0)
    return body


def deserialize(data: bytes) -> dict:
    """The checked record of a recipe file (raises Corrupt). Parsing only: nothing in it runs."""
    head, sep, payload = data.partition(b"\n")
    parts = head.split(b" ")
    if not sep or len(parts) != 4 or parts[0] != MAGIC:
        raise Corrupt("bad header")
    if parts[1] != b"%d" % FORMAT:
        raise Corrupt(f"format {parts[1][:8].decode(errors='replace')!r}, this version reads {FORMAT}")
    if not parts[2].isdigit() or int(parts[2]) != len(payload):
        raise Corrupt(f"truncated: {len(payload)} of {parts[2][:20].decode(errors='replace')} bytes")
    if hashlib.sha256(payload).hexdigest().encode() != parts[3]:
        raise Corrupt("checksum mismatch")
    try:
        body = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Corrupt(f"not a JSON record ({e})") from None
    return _check_body(body)


def _recipe(body: dict, key, nodes, externals, outs, site) -> Recipe:
    """A Recipe from the program's own pending ops plus the file's pass results."""
    g = build.build_fx(nodes, externals, outs)          # what compile_graph builds: never the file's
    g.eliminate_dead_code()
    layouts.place_permutes(g)                           # the permutes passes.run_all places
    gnodes = list(g.nodes)
    if len(gnodes) != len(body["nodes"]):
        raise Corrupt("its graph does not match the pending graph")
    for n, (kind, op_name, meta) in zip(gnodes, body["nodes"]):
        if kind != n.op or op_name != n.meta.get("op_name", ""):
            raise Corrupt(f"its graph does not match the pending graph at {n.name}")
        n.meta.update(meta)
    node_count = sum(1 for n in gnodes if passes._is_compute(n))
    if node_count != body["node_count"]:
        raise Corrupt("node count does not match the pending graph")
    gm = fx.GraphModule(torch.nn.Module(), g)
    r = Recipe(key, gm, node_count, body["clusters"], body["peak_bytes"], passes.summarize(g),
               build.describe(nodes, externals), site, 0)
    r.fn, r.backend = gm.forward, "fx"                   # until _lower swaps in the TorchScript
    r.reason = "loaded from the disk cache"
    r.from_disk = True
    return r


# ---------------------------------------------------------------- the cache folder

def _log(msg: str) -> None:
    if config.get("LOG_LEVEL_PT_HABHELPER") <= 2:
        print(msg, file=sys.stderr, flush=True)


class DiskCacheWarning(RuntimeWarning):
    pass


def _warn(msg: str) -> None:
    warnings.warn(f"hpu_lab disk cache: {msg}", DiskCacheWarning, stacklevel=2)


def _ctime(st) -> float:
    return getattr(st, "st_birthtime", None) or st.st_mtime


class Folder:
    def __init__(self, cfg):
        self.path = cfg.path
        self.max_bytes = None if cfg.max_mb is None else int(cfg.max_mb * 1024 * 1024)
        os.makedirs(self.path, exist_ok=True)
        if cfg.delete:
            with self._locked():
                for name in os.listdir(self.path):
                    if name.endswith(SUFFIX) or name.startswith(".tmp-"):
                        _unlink(os.path.join(self.path, name))

    def file(self, dig: str) -> str:
        return os.path.join(self.path, dig + SUFFIX)

    def _locked(self):
        return _FLock(os.path.join(self.path, LOCK))

    def write(self, dig: str, data: bytes) -> None:
        tmp = os.path.join(self.path, f".tmp-{os.getpid()}-{threading.get_ident()}-{dig}")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.file(dig))          # atomic: a reader sees all of it or nothing

    def evict(self) -> None:
        if self.max_bytes is None:
            return
        limit = 0.99 * self.max_bytes
        with self._locked():
            files = []
            for name in os.listdir(self.path):
                if name.endswith(SUFFIX):
                    try:
                        st = os.stat(os.path.join(self.path, name))
                    except FileNotFoundError:
                        continue
                    files.append((_ctime(st), name, st.st_size))
            total = sum(f[2] for f in files)
            for _, name, size in sorted(files):
                if total <= limit:
                    break
                if _unlink(os.path.join(self.path, name)):
                    total -= size
                    _log(f"Removed {name[:-len(SUFFIX)]} successfully. Disk cache size after removal: "
                         f"{total / (1024 * 1024):.2f} MB")


class _FLock:
    def __init__(self, path):
        self.path = path

    def __enter__(self):
        self.f = open(self.path, "a+")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _unlink(path) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:          # gone already, or not ours to remove (a folder, no permission)
        return False


# ---------------------------------------------------------------- hooks and the writer thread

_state = {"cfg": None, "folder": None}
_queue: queue.Queue = queue.Queue()
_writer = None


def folder():
    """The active cache folder (None when PT_HPU_RECIPE_CACHE_CONFIG is unset)."""
    cfg = config.get("PT_HPU_RECIPE_CACHE_CONFIG")
    if cfg != _state["cfg"]:
        f = None
        if cfg is not None:
            try:
                f = Folder(cfg)
            except OSError as e:    # e.g. no permission, or the path became a file: run without it
                _warn(f"PT_HPU_RECIPE_CACHE_CONFIG: cannot use {cfg.path!r} as the cache folder "
                      f"({type(e).__name__}: {e}); the disk cache is off, the program runs on")
        _state["cfg"], _state["folder"] = cfg, f
    return _state["folder"]


def lookup(key, nodes, externals, outs, site):
    f = folder()
    if f is None:
        return None
    t0 = ev.now()
    try:
        text = key_text(key)
    except Uncacheable:
        return None
    path = f.file(digest(text))
    r = None
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        body = deserialize(data)
        if body["key"] != text:
            raise Corrupt("a different graph under the same digest")
        r = _recipe(body, key, nodes, externals, outs, site)
    except FileNotFoundError:
        pass
    except Exception as e:  # noqa: BLE001 - any unreadable file: never run it, recompile
        _warn(f"{os.path.basename(path)} is unusable ({e}); removed, the graph compiles again")
        _unlink(path)
        r = None
    if r is None:
        ev.emit(ev.CacheLookup(t0, ev.now(), "host", ev.recorder.step, hit=False, key=key.short, source="disk"))
        return None
    r.compile_ns = ev.now() - t0                   # what this "compile" cost: the load
    ev.emit(ev.CacheLookup(t0, ev.now(), "host", ev.recorder.step, hit=True, key=key.short, source="disk"))
    if config.get("HPU_LAB_RECIPE_EXECUTOR") == "torchscript":
        _start_writer()
        _queue.put((_lower, r))
    return r


def store(recipe) -> None:
    f = folder()
    if f is None or getattr(recipe, "from_disk", False):
        return
    _start_writer()
    _queue.put((_store, (f, recipe)))


def _start_writer():
    global _writer
    if _writer is None or not _writer.is_alive():
        if _writer is None:
            atexit.register(flush_writes)
        _writer = threading.Thread(target=_write_loop, name="hpu_lab-disk-cache", daemon=True)
        _writer.start()


def _write_loop():
    while True:
        job, arg = _queue.get()
        try:
            job(arg)
        finally:
            _queue.task_done()


def _store(arg) -> None:
    f, recipe = arg
    try:
        text = key_text(recipe.key)
        f.write(digest(text), serialize(recipe, text))
        f.evict()
    except Uncacheable:
        pass
    except Exception as e:  # noqa: BLE001 - a failed store only costs a later compile
        _warn(f"could not store recipe {recipe.short_key}: {type(e).__name__}: {e}")


lowered = {"recipes": 0, "ns": 0}      # TorchScript lowerings of loaded recipes, off the launch path


def _lower(recipe) -> None:
    """Trace a loaded recipe's TorchScript here (TorchScript is code: it is never read from the
    folder). Until it is ready the device runs the recipe's fx code, which gives the same numbers."""
    t0 = ev.now()
    fn, backend = lowering.lower(recipe.gm, quiet=False)
    recipe.fn, recipe.backend = fn, backend
    lowered["recipes"] += 1
    lowered["ns"] += ev.now() - t0


def flush_writes() -> None:
    """Wait until every queued recipe is on disk (also run at exit, so a short script's recipes
    are there for the next process)."""
    if _writer is not None and _writer.is_alive():
        _queue.join()
        atexit.register(flush_writes)


# ---------------------------------------------------------------- cold vs warm start, measured

def _training_steps(steps: int = 3) -> dict:
    """Seed 000's MNIST MLP training loop in lazy mode; what compiling cost this process."""
    import json
    from ..lab.examples import Net, train_step

    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    with ev.Collector() as c:
        for _ in range(steps):
            loss = train_step(model, opt, torch.randn(200, 1, 28, 28), torch.randint(0, 10, (200,)))
        final = loss.item()
    flush_writes()
    disk = [e for e in c.of(ev.CacheLookup) if e.source == "disk" and e.hit]
    return json.loads(json.dumps({
        "compiles": len(c.of(ev.Compile)), "compile_ms": sum(e.duration_ns for e in c.of(ev.Compile)) / 1e6,
        "disk_hits": len(disk), "disk_load_ms": sum(e.duration_ns for e in disk) / 1e6, "loss": final,
        "lowered_off_path_ms": lowered["ns"] / 1e6}))


def measure(repeats: int = 3, folder_path: str = "") -> dict:
    """Cold (empty cache) and warm (second process) starts, each in a fresh process."""
    import json
    import statistics
    import subprocess
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = folder_path or os.path.join(tmp, "recipes")
        for _ in range(repeats):
            for kind, delete in (("cold", "true"), ("warm", "false")):
                env["PT_HPU_RECIPE_CACHE_CONFIG"] = f"{path},{delete},1024"
                out = subprocess.run([sys.executable, "-c", "import json, hpu_lab.compiler.disk_cache as d; "
                                      "print(json.dumps(d._training_steps()))"],
                                     env=env, capture_output=True, text=True, check=True)
                runs[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold = statistics.median(r["compile_ms"] for r in runs["cold"])
    warm = statistics.median(r["disk_load_ms"] + r["compile_ms"] for r in runs["warm"])
    return {"cold_compile_ms": cold, "warm_compile_ms": warm, "ratio": warm / cold, "runs": runs}


def report() -> dict:
    """Measure and print cold vs warm start (what ``python -m hpu_lab.lab.bench disk_cache`` shows)."""
    m = measure()
    c, w = m["runs"]["cold"][0], m["runs"]["warm"][0]
    print("\n== Disk recipe cache: seed-000 training step in fresh processes ==")
    print(f"cold start: {m['cold_compile_ms']:.1f} ms compiling {c['compiles']} recipes (median of "
          f"{len(m['runs']['cold'])} fresh processes)")
    print(f"warm start: {m['warm_compile_ms']:.1f} ms loading {w['disk_hits']} recipes from disk, "
          f"{w['compiles']} compiled; their TorchScript traced off the launch path in "
          f"{w['lowered_off_path_ms']:.1f} ms (the fx code ran meanwhile)")
    print(f"warm / cold = {100 * m['ratio']:.1f}% (target: at most 20%); same loss: "
          f"{c['loss'] == w['loss']}")
    return m


if __name__ == "__main__":
    if "--measure" in sys.argv:
        report()
    else:
        print(__doc__)
