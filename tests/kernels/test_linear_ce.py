"""F.linear_cross_entropy with chunking options on hpu equals CPU bit for bit, bfloat16 too (issue 10):
one node (torch's chunked custom op, whose kernel is the CPU's), with the options resolved as for a
CPU input. It used to land 1-4 bf16 ulps away: "auto" options resolved for an unknown device type
(a smaller chunk, accumulation in bfloat16) gave the same kernel other arguments."""
import pytest
import torch
import torch.nn.functional as F

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config
from hpu_lab.kernels import linear_ce

Options = pytest.importorskip("torch.nn.modules.linear_cross_entropy_options").LinearCrossEntropyOptions

CHUNKED = "torch_nn._linear_cross_entropy_batch_chunked"


def _inputs(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 8, generator=g).to(dtype)
    w = torch.randn(24, 8, generator=g).to(dtype)
    b = torch.randn(24, generator=g).to(dtype)
    cw = torch.rand(24, generator=g).to(dtype) + 0.5
    t = torch.randint(0, 24, (16,), generator=g)
    t[3] = -100                                    # an ignored target
    return x, w, b, cw, t


def _run(dev, seed, dtype, reduction, options):
    x, w, b, cw, t = _inputs(seed, dtype)
    leaves = [v.to(dev).requires_grad_() for v in (x, w, b)]
    loss = F.linear_cross_entropy(leaves[0], leaves[1], t.to(dev), linear_bias=leaves[2], weight=cw.to(dev),
                                  reduction=reduction, options=options)
    grads = torch.autograd.grad(loss.sum(), leaves)
    htcore.mark_step()
    return [loss.cpu(), *(g.cpu() for g in grads)]


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_equals_cpu_bit_for_bit(lazy, reduction, dtype, monkeypatch):
    from hpu_lab import tensor
    seen, real = [], tensor._dispatch
    monkeypatch.setattr(tensor, "_dispatch", lambda f, a, k: seen.append(str(f)) or real(f, a, k))
    config.set(PT_HPU_LAZY_MODE=lazy)
    for seed in range(6):
        for options in (Options(), Options(batch_chunk_size=4), Options(acc_policy="compact")):
            cpu = _run("cpu", seed, dtype, reduction, options)
            hpu = _run("hpu", seed, dtype, reduction, options)
            for name, a, h in zip(("loss", "d input", "d linear_weight", "d linear_bias"), cpu, hpu):
                assert torch.equal(h, a), (seed, options, name, h, a)
    assert any(op.startswith(CHUNKED) for op in seen)        # the chunked op: one node ...
    assert "aten.mm.default" not in seen or reduction == "none"  # ... not a decomposition (forward)


def test_without_the_alignment_bf16_differs():
    """The test above can fail: with torch's own option resolution the bf16 losses differ."""
    config.set(PT_HPU_LAZY_MODE="1")
    linear_ce.uninstall()
    try:
        differ = sum(not torch.equal(_run("cpu", s, torch.bfloat16, r, Options())[0],
                                     _run("hpu", s, torch.bfloat16, r, Options())[0])
                     for s in range(6) for r in ("mean", "sum", "none"))
    finally:
        linear_ce.install()
    if differ == 0:
        pytest.skip("torch's bf16 accumulation policies give the same losses on this CPU, so the "
                    "alignment above is not what makes them equal here")


def test_explicit_device_resolution_is_torch_own():
    """Only an hpu device is resolved as the CPU: CPU and device=None keep torch's picks."""
    o = Options()
    cpu = o._adjust(16, 8, 24, torch.bfloat16, torch.device("cpu"))
    assert o._adjust(16, 8, 24, torch.bfloat16, torch.device("hpu")) == cpu
    assert cpu.acc_dtype == torch.float32 and cpu.acc_policy == "accurate"
    none = o._adjust(16, 8, 24, torch.bfloat16, None)
    assert none.acc_policy == "compact"              # torch's fallback, unchanged
