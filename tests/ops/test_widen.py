"""Dtypes the CPU kernel lacks (fp8, some bf16/fp16) are computed in float32 and rounded once
(hpu_lab/ops/widen.py): the result is what rounding the exact value gives, never a wrong answer."""
import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab.ops import widen

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def _on_hpu(fn, *xs):
    r = fn(*[x.to("hpu") for x in xs])
    htcore.mark_step()
    return [t.cpu() for t in r] if isinstance(r, tuple) else r.cpu()


def _exact_rounded(fn, *xs, dtype):
    r = fn(*[x.float() for x in xs])
    return [t.to(dtype) if t.is_floating_point() else t for t in r] if isinstance(r, tuple) else r.to(dtype)


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("name, fn", [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b),
    ("clamp", lambda a, b: a.clamp(-2, 2)), ("amax", lambda a, b: a.amax(1)),
    ("aminmax", lambda a, b: torch.aminmax(a, dim=0)), ("maximum", torch.maximum),
])
def test_fp8_ops_equal_the_rounded_exact_value(dtype, name, fn):
    a, b = (torch.randn(5, 6) * 4).to(dtype), (torch.randn(5, 6) * 4).to(dtype)
    with pytest.raises(NotImplementedError):
        fn(a, b)                                 # the CPU has no kernel ...
    got, want = _on_hpu(fn, a, b), _exact_rounded(fn, a, b, dtype=dtype)
    for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
        assert g.dtype == w.dtype and torch.equal(g.float(), w.float())      # ... hpu computes it


def test_fp8_in_place_index_copy_writes_its_argument():
    x = (torch.randn(4, 3) * 2).to(torch.float8_e5m2)
    src = (torch.randn(2, 3) * 2).to(torch.float8_e5m2)
    h = x.to("hpu")
    h.index_copy_(0, torch.tensor([3, 0]).to("hpu"), src.to("hpu"))
    expect = x.float().index_copy(0, torch.tensor([3, 0]), src.float()).to(torch.float8_e5m2)
    assert torch.equal(h.cpu().float(), expect.float())


def test_bf16_cdist():
    a, b = torch.randn(4, 3).bfloat16(), torch.randn(5, 3).bfloat16()
    got = _on_hpu(torch.cdist, a, b)
    assert got.dtype == torch.bfloat16 and torch.equal(got, torch.cdist(a.float(), b.float()).bfloat16())


def test_other_device_errors_are_not_widened():
    assert widen.missing_kernel(NotImplementedError("\"add_stub\" not implemented for 'Float8_e4m3fn'"))
    assert not widen.missing_kernel(RuntimeError("index 7 is out of bounds for dimension 0 with size 4"))
    assert not widen.missing_kernel(NotImplementedError("\"foo\" not implemented for 'ComplexFloat'"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_add_relu_in_half_precisions(dtype):
    a, b = torch.randn(5, 3).to(dtype), torch.randn(5, 3).to(dtype)
    with pytest.raises(RuntimeError, match="Unsupported datatype for add_relu"):
        torch._VF._add_relu(a, b)
    got = _on_hpu(torch._VF._add_relu, a, b)
    assert got.dtype == dtype and torch.equal(got, torch.relu(a.float() + b.float()).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_take_with_int32_indices(dtype):
    x = torch.arange(12).view(3, 4).to(dtype)
    idx = torch.tensor([[11, 0], [5, 7]], dtype=torch.int32)
    got = _on_hpu(torch.take, x, idx)
    assert got.dtype == dtype and torch.equal(got, torch.take(x, idx.long()))
    with pytest.raises(Exception, match="out of range: tried to access index 12"):   # reported at the sync
        _on_hpu(torch.take, x, torch.tensor([12], dtype=torch.int32))
    assert torch.equal(_on_hpu(torch.take, x, idx), got)                             # and usable after


def test_a_scalar_operand_takes_the_half_dtype_first_as_on_cpu():
    # torch's bf16 kernels compute bf16(x + bf16(s)); the widened add_relu does the same
    x = torch.tensor([0.76953125], dtype=torch.bfloat16)
    s = 3.116455078125                        # not a bf16 value: bf16(s) = 3.109375
    want = torch.relu(x + s)                 # CPU bf16 add (it has that kernel): 3.875
    assert want.item() == 3.875
    got = _on_hpu(lambda t: torch.ops.aten._add_relu.Scalar(t, s), x)
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_add_relu_with_a_scalar_adds_the_rounded_product_of_other_and_alpha(dtype):
    torch.manual_seed(0)
    x = torch.rand(40, dtype=dtype)
    for other, alpha in ((4.3, 0.723), (-2.0, -0.26), (4.3, -0.26)):
        o, a = (torch.tensor(v, dtype=dtype).item() for v in (other, alpha))
        got = torch._add_relu(x.to("hpu"), o, alpha=a).cpu()
        assert got.dtype == dtype and torch.equal(got, torch.relu(x + o * a))   # x + dtype(o * a), rounded once


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_add_relu_with_a_tensor_adds_other_times_alpha_rounded_first(dtype):
    torch.manual_seed(1)
    x, o = torch.rand(5, 3, 1, 2, dtype=dtype), torch.rand(1, 3, 5, 2, dtype=dtype)
    a = torch.tensor(-0.26, dtype=dtype).item()
    got = torch._add_relu(x.to("hpu"), o.to("hpu"), alpha=a).cpu()
    assert torch.equal(got, torch.relu(x + o * a))


@pytest.mark.parametrize("lazy", ["1", "0"])
def test_integer_lerp_and_bool_trunc_as_gaudi(lazy):
    # CPU has no integer lerp ("lerp_kernel_scalar" not implemented for 'Int') nor bool trunc; Gaudi
    # has both (Intel's test_hpu_lerp, test_randint): float32, then truncated to the op's dtype
    from hpu_lab import config
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        g = torch.Generator().manual_seed(0)
        s, e = torch.randint(0, 15, (2, 2, 4), generator=g, dtype=torch.int32), torch.randint(0, 15, (2, 2, 4), generator=g, dtype=torch.int32)
        w = torch.randint(0, 20, (2, 2, 4), generator=g, dtype=torch.int32)
        for weight in (5, 2.5, w):
            ref = torch.lerp(s.float(), e.float(), weight.float() if isinstance(weight, torch.Tensor) else weight).to(torch.int32)
            got = torch.lerp(s.to("hpu"), e.to("hpu"), weight.to("hpu") if isinstance(weight, torch.Tensor) else weight)
            assert got.dtype == torch.int32 and torch.equal(got.cpu(), ref)
        x = s.to("hpu")
        x.lerp_(e.to("hpu"), 3)
        assert torch.equal(x.cpu(), torch.lerp(s.float(), e.float(), 3).to(torch.int32))
        b = torch.tensor([True, False, True]).to("hpu")
        assert b.trunc().dtype == torch.bool and torch.equal(b.trunc().cpu(), b.cpu())
        with pytest.raises(Exception, match="not implemented for 'Int'"):     # other integer ops: CPU's refusal
            torch.frac(torch.ones(3, dtype=torch.int32, device="hpu")).cpu()
    finally:
        config.reload()
