"""uniform_ on an integer hpu tensor (Intel's test_hpu_uniform): Gaudi draws it, CPU's kernel refuses
("check_uniform_bounds" not implemented for 'Int'). hpu_lab draws float32 from torch's generator and
rounds down: integers uniform over [low, high), the same draw as the float32 one."""
import pytest
import torch

import hpu_lab  # noqa: F401
from hpu_lab import config


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8])
def test_uniform_on_integers(dtype, lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        torch.manual_seed(3)
        want = torch.empty(2000).uniform_(-50, 10).floor().to(dtype)
        torch.manual_seed(3)
        x = torch.empty(2000, dtype=dtype, device="hpu")
        x.uniform_(-50, 10)
        got = x.cpu()
        assert got.dtype == dtype and torch.equal(got, want)
        assert got.min().item() == -50 and got.max().item() == 9
        x.uniform_(-50, 10)
        assert not torch.equal(x.cpu(), got)           # a new draw each time
    finally:
        config.reload()


def test_uniform_refusals_stay_cpus():
    for dev in ("cpu", "hpu"):
        with pytest.raises(NotImplementedError, match="'Bool'"):
            torch.empty(3, dtype=torch.bool, device=dev).uniform_(0, 1)
        with pytest.raises(RuntimeError, match=r"from=5 > to=1"):
            torch.empty(3, device=dev).uniform_(5, 1)
