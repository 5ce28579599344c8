"""The backend-native aten ops (hpu_lab/kernels/native_ops.py): convolution_overrideable and its backward on
hpu equal torch's convolution on CPU."""
import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("groups", [1, 2])
def test_convolution_overrideable_forward_and_backward(transposed, groups):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 7, 7, requires_grad=True)
    w = torch.randn(4, 6 // groups, 3, 3) if transposed else torch.randn(6, 4 // groups, 3, 3)
    w.requires_grad_()
    b = torch.randn(6, requires_grad=True)
    args = ([2, 2], [1, 1], [1, 1], transposed, [1, 1] if transposed else [0, 0], groups)
    ref = torch.ops.aten.convolution(x, w, b, *args)
    ref.square().sum().backward()
    xh, wh, bh = (t.detach().to("hpu").requires_grad_() for t in (x, w, b))
    out = torch.ops.aten.convolution_overrideable(xh, wh, bh, *args)
    out.square().sum().backward()
    torch.testing.assert_close(out.cpu(), ref)
    for got, want in ((xh, x), (wh, w), (bh, b)):
        torch.testing.assert_close(got.grad.cpu(), want.grad, atol=1e-4, rtol=1e-4)


def test_the_cpu_itself_has_no_convolution_overrideable():
    with pytest.raises(NotImplementedError, match="convolution_overrideable"):
        torch.ops.aten.convolution_overrideable(torch.randn(1, 1, 3, 3), torch.randn(1, 1, 1, 1), None,
                                                [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
