"""``t.data = x``, ``t.set_(...)`` and dtype-reinterpreting views on hpu, as on CPU (issue 32 point 2,
issue 38 point 5, issue 35 point 2): afterwards both names are one memory, lazy and eager."""
import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrize

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config


@pytest.fixture(params=["1", "0"], ids=["lazy", "eager"])
def mode(request):
    config.set(PT_HPU_LAZY_MODE=request.param)
    return request.param


def _step(dev):
    if dev == "hpu" and config.lazy_mode():
        htcore.mark_step()


def _both(fn):
    """fn(dev) -> list of values; equal on cpu and hpu."""
    want = [w.cpu() if isinstance(w, torch.Tensor) else w for w in fn("cpu")]
    got = [g.cpu() if isinstance(g, torch.Tensor) else g for g in fn("hpu")]
    for w, g in zip(want, got):
        if isinstance(w, torch.Tensor):
            assert w.dtype == g.dtype and torch.equal(w, g)
        else:
            assert w == g
    return got


def test_data_rebinding_between_hpu_tensors_aliases(mode):
    """It was ignored: the sizes changed and the old storage stayed."""
    def run(dev):
        t = torch.zeros(3, device=dev)
        flat = torch.arange(10.0).to(dev)
        t.data = flat[2:8].view(2, 3)
        t.add_(1)                    # seen through flat
        flat[2] = -5.0               # seen through t
        _step(dev)
        return [t, flat, tuple(t.shape), t.data_ptr() == flat.data_ptr() + 8, t._version]
    _both(run)


def test_data_across_devices_keeps_the_object(mode):
    for start, to in (("cpu", "hpu"), ("hpu", "cpu")):
        p = nn.Parameter(torch.randn(2, 3).to(start))
        p.grad = torch.ones(2, 3).to(start)
        g, hooks = p.grad, []
        p.register_hook(lambda grad: hooks.append(1))
        x = torch.randn(2, 3)
        p.data = x.to(to)
        assert p.device.type == to and isinstance(p, nn.Parameter) and p.requires_grad
        assert p.grad is g and g.device.type == to
        (p * 2).sum().backward()
        assert hooks == [1] and torch.equal(p.grad.cpu(), torch.full((2, 3), 3.0))
        assert torch.equal(p.detach().cpu(), x)
    assert type(p) is nn.Parameter


def test_data_refuses_what_cpu_refuses():
    p = nn.Parameter(torch.randn(3).to("hpu"))
    with pytest.raises(RuntimeError, match="must be floating point or complex dtype"):
        p.data = torch.ones(3, dtype=torch.int64)


def test_compatible_shallow_copy_type_as_for_a_dense_device():
    c, h = torch.randn(2), torch.randn(2).to("hpu")
    assert torch._has_compatible_shallow_copy_type(c, h) and torch._has_compatible_shallow_copy_type(h, c)
    assert not torch._has_compatible_shallow_copy_type(h, torch.randn(2).to_sparse())


def test_set_variants_as_on_cpu(mode):
    def run(dev):
        b = torch.arange(6.0).to(dev)
        a = torch.zeros(4).to(dev)
        a.set_(b[1:])
        b[2] = 9
        a[0] += 100
        c = torch.zeros(2).to(dev)
        c.set_(b.untyped_storage(), 2, (2,), (2,))
        d = torch.zeros(2, dtype=torch.int32).to(dev)
        d.set_(b.untyped_storage(), 0, (2,), (1,))          # the same bytes as int32
        e = torch.ones(3).to(dev)
        e.set_()
        return [a, b, c, d, tuple(e.shape), a._version]
    _both(run)
    with pytest.raises(RuntimeError, match="Could not set tensor of type int to a tensor of type float"):
        torch.zeros(2).to("hpu").set_(torch.ones(2, dtype=torch.int32).to("hpu"))


class _Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


def test_parametrize_on_a_module_already_on_hpu(mode):
    """register_parametrization keeps the Parameter (set_), remove_parametrizations(leave_parametrized=
    True) writes the value back into it (set_ again): both were refused."""
    def run(dev):
        torch.manual_seed(0)
        m = nn.Linear(3, 3).to(dev)
        w = m.weight
        parametrize.register_parametrization(m, "weight", _Symmetric())
        same = m.parametrizations.weight.original is w
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        m(torch.ones(2, 3).to(dev)).sum().backward()
        opt.step()
        parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
        return [same, m.weight is w, m.weight.detach()]
    _both(run)


def test_dtype_views_read_and_write_the_same_bytes(mode):
    def run(dev):
        torch.manual_seed(0)
        p = torch.randn(4, 3).to(dev)
        b, i = p.view(torch.uint8), p.view(torch.int32)
        first = [b.clone(), i[1].clone(), tuple(b.shape), b.stride()]
        b[0, 0:4] = 0
        i[2, 1] = 1065353216                 # 1.0f
        p[3, 2] = 5.0
        _step(dev)
        seen = [p.clone(), i.clone(), b.sum()]
        p.view(torch.float16)[1].zero_()
        x = torch.arange(6, dtype=torch.float32).to(dev)[1:5]
        return first + seen + [p, x.view(torch.int32), x.view(torch.int16).view(torch.bfloat16),
                               b.data_ptr() == p.data_ptr()]
    _both(run)


def test_dtype_views_refuse_what_cpu_refuses_and_complex():
    y = torch.zeros(3).to("hpu")
    with pytest.raises(RuntimeError, match="must be divisible by 2 to view Float as Double"):
        y.view(torch.float64)
    with pytest.raises(NotImplementedError, match="Complex datatype is not supported on HPU device"):
        torch.zeros(4).to("hpu").view(torch.complex64)


def test_data_view_uint8_of_a_parameter_in_a_flat_buffer(mode):
    """DeepSpeed's look at parameter bytes, for parameters bound into a flat buffer."""
    def run(dev):
        flat = torch.arange(12.0).to(dev)
        p = nn.Parameter(torch.zeros(2, 3).to(dev))
        p.data = flat[6:].view(2, 3)
        u = p.data.view(torch.uint8)
        u[0, :4] = 0
        return [flat, u.sum(), p.detach()]
    _both(run)
