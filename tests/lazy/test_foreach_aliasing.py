"""Foreach and optimizer ops whose tensors share memory (hpu_lab/aliasing.writes_over_reads): hpu
does what CPU does. CPU applies a foreach op tensor after tensor (``_foreach_add_([a, a], [b, b])``
adds b twice) or refuses the overlap; the lazy path computed every read before every write (a + b),
a silent wrong answer, in lazy and eager mode alike. The same holds where the op falls back to the
CPU (hpu_lab/dispatch/host_ops.py): each argument was read into a host copy of its own, so ``[a, a]`` were
two tensors there too (and CPU's overlap refusal never came)."""
import pytest
import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config
from hpu_lab.dispatch import fallback

CASES = {
    "add_ the same tensor twice": lambda a, b: torch._foreach_add_([a, a], [b, b]),
    "mul_ a tensor and its row": lambda a, b: torch._foreach_mul_([a, a[0]], 2.0),
    "add_ a tensor and its row, lists": lambda a, b: torch._foreach_add_([a, a[0]], [b, b[0]], alpha=0.5),
    "mul_ two rows by each other": lambda a, b: torch._foreach_mul_([a[0], a[1]], [a[1], a[0]]),
    "lerp_ the same tensor twice": lambda a, b: torch._foreach_lerp_([a, a], [b, b], 0.3),
    "copy_ two rows crosswise": lambda a, b: torch._foreach_copy_([a[0], a[1]], [a[1], a[0]]),
    "addcdiv_ overlapping lists": lambda a, b: torch._foreach_addcdiv_(
        [a[0], a[1:]], [b[0], b[1:]], [a[1], b[1:].abs() + 1], 0.5),
    "mul_ by itself (elementwise: no overlap)": lambda a, b: torch._foreach_mul_([a, b], [a, b]),
    "rows of one buffer (disjoint)": lambda a, b: torch._foreach_add_([a[0], a[1], a[2]], [b[0], b[1], b[2]]),
    "add_ a row and the tensor (CPU refuses)": lambda a, b: torch._foreach_add_([a[0], a[:2]], [a[1], a[0]]),
    "addcdiv_ shifted views (CPU refuses)": lambda a, b: torch._foreach_addcdiv_(
        [a, a[1:]], [b, a[:2]], [b.abs() + 1, b[1:].abs() + 1], 0.5),
}


# the foreach and fused ops of the cases and optimizers, made to fall back to the CPU
ON_CPU = ",".join("aten::_foreach_" + n for n in ("add_", "mul_", "lerp_", "copy_", "addcdiv_", "addcmul_")) \
    + ",aten::_fused_adamw_,aten::_amp_update_scale_"


@pytest.fixture(params=[("1", False), ("0", False), ("1", True), ("0", True)],
                ids=["lazy", "eager", "lazy-on-cpu", "eager-on-cpu"])
def mode(request):
    lazy, on_cpu = request.param
    config.set(PT_HPU_LAZY_MODE=lazy, PT_HPU_PLACE_ON_CPU=ON_CPU if on_cpu else "")
    before = sum(fallback.counts.values())
    yield
    assert (sum(fallback.counts.values()) > before) == on_cpu     # the path under test was taken
    config.reload()


def _run(f, dev):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 4, generator=g).to(dev), torch.randn(3, 4, generator=g).to(dev)
    try:
        f(a, b)
        if dev == "hpu" and config.get("PT_HPU_LAZY_MODE"):
            htcore.mark_step()
        return a.cpu(), b.cpu(), a._version
    except RuntimeError as e:
        return str(e)


@pytest.mark.parametrize("name", list(CASES))
def test_foreach_over_shared_memory_is_cpus(name, mode):
    exp, got = _run(CASES[name], "cpu"), _run(CASES[name], "hpu")
    if isinstance(exp, str):
        assert got == exp                     # CPU's refusal, word for word, at the op
        assert torch.equal((torch.ones(2).to("hpu") + 1).cpu(), torch.full((2,), 2.))   # still usable
    else:
        assert not isinstance(got, str), got
        assert torch.equal(got[0], exp[0]) and torch.equal(got[1], exp[1]) and got[2] == exp[2]


OPTIMIZERS = {
    "Adam foreach": (torch.optim.Adam, dict(foreach=True)),
    "AdamW fused": (torch.optim.AdamW, dict(fused=True)),
    "SGD foreach, momentum": (torch.optim.SGD, dict(foreach=True, momentum=0.9)),
    "Adadelta foreach": (torch.optim.Adadelta, dict(foreach=True)),
}


def _train(dev, cls, kw, overlap):
    g = torch.Generator().manual_seed(0)
    flat = torch.randn(10, generator=g).to(dev)
    p1 = torch.nn.Parameter(flat[0:6])
    p2 = torch.nn.Parameter(flat[4:10] if overlap else flat[6:10])
    opt = cls([p1, p2], lr=0.1, **kw)
    x = torch.randn(6, generator=g).to(dev)
    for _ in range(3):
        ((p1 * x).sum() + (p2 * p2).sum()).backward()
        opt.step()
        opt.zero_grad()
        if dev == "hpu" and config.get("PT_HPU_LAZY_MODE"):
            htcore.mark_step()
    return flat.cpu(), p1._version, p2._version


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapping", "disjoint"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_over_params_sharing_a_buffer_is_cpus(name, overlap, mode):
    cls, kw = OPTIMIZERS[name]
    exp, got = _train("cpu", cls, kw, overlap), _train("hpu", cls, kw, overlap)
    assert torch.equal(got[0], exp[0]) and got[1:] == exp[1:]


def test_amp_update_scale_returns_the_scale_as_cpu(mode):
    # writes scale and growth_tracker, returns scale alone ("Unable to cast (tensor, tensor) to Tensor")
    def run(dev):
        scale, tracker = torch.ones(1, device=dev), torch.zeros(1, dtype=torch.int32, device=dev)
        r = torch._amp_update_scale_(scale, tracker, torch.zeros(1, device=dev), 2.0, 0.5, 1)
        return r is scale, scale.cpu(), tracker.cpu()
    exp, got = run("cpu"), run("hpu")
    assert got[0] and exp[0] and torch.equal(got[1], exp[1]) and torch.equal(got[2], exp[2])
