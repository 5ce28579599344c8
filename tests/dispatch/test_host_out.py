"""Ops run on the host (hpu_lab/dispatch/host_ops.py: random draws, data-dependent ops, the CPU fallback) write
what CPU writes into every tensor they write: keyword-only ``out=`` tensors (single and tuple), resized
and laid out as on CPU; and autograd's version counters move exactly as on CPU (once an ``out=``
tensor of the CPU fallback kept its stale memory: a silent wrong answer)."""
import warnings

import pytest
import torch

from hpu_lab import config

aten = torch.ops.aten


@pytest.fixture(params=["lazy", "eager"])
def mode(request):
    if request.param == "eager":
        config.set(PT_HPU_LAZY_MODE="0")
    return request.param


def _both(fn):
    got = []
    for dev in ("cpu", "hpu"):
        torch.manual_seed(5)
        got.append(fn(dev))
    return got


def test_cpu_fallback_writes_out_and_out_tuples(mode):
    config.set(PT_HPU_PLACE_ON_CPU="aten::add,aten::sort")

    def run(dev):
        o = torch.zeros(3, device=dev)
        r = torch.add(torch.ones(3, device=dev), 1, out=o)
        v, i = torch.empty(0, device=dev), torch.empty(0, dtype=torch.long, device=dev)
        rv, ri = torch.sort(torch.tensor([3., 1, 2], device=dev), out=(v, i))
        assert r is o and rv is v and ri is i
        return o.cpu(), v.cpu(), i.cpu(), (o._version, v._version, i._version), v.stride()

    cpu, hpu = _both(run)
    for c, h in zip(cpu, hpu):
        assert (torch.equal(c, h) if isinstance(c, torch.Tensor) else c == h), (c, h)
    assert torch.equal(hpu[0], torch.full((3,), 2.0))


def test_out_view_of_a_larger_tensor_writes_into_its_base(mode):
    config.set(PT_HPU_PLACE_ON_CPU="aten::add")

    def run(dev):
        base = torch.zeros(3, 4, device=dev)
        torch.add(torch.ones(4, device=dev), 2, out=base[1])
        torch.add(torch.ones(3, device=dev), 5, out=base[:, 3])     # a strided out
        return base.cpu()

    cpu, hpu = _both(run)
    assert torch.equal(cpu, hpu) and hpu[1, 0] == 3 and hpu[0, 3] == 6


def test_non_empty_out_is_resized_as_on_cpu_with_cpus_warnings(mode):
    config.set(PT_HPU_PLACE_ON_CPU="aten::add")

    def run(dev):
        o, r = torch.full((2,), 9.0, device=dev), torch.full((2,), 9.0, device=dev)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.add(torch.ones(2, 3, device=dev), 1, out=o)      # resize_output: warns
            torch.rand(2, 3, out=r)                                  # rand resizes silently
        said = [str(x.message) for x in w if "was resized" in str(x.message)]
        return o.cpu(), r.cpu(), o.shape, r.shape, o.stride(), said

    cpu, hpu = _both(run)
    assert torch.equal(cpu[0], hpu[0]) and torch.equal(cpu[1], hpu[1])
    assert cpu[2:] == hpu[2:] and hpu[2] == (2, 3) and len(hpu[5]) == 1


def test_nonzero_out_takes_cpus_column_major_layout(mode):
    def run(dev):
        o = torch.empty(0, dtype=torch.long, device=dev)
        torch.nonzero(torch.tensor([[0., 1], [2, 0], [3, 4]], device=dev), out=o)
        flat = o.flatten()          # a copy on CPU (column-major): o keeps its values
        flat.fill_(0)
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            o.view(-1)
        return o.cpu(), o.stride()

    (c, cst), (h, hst) = _both(run)
    assert torch.equal(c, h) and cst == hst == (1, 4)


def test_fp8_out_of_a_random_op_gets_the_float32_draw_rounded_once(mode):
    # the CPU has no fp8 kernel for rand; Gaudi draws fp8: the draw is CPU's float32 draw, rounded
    torch.manual_seed(3)
    o = torch.empty(6, dtype=torch.float8_e4m3fn, device="hpu")
    assert torch.rand(6, out=o) is o
    torch.manual_seed(3)
    want = torch.rand(6).to(torch.float8_e4m3fn)
    assert o.dtype == torch.float8_e4m3fn and torch.equal(o.cpu().float(), want.float())


def test_in_place_host_op_bumps_the_version_once_as_cpu(mode):
    config.set(PT_HPU_PLACE_ON_CPU="aten::add_,aten::_foreach_add_")

    def run(dev):
        x = torch.ones(3, device=dev)
        x.add_(1)
        y = torch.zeros(4, device=dev)
        y.bernoulli_(torch.full((4,), 0.5, device=dev))      # bernoulli_.Tensor: a host draw
        x2 = torch.randn(4, device=dev)
        noise = torch.empty(4, device=dev)
        aten.rrelu_with_noise_(x2, noise, 0.1, 0.3, True)   # noise written by the kernel, not bumped
        xs = [torch.ones(2, device=dev), torch.ones(3, device=dev)]
        torch._foreach_add_(xs, 1.0)        # bumped by the in-place ops CPU's kernel runs inside
        return x._version, y._version, x2._version, noise._version, xs[0]._version, xs[1]._version, y.cpu()

    cpu, hpu = _both(run)
    assert cpu[:6] == hpu[:6] == (1, 1, 1, 0, 1, 1)
    assert torch.equal(cpu[6], hpu[6])


def test_autograd_refuses_a_backward_through_a_value_a_host_op_overwrote(mode):
    for dev in ("cpu", "hpu"):
        x = torch.randn(4, device=dev, requires_grad=True)
        y = x.exp()                                   # exp saves its result for the backward
        y.bernoulli_(torch.full((4,), 0.5, device=dev))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_device_ops_bump_versions_as_cpu_too(mode):
    # add_ and out= ops are bumped by autograd's in-place layer above the device; foreach ops are not
    # (their CPU kernel bumps): the lazy path bumps only those, so every count equals CPU's
    def run(dev):
        x = torch.ones(3, device=dev)
        x.add_(1)
        x.mul_(2)
        xs = [torch.ones(3, device=dev), torch.ones(2, device=dev)]
        torch._foreach_add_(xs, 1.0)
        o = torch.empty(3, device=dev)
        torch.mul(x, 2, out=o)
        v = x[1:]
        v.zero_()
        return x._version, xs[0]._version, xs[1]._version, o._version, v._version

    cpu, hpu = _both(run)
    assert cpu == hpu == (3, 1, 1, 1, 3)


@pytest.mark.parametrize("placed_on_cpu", [False, True])
def test_an_out_tensor_on_another_device_is_refused_and_left_alone(mode, placed_on_cpu):
    # every torch device refuses out= on another device; the host path computes on the CPU, where
    # writing the user's CPU tensor silently would have "worked"
    if placed_on_cpu:
        config.set(PT_HPU_PLACE_ON_CPU="aten::add,aten::sort")
    a = torch.tensor([3., 1, 2], device="hpu")
    cases = {"add": lambda o: torch.add(a, 1, out=o),
             "sort": lambda o: torch.sort(a, out=(o, torch.empty(0, dtype=torch.long))),
             "nonzero": lambda o: torch.nonzero(a, out=o.long())}
    for name, op in cases.items():
        o = torch.full((3,), -7.0)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found "
                                               "at least two devices, hpu:0 and cpu!"):
            op(o)
        assert o.tolist() == [-7.0] * 3 and o._version == 0, name
    assert torch.add(a, 1).cpu().tolist() == [4., 2, 3]      # the runtime stays usable
