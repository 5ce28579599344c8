"""Attention masks on hpu equal CPU bit for bit (issue 32 item 3; issue 38 item 6; issue 35 item 5).

A bool ``attn_mask`` used to be added to the scores as a 0/1 bias (CPU's front converts it to
0/-inf first; hpu_lab handed it to the kernel as it was). The flash kernel also ran as a host op
(a sync in lazy mode, refused inside an HPU Graph capture), grouped-query attention took the math
kernel where CPU takes flash, and torch.compile asked CPU's backend choice on fake tensors (math).
"""
import pytest
import torch
import torch.nn.functional as F

import hpu_lab.core as htcore
from hpu_lab import config, events as ev
from attention_masks import sample_inputs_transformers_masks


def _samples(dtype=torch.float32, grad=False):
    return list(sample_inputs_transformers_masks(None, "cpu", dtype, grad))


def _hpu(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().to("hpu")
        return y.requires_grad_() if x.requires_grad else y
    return x


def _run(s, dev_fn):
    q = dev_fn(s.input)
    k, v = (dev_fn(a) for a in s.args)
    kw = {n: dev_fn(a) for n, a in s.kwargs.items()}
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    grads = []
    if q.requires_grad:
        g = torch.Generator().manual_seed(1)
        gout = torch.randn(out.shape, generator=g, dtype=out.dtype).to(out.device)
        grads = torch.autograd.grad(out, (q, k, v), gout)
    return out, grads


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("grad", [False, True], ids=["fwd", "bwd"])
def test_transformers_masks_bitwise_as_cpu(lazy, grad):
    config.set(PT_HPU_LAZY_MODE=lazy)
    for i, s in enumerate(_samples(grad=grad)):
        a, ga = _run(s, lambda x: x.detach().clone().requires_grad_(x.requires_grad)
                     if isinstance(x, torch.Tensor) else x)
        b, gb = _run(s, _hpu)
        htcore.mark_step()
        assert torch.equal(b.cpu(), a), f"sample {i}: forward differs by {(b.cpu() - a).abs().max()}"
        for x, y in zip(ga, gb):
            assert torch.equal(y.cpu(), x), f"sample {i}: gradient differs by {(y.cpu() - x).abs().max()}"


def test_bool_mask_is_a_mask_not_a_bias():
    """The issue's case: one padded row fully masked, CPU gives zeros there (its kernels' rule)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    m = torch.rand(2, 1, 5, 6) > 0.3
    m[0, 0, 1] = False
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    b = F.scaled_dot_product_attention(q.to("hpu"), k.to("hpu"), v.to("hpu"), attn_mask=m.to("hpu")).cpu()
    assert torch.equal(b, a)
    assert torch.equal(b[0, :, 1], torch.zeros(4, 8))


@pytest.mark.parametrize("kind", ["bool", "float", "none"])
def test_flash_kernel_is_a_graph_node_not_a_host_op(collect, kind):
    """Without dropout the flash op is a node of the lazy graph (it used to run as a random op on
    the host, a sync): no host sync until the values are read."""
    q = torch.randn(2, 2, 4, 8).to("hpu")
    m = {"bool": torch.rand(2, 1, 4, 4) > 0.5, "float": torch.randn(2, 1, 4, 4), "none": None}[kind]
    F.scaled_dot_product_attention(q, q, q, attn_mask=None if m is None else m.to("hpu"))
    assert collect.of(ev.HostSync) == []
    htcore.mark_step()
    assert collect.of(ev.HostSync) == []


@pytest.mark.parametrize("lazy", ["1", "0"])
def test_grouped_query_attention_takes_cpus_kernel(lazy, monkeypatch):
    """enable_gqa: CPU's choice is flash (issue 38 item 6); hpu takes it too, equal bit for bit."""
    from hpu_lab import tensor
    seen, real = [], tensor._dispatch
    monkeypatch.setattr(tensor, "_dispatch", lambda f, a, k: seen.append(str(f)) or real(f, a, k))
    config.set(PT_HPU_LAZY_MODE=lazy)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 8, 5, 16), torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16)
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    hpu = [t.to("hpu").requires_grad_() for t in (q, k, v)]
    a = F.scaled_dot_product_attention(*cpu, enable_gqa=True)
    b = F.scaled_dot_product_attention(*hpu, enable_gqa=True)
    a.sum().backward()
    b.sum().backward()
    htcore.mark_step()
    assert torch.equal(b.cpu(), a)
    for x, y in zip(cpu, hpu):
        assert torch.equal(y.grad.cpu(), x.grad)
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in seen


def test_compiled_attention_with_bool_mask_equals_cpu():
    """torch.compile(backend="hpu_backend"): CPU's choice is asked outside the fake/functional modes."""
    config.set(PT_HPU_LAZY_MODE="0")

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(16, 48)

        def forward(self, x, m):
            q, k, v = self.qkv(x).view(2, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    torch.manual_seed(0)
    ref, mod = Attn(), Attn()
    mod.load_state_dict(ref.state_dict())
    compiled = torch.compile(mod.to("hpu"), backend="hpu_backend")
    x = torch.randn(2, 5, 16)
    m = torch.rand(2, 1, 5, 5) > 0.3
    m[0, 0, 2] = False
    a, b = ref(x, m), compiled(x.to("hpu"), m.to("hpu"))
    assert torch.equal(b.cpu(), a)
    a.pow(2).sum().backward()
    b.pow(2).sum().backward()
    assert torch.equal(mod.qkv.weight.grad.cpu(), ref.qkv.weight.grad)
    assert torch.equal(mod.qkv.bias.grad.cpu(), ref.qkv.bias.grad)


def test_bool_mask_inside_an_hpu_graph_replays_as_cpu():
    """Captured SDPA with a bool mask; replayed with new queries and a new mask (static inputs)."""
    torch.manual_seed(0)
    k, v = torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    sq, sm = torch.zeros(2, 2, 4, 8, device="hpu"), torch.ones(2, 1, 4, 6, dtype=torch.bool, device="hpu")
    hk, hv = k.to("hpu"), v.to("hpu")
    g = htcore.hpu.HPUGraph()
    with htcore.hpu.graph(g):
        out = F.scaled_dot_product_attention(sq, hk, hv, attn_mask=sm)
    for step in range(3):
        q = torch.randn(2, 2, 4, 8)
        m = torch.rand(2, 1, 4, 6) > 0.4
        m[step % 2, 0, step] = False                    # a fully masked row
        sq.copy_(q.to("hpu"))
        sm.copy_(m.to("hpu"))
        g.replay()
        assert torch.equal(out.cpu(), F.scaled_dot_product_attention(q, k, v, attn_mask=m))


def test_transformer_encoder_training_step_captured_in_an_hpu_graph():
    """Issue 35 item 5: nn.TransformerEncoderLayer's training step captured (SDPA inside the graph,
    as on a Gaudi, where it is captured like any op) and replayed: CPU's parameters, step by step."""
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    mod = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    mod.load_state_dict(ref.state_dict())
    mod.to("hpu")
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(mod.parameters(), lr=0.1)
    xs = [torch.randn(2, 5, 16) for _ in range(4)]
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True                                  # key padding of the second sequence
    static_x = xs[0].to("hpu")
    hmask = mask.to("hpu")

    def step(model, optim, x, m):
        optim.zero_grad(set_to_none=False)
        loss = model(x, src_key_padding_mask=m).pow(2).mean()
        loss.backward()
        optim.step()
        return loss

    step(mod, opt, static_x, hmask)                     # warm-up (grads exist), as the docs' loop
    rloss = step(ref, ropt, xs[0], mask)
    g = htcore.hpu.HPUGraph()
    static_x.copy_(xs[1].to("hpu"))
    with htcore.hpu.graph(g):
        loss = step(mod, opt, static_x, hmask)
    rloss = step(ref, ropt, xs[1], mask)
    assert torch.equal(loss.cpu(), rloss.detach())
    for x in xs[2:]:
        static_x.copy_(x.to("hpu"))
        g.replay()
        rloss = step(ref, ropt, x, mask)
        assert torch.equal(loss.cpu(), rloss.detach())
    for (n, p), rp in zip(mod.named_parameters(), ref.parameters()):
        assert torch.equal(p.cpu(), rp.detach()), n


@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("lazy", ["1", "0"])
def test_fused_sdpa_bool_mask_equals_its_additive_mask(recompute, lazy):
    """FusedSDPA: a bool mask (True = attend, padded batches broadcast over heads, a fully masked
    row) gives what the additive 0/-inf mask gives, forward and backward, and CPU's attention
    within float32 rounding (its kernel computes differently from CPU's flash kernel)."""
    from hpu_lab.hpex.kernels import FusedSDPA
    config.set(PT_HPU_LAZY_MODE=lazy)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    m = torch.rand(2, 1, 5, 5) > 0.3
    m[0, 0, 1] = False
    add = torch.zeros(m.shape).masked_fill(~m, float("-inf"))
    res = []
    for mask in (m, add):
        h = [t.to("hpu").requires_grad_() for t in (q, k, v)]
        out = FusedSDPA.apply(*h, mask.to("hpu"), 0.0, False, None, "None", recompute)
        out.pow(2).sum().backward()
        htcore.mark_step()
        res.append([out.cpu()] + [t.grad.cpu() for t in h])
    for a, b in zip(*res):
        assert torch.equal(a, b)
    c = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*c, attn_mask=m)
    ref.pow(2).sum().backward()
    for a, b in zip(res[0], [ref.detach()] + [t.grad for t in c]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert torch.equal(res[0][0][0, :, 1], torch.zeros(4, 8))      # fully masked row: zeros, as CPU


def test_scaled_masked_softmax_refuses_a_bool_mask():
    """hpu::scaled_masked_softmax adds its mask (the bridge's own test uses a 0/1 bias): a bool mask
    is refused at the call, naming the conversion, instead of being added as 0/1."""
    x = torch.randn(2, 4).to("hpu")
    with pytest.raises(TypeError, match="additive mask.*got a bool mask"):
        torch.ops.hpu.scaled_masked_softmax(x, torch.ones(2, 4, dtype=torch.bool).to("hpu"), 0.5)
    mask = torch.tensor([[0.0, 0.0, float("-inf"), 0.0]]).expand(2, 4)
    got = torch.ops.hpu.scaled_masked_softmax(x, mask.to("hpu"), 0.5).cpu()
    assert torch.equal(got, torch.softmax(x.cpu() * 0.5 + mask, dim=-1))
