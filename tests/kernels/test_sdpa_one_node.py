"""F.scaled_dot_product_attention on hpu is ONE graph node running CPU's kernel (issue 10, point 8):
equal to CPU bit for bit, forward and backward (it used to take the math decomposition, 1e-5 away)."""
import pytest
import torch
import torch.nn.functional as F

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("kw", [dict(is_causal=True), dict(attn_mask="float"), dict()])
def test_sdpa_equals_cpu_as_one_node(lazy, kw, monkeypatch):
    from hpu_lab import tensor
    seen, real = [], tensor._dispatch
    monkeypatch.setattr(tensor, "_dispatch", lambda f, a, k: seen.append(str(f)) or real(f, a, k))
    config.set(PT_HPU_LAZY_MODE=lazy)
    torch.manual_seed(0)
    q, k, v = torch.randn(4, 4, 3, 8), torch.randn(4, 4, 6, 8), torch.randn(4, 4, 6, 8)
    if kw.get("attn_mask") == "float":
        kw = dict(attn_mask=torch.randn(3, 6))
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    hpu = [t.to("hpu").requires_grad_() for t in (q, k, v)]
    hkw = {n: (x.to("hpu") if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
    a = F.scaled_dot_product_attention(*cpu, **kw)
    b = F.scaled_dot_product_attention(*hpu, **hkw)
    htcore.mark_step()
    assert torch.equal(b.cpu(), a)
    a.sum().backward()
    b.sum().backward()
    htcore.mark_step()
    for x, y in zip(cpu, hpu):
        assert torch.equal(y.grad.cpu(), x.grad)
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in seen
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward.default" in seen
    assert not [op for op in seen if "softmax" in op or "bmm" in op]       # not the decomposition
