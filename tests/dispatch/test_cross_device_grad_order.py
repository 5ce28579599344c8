"""Gradients that reach one tensor both from hpu and from CPU ops (``x.cpu()`` on one path).

The autograd engine sums the contributions to a node's input buffer in the order they arrive; the
hpu and CPU parts of the graph run on different engine threads, so the order can change from run
to run. Two contributions commute exactly (IEEE addition is commutative); from three on, the
association can differ from CPU's and so can the last bits. The bound tested here is the one
docs/correctness.md states: each element within (n - 1) rounding steps of the sum of magnitudes.
"""
import torch

import hpu_lab  # noqa: F401


def _grad(dev):
    torch.manual_seed(0)
    x0 = torch.randn(4096) * 1e3
    x = x0.to(dev).requires_grad_() if dev != "cpu" else x0.clone().requires_grad_()
    # three contributions to x's gradient: two computed on dev, one on the CPU
    parts = [x.sin() * 1e-3, x.cos() * 3.1, (x.cpu().tanh() * 7.7).to(dev)]
    sum(p.sum() for p in parts).backward()
    contrib = [torch.cos(x0) * 1e-3, -torch.sin(x0) * 3.1, (1 - torch.tanh(x0) ** 2) * 7.7]
    return x.grad.cpu(), contrib


def test_two_paths_commute_exactly():
    torch.manual_seed(1)
    x0 = torch.randn(1000)
    ref = x0.clone().requires_grad_()
    (ref.sin().sum() + ref.cpu().cos().sum()).backward()
    for _ in range(5):
        xh = x0.to("hpu").requires_grad_()
        (xh.sin().sum() + xh.cpu().cos().to("hpu").sum()).backward()
        assert torch.equal(xh.grad.cpu(), ref.grad)


def test_three_paths_within_the_documented_bound():
    ref, contrib = _grad("cpu")
    mag = sum(c.abs() for c in contrib)
    bound = (len(contrib) - 1) * torch.finfo(torch.float32).eps * mag
    for _ in range(5):
        got, _ = _grad("hpu")
        assert ((got - ref).abs() <= bound).all(), (got - ref).abs().max()
