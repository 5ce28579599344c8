"""torch.linalg.lstsq on hpu returns CPU's layout: for m > n the solution is CPU's column-major view
into a max(m, n)-row buffer (it came back contiguous from the host fallback: values equal, but views
and aliasing differed). Values, strides, what views do, and gradients, lazy and eager."""
import pytest
import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config
from hpu_lab.kernels import lstsq

CASES = [(4, 3, 2, False, ()), (3, 4, 2, False, ()), (4, 3, 0, True, ()), (5, 3, 2, False, (2,)),
         (3, 3, 2, False, (3,)), (5, 3, 1, True, (2,)), (6, 2, 3, False, (2, 3))]


@pytest.fixture(params=["1", "0"], ids=["lazy", "eager"])
def mode(request):
    config.set(PT_HPU_LAZY_MODE=request.param)
    yield
    config.reload()


def _ab(m, n, k, vector, batch):
    g = torch.Generator().manual_seed(m * 100 + n * 10 + k)
    a = torch.randn(*batch, m, n, generator=g, dtype=torch.float64)
    b = torch.randn(*batch, m, generator=g, dtype=torch.float64) if vector else \
        torch.randn(*batch, m, k, generator=g, dtype=torch.float64)
    return a, b


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("driver", [None, "gelsd", "gelsy", "gelss"])
def test_solution_layout_and_values_are_the_cpus(case, driver, mode):
    a, b = _ab(*case)
    cpu = torch.linalg.lstsq(a, b, driver=driver)
    hpu = torch.linalg.lstsq(a.to("hpu"), b.to("hpu"), driver=driver)
    htcore.mark_step()
    for c, h in zip(cpu, hpu):
        assert h.shape == c.shape and h.dtype == c.dtype
        if c.numel():
            assert h.stride() == c.stride()
            assert torch.allclose(h.cpu(), c, rtol=1e-10, atol=1e-10)
    sol, hsol = cpu[0], hpu[0]
    if sol.dim() >= 2:
        assert hsol.mT.is_contiguous() == sol.mT.is_contiguous()
    try:
        sol.view(-1)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            hsol.view(-1)
    else:
        assert torch.allclose(hsol.view(-1).cpu(), sol.view(-1), rtol=1e-10, atol=1e-10)


def test_gradients_are_the_cpus(mode):
    a, b = _ab(5, 3, 2, False, (2,))
    ca, cb = a.clone().requires_grad_(), b.clone().requires_grad_()
    ha, hb = a.to("hpu").requires_grad_(), b.to("hpu").requires_grad_()
    torch.linalg.lstsq(ca, cb).solution.pow(2).sum().backward()
    torch.linalg.lstsq(ha, hb).solution.pow(2).sum().backward()
    htcore.mark_step()
    assert torch.allclose(ha.grad.cpu(), ca.grad, rtol=1e-10, atol=1e-10)
    assert torch.allclose(hb.grad.cpu(), cb.grad, rtol=1e-10, atol=1e-10)


def test_without_the_relayout_the_solution_is_contiguous():
    """The tests above can fail: the plain host result has another layout than CPU's."""
    a, b = _ab(4, 3, 2, False, ())
    lstsq.uninstall()
    try:
        got = torch.linalg.lstsq(a.to("hpu"), b.to("hpu")).solution
    finally:
        lstsq.install()
    assert got.stride() != torch.linalg.lstsq(a, b).solution.stride()
