"""``out=`` tensors and ``resize_`` on hpu behave as stock PyTorch (hpu_lab/dispatch/resize.py)."""
import warnings

import pytest
import torch

import hpu_lab.core as htcore


def _run(fn, out_shape, dtype=torch.float32):
    """fn(out=...) on CPU and on hpu from an out tensor of out_shape: results, shapes, warnings."""
    got = []
    for dev in ("cpu", "hpu"):
        out = torch.zeros(out_shape, dtype=dtype).to(dev)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ret = fn(dev, out)
        htcore.mark_step()
        # the CPU message ends with " (Triggered internally at ...Resize.cpp:NN.)": compare the text before
        got.append((out.cpu(), [str(x.message).split(" (Triggered")[0] for x in w if "resized" in str(x.message)],
                    ret is out))
    return got


@pytest.mark.parametrize("out_shape", [(0,), (2, 2), (7,)])
def test_out_of_the_wrong_shape_is_resized_with_the_cpu_warning(out_shape):
    a = torch.randn(3, 4)
    (c, cw, cr), (h, hw, hr) = _run(lambda dev, out: torch.clamp(a.to(dev), -0.5, 0.5, out=out), out_shape)
    assert torch.equal(c, h) and h.shape == (3, 4) and cr and hr
    assert hw == cw and (len(hw) == 1) == (out_shape != (0,))     # empty out: resized silently


def test_reductions_and_cat_into_a_resized_out():
    a = torch.randn(4, 5)
    for fn in (lambda dev, out: torch.amax(a.to(dev), 1, out=out),
               lambda dev, out: torch.cat([a.to(dev), a.to(dev)], 0, out=out),
               lambda dev, out: torch.addcmul(a.to(dev), a.to(dev), a.to(dev), value=0.5, out=out)):
        (c, cw, _), (h, hw, _) = _run(fn, (1,))
        assert torch.equal(c, h) and cw == hw


def test_bool_out_of_all_any():
    a = torch.randn(3, 4) > 0
    (c, _, _), (h, _, _) = _run(lambda dev, out: torch.any(a.to(dev), 1, out=out), (0,), torch.bool)
    assert torch.equal(c, h)


def test_resize_keeps_leading_elements_and_stays_usable():
    t = torch.arange(6.0).to("hpu")
    t.resize_(2, 2)
    assert torch.equal(t.cpu(), torch.arange(4.0).view(2, 2))
    t.resize_(3, 3)
    assert t.shape == (3, 3) and torch.equal(t.cpu().view(-1)[:4], torch.arange(4.0))
    t.fill_(1.0)
    assert (t + 1).sum().item() == 18.0                           # a normal tensor afterwards
    nc = torch.randn(3, 4).to("hpu").t()
    with pytest.raises(RuntimeError, match="non-contiguous"):
        nc.resize_(5)
    assert nc.shape == (4, 3)                                     # unchanged after the refusal
