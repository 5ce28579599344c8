"""FusedSDPA takes the bridge's full positional signature (..., return_dropout_mask, return_attn_probs)."""
import pytest
import torch
import torch.nn.functional as F

from hpu_lab.hpex.kernels import FusedSDPA


def test_thirteen_positional_arguments_and_attention_probabilities():
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    out = FusedSDPA.apply(q.to("hpu"), k.to("hpu"), v.to("hpu"), None, 0.0, True, None, "None", None, None,
                          "left", False, False)
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out, probs = FusedSDPA.apply(q.to("hpu"), k.to("hpu"), v.to("hpu"), None, 0.0, True, None, "None", True, None,
                                 "left", False, True)
    expect = torch.softmax((q @ k.transpose(-2, -1)) / 8 ** 0.5 + torch.full((5, 5), float("-inf")).triu(1), -1)
    torch.testing.assert_close(probs.cpu(), expect)
    torch.testing.assert_close(out.cpu(), expect @ v)


def test_attention_probabilities_are_for_inference_only_and_the_dropout_mask_is_refused():
    q = torch.randn(1, 1, 4, 8).to("hpu").requires_grad_()
    with pytest.raises(RuntimeError, match="inference"):
        FusedSDPA.apply(q, q, q, None, 0.0, False, None, "None", None, None, "left", False, True)
    with pytest.raises(NotImplementedError, match="return_dropout_mask"):
        FusedSDPA.apply(q.detach(), q.detach(), q.detach(), None, 0.1, False, None, "None", False, None, "left", True)
