"""Random ops with out= on hpu (hpu_lab/random_out.py): the draw lands in the out tensor, and it is
the same draw as on CPU for the same seed (it once stayed in a host copy: out kept stale memory)."""
import pytest
import torch


def _both(fn):
    got = []
    for dev in ("cpu", "hpu"):
        torch.manual_seed(11)
        got.append(fn(dev))
    return got


@pytest.mark.parametrize("case", ["normal_tensor_float", "normal_float_tensor", "normal_tensor_tensor",
                                  "bernoulli", "randn", "uniform_like"])
def test_random_out_fills_the_out_tensor_with_the_cpu_draw(case):
    def run(dev):
        ones, zeros = torch.ones(6, 5, device=dev), torch.zeros(6, 5, device=dev)
        out = torch.empty(6, 5, device=dev)
        if case == "normal_tensor_float":
            r = torch.normal(zeros, 2.0, out=out)
        elif case == "normal_float_tensor":
            r = torch.normal(1.0, ones, out=out)
        elif case == "normal_tensor_tensor":
            r = torch.normal(zeros, ones, out=out)
        elif case == "bernoulli":
            r = torch.bernoulli(torch.full((6, 5), 0.5, device=dev), out=out)
        elif case == "randn":
            r = torch.randn(6, 5, out=out)
        else:
            r = torch.rand(6, 5, out=out)
        assert r is out
        return out.cpu()
    cpu, hpu = _both(run)
    assert torch.equal(cpu, hpu)


def test_random_out_with_zero_std_is_the_mean_and_a_resized_out():
    out = torch.full((4,), 7.0, device="hpu")
    torch.normal(torch.arange(4.0, device="hpu"), 0.0, out=out)
    assert torch.equal(out.cpu(), torch.arange(4.0))
    cpu, hpu = _both(lambda dev: torch.randn(2, 3, out=torch.empty(0, device=dev)).cpu())   # resized as on CPU
    assert hpu.shape == (2, 3) and torch.equal(cpu, hpu)
    with pytest.raises(RuntimeError, match=r"size of tensor a \(4\) must match the size of tensor b \(3\)"):
        torch.normal(torch.arange(4.0, device="hpu"), 0.0, out=torch.empty(3, device="hpu"))   # CPU's error too
