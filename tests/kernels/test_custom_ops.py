"""torch.ops.hpu custom ops (hpu_lab/kernels/custom_ops.py): on "hpu" each is one lazy-graph node and equals
the plain-torch computation it stands for."""
import pytest
import torch
import torch.nn.functional as F

import hpu_lab.core as htcore


def _causal_ref(x, scale):
    q, k = x.shape[-2:]
    s = (x.float() * scale).masked_fill(~torch.ones(q, k, dtype=torch.bool).tril(k - q), float("-inf"))
    return torch.softmax(s, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scaled_triangular_softmax_and_retain(dtype):
    x = torch.randn(3, 6, 6, dtype=dtype)
    out = torch.ops.hpu.scaled_triangular_softmax(x.to("hpu"), 0.8)
    htcore.mark_step()
    torch.testing.assert_close(out.cpu().float(), _causal_ref(x, 0.8), atol=1e-2 if dtype == torch.bfloat16 else 1e-6,
                               rtol=1e-2 if dtype == torch.bfloat16 else 1e-5)
    res, recpr, mx = torch.ops.hpu.scaled_triangular_softmax_retain(x.to("hpu"), 0.8)
    assert recpr.dtype == torch.float32 and mx.dtype == dtype and mx.shape == (3, 6, 1)
    again = torch.ops.hpu.scaled_triangular_softmax(x.to("hpu"), 0.8, recpr, mx)
    assert torch.equal(res.cpu(), again.cpu())          # the retained stats reproduce the same bits
    assert (res.cpu().triu(1) == 0).all()


def test_scaled_masked_triangular_softmax_windows_and_empty_rows():
    x = torch.randn(4, 5, 5)
    start_end = torch.tensor([[1, 4], [0, 5]])                 # groups of 2 batch entries
    out = torch.ops.hpu.scaled_masked_triangular_softmax(x.to("hpu"), start_end.to("hpu"), 1.5, 2, True, 0, None).cpu()
    for b in range(4):
        s, e = start_end[b // 2].tolist()
        for i in range(5):
            keep = [j for j in range(5) if s <= j < e and j <= i]
            expect = torch.zeros(5)
            if keep:
                expect[keep] = torch.softmax(x[b, i, keep] * 1.5, -1)
            torch.testing.assert_close(out[b, i], expect)        # no key left: a row of zeros
    bf8 = torch.ops.hpu.scaled_masked_triangular_softmax(x.bfloat16().to("hpu"), start_end.to("hpu"), 1.5, 2, True, 0,
                                                          torch.float8_e4m3fn)
    assert bf8.dtype == torch.float8_e4m3fn
    with pytest.raises(RuntimeError, match="pairs"):
        torch.ops.hpu.scaled_masked_triangular_softmax(x, start_end, 1.5, 4, True, 0, None)


def test_scaled_masked_softmax():
    x, mask = torch.randn(8, 16), torch.randint(0, 2, (8, 16)).float() * -1e4
    out = torch.ops.hpu.scaled_masked_softmax(x.to("hpu"), mask.to("hpu"), 0.3).cpu()
    torch.testing.assert_close(out, F.softmax(x * 0.3 + mask, -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float8_e5m2])
def test_kv_reorder_in_place(dtype):
    cache = torch.randint(0, 50, (2, 4, 3, 7, 5)).to(dtype)
    start, end = torch.tensor([1, 0], dtype=torch.int32), torch.tensor([4, 7], dtype=torch.int32)
    src = [[3, 3, 0, 1], [2, 1, 0, 0]]
    packed = torch.tensor([sum(b << (2 * (3 - j)) for j, b in enumerate(row)) for row in src], dtype=torch.uint8)
    h = cache.to("hpu")
    torch.ops.hpu.kv_reorder_(h, start.to("hpu"), end.to("hpu"), packed.to("hpu"))
    expect = cache.view(torch.uint8) if dtype == torch.float8_e5m2 else cache.clone()
    expect = expect.clone()
    for b in range(2):
        rows = slice(int(start[b]), int(end[b]))
        expect[b, :, :, rows] = expect[b, src[b], :, rows].clone()
    got = h.cpu()
    assert torch.equal(got.view(torch.uint8) if dtype == torch.float8_e5m2 else got, expect)


def test_in_place_interleave():
    x = torch.randn(8, 3)
    h = x.to("hpu")
    torch.ops.hpu.in_place_interleave_(h)
    assert torch.equal(h.cpu(), x[[0, 0, 0, 0, 4, 4, 4, 4]])


@pytest.mark.parametrize("name", ["exp", "sqrt", "rsqrt"])
def test_fast_math_is_the_exact_function(name):
    x = torch.rand(10, dtype=torch.bfloat16) * 5 + 0.1
    # the exact value rounded once to bf16 (the CPU's own bf16 rsqrt is off by one ulp on some inputs)
    expect = getattr(torch, name)(x.float()).bfloat16()
    assert torch.equal(getattr(torch.ops.hpu, f"{name}_fast_math")(x.to("hpu")).cpu(), expect)


@pytest.mark.parametrize("permuted", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_mixture_of_experts_matches_a_loop_over_tokens(permuted, fused):
    torch.manual_seed(0)
    T, H, Fd, E = 5, 8, 12, 4
    x = torch.randn(T, H)
    w1, w2, w3 = ([torch.randn(H, Fd) for _ in range(E)], [torch.randn(H, Fd) for _ in range(E)],
                  [torch.randn(Fd, H) for _ in range(E)])
    weights, table = torch.topk(torch.randn(T, E), 2)
    expect = torch.zeros(T, H)
    for t in range(T):
        for k in range(2):
            e = int(table[t, k])
            expect[t] += weights[t, k] * ((F.silu(x[t] @ w1[e]) * (x[t] @ w2[e])) @ w3[e])
    dev = [[(w.t() if permuted else w).to("hpu") for w in ws] for ws in (w1, w2, w3)]
    args = (x.to("hpu"), table.to("hpu"), weights.to("hpu"))
    if fused:
        w12 = [torch.cat((a, b), dim=0 if permuted else 1) for a, b in zip(dev[0], dev[1])]
        out = torch.ops.hpu.mixture_of_experts.fused_weights(*args, w12, dev[2], permuted, "silu", 0, E - 1)
    else:
        out = torch.ops.hpu.mixture_of_experts(*args, *dev, permuted, "silu", 0, E - 1)
    torch.testing.assert_close(out.cpu(), expect, atol=1e-4, rtol=1e-4)


def test_a_custom_op_is_one_node_of_the_lazy_graph(collect):
    from hpu_lab import events
    x = torch.randn(2, 4, 4).to("hpu")
    htcore.mark_step()
    y = torch.ops.hpu.scaled_triangular_softmax(x, 1.0)
    htcore.mark_step()
    y.cpu()
    compiles = collect.of(events.Compile)
    assert compiles and any("scaled_triangular_softmax" in str(c) for c in compiles)


def _pack(vals):
    """8 4-bit values per int32, the first in the lowest bits."""
    v = (vals & 0xF).to(torch.int64).view(*vals.shape[:-1], -1, 8)
    packed = (v << torch.arange(0, 32, 4)).sum(-1)
    return torch.where(packed >= 2 ** 31, packed - 2 ** 32, packed).to(torch.int32)


@pytest.mark.parametrize("signed", [True, False])
def test_convert_from_int4_dequantizes_groupwise(signed):
    torch.manual_seed(0)
    q = torch.randint(-8, 8, (4, 16)) if signed else torch.randint(0, 16, (4, 16))
    scale = torch.randn(2, 16)                          # one row per group of 2 input rows
    zp = torch.randint(0, 4, (2, 16))
    op = torch.ops.hpu.convert_from_int4 if signed else torch.ops.hpu.convert_from_uint4
    out = op(_pack(q).to("hpu"), scale.to("hpu"), _pack(zp).to("hpu"), torch.float32).cpu()
    expect = (q - zp.repeat_interleave(2, 0)).float() * scale.repeat_interleave(2, 0)
    assert torch.equal(out, expect)
    plain = op(_pack(q).to("hpu"), torch.ones(4, 16).to("hpu"), None, torch.bfloat16).cpu()
    assert plain.dtype == torch.bfloat16 and torch.equal(plain, q.bfloat16())


def test_plain_index_is_advanced_indexing():
    x = torch.randn(4, 5)
    idx = [torch.tensor([3, 0]), torch.tensor([1, 4])]
    out = torch.ops.hpu.plain_index(x.to("hpu"), [i.to("hpu") for i in idx])
    assert torch.equal(out.cpu(), x[idx[0], idx[1]])


@pytest.mark.parametrize("dtype", [torch.float8_e5m2, torch.float8_e4m3fn])
@pytest.mark.parametrize("dim", [1, (0, 2), None])
def test_sum_fp8_is_the_float32_sum_rounded_once(dtype, dim):
    torch.manual_seed(0)
    x = (torch.randn(6, 7, 8) * 10).to(dtype)
    wide = torch.ops.hpu.sum_fp8(x.to("hpu"), dim, True, torch.float32).cpu()
    assert wide.dtype == torch.float32 and torch.equal(wide, torch.sum(x.float(), dim, True))
    narrow = torch.ops.hpu.sum_fp8(x.to("hpu"), dim, False).cpu()
    expect = torch.sum(x.float(), dim).to(dtype)      # torch's cast: nearest even, saturating for e4m3fn
    assert narrow.dtype == dtype and torch.equal(narrow.view(torch.uint8), expect.view(torch.uint8))


def test_sum_fp8_refuses_other_dtypes():
    with pytest.raises(RuntimeError, match="sum_fp8: input must be float8"):
        torch.ops.hpu.sum_fp8(torch.ones(3).to("hpu")).cpu()
