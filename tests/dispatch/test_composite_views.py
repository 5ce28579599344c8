"""View-like composite ops reaching the device whole (called below autograd: inside an op handler,
``_AutoDispatchBelowAutograd``) are torch's composites, not views: ``contiguous``, ``reshape`` and
``flatten`` of a transposed tensor are copies. They were taken for views of the same storage with the
copy's strides: a silent wrong answer (found writing rnn_ops.pack_padded_sequence)."""
import pytest
import torch

import hpu_lab  # noqa: F401

CALLS = {
    "contiguous": lambda x: x.t().contiguous(),
    "contiguous-channels-last": lambda x: x.reshape(1, 2, 3, 1).contiguous(memory_format=torch.channels_last),
    "reshape-copy": lambda x: x.t().reshape(-1),
    "reshape-view": lambda x: x.reshape(3, 2),
    "flatten": lambda x: x.t().flatten(),
    "narrow": lambda x: x.narrow(1, 1, 2),
    "view_as": lambda x: x.view_as(torch.empty(3, 2, device=x.device)),
    "movedim": lambda x: x.movedim(0, 1).contiguous(),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_below_autograd_equals_cpu(name):
    x = torch.arange(6.).reshape(2, 3)
    want = CALLS[name](x)
    with torch._C._AutoDispatchBelowAutograd():
        got = CALLS[name](x.to("hpu"))
    assert got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(got.cpu(), want)


def test_a_view_stays_a_view():
    x = torch.arange(6.).reshape(2, 3).to("hpu")
    with torch._C._AutoDispatchBelowAutograd():
        v = x.reshape(3, 2)
        v.add_(1)
    assert torch.equal(x.cpu(), torch.arange(6.).reshape(2, 3) + 1)
