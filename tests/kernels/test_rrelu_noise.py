"""nn.RReLU on hpu (hpu_lab/rrelu_noise.py): in training the random slopes are torch's own draws (the
same numbers as on CPU for the same seed), and backward multiplies by the same slopes."""
import pytest
import torch


def _run(device, dtype):
    torch.manual_seed(7)
    x = torch.randn(3, 5, dtype=dtype).to(device).requires_grad_()
    g = torch.randn(3, 5, dtype=dtype).to(device)
    y = torch.nn.RReLU(0.2, 0.6)(x)
    y.backward(g)
    return x.detach().cpu(), y.detach().cpu(), x.grad.cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rrelu_training_forward_and_backward_equal_cpu(dtype):
    x, y, grad = _run("hpu", dtype)
    xc, yc, gradc = _run("cpu", dtype)
    assert torch.equal(x, xc) and torch.equal(y, yc) and torch.equal(grad, gradc)
    neg = x < 0
    slope = (y[neg] / x[neg]).float()
    assert neg.any() and ((slope >= 0.2 - 1e-2) & (slope <= 0.6 + 1e-2)).all()
    assert torch.equal(y[~neg], x[~neg])


def test_rrelu_noise_keeps_its_autograd_version():
    x = torch.randn(8, device="hpu", requires_grad=True)
    noise = torch.empty(8, device="hpu")
    torch.ops.aten.rrelu_with_noise(x, noise, 0.1, 0.3, True)
    assert noise._version == 0          # as on CPU: autograd saves noise for the backward
    assert ((noise.cpu() == 1) == (x.detach().cpu() >= 0)).all()
