"""_efficientzerotensor on hpu (issue 10): the zero gradient of sgn (and any backward that returns
torch's zero tensor) is zeros, as on CPU; it used to raise "Could not run
'aten::_efficientzerotensor' with arguments from the 'hpu' backend"."""
import pytest
import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config


@pytest.fixture(params=["1", "0"], ids=["lazy", "eager"])
def mode(request):
    config.set(PT_HPU_LAZY_MODE=request.param)
    yield
    config.reload()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sgn_gradient_is_cpus(dtype, mode):
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).to(dtype)
    for f in (lambda t: torch.sgn(t).sum(), lambda t: (torch.sgn(t) * t).sum()):
        a, h = x.clone().requires_grad_(), x.to("hpu").requires_grad_()
        ga = torch.autograd.grad(f(a), a)[0]
        gh = torch.autograd.grad(f(h), h)[0]
        htcore.mark_step()
        assert (gh.shape, gh.dtype, gh.stride()) == (ga.shape, ga.dtype, ga.stride())
        assert torch.equal(gh.cpu(), ga)


def test_efficientzerotensor_factory(mode):
    for dtype in (None, torch.bfloat16, torch.int64):
        want = torch._efficientzerotensor((2, 3), dtype=dtype)
        got = torch._efficientzerotensor((2, 3), dtype=dtype, device="hpu")
        assert (got.device.type, got.dtype, got.shape, got.stride()) == ("hpu", want.dtype, want.shape, want.stride())
        assert torch.equal((got + 1).cpu(), want + 1)
