"""FusedSDPA: F.scaled_dot_product_attention's numbers, one node each way, and the memory order
recompute < no-recompute < unfused attention."""
import pytest
import torch
import torch.nn.functional as F

import hpu_lab.core as htcore
from hpu_lab import events
from hpu_lab.hpex.kernels import FusedSDPA
from hpu_lab.compiler.graph import HELPER_NAMES

HELPERS = {"input", "output", *HELPER_NAMES.values()}     # view, scatter, scatter_into, ...


def _qkv(dtype, b=2, h=4, hkv=4, L=16, S=12, E=8, bk=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    bk = b if bk is None else bk
    return (torch.randn(b, h, L, E, generator=g).to(dtype), torch.randn(bk, hkv, S, E, generator=g).to(dtype),
            torch.randn(bk, hkv, S, E, generator=g).to(dtype))


def _mask(kind, b, h, L, S, dtype):
    g = torch.Generator().manual_seed(1)
    if kind is None:
        return None
    shape = {"LS": (b, h, L, S), "1S": (b, 1, 1, S), "2d": (L, S)}[kind[:2] if kind != "2d" else "2d"]
    if kind.endswith("bool"):
        m = torch.rand(*shape, generator=g) > 0.3
        m[..., 0] = True                      # no row entirely masked
        return m
    return torch.randn(*shape, generator=g).to(dtype)


def _compare(dtype, recompute, mask=None, causal=False, hkv=4, bk=None, S=12):
    q, k, v = _qkv(dtype, hkv=hkv, bk=bk, S=S)
    m = _mask(mask, 2, 4, 16, S, dtype)
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*cpu, attn_mask=m, is_causal=causal, enable_gqa=hkv != 4)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    ref.backward(grad)
    hpu = [t.to("hpu").requires_grad_() for t in (q, k, v)]
    out = FusedSDPA.apply(*hpu, None if m is None else m.to("hpu"), 0.0, causal, None, "None", recompute)
    out.backward(grad.to("hpu"))
    htcore.mark_step()
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu(), ref, **tol)
    for a, b in zip(hpu, cpu):
        assert a.grad.dtype == dtype and a.grad.shape == b.shape
        torch.testing.assert_close(a.grad.cpu(), b.grad, **tol)


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "no_recompute"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mask", [None, "LS_float", "LS_bool", "1S_float", "1S_bool", "2d_float"])
def test_equals_sdpa(dtype, recompute, mask):
    _compare(dtype, recompute, mask)


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "no_recompute"])
def test_causal_and_grouped_query_attention(recompute):
    _compare(torch.float32, recompute, causal=True, S=16)
    _compare(torch.float32, recompute, hkv=2)
    _compare(torch.float32, recompute, hkv=1)


def test_no_recompute_broadcasts_over_batch_recompute_refuses():
    _compare(torch.float32, False, bk=1)
    q, k, v = [t.to("hpu").requires_grad_() for t in _qkv(torch.float32, bk=1)]
    with pytest.raises(ValueError, match="recompute mode does not support broadcasting on batch size"):
        FusedSDPA.apply(q, k, v, None, 0.0, False, None, "None", True)


def test_dtype_and_argument_restrictions():
    q, k, v = [t.to("hpu") for t in _qkv(torch.float16)]
    with pytest.raises(TypeError, match="FP32 and BF16 only"):
        FusedSDPA.apply(q, k, v)
    q, k, v = [t.to("hpu") for t in _qkv(torch.float32)]
    with pytest.raises(ValueError, match="attn_mask must be None when is_causal"):
        FusedSDPA.apply(q, k, v, torch.ones(16, 12, dtype=torch.bool).to("hpu"), 0.0, True)
    with pytest.raises(ValueError, match="softmax_mode = fp32 is supported only when q/k/v inputs are BF16"):
        FusedSDPA.apply(q, k, v, None, 0.0, False, None, "fp32")
    qg = q.clone().requires_grad_()
    with pytest.raises(ValueError, match="Optimized softmax mode is supported in recompute training mode only"):
        FusedSDPA.apply(qg, k, v, None, 0.0, False, None, "fast", True)
    with pytest.raises(ValueError, match="dropout_p"):
        FusedSDPA.apply(q, k, v, None, 1.0)
    with pytest.raises(NotImplementedError, match="valid_seq_len"):
        FusedSDPA.apply(q, k, v, None, 0.0, False, None, "None", None, torch.tensor([3]))
    out = FusedSDPA.apply(qg, k, v, None, 0.0, True, None, "fast", True)        # causal: allowed
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(*[t.cpu() for t in (q, k, v)],
                                                                         is_causal=True))


def test_keyword_arguments_and_default_scale():
    q, k, v = _qkv(torch.float32)
    ref = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    out = FusedSDPA.apply(q.to("hpu"), k.to("hpu"), v.to("hpu"), scale=0.3, recompute_mode=False)
    torch.testing.assert_close(out.cpu(), ref)
    torch.testing.assert_close(FusedSDPA.apply(q, k, v), F.scaled_dot_product_attention(q, k, v))   # on CPU too


def _fused_op_names(fn):
    with events.Collector(kinds=[events.Compile]) as c:
        fn()
        htcore.mark_step()
    return [n.op for e in c.events for n in e.graph.nodes if n.op.startswith("hpu_lab::")]


def test_global_recompute_switch():
    q, k, v = [t.to("hpu").requires_grad_() for t in _qkv(torch.float32)]
    assert torch.hpu.recompute_sdp_enabled()               # the default
    assert _fused_op_names(lambda: FusedSDPA.apply(q, k, v).sum().backward()) == \
        ["hpu_lab::sdpa_recomp_fwd", "hpu_lab::sdpa_recomp_bwd"]
    with torch.hpu.sdp_kernel(enable_recompute=False):
        assert not torch.hpu.recompute_sdp_enabled()
        assert _fused_op_names(lambda: FusedSDPA.apply(q, k, v).sum().backward()) == \
            ["hpu_lab::sdpa_fwd", "hpu_lab::sdpa_bwd"]
        # an explicit recompute_mode wins over the global setting
        assert _fused_op_names(lambda: FusedSDPA.apply(q, k, v, recompute_mode=True).sum().backward()) == \
            ["hpu_lab::sdpa_recomp_fwd", "hpu_lab::sdpa_recomp_bwd"]
    assert torch.hpu.recompute_sdp_enabled()
    torch.hpu.enable_recompute_sdp(False)
    try:
        assert not torch.hpu.recompute_sdp_enabled()
    finally:
        torch.hpu.enable_recompute_sdp(True)


@pytest.mark.parametrize("recompute", [True, False], ids=["recompute", "no_recompute"])
def test_one_node_forward_one_node_backward(recompute):
    q, k, v = [t.to("hpu").requires_grad_() for t in _qkv(torch.float32)]
    htcore.mark_step()
    with events.Collector(kinds=[events.Compile]) as c:
        out = FusedSDPA.apply(q, k, v, recompute_mode=recompute)
        htcore.mark_step()
        out.backward(torch.ones_like(out))
        htcore.mark_step()
    fwd, bwd = [[n for n in e.graph.nodes if n.op not in HELPERS] for e in c.events]
    assert [n.op for n in fwd] == ["hpu_lab::sdpa_recomp_fwd" if recompute else "hpu_lab::sdpa_fwd"]
    assert [n.op for n in bwd if n.op.startswith("hpu_lab::")] == \
        ["hpu_lab::sdpa_recomp_bwd" if recompute else "hpu_lab::sdpa_bwd"]
    assert fwd[0].engine == "MME"
    with events.Collector(kinds=[events.Compile]) as c:
        out = _unfused(q, k, v)
        htcore.mark_step()
        out.backward(torch.ones_like(out))
        htcore.mark_step()
    ufwd, ubwd = [[n for n in e.graph.nodes if n.op not in HELPERS] for e in c.events]
    # matmul, scale, softmax, matmul and their grads (matmul's _unsafe_view of its result is a view)
    assert len(ufwd) >= 4 and len(ubwd) >= 8


def test_inference_without_grad():
    q, k, v = [t.to("hpu") for t in _qkv(torch.bfloat16)]
    with torch.no_grad():
        out = FusedSDPA.apply(q, k, v)
    assert out.dtype == torch.bfloat16 and not out.requires_grad
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(*[t.cpu() for t in (q, k, v)]),
                               atol=3e-2, rtol=3e-2)


def test_dropout_is_reproducible_and_backward_uses_the_same_mask():
    q, k, v = _qkv(torch.float32)
    hq, hk, hv = [t.to("hpu").requires_grad_() for t in (q, k, v)]
    torch.manual_seed(7)
    out = FusedSDPA.apply(hq, hk, hv, None, 0.3, False, None, "None", True)
    out.sum().backward()
    torch.manual_seed(7)
    out2 = FusedSDPA.apply(hq.detach(), hk.detach(), hv.detach(), None, 0.3, False, None, "None", False)
    torch.testing.assert_close(out.detach().cpu(), out2.cpu())            # both modes: the same mask
    assert not torch.allclose(out.detach().cpu(), F.scaled_dot_product_attention(q, k, v))
    # reference: the same keep-mask (drawn from the seed the op took from torch's generator)
    torch.manual_seed(7)
    seed = torch.randint(0, 2 ** 62, (), dtype=torch.int64).item()
    keep = torch.empty(2, 4, 16, 12).bernoulli_(0.7, generator=torch.Generator().manual_seed(seed)) / 0.7
    cq, ck, cv = [t.clone().requires_grad_() for t in (q, k, v)]
    p = torch.softmax(cq @ ck.transpose(-2, -1) / 8 ** 0.5, -1)
    ref = (p * keep) @ cv
    ref.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    for a, b in ((hq, cq), (hk, ck), (hv, cv)):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- memory

def _unfused(q, k, v):
    """Attention written out op by op (F.scaled_dot_product_attention is itself one fused node)."""
    return torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, dim=-1) @ v


def _attention_step(kind, split):
    """Peak device memory of forward + backward of one attention (on top of q, k, v), and the
    memory plans (Compile.peak_bytes) of the graphs it ran."""
    torch.manual_seed(0)
    q, k, v = [torch.randn(2, 4, 128, 32).to("hpu").requires_grad_() for _ in range(3)]
    htcore.mark_step()
    torch.hpu.synchronize()
    base = torch.hpu.memory_allocated()
    torch.hpu.reset_peak_memory_stats()
    with events.Collector(kinds=[events.Compile]) as c:
        if kind == "unfused":
            out = _unfused(q, k, v)
        else:
            out = FusedSDPA.apply(q, k, v, recompute_mode=kind == "recompute")
        if split:
            htcore.mark_step()           # forward and backward as two graphs: saved tensors cross
        out.sum().backward()
        htcore.mark_step()
        torch.hpu.synchronize()
    return torch.hpu.max_memory_allocated() - base, [e.peak_bytes for e in c.events]


@pytest.mark.parametrize("split", [False, True], ids=["one_graph", "fwd_bwd_graphs"])
def test_max_memory_allocated_recompute_lt_no_recompute_lt_unfused(split):
    peak = {kind: _attention_step(kind, split)[0] for kind in ("recompute", "no_recompute", "unfused")}
    assert peak["recompute"] < peak["no_recompute"] < peak["unfused"], peak
    probs, lse = 2 * 4 * 128 * 128 * 4, 2 * 4 * 128 * 4     # fp32 (N, H, L, S) probabilities, (N, H, L) lse
    assert peak["no_recompute"] - peak["recompute"] >= probs - lse


def _planner_counts_multi_output_nodes():
    """Does compiler/passes.memory_plan count the outputs of a multi-output node (sort, native_layer_norm,
    a fused attention) as intermediates? It did not when this test was written."""
    x = torch.randn(1024).to("hpu")
    htcore.mark_step()
    with events.Collector(kinds=[events.Compile]) as c:
        y = torch.sort(x * 1.0).values * (x * 2.0)      # sort's values still alive when x * 2.0 is made
        htcore.mark_step()
    del y
    return c.events[0].peak_bytes > 1024 * 4            # more than one intermediate at a time


def test_memory_plan_recompute_lt_no_recompute_lt_unfused():
    if not _planner_counts_multi_output_nodes():
        pytest.xfail("core bug: compiler/passes.memory_plan classifies the getitem outputs of a multi-output "
                     "node as aliases, so a fused op's outputs (and sort's, native_layer_norm's...) count 0 bytes")
    plan = {kind: max(_attention_step(kind, False)[1]) for kind in ("recompute", "no_recompute", "unfused")}
    assert plan["recompute"] < plan["no_recompute"] < plan["unfused"], plan
