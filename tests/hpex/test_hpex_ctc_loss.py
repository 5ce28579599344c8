"""hpex CTCLoss (hpu_lab/hpex/kernels/ctc_loss.py): loss and input gradient equal nn.CTCLoss on CPU."""
import pytest
import torch

from hpu_lab.hpex.kernels import CTCLoss


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_loss_and_gradient_equal_torch_on_cpu(reduction):
    torch.manual_seed(0)
    T, C, N, S = 12, 6, 3, 4
    logits = torch.randn(T, N, C)
    targets = torch.randint(1, C, (N, S))
    in_len, tgt_len = torch.tensor([12, 10, 7]), torch.tensor([4, 2, 3])
    x = logits.log_softmax(2).detach().requires_grad_()
    ref = torch.nn.CTCLoss(reduction=reduction)(x, targets, in_len, tgt_len)
    ref.sum().backward()
    xh = x.detach().to("hpu").requires_grad_()
    out = CTCLoss.apply(xh, targets.to("hpu"), in_len.to("hpu"), tgt_len.to("hpu"), 0, reduction)
    out.sum().backward()
    torch.testing.assert_close(out.cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xh.grad.cpu(), x.grad, atol=1e-5, rtol=1e-5)


def test_ctc_loss_refuses_an_unknown_reduction():
    with pytest.raises(ValueError, match="reduction must be one of"):
        CTCLoss.apply(torch.zeros(2, 1, 3), torch.ones(1, 1, dtype=torch.long), torch.tensor([2]), torch.tensor([1]),
                      0, "max")
