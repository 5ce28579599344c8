"""Meta kernels corrected to the CPU kernel's shapes (hpu_lab/ops/meta_fixes.py), and the loss that needed
it: multilabel_margin_loss on hpu equals CPU in every dtype Gaudi supports, forward and backward."""
import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("shape", [(6,), (3, 6), (0, 6)])
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_multilabel_margin_loss_forward_meta_shape_is_the_cpus(shape, reduction):
    x, t = torch.rand(shape), torch.zeros(shape, dtype=torch.long)
    cpu = torch.ops.aten.multilabel_margin_loss_forward(x, t, reduction)
    meta = torch.ops.aten.multilabel_margin_loss_forward(x.to("meta"), t.to("meta"), reduction)
    assert [(c.shape, c.dtype) for c in cpu] == [(m.shape, m.dtype) for m in meta]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(6,), (2, 6)])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_on_hpu(dtype, shape, reduction):
    torch.manual_seed(0)
    x = torch.rand(shape).to(dtype)
    t = torch.multinomial(torch.rand((1, 6) if len(shape) == 1 else shape), 6).reshape(shape)
    t[..., 3] = -1                                    # labels end at the first -1
    xc = x.float().clone().requires_grad_()
    ref = F.multilabel_margin_loss(xc, t, reduction=reduction)
    ref.backward(torch.ones_like(ref))
    xh = x.to("hpu").requires_grad_()
    out = F.multilabel_margin_loss(xh, t.to("hpu"), reduction=reduction)
    out.backward(torch.ones_like(out))
    assert out.shape == ref.shape and out.dtype == dtype and xh.grad.dtype == dtype
    # bf16/fp16: computed in float32 and rounded once (the CPU has no kernel for them)
    assert torch.equal(out.cpu(), ref.detach().to(dtype))
    assert torch.equal(xh.grad.cpu(), xc.grad.to(dtype))


def _unpool_cl(x):
    x = x.reshape(1, 2, 4, 6).contiguous(memory_format=torch.channels_last)
    out, idx = F.max_pool2d(x, 2, return_indices=True)
    return F.max_unpool2d(out, idx, 2)


# each: a CPU kernel whose output layout torch's Meta kernel got wrong for a CPU backend (it asked
# device_hint, which answers "cuda" for a meta tensor), or that was always contiguous (max_unpool2d)
LAYOUT_CASES = {
    "svd_vh": (lambda x: torch.linalg.svd(x.reshape(2, 2, 12))[2], (48,)),
    "svd_lowrank_v": (lambda x: torch.svd_lowrank(x.reshape(2, 4, 6), q=2)[2], (48,)),
    "eig_vectors": (lambda x: torch.linalg.eig(x.reshape(3, 4, 4))[1], (48,)),
    "rfft2": (lambda x: torch.fft.rfft2(x.reshape(5, 6, 4), dim=(0, 1)), (120,)),
    # (x + 1j * y, not torch.complex(x, y): that returns a CPU tensor from hpu ones, as the bridge's)
    "hfft2": (lambda x: torch.fft.hfft2((x + 1j * x.flip(0)).reshape(5, 6, 4), dim=(0, 1)), (120,)),
    "max_unpool2d_channels_last": (_unpool_cl, (48,)),
}


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("case", sorted(LAYOUT_CASES))
def test_output_layout_is_the_cpus(case, lazy):
    from hpu_lab import config
    fn, shape = LAYOUT_CASES[case]
    torch.manual_seed(0)
    x = torch.randn(shape)
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        torch.manual_seed(1)
        ref = fn(x)
        torch.manual_seed(1)
        got = fn(x.to("hpu"))
        assert got.stride() == ref.stride(), f"hpu strides {got.stride()} vs CPU {ref.stride()}"
        torch.testing.assert_close(got.cpu(), ref)
        # the layout is what aliasing depends on: a flat view of it reads the same elements
        if ref.is_contiguous() is False and ref.mT.is_contiguous():
            torch.testing.assert_close(got.mT.reshape(-1).cpu(), ref.mT.reshape(-1))
    finally:
        config.reload()


BN_EVAL = {
    "native_batch_norm": lambda x, w, b, rm, rv: torch.ops.aten.native_batch_norm(x, w, b, rm, rv, False, 0.1, 0.5),
    "native_batch_norm_no_weight": lambda x, w, b, rm, rv: torch.ops.aten.native_batch_norm(
        x, None, None, rm, rv, False, 0.1, 0.5),
    "_native_batch_norm_legit": lambda x, w, b, rm, rv: torch.ops.aten._native_batch_norm_legit(
        x, w, b, rm, rv, False, -1.0, 0.5),
    "_native_batch_norm_legit_no_training": lambda x, w, b, rm, rv:
        torch.ops.aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, -1.0, 0.5),
}


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(BN_EVAL))
def test_batch_norm_in_eval_mode_returns_cpus_empty_statistics(case, dtype, lazy):
    # was "Expected Tensor but got None" (OpInfo _native_batch_norm_legit sample 4) or [C]-shaped stats
    from hpu_lab import config
    torch.manual_seed(0)
    args = [torch.randn(2, 3, 4, 5), torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5]
    args = [a.to(dtype) for a in args]
    ref = BN_EVAL[case](*args)
    meta = BN_EVAL[case](*[a.to("meta") for a in args])
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        got = BN_EVAL[case](*[a.to("hpu") for a in args])
        for g, m, r in zip(got, meta, ref):
            assert g.shape == m.shape == r.shape and g.dtype == r.dtype
            assert torch.equal(g.cpu(), r)
    finally:
        config.reload()


@pytest.mark.parametrize("lazy", ["1", "0"])
def test_batch_norm_training_statistics_have_cpus_dtype_in_bfloat16(lazy):
    # the full OpInfo sweep's bf16 native_batch_norm "wrong" samples: float32 stats, CPU's bfloat16
    from hpu_lab import config
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5).bfloat16(), torch.randn(3).bfloat16(), torch.randn(3).bfloat16()
    ref = torch.ops.aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        got = torch.ops.aten.native_batch_norm(x.to("hpu"), w.to("hpu"), b.to("hpu"), None, None, True, 0.1, 1e-5)
        for g, r in zip(got, ref):
            assert (g.shape, g.dtype) == (r.shape, r.dtype)
            assert torch.equal(g.cpu(), r)
    finally:
        config.reload()


@pytest.mark.parametrize("dim", [None, (), (0,), (1,), (0, 1), (-1,)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_nansum_and_nanmean_reduce_like_cpu(dim, keepdim):
    x = torch.randn(3, 4)
    x[0, 1] = float("nan")
    h = x.to("hpu")
    for op in (torch.nansum, torch.nanmean):
        kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
        got, want = op(h, **kw), op(x, **kw)
        assert got.shape == want.shape and torch.allclose(got.cpu(), want), (op, dim, keepdim)
    assert torch.nansum(h, (), keepdim, dtype=torch.float64).dtype == torch.float64


BN_UPDATE = ["_batch_norm_with_update", "_batch_norm_with_update_functional", "_batch_norm_no_update"]


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                    (torch.bfloat16, torch.float32)])
@pytest.mark.parametrize("name", BN_UPDATE)
def test_batch_norm_update_ops_meta_is_the_cpus(name, dtypes, lazy):
    # the executor's output check refused these: torch's Meta kernels said float32 statistics (CPU:
    # bfloat16) and [C] statistics for _batch_norm_no_update (CPU: empty; read as [C], out of bounds)
    from hpu_lab import config
    op = getattr(torch.ops.aten, name).default
    torch.manual_seed(0)
    xd, pd = dtypes
    args = [torch.randn(4, 3, 5).to(xd)] + [t.to(pd) for t in (torch.randn(3), torch.randn(3), torch.randn(3),
                                                                   torch.rand(3) + 0.5)]
    ref = op(*[a.clone() for a in args], 0.1, 1e-5)
    meta = op(*[a.to("meta") for a in args], 0.1, 1e-5)
    assert [(r.shape, r.dtype) for r in ref] == [(m.shape, m.dtype) for m in meta]
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        got = op(*[a.to("hpu") for a in args], 0.1, 1e-5)
        for g, r in zip(got, ref):
            assert (g.shape, g.dtype) == (r.shape, r.dtype)
            assert torch.equal(g.cpu(), r)
    finally:
        config.reload()


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [-1, 2])
def test_embedding_bag_auxiliary_outputs_are_the_cpus(dtype, mode, include_last_offset, padding_idx, lazy):
    # the executor's output check refused them (eager embedding_bag): torch's Meta kernel missed CPU's
    # bfloat16 fast path (offset2bag empty) and the bag_size/max_indices sizes with include_last_offset
    from hpu_lab import config
    w = torch.randn(5, 4, dtype=dtype)
    idx, off = torch.tensor([0, 2, 4, 1, 3, 2]), torch.tensor([0, 2, 4], dtype=torch.int32)
    for op in (torch.ops.aten._embedding_bag.default, torch.ops.aten._embedding_bag_forward_only.default):
        args = (w, idx, off, False, mode, False, None, include_last_offset, padding_idx)
        ref = op(*args)
        meta = op(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
        assert [(r.shape, r.dtype) for r in ref] == [(m.shape, m.dtype) for m in meta]
        config.set(PT_HPU_LAZY_MODE=lazy)
        try:
            got = op(*[a.to("hpu") if isinstance(a, torch.Tensor) else a for a in args])
            assert [(g.shape, g.dtype) for g in got] == [(r.shape, r.dtype) for r in ref]
            assert torch.equal(got[0].cpu(), ref[0])
            for g, r in zip(got[1:], ref[1:]):     # offset2bag, bag_size, max_indices: CPU's values too
                assert torch.equal(g.cpu(), r)
        finally:
            config.reload()


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("dtypes", [(torch.bfloat16, None), (torch.bfloat16, torch.float32), (torch.float16, None),
                                    (torch.float16, torch.float32), (torch.float32, None)])
def test_native_layer_norm_statistics_have_cpus_dtype(dtypes, lazy):
    # torch's Meta kernel says float32 statistics for any bfloat16 input, CPU's kernel returns
    # bfloat16: the executor refused the hpu op (Intel's test_hpu_layer_norm)
    import hpu_lab  # noqa: F401
    from hpu_lab import config
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        xd, wd = dtypes
        x = torch.rand(3, 1, 4).to(xd)
        w = torch.rand(4).to(wd) if wd else None
        for args in ((x, [4], w, w, 1e-5), (x, [1, 4], None, None, 1e-5)):
            if args[2] is None and wd:
                continue
            cpu = torch.ops.aten.native_layer_norm(*args)
            hpu = torch.ops.aten.native_layer_norm(*[a.to("hpu") if isinstance(a, torch.Tensor) else a for a in args])
            for c, h in zip(cpu, hpu):
                assert (h.dtype, h.shape, h.stride()) == (c.dtype, c.shape, c.stride())
                assert torch.equal(h.cpu(), c)
    finally:
        config.reload()


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("mask", [(False, True, True), (True, False, False), (False, True, False)])
def test_batch_norm_backward_leaves_out_what_output_mask_leaves_out(mask, lazy):
    # CPU's kernel returns no gradient where output_mask asks for none; torch's Meta kernel returned
    # all three, and in eager mode the executor refused the missing one (BatchNorm on the data: the
    # input needs no gradient). Found by the module programs of tests/fuzz_modules.py
    import hpu_lab  # noqa: F401
    from hpu_lab import config
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        g = torch.Generator().manual_seed(0)
        args = [torch.randn(5, 4, generator=g) for _ in range(2)] + [torch.randn(4, generator=g) for _ in range(5)]
        cpu = torch.ops.aten.native_batch_norm_backward(*args, True, 1e-5, list(mask))
        hpu = torch.ops.aten.native_batch_norm_backward(*[a.to("hpu") for a in args], True, 1e-5, list(mask))
        for c, h in zip(cpu, hpu):
            assert (c is None) == (h is None)
            if c is not None:
                assert torch.equal(h.cpu(), c)
        bn, x = torch.nn.BatchNorm1d(4).to("hpu"), torch.randn(5, 4, generator=g)
        bn(x.to("hpu")).sum().backward()
        ref = torch.nn.BatchNorm1d(4)
        ref(x).sum().backward()
        assert torch.equal(bn.weight.grad.cpu(), ref.weight.grad) and torch.equal(bn.bias.grad.cpu(), ref.bias.grad)
    finally:
        config.reload()
