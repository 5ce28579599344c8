"""The OpInfo differential harness: every sample of PyTorch's OpInfo database run on "hpu" and on
CPU, values, dtypes, shapes and strides compared (and input gradients, for autograd ops).

Each sample ends in one kind:
  pass     hpu equals CPU (values within the dtype's tolerance; shapes, dtypes and strides equal)
  wrong    hpu returned something else: the worst bug, the target is 0
  layout   values equal, but an output's strides differ from CPU's (changes aliasing of later ops)
  error    hpu raised while CPU did not: must be a clear, documented error (docs/correctness.md)
  cpu      CPU itself rejects the sample or is not repeatable on it (not counted)

``tests/dispatch/test_core_opinfo.py`` runs a deterministic sample of this in ``make test``; ``make fuzz``
runs all of it (``python tests/opinfo_diff.py``) and prints the figures.
"""
from __future__ import annotations

import collections
import json
import re
import sys
import time
import zlib

import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config

try:
    from torch.testing._internal.common_methods_invocations import op_db
except Exception:            # a torch without its testing package: the tests skip
    op_db = None
else:
    # OpInfo-style entries of our own: the attention masks of transformers' SDPA path
    from attention_masks import extra_ops
    op_db = list(op_db) + extra_ops()

# ops whose CPU reference itself is not repeatable, or that have no hpu meaning
SKIP = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
        "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
        "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "torch.empty",
        "item", "to_sparse", "sparse.sampled_addmm", "sparse.mm", "nonzero_static", "to",
        "resize_", "resize_as_", "histogramdd", "histogram",
        "normal", "bernoulli", "multinomial", "uniform", "cauchy", "exponential", "geometric",
        "log_normal", "randint_like", "rand_like", "randn_like", "randint", "randn", "rand",
        # as_strided addresses the *storage*: .to("hpu") copies a partial view into a fresh one
        "as_strided", "as_strided_scatter", "as_strided_copy"}

TOL = {torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5)}


def ops_for(dtype, grad=False):
    if op_db is None:
        return []
    return [op for op in op_db if op.name not in SKIP and dtype in op.supported_dtypes("cpu")
            and (not grad or op.supports_autograd)]


def op_id(op) -> str:
    return f"{op.name}.{op.variant_test_name}".rstrip(".")


def _to(x, dev, host=frozenset(), _n=None):
    """x with its CPU tensors moved to ``dev``, except the tensors numbered in ``host`` (their
    position in _tensors order): the ones OpInfo creates on the CPU for every device."""
    n = _n if _n is not None else [0]
    if isinstance(x, torch.Tensor):
        n[0] += 1
        if x.device.type == "cpu" and x.layout == torch.strided and n[0] - 1 not in host:
            y = x.detach().to(dev)
            return y.requires_grad_(x.requires_grad) if x.is_leaf or x.requires_grad else y
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_to(y, dev, host, n) for y in x)
    if isinstance(x, dict):
        return {k: _to(v, dev, host, n) for k, v in x.items()}
    return x


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def _layout(t):
    return tuple(st for s, st in zip(t.shape, t.stride()) if s > 1)


def compare(got, expected, dtype):
    """None if equal, else (kind, detail): kind 'wrong' or 'layout'."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return "wrong", f"got {type(got).__name__}, expected a tensor"
        g = got.cpu() if got.device.type == "hpu" else got
        if g.shape != expected.shape or g.dtype != expected.dtype:
            return "wrong", f"shape/dtype {tuple(g.shape)} {g.dtype} vs {tuple(expected.shape)} {expected.dtype}"
        try:
            torch.testing.assert_close(g, expected, equal_nan=True, check_device=False,
                                       **TOL.get(dtype, {}))
        except AssertionError as e:
            return "wrong", str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:3])
        if expected.layout == torch.strided and got.numel() > 1 and _layout(got) != _layout(expected):
            return "layout", f"strides {tuple(got.stride())} vs CPU {tuple(expected.stride())}"
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return "wrong", f"got {type(got).__name__}, expected {type(expected).__name__} of {len(expected)}"
        worst = None
        for a, b in zip(got, expected):
            r = compare(a, b, dtype)
            if r is not None and (worst is None or r[0] == "wrong"):
                worst = r
        return worst
    if isinstance(expected, float) and isinstance(got, float):
        if expected != got and not (expected != expected and got != got):
            if abs(expected - got) > 1e-5 + 1.3e-6 * abs(expected):
                return "wrong", f"{got} vs {expected}"
        return None
    if got != expected and not isinstance(expected, torch.dtype | torch.device | torch.Size | type(None)):
        try:
            if got == expected:
                return None
        except Exception:
            pass
        return "wrong", f"{got!r} vs {expected!r}"
    return None


def _run(op, s, dev, grad, seed):
    """Output (and input grads with grad=True) of one sample on ``dev``."""
    inp, args, kw = (s.input, s.args, s.kwargs) if dev == "cpu" else \
        _to((s.input, s.args, s.kwargs), dev, _HOST.get(id(s), frozenset()))
    torch.manual_seed(seed)
    out = op(inp, *args, **kw)
    if not grad:
        return out
    leaves = [t for t in _tensors((inp, args, kw)) if t.requires_grad]
    outs = [t for t in _tensors(out) if t.requires_grad and t.dtype.is_floating_point]
    if not leaves or not outs:
        return out, []
    g = torch.Generator().manual_seed(seed + 1)
    gouts = [torch.randn(t.shape, generator=g, dtype=t.dtype).to(t.device) for t in outs]
    grads = torch.autograd.grad(outs, leaves, gouts, allow_unused=True)
    return out, list(grads)


def error_kind(e) -> str:
    """The error with its numbers and names of shapes blurred: what the error table groups by."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    msg = re.sub(r"\(op created at [^)]*\)", "", msg)
    msg = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", msg)
    return f"{type(e).__name__}: {msg[:150]}"


def run_sample(op, s, dtype, grad, seed=0):
    """(kind, detail) of one sample (see the module docstring)."""
    try:
        expected = _run(op, s, "cpu", grad, seed)
    except Exception:
        return "cpu", "CPU rejects the sample"
    try:
        got = _run(op, s, "hpu", grad, seed)
        htcore.mark_step()
        r = compare(got, expected, dtype)        # reads the hpu values (a sync: may raise too)
    except Exception as e:
        try:
            htcore.mark_step()
            torch.hpu.synchronize()
        except Exception:
            pass
        return "error", error_kind(e)
    if r is not None and r[0] == "wrong":
        again = _run(op, s, "cpu", grad, seed)           # is CPU itself repeatable here?
        if compare(again, expected, dtype) is not None:
            return "cpu", "CPU is not repeatable on this sample"
    return r or ("pass", "")


def samples(op, dtype, grad):
    try:
        ss = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
    except Exception:
        return []
    _HOST.clear()                  # keyed by id(): only the samples of the latest call are alive
    _mark_host_tensors(op, dtype, ss)
    return ss


_HOST = {}                         # id(sample): numbers of its tensors that stay on the CPU


def _mark_host_tensors(op, dtype, ss):
    """Some samples keep a tensor on the CPU whatever the device (``tensor_split``'s indices: the op
    requires them there, on CUDA too). Generating the samples for the meta device tells them apart:
    a tensor still on the CPU there stays on the CPU in the hpu run (``_HOST``)."""
    if not any(t.dtype in (torch.int64, torch.int32) for s in ss for t in _tensors((s.input, s.args, s.kwargs))):
        return
    try:
        ms = list(op.sample_inputs("meta", dtype, requires_grad=False))
    except Exception:
        return
    if len(ms) != len(ss):
        return
    for s, m in zip(ss, ms):
        a, b = list(_tensors((s.input, s.args, s.kwargs))), list(_tensors((m.input, m.args, m.kwargs)))
        if len(a) == len(b):
            _HOST[id(s)] = frozenset(i for i, t in enumerate(b) if t.device.type == "cpu")


def pick(n, key, k):
    """k sample indices of n, chosen by a hash of key: the same every run (CI's subset)."""
    if n <= k:
        return list(range(n))
    h = zlib.crc32(key.encode())
    step = max(1, n // k)
    return sorted({(h + i * step) % n for i in range(k)})


class Tally:
    def __init__(self):
        self.kinds = collections.Counter()
        self.errors = collections.Counter()
        self.bad = []          # (config, op, sample index, kind, detail)

    def add(self, cfg, op, i, kind, detail):
        self.kinds[kind] += 1
        if kind == "error":
            self.errors[detail] += 1
        if kind in ("wrong", "layout", "error"):
            self.bad.append((cfg, op_id(op), i, kind, detail))

    def report(self, title) -> str:
        n = sum(v for k, v in self.kinds.items() if k != "cpu")
        p = self.kinds["pass"]
        lines = [f"{title}: {n} samples, {p} pass ({100 * p / max(n, 1):.2f}%), "
                 f"wrong {self.kinds['wrong']}, layout {self.kinds['layout']}, error {self.kinds['error']} "
                 f"(CPU rejects or is not repeatable: {self.kinds['cpu']})"]
        return "\n".join(lines)


CONFIGS = {            # name: (lazy mode, dtype, gradients)
    "f32-lazy": ("1", torch.float32, False), "f32-eager": ("0", torch.float32, False),
    "bf16-lazy": ("1", torch.bfloat16, False), "bf16-eager": ("0", torch.bfloat16, False),
    "grad-lazy": ("1", torch.float32, True), "grad-eager": ("0", torch.float32, True),
}


def in_shard(k, shard):
    """Whether the k-th op of a config belongs to ``shard`` = (i, n), 1 <= i <= n: every n-th op
    from the i-th, so that the heavy families (linalg, fft, ...) spread over the shards."""
    return shard is None or k % shard[1] == shard[0] - 1


def parse_shard(text):
    m = re.fullmatch(r"(\d+)/(\d+)", text or "")
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ValueError(f"--shard wants I/N with 1 <= I <= N (e.g. 2/4), got {text!r}")
    return int(m[1]), int(m[2])


def sweep(configs, per_op=None, out=sys.stdout, budget_s=None, trace=False, resume=None, json_out=False,
          only=None, shard=None):
    """Run every op of each config (``per_op`` samples each, or all); print and return the tallies.
    ``resume`` = (config, op id, sample index): start just after that sample (see ``isolated``).
    ``shard`` = (i, n): only the i-th of n interleaved parts of the ops (see ``in_shard``)."""
    tallies = {}
    for cfg in configs:
        lazy, dtype, grad = CONFIGS[cfg]
        config.set(PT_HPU_LAZY_MODE=lazy)
        t = tallies[cfg] = Tally()
        t0 = time.monotonic()
        skipping = resume is not None and resume[0] == cfg
        for k, op in enumerate(ops_for(dtype, grad)):
            if only is not None and op_id(op) not in only or not in_shard(k, shard):
                continue
            if skipping and op_id(op) != resume[1]:
                continue
            ss = samples(op, dtype, grad)
            idx = range(len(ss)) if per_op is None else pick(len(ss), op_id(op) + cfg, per_op)
            for i in idx:
                if skipping:
                    skipping = i != resume[2]
                    continue
                if trace:
                    print("SAMPLE", cfg, op_id(op), i, file=sys.stderr, flush=True)   # names a crash
                kind, detail = run_sample(op, ss[i], dtype, grad)
                t.add(cfg, op, i, kind, detail)
                if json_out:       # per sample: a child that aborts later keeps what it counted
                    print("JSON " + json.dumps([cfg, op_id(op), i, kind, detail]), flush=True)
            if budget_s is not None and time.monotonic() - t0 > budget_s:
                break
        config.reload()
        print(t.report(f"{cfg} ({time.monotonic() - t0:.0f} s)"), file=out, flush=True)
    return tallies


def isolated(cfg, per_op=None, only=None, shard=None):
    """Run one config in child processes: a sample that aborts the process (an exception raised
    inside a C++ backward formula on hpu aborts in torch's Python device guard) is counted as an
    error of kind 'abort' and the sweep goes on after it. Returns a Tally."""
    import subprocess
    total = Tally()
    resume = None
    while True:
        cmd = [sys.executable, __file__, cfg, "--trace", "--json"]
        if per_op is not None:
            cmd += ["--per-op", str(per_op)]
        if resume:
            cmd += ["--resume", "|".join(map(str, resume))]
        if only is not None:
            cmd += ["--only", ",".join(only)]
        if shard is not None:
            cmd += ["--shard", "%d/%d" % shard]
        p = subprocess.run(cmd, capture_output=True, text=True)
        for line in p.stdout.splitlines():
            if line.startswith("JSON "):
                c, name, i, kind, detail = json.loads(line[5:])
                total.kinds[kind] += 1
                if kind == "error":
                    total.errors[detail] += 1
                if kind in ("wrong", "layout", "error"):
                    total.bad.append((c, name, i, kind, detail))
        if p.returncode in (0, 1):
            return total
        last = [ln.split()[1:] for ln in p.stderr.splitlines() if ln.startswith("SAMPLE ")]
        if not last:
            raise RuntimeError(f"opinfo child failed before any sample:\n{p.stderr[-2000:]}")
        c, name, i = last[-1]
        resume = (c, name, int(i))
        kind = "abort: an exception inside a backward formula on hpu aborts the process"
        total.kinds["error"] += 1
        total.errors[kind] += 1
        total.bad.append((c, name, int(i), "error", kind))


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", default=list(CONFIGS))
    ap.add_argument("--per-op", type=int, default=None, help="samples per op (default: all)")
    ap.add_argument("--list", action="store_true", help="print every failing sample")
    ap.add_argument("--trace", action="store_true", help="name each sample on stderr before running it")
    ap.add_argument("--json", action="store_true", help="(child) print the tallies as JSON")
    ap.add_argument("--resume", default=None, help="(child) config|op|index to start after")
    ap.add_argument("--isolate", action="store_true", help="one child process per config, surviving aborts")
    ap.add_argument("--only", default=None, help="comma-separated op ids")
    ap.add_argument("--shard", default=None, metavar="I/N",
                    help="only the I-th of N parts of each config's ops (every N-th op from the I-th), "
                         "to run a sweep in pieces")
    a = ap.parse_args(argv)
    try:
        shard = parse_shard(a.shard) if a.shard is not None else None
    except ValueError as e:
        ap.error(str(e))
    if a.isolate:
        tallies = {}
        for cfg in a.configs:
            tallies[cfg] = isolated(cfg, a.per_op, set(a.only.split(",")) if a.only else None, shard)
            print(tallies[cfg].report(cfg + (f" shard {a.shard}" if shard else "")), flush=True)
    else:
        resume = a.resume.split("|") if a.resume else None
        if resume:
            resume = (resume[0], resume[1], int(resume[2]))
        only = set(a.only.split(",")) if a.only else None
        tallies = sweep(a.configs, a.per_op, trace=a.trace, resume=resume, json_out=a.json, only=only,
                        shard=shard)
    if a.json:
        return 1 if any(t.kinds["wrong"] for t in tallies.values()) else 0
    errors = collections.Counter()
    for t in tallies.values():
        errors.update(t.errors)
    print("\nerror kinds (all configs):")
    for msg, n in errors.most_common():
        print(f"  {n:5d}  {msg}")
    bad = [b for t in tallies.values() for b in t.bad if b[3] != "error" or a.list]
    if bad:
        print("\nwrong / layout samples:" if not a.list else "\nfailing samples:")
        for b in bad:
            print("  ", *b)
    return 1 if any(t.kinds["wrong"] for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
