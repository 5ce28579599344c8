"""In-place view ops, writes through expanded views, batch norm without running stats: the loud
failures real code hit (issue 10, points 3-5). Each result equals CPU's, in lazy and eager mode."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config


@pytest.fixture(params=["lazy", "eager"], autouse=True)
def mode(request):
    config.set(PT_HPU_LAZY_MODE="1" if request.param == "lazy" else "0")
    yield request.param
    config.reload()


def same(fn, *inputs, grad=False):
    """fn on CPU and on hpu: equal values, shapes and strides (and input grads with grad=True)."""
    cpu = [x.clone().requires_grad_(grad) for x in inputs]
    hpu = [x.to("hpu").requires_grad_(grad) for x in inputs]
    a, b = fn(*cpu), fn(*hpu)
    a, b = (a, b) if isinstance(a, (list, tuple)) else ([a], [b])
    htcore.mark_step()
    for u, v in zip(a, b):
        assert v.shape == u.shape and v.stride() == u.stride(), (u.shape, v.shape, u.stride(), v.stride())
        torch.testing.assert_close(v.cpu(), u, rtol=0, atol=0)
    if grad:
        sum(x.float().sum() for x in a).backward()
        sum(x.float().sum() for x in b).backward()
        for x, y in zip(cpu, hpu):
            torch.testing.assert_close(y.grad.cpu(), x.grad, rtol=0, atol=0)


def _r(*shape):
    torch.manual_seed(sum(shape))
    return torch.randn(*shape)


@pytest.mark.parametrize("name, fn, shape", [
    ("squeeze_", lambda x: x.squeeze_(1), (3, 1, 4)),
    ("squeeze_dims", lambda x: x.squeeze_((0, 2)), (1, 3, 1)),
    ("unsqueeze_", lambda x: x.unsqueeze_(0).mul_(2), (3, 4)),
    ("t_", lambda x: x.t_(), (3, 4)),
    ("transpose_", lambda x: x.transpose_(0, 2), (3, 4, 5)),
    ("swapdims_", lambda x: x.swapdims_(0, 1), (3, 4)),
    ("as_strided_", lambda x: (x[1:].as_strided_((2, 2), (1, 2), 3), x), (4, 4)),
    ("on_a_view", lambda x: (x, x[0].unsqueeze_(0).mul_(3)), (3, 4)),
    ("then_the_base", lambda x: (x[1].t_(), x.add_(1)), (3, 4)),
])
def test_inplace_view_ops(name, fn, shape):
    same(fn, _r(*shape))


def test_inplace_views_under_autograd():
    same(lambda x: (x * 2).unsqueeze_(0).transpose_(1, 2) * 3, _r(3, 4), grad=True)


@pytest.mark.parametrize("name, fn, shapes", [
    ("vector_matrix", torch.matmul, [(3,), (3, 4)]),
    ("matrix_vector", torch.matmul, [(4, 3), (3,)]),
    ("vector_batch", torch.matmul, [(3,), (2, 3, 4)]),
    ("quantile", lambda x: torch.quantile(x, 0.3, dim=1), [(5, 7)]),
    ("nanquantile", lambda x: torch.nanquantile(x, 0.8), [(5, 7)]),
    ("linear_cross_entropy", lambda x, w: F.linear_cross_entropy(
        x, w, torch.arange(6).remainder(10).to(x.device)), [(6, 8), (10, 8)]),
])
def test_ops_whose_decompositions_use_inplace_views(name, fn, shapes):
    same(fn, *[_r(*s) for s in shapes], grad=name != "quantile" and name != "nanquantile")


def test_stft():
    same(lambda x: torch.stft(x, 16, window=torch.hann_window(16).to(x.device), return_complex=True),
         _r(64))


@pytest.mark.parametrize("fill", [
    lambda e: e.zero_(), lambda e: e.fill_(2.5),
    lambda e: e.masked_fill_(torch.ones(3, 5, dtype=torch.bool, device=e.device), 1.5),
])
def test_fill_through_an_expanded_view(fill):
    def fn(t):
        fill(t[0:1].expand(3, 5))
        t.expand(1, 2, 5).mul_(2)           # a size-1 expand shares no memory
        return t
    same(fn, _r(2, 5))


def test_arithmetic_through_an_expanded_view_raises_at_the_op_like_cpu():
    for dev in ("cpu", "hpu"):
        t = torch.ones(2, 5, device=dev)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            t[0:1].expand(3, 5).add_(1)
        htcore.mark_step()
        assert t.sum().item() == 10          # nothing written, the runtime still usable


def test_batch_norm_without_running_stats():
    same(lambda x: F.batch_norm(x, None, None, training=True), _r(4, 3, 5, 5), grad=True)
    same(lambda x: torch.ops.aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5),
         _r(4, 3, 5, 5))
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(3, track_running_stats=False)
    hbn = nn.BatchNorm2d(3, track_running_stats=False)
    hbn.load_state_dict(bn.state_dict())
    same(lambda x: (bn if x.device.type == "cpu" else hbn.to("hpu"))(x), _r(4, 3, 5, 5), grad=True)


def test_nonzero_and_argwhere_are_laid_out_as_on_cpu():
    """CPU's nonzero is column-major: flatten copies, view(-1) raises. hpu must alias the same way."""
    x = torch.tensor([[0., 1, 2], [3, 0, 5]])
    for op in (torch.nonzero, torch.argwhere):
        cpu, hpu = op(x), op(x.to("hpu"))
        assert hpu.stride() == cpu.stride()
        hpu.flatten().fill_(0)
        assert torch.equal(hpu.cpu(), cpu)              # flatten copied: hpu unchanged
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            hpu.view(-1)


def test_pow_inplace_with_a_scalar_exponent_and_its_gradient():
    same(lambda x: (x * 1).pow_(4), _r(5), grad=True)
    same(lambda x: torch.linalg.vector_norm(x, 4), _r(5), grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_with_update_writes_stats_and_returns_cpus_outputs(dtype):
    x = _r(4, 3, 5).to(dtype)
    cpu_stats = [torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)]
    hpu_stats = [t.to("hpu") for t in cpu_stats]
    a = torch.ops.aten._batch_norm_with_update(x, None, None, *cpu_stats, 0.1, 1e-5)
    b = torch.ops.aten._batch_norm_with_update(x.to("hpu"), None, None, *hpu_stats, 0.1, 1e-5)
    htcore.mark_step()
    for u, v in zip(a, b):
        assert v.dtype == u.dtype and torch.equal(v.cpu(), u)
    for u, v in zip(cpu_stats, hpu_stats):
        assert torch.equal(v.cpu(), u)


def test_batch_norm_without_affine_trains_like_cpu():
    torch.manual_seed(0)
    m, hm = nn.BatchNorm1d(3, affine=False), nn.BatchNorm1d(3, affine=False).to("hpu")
    same(lambda x: (m if x.device.type == "cpu" else hm)(x * 2), _r(4, 3, 5), grad=True)
    assert torch.equal(hm.running_var.cpu(), m.running_var)


def test_batch_norm_with_update_gradients_like_cpu():
    """(A second version bump of the running stats made autograd refuse this backward.)"""
    w, b = _r(3), _r(3) + 1
    same(lambda x, w, b: torch.ops.aten._batch_norm_with_update(
        x, w, b, torch.zeros(3, device=x.device), torch.ones(3, device=x.device), 0.1, 1e-5)[0],
        _r(4, 3, 5), w, b, grad=True)
