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


ZERO_CASES = {     # what torch's ZeroTensor layer makes of a zero tensor (CPU's answers, in the comments)
    "x.grad after sgn().backward(): add_": lambda d: _sgn_grad(d).add_(1),        # refused: immutable
    "x.grad: zero_() (zero_grad(set_to_none=False))": lambda d: _sgn_grad(d).zero_(),
    "a row of it: fill_": lambda d: _zero(d)[0].fill_(2),                            # refused
    "copy_ into it": lambda d: _zero(d).copy_(torch.ones(2, 3, device=d)),          # refused
    "copy_ from it": lambda d: torch.ones(2, 3, device=d).copy_(_zero(d)),
    "mul: a zero tensor": lambda d: _zero(d) * torch.ones(3, device=d),
    "mul by a number: a zero tensor": lambda d: _zero(d) * 2,
    "add: materialized": lambda d: _zero(d) + 1,
    "views: zero tensors": lambda d: _zero(d).t().detach()[1:],
    "to its own dtype: itself": lambda d: (lambda z: z.to(torch.float32) is z)(_zero(d)),
    "to another dtype: materialized": lambda d: _zero(d).double(),
    "clone: materialized, mutable": lambda d: _zero(d).clone().add_(1),
    "sum": lambda d: _zero(d).sum(),
}


def _zero(dev):
    return torch._efficientzerotensor((2, 3), device=dev)


def _sgn_grad(dev):
    x = torch.randn(3).to(dev).requires_grad_()
    torch.sgn(x).sum().backward()
    return x.grad


def _outcome(f, dev):
    try:
        r = f(dev)
    except RuntimeError as e:
        return str(e)
    if isinstance(r, torch.Tensor):
        return r._is_zerotensor(), r.dtype, tuple(r.shape), r.cpu()
    return r


@pytest.mark.parametrize("name", list(ZERO_CASES))
def test_zero_tensor_behaves_as_cpus(name, mode):
    # hpu's zero tensor carries torch's ZeroTensor key: the same layer answers as on CPU (it used
    # to be plain zeros: _is_zerotensor() False, and a write CPU refuses went through)
    exp, got = _outcome(ZERO_CASES[name], "cpu"), _outcome(ZERO_CASES[name], "hpu")
    if isinstance(exp, tuple):
        assert isinstance(got, tuple), got
        assert got[:3] == exp[:3] and torch.equal(got[3], exp[3])
    else:
        assert got == exp


def test_meta_copy_of_an_hpu_tensor_is_a_meta_tensor():
    # Tensor.to("meta") (torch's ZeroTensor kernels take shapes this way) used to return an hpu tensor
    for dev in ("cpu", "hpu"):
        y = torch.ones(2, 3, device=dev).t().to("meta", torch.float16)
        assert (type(y), y.device.type, y.stride(), y.dtype) == (torch.Tensor, "meta", (1, 3), torch.float16)


def test_training_through_a_zero_gradient_is_cpus(mode):
    out = []
    for dev in ("cpu", "hpu"):
        w = torch.nn.Parameter(torch.linspace(-1, 1, 4).to(dev))
        v = torch.nn.Parameter(torch.ones(4).to(dev))
        opt = torch.optim.Adam([w, v], lr=0.1, foreach=True)
        for _ in range(2):
            (torch.sgn(w) * v).sum().backward()
            assert w.grad._is_zerotensor()
            opt.step()
            opt.zero_grad()
            if dev == "hpu":
                htcore.mark_step()
        out.append((w.detach().cpu(), v.detach().cpu()))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
