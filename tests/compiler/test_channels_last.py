"""channels_last on hpu: every op a conv net runs gives CPU's output layout (strides) and values, forward
and backward, float32 and bfloat16, lazy and eager. Convolution's Meta kernel said contiguous where
CPU's kernel returns channels-last (hpu_lab/ops/meta_fixes.py)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from hpu_lab import config

CL, CL3 = torch.channels_last, torch.channels_last_3d


@pytest.fixture(params=["lazy", "eager"])
def mode(request):
    if request.param == "eager":
        config.set(PT_HPU_LAZY_MODE="0")
    return request.param


def _same(fn, *inputs):
    """fn on CPU and on hpu: the same strides and the same values, for each result."""
    c = fn(*inputs)
    h = fn(*(t.to("hpu") if isinstance(t, torch.Tensor) else t for t in inputs))
    cs, hs = (c, h) if isinstance(c, (tuple, list)) else ((c,), (h,))
    for a, b in zip(cs, hs):
        assert a.stride() == b.stride(), (a.shape, a.stride(), b.stride())
        assert torch.equal(a, b.cpu())


def _x(shape, dtype, fmt=None):
    torch.manual_seed(0)
    t = torch.randn(shape, dtype=dtype)
    return t.contiguous(memory_format=fmt) if fmt is not None else t


CONVS = {
    "conv2d_cl_input": (lambda x, w: F.conv2d(x, w, padding=1), (2, 4, 7, 7), CL, (6, 4, 3, 3), None),
    "conv2d_cl_weight": (lambda x, w: F.conv2d(x, w, stride=2), (2, 4, 7, 7), None, (6, 4, 3, 3), CL),
    "conv2d_groups": (lambda x, w: F.conv2d(x, w, groups=2), (2, 4, 6, 6), CL, (6, 2, 3, 3), None),
    "conv2d_1x1": (lambda x, w: F.conv2d(x, w), (2, 4, 5, 5), CL, (3, 4, 1, 1), None),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2), (2, 4, 5, 5), CL, (4, 3, 3, 3), None),
    "conv3d": (lambda x, w: F.conv3d(x, w), (1, 2, 4, 5, 5), CL3, (3, 2, 2, 2, 2), None),
    "conv1d": (lambda x, w: F.conv1d(x, w), (2, 4, 9), None, (3, 4, 3), None),
    "conv2d_contiguous": (lambda x, w: F.conv2d(x, w), (2, 4, 6, 6), None, (3, 4, 3, 3), None),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CONVS))
def test_convolution_output_layout_is_cpus(case, dtype, mode):
    fn, xs, xf, ws, wf = CONVS[case]
    if case == "conv3d" and dtype == torch.bfloat16:
        dtype = torch.float64          # and the slow kernel's rule for a dtype oneDNN does not take
    _same(fn, _x(xs, dtype, xf), _x(ws, dtype, wf))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channels_last_ops_of_a_conv_net_keep_cpus_layout(dtype, mode):
    x = _x((2, 4, 8, 8), dtype, CL)
    stats = torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype)
    bn_w, bn_b = torch.rand(4, dtype=dtype), torch.rand(4, dtype=dtype)
    _same(lambda x: F.batch_norm(x, stats[0].clone().to(x.device), stats[1].clone().to(x.device),
                                 bn_w.to(x.device), bn_b.to(x.device), training=True), x)
    _same(lambda x: F.batch_norm(x, stats[0].to(x.device), stats[1].to(x.device), training=False), x)
    _same(lambda x: F.max_pool2d(x, 2, return_indices=True), x)
    _same(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), x)
    _same(lambda x: (F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, 3)), x)
    _same(lambda x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                     F.interpolate(x, scale_factor=2, mode="bilinear")), x)
    _same(lambda x: (F.relu_(x.clone()), F.relu(x), x + x, x + x.contiguous(), x + 1, F.silu(x)), x)
    _same(lambda x: (torch.cat([x, x], 1), x.mean((2, 3), keepdim=True), F.group_norm(x, 2)), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channels_last_conv_net_trains_with_cpus_layouts_and_values(dtype, mode):
    def run(dev):
        torch.manual_seed(1)
        net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                            nn.MaxPool2d(2), nn.Conv2d(8, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                            nn.Linear(4, 2)).to(dtype).to(memory_format=CL)
        x = torch.randn(2, 3, 10, 10, dtype=dtype).contiguous(memory_format=CL)
        net, x = net.to(dev), x.to(dev).requires_grad_()
        feats = net[:5](x)
        net[5:](feats).sum().backward()
        got = [feats, x.grad] + [p.grad for p in net.parameters()]
        return [(tuple(t.stride()), t.detach().cpu()) for t in got]

    cpu, hpu = run("cpu"), run("hpu")
    assert cpu[0][0] == hpu[0][0] and cpu[0][1].is_contiguous(memory_format=CL)
    for (cs, cv), (hs, hv) in zip(cpu, hpu):
        assert cs == hs
        assert torch.equal(cv, hv)


def test_compiled_convolution_output_layout_is_cpus(mode):
    # torch.compile traces with FakeTensors on device "hpu": torch's fake convolution asked the backend
    # choice of that device (contiguous); it now takes CPU's (ops/meta_fixes.py). (Elementwise results on
    # "hpu" FakeTensors are contiguous by torch's own choice for Intel's device:
    # torch._refs.is_noncontiguous_supported; ops/meta_fixes.py says so.)
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3).to(memory_format=CL)
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=CL)
    ref = conv(x)
    hconv = __import__("copy").deepcopy(conv).to("hpu")
    with torch.no_grad():
        y = torch.compile(hconv, backend="hpu_backend")(x.to("hpu"))
    assert y.stride() == ref.stride() and torch.equal(y.cpu(), ref.detach())
