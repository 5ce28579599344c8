"""Random straight-line programs, run on "hpu" and on CPU: every value, layout and gradient equal.

A program is a list of Python lines over tensors t0, t1, ... (elementwise ops, broadcasting, matmul
with 1-D/2-D/3-D operands, reductions, views, in-place ops on views and on their bases, casts,
mark_step and .item() points, and a backward through leaves w0, w1, ...). A second kind, the
module programs of ``fuzz_modules.py``, adds nn modules with state and side effects (BatchNorm,
Dropout, LSTM/GRU/RNN and cells; outputs sometimes discarded, statistics read mid-step) and
torch.save/torch.load round trips; modules are compared by parameters, gradients and buffers.
The generator proposes
random lines and keeps those CPU runs without error, so CPU defines every program's meaning; hpu
must then give the same results, in lazy and in eager mode. A failing program is shrunk (lines
removed while it still fails) and printed, so the report is a minimal reproducer.

``tests/dispatch/test_fuzz_programs.py`` runs a few programs of each kind in ``make test``; ``make fuzz`` runs
many (``python tests/fuzz_programs.py --programs 300``: 300 of each kind).
"""
from __future__ import annotations

import io
import random
import sys

import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config

UNARY = ["torch.sin({a})", "torch.tanh({a})", "torch.relu({a})", "{a}.abs()", "-{a}", "torch.sigmoid({a})",
         "{a}.abs().sqrt()", "torch.exp(torch.tanh({a}))", "torch.log1p({a}.abs())", "{a}.clamp(-0.5, 0.5)",
         "{a} * 2 + 1", "{a}.square()", "torch.where({a} > 0, {a}, 0.1 * {a})", "{a}.floor()",
         "({a} > 0.2).float()", "{a}.sign()", "torch.nn.functional.gelu({a})", "{a}.reciprocal().tanh()"]
BINARY = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / ({b}.abs() + 1)", "torch.maximum({a}, {b})",
          "torch.minimum({a}, {b})", "torch.atan2({a}, {b})", "{a} * 0.5 + {b} * 0.25",
          "torch.lerp({a}, {b}, 0.3)", "torch.where({b} > 0, {a}, {b})"]
REDUCE = ["{a}.sum({d})", "{a}.mean({d}, keepdim=True)", "{a}.amax({d})", "{a}.sum()", "{a}.mean()",
          "{a}.prod({d})", "{a}.var({d})", "torch.softmax({a}, {d})", "{a}.cumsum({d})",
          "{a}.norm()", "{a}.logsumexp({d})", "{a}.argmax({d})", "{a}.std({d}, keepdim=True)",
          "torch.log_softmax({a}, {d})", "{a}.amin({d}, keepdim=True)"]
VIEW = ["{a}.t()", "{a}.transpose(0, -1)", "{a}[1:]", "{a}[..., ::2]", "{a}.unsqueeze(0)",
        "{a}.reshape(-1)", "{a}.flatten()", "{a}.permute(*reversed(range({a}.dim())))", "{a}[0]",
        "{a}.narrow(-1, 0, 1)", "{a}.expand(2, *{a}.shape)", "{a}.view(-1)", "{a}.squeeze()",
        "{a}.diagonal(0, 0, -1)", "{a}.contiguous()", "{a}[:, None]", "{a}.unflatten(0, (1, -1))",
        "{a}.split(1, -1)[0]", "{a}.chunk(2, 0)[-1]", "{a}.movedim(0, -1)", "{a}.clone()"]
INPLACE = ["{a}.add_({b})", "{a}.mul_(2)", "{a}.zero_()", "{a}.fill_(0.5)", "{a}.clamp_(-1, 1)",
           "{a}.copy_({b})", "{a}.sub_({b}, alpha=0.5)", "{a}[0].add_(1)", "{a}.t().mul_(-1)",
           "{a}[..., :1].fill_(3)", "{a}.relu_()", "{a}.addcmul_({b}, {b}, value=0.1)",
           "{a}.unsqueeze_(0)", "{a}.squeeze_()", "{a}.transpose_(0, -1)", "{a}.div_(2)",
           "{a}.masked_fill_({a} > 0, 0.0)", "{a}.index_fill_(0, torch.tensor([0], device=dev), -2.0)",
           # reading, through another view, memory the op writes (CPU's result depends on its loop order)
           "{a}.mul_({a}[..., :1])", "{a}[..., 1:].sub_({a}[..., :-1], alpha=0.5)"]
CAST = ["{a}.double()", "{a}.float()", "{a}.to(torch.bfloat16)", "{a}.half().float()", "{a}.int()",
        "{a}.to(torch.float64).sum({d})", "{a}.bool()", "{a}.long() + 1"]
NEW_SHAPES = [(3,), (4,), (2, 3), (3, 4), (4, 3), (2, 3, 4), (2, 4, 3), (1, 4), (3, 1), (5,), (2, 1, 4)]


class Gen:
    """Proposes lines; keeps the ones CPU runs (``env`` is the CPU state so far)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.lines = [f"g = torch.Generator().manual_seed({seed})"]
        self.env = _env("cpu")
        exec(self.lines[0], self.env)
        self.n = 0
        self.leaves = 0

    def tensors(self, grad=None):
        return [k for k, v in self.env.items() if isinstance(v, torch.Tensor) and k[0] in "tw"
                and (grad is None or v.requires_grad == grad)]

    def pick(self, grad=None):
        ts = self.tensors(grad)
        return self.rng.choice(ts) if ts else None

    def fresh_shape_like(self, a):
        """A shape that broadcasts with a's: a suffix of it with some dims set to 1."""
        shape = list(self.env[a].shape)
        k = self.rng.randint(0, len(shape))
        shape = shape[k:]
        return tuple(1 if self.rng.random() < 0.3 else s for s in shape)

    def propose(self):
        r = self.rng.random()
        a = self.pick()
        new = f"t{self.n}"
        if a is None or r < 0.08:
            shape = self.rng.choice(NEW_SHAPES)
            if self.rng.random() < 0.25:
                name = f"w{self.leaves}"
                return [f"{name} = torch.randn({shape}, generator=g).to(dev).requires_grad_()"], name
            return [f"{new} = torch.randn({shape}, generator=g).to(dev)"], new
        d = self.rng.randint(-1, 1)
        if r < 0.22:
            return [f"{new} = " + self.rng.choice(UNARY).format(a=a)], new
        if r < 0.40:
            b = self.pick()
            if self.rng.random() < 0.5 or b is None:
                b = f"t{self.n}b"
                return [f"{b} = torch.randn({self.fresh_shape_like(a)}, generator=g).to(dev)",
                        f"{new} = " + self.rng.choice(BINARY).format(a=a, b=b)], new
            return [f"{new} = " + self.rng.choice(BINARY).format(a=a, b=b)], new
        if r < 0.50:
            return self.matmul(a, new)
        if r < 0.60:
            return [f"{new} = " + self.rng.choice(REDUCE).format(a=a, d=d)], new
        if r < 0.72:
            return [f"{new} = " + self.rng.choice(VIEW).format(a=a)], new
        if r < 0.84:
            a = self.pick(grad=False)
            if a is None:
                return None
            b = self.pick()
            line = self.rng.choice(INPLACE).format(a=a, b=b)
            return [line], None
        if r < 0.90:
            return [f"{new} = " + self.rng.choice(CAST).format(a=a, d=d)], new
        if r < 0.95:
            return ["htcore.mark_step()"], None
        return [f"s{self.n} = {a}.float().sum().item()", f"{new} = {a} * s{self.n}"], new

    def matmul(self, a, new):
        """matmul of a with a fresh operand fitting a's last dim, as 1-D, 2-D or 3-D."""
        shape = self.env[a].shape
        if len(shape) == 0 or len(shape) > 3:
            return None
        n = shape[-1]
        m = self.rng.choice([2, 3, 5])
        other = self.rng.choice([(n,), (n, m), (2, n, m) if len(shape) < 3 else (shape[0], n, m)])
        b = f"t{self.n}m"
        mk = f"{b} = torch.randn({other}, generator=g).to(dev)"
        if self.rng.random() < 0.3 and len(shape) >= 2:      # the other side: b @ a
            k = shape[-2]
            other = self.rng.choice([(k,), (m, k)])
            return [f"{b} = torch.randn({other}, generator=g).to(dev)", f"{new} = torch.matmul({b}, {a})"], new
        return [mk, f"{new} = {self.rng.choice(['torch.matmul', 'torch.Tensor.matmul'])}({a}, {b})"], new

    def step(self):
        p = self.propose()
        if p is None:
            return
        lines, name = p
        snapshot = {k: v for k, v in self.env.items()}
        state = torch.Generator().set_state(self.env["g"].get_state())
        try:
            for ln in lines:
                exec(ln, self.env)
        except Exception:
            self.env.clear()
            self.env.update(snapshot)
            self.env["g"].set_state(state.get_state())
            return
        res = self.env.get(name) if name else None
        if isinstance(res, torch.Tensor) and (res.numel() > 4096 or res.dim() > 4):
            self.env.clear()
            self.env.update(snapshot)
            self.env["g"].set_state(state.get_state())
            return
        self.lines += lines
        self.n += 1
        if name and name.startswith("w"):
            self.leaves += 1


# torch.load's map_location on hpu, varied by the module programs' round trips (fuzz_modules.py)
MAP_LOCATIONS = [None, "hpu", "hpu:0", torch.device("hpu"), lambda s, loc: s.hpu(),
                 lambda s, loc: s.to(device="hpu")]


def rt(obj, variant, dev):
    """``obj`` through torch.save and torch.load (on hpu with the ``variant``-th map_location)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, map_location=MAP_LOCATIONS[variant % len(MAP_LOCATIONS)] if dev == "hpu" else None)


def _env(dev):
    return {"torch": torch, "htcore": htcore, "dev": dev, "nn": torch.nn,
            "rt": lambda obj, variant=0: rt(obj, variant, dev)}


def generate(seed, length=25, gen_class=None):
    """A program (list of lines) of about ``length`` accepted steps; ends with a backward.
    ``gen_class``: the generator (default ``Gen``; fuzz_modules.ModuleGen for module programs)."""
    gen = (gen_class or Gen)(seed)
    tries = 0
    while gen.n < length and tries < length * 20:
        gen.step()
        tries += 1
    outs = [k for k in gen.tensors() if k.startswith("t") and gen.env[k].requires_grad
            and gen.env[k].dtype.is_floating_point]
    if outs:
        line = "(" + " + ".join(f"({k}.float() * {i + 1}).sum()" for i, k in enumerate(outs[-4:])) + ").backward()"
        try:
            exec(line, gen.env)
            gen.lines.append(line)
        except Exception:
            pass
    return gen.lines


def run(lines, dev):
    env = _env(dev)
    exec("\n".join(lines), env)
    if dev == "hpu":
        htcore.mark_step()
    return env


def _tol(dtype):
    if dtype in (torch.float32, torch.float64):
        return dict(rtol=1e-5, atol=1e-5)
    return dict(rtol=1.6e-2, atol=1e-3)


def check(lines, modes=("1", "0")):
    """None if hpu equals CPU in every mode, else a one-line description of the first difference."""
    try:
        ref = run(lines, "cpu")
    except Exception:
        return None                        # (while shrinking) CPU rejects this program: not a failure
    for lazy in modes:
        config.set(PT_HPU_LAZY_MODE=lazy)
        mode = "lazy" if lazy == "1" else "eager"
        try:
            try:
                got = run(lines, "hpu")
                for k, v in ref.items():
                    msg = _diff(k, got.get(k), v)
                    if msg:
                        return f"{mode}: {msg}"
            except Exception as e:
                return f"{mode}: hpu raised {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        finally:
            try:
                htcore.mark_step()
                torch.hpu.synchronize()
            except Exception:
                pass
            config.reload()
    return None


def _diff(name, got, exp):
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{name}: missing"
        pairs = [(name, got, exp)]
        if exp.is_leaf:
            pairs.append((name + ".grad", got.grad if got.is_leaf else None, exp.grad))
        for what, a, b in pairs:
            if b is None:
                if a is not None:
                    return f"{what}: hpu has a gradient, CPU none"
                continue
            if a is None:
                return f"{what}: no gradient on hpu"
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"{what}: {tuple(a.shape)} {a.dtype} vs CPU {tuple(b.shape)} {b.dtype}"
            try:
                torch.testing.assert_close(a.detach().cpu(), b.detach(), equal_nan=True, **_tol(b.dtype))
            except AssertionError as e:
                return f"{what}: values differ: {' '.join(str(e).split())[:200]}"
            la = tuple(st for s, st in zip(a.shape, a.stride()) if s > 1)
            lb = tuple(st for s, st in zip(b.shape, b.stride()) if s > 1)
            if la != lb:
                return f"{what}: strides {tuple(a.stride())} vs CPU {tuple(b.stride())}"
    elif isinstance(exp, torch.nn.Module):          # parameters, their gradients, buffers
        if not isinstance(got, torch.nn.Module):
            return f"{name}: missing"
        g, e = got.state_dict(keep_vars=True), exp.state_dict(keep_vars=True)
        if list(g) != list(e):
            return f"{name}: state {list(g)} vs CPU {list(e)}"
        for k in e:
            msg = _diff(f"{name}.{k}", g[k], e[k])
            if msg:
                return msg
    elif isinstance(exp, float) and name.startswith("s"):
        if not isinstance(got, float) or abs(got - exp) > 1e-4 + 1e-4 * abs(exp):
            if not (exp != exp and got != got):
                return f"{name}: {got} vs CPU {exp}"
    return None


def shrink(lines, modes=("1", "0")):
    """Remove lines (the seed line stays) while the program still fails; return the smallest."""
    assert check(lines, modes) is not None
    changed = True
    while changed:
        changed = False
        for i in range(len(lines) - 1, 0, -1):
            cand = lines[:i] + lines[i + 1:]
            if check(cand, modes) is not None:
                lines = cand
                changed = True
    return lines


def report(seed, lines, modes=("1", "0")):
    msg = check(lines, modes)
    if msg is None:
        return None
    small = shrink(lines, modes)
    return (f"program seed {seed} differs from CPU: {check(small, modes)}\n"
            f"minimal program ({len(small)} lines; dev = 'hpu' vs 'cpu'):\n    " + "\n    ".join(small))


def generate_kind(kind, seed, length):
    """A program of ``kind``: "tensor" (this module's lines) or "module" (fuzz_modules.py)."""
    if kind == "module":
        import fuzz_modules
        return fuzz_modules.generate(seed, length)
    return generate(seed, length)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=300, help="programs of each kind")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--length", type=int, default=30)
    ap.add_argument("--kinds", default="tensor,module", help="tensor, module, or both (comma-separated)")
    a = ap.parse_args(argv)
    status = 0
    for kind in a.kinds.split(","):
        failures = 0
        for seed in range(a.first_seed, a.first_seed + a.programs):
            r = report(seed, generate_kind(kind, seed, a.length))
            if r:
                failures += 1
                print(f"[{kind}] {r}", flush=True)
        print(f"random {kind} programs: {a.programs}, lazy and eager, {failures} differ from CPU", flush=True)
        status = status or (1 if failures else 0)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
