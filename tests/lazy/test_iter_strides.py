"""Elementwise results on hpu are laid out as CPU's TensorIterator lays them out (hpu_lab/lazy/iter_strides.py).
torch's Meta kernels differ where dimensions tie (size-1, broadcast, empty): the random-program test
found hpu results laid out otherwise (seed 4006: a column-major (1, 2, 2) sum came out row-major)."""
import random

import pytest
import torch

import fuzz_programs as fp
import hpu_lab  # noqa: F401
from hpu_lab import config
from hpu_lab.lazy.iter_strides import operand_layouts, output_strides

aten = torch.ops.aten


def _random_operand(rng, shape):
    """A tensor of ``shape`` with a random layout: sliced, permuted, or expanded where size 1."""
    base = torch.randn(*[s * 2 + 1 for s in shape]) if shape else torch.randn(())
    t = base[tuple(slice(0, 2 * s, 2) if rng.random() < 0.5 else slice(0, s) for s in shape)]
    if len(shape) > 1 and rng.random() < 0.5:
        p = list(range(len(shape)))
        rng.shuffle(p)
        t = t.permute(p).contiguous().permute([p.index(i) for i in range(len(shape))])
    if shape and rng.random() < 0.3:
        sz = list(t.shape)
        d = rng.randrange(len(sz))
        if sz[d] == 1:
            sz[d] = 3
            t = t.expand(sz)
    return t


def test_output_strides_are_tensoriterators():
    """The rule against CPU itself, over random layouts, broadcasts and wrapped numbers."""
    rng = random.Random(0)
    checked = 0
    for _ in range(3000):
        shape = [rng.choice([0, 1, 1, 2, 3]) for _ in range(rng.randint(0, 4))]
        a = _random_operand(rng, shape)
        kind = rng.choice(["unary", "scalar", "binary", "where"])
        other = [1 if rng.random() < 0.4 else s for s in a.shape][rng.randint(0, a.dim()) if rng.random() < 0.3 else 0:]
        if kind == "unary":
            func, args = aten.exp.default, [a]
        elif kind == "scalar":
            func, args = aten.mul.Tensor, [a, 2]
        elif kind == "binary":
            func, args = aten.add.Tensor, [a, _random_operand(rng, other)]
        else:
            func, args = aten.where.self, [a > 0, _random_operand(rng, other), _random_operand(rng, list(a.shape))]
        try:
            out = func(*args)
        except RuntimeError:        # an expanded operand that does not broadcast: CPU refuses it too
            continue
        assert output_strides(tuple(out.shape), operand_layouts(func, args, {})) == out.stride(), \
            (func, [(tuple(x.shape), x.stride()) for x in args if isinstance(x, torch.Tensor)])
        checked += 1
    assert checked > 2500


CASES = {
    "(2, 1) + (1, 1, 2): column-major on CPU": lambda d: torch.ones(2, 1, dtype=torch.float64, device=d) +
    torch.ones(2, 1, 1, device=d).transpose(0, -1),
    "empty (0, 3) / (3,)": lambda d: torch.ones(3, 1, device=d).t()[1:] / torch.ones(3, device=d),
    "transposed * column": lambda d: torch.ones(3, 3, device=d).t() * torch.ones(3, 1, device=d),
    "where over a broadcast": lambda d: torch.where(torch.ones(1, 3, device=d) > 0, torch.ones(3, 1, device=d).t(),
                                                    torch.zeros(1, 1, 3, device=d)),
}


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("name", list(CASES))
def test_elementwise_layout_is_cpus(name, lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        c, h = CASES[name]("cpu"), CASES[name]("hpu")
        assert (h.shape, h.stride(), h.is_contiguous()) == (c.shape, c.stride(), c.is_contiguous())
        assert torch.equal(h.cpu(), c)
    finally:
        config.reload()


SHRUNK = {   # as the shrinker printed them (dev = "hpu" vs "cpu")
    "seed 4006": ["g = torch.Generator().manual_seed(4006)", "t0 = torch.randn((2, 1, 4), generator=g).to(dev)",
                  "t1 = torch.sin(t0)", "t2 = t1.to(torch.float64).sum(-1)", "t4 = t1.std(-1, keepdim=True)",
                  "t6 = t4.transpose(0, -1)", "t14 = t2 + t6"],
    "seed 4042": ["g = torch.Generator().manual_seed(4042)", "t0 = torch.randn((3, 1), generator=g).to(dev)",
                  "t1 = t0.t()", "t2 = t1[1:]", "t3b = torch.randn((3,), generator=g).to(dev)",
                  "t3 = t2 / (t3b.abs() + 1)"],
}


@pytest.mark.parametrize("name", list(SHRUNK))
def test_fuzz_programs_that_differed(name):
    assert fp.check(SHRUNK[name]) is None
