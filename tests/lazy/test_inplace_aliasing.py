"""In-place ops that read, through another view, memory they write (hpu_lab/lazy/aliasing.py): hpu does
what CPU does. CPU runs the op on the shared memory (elements written first are read afterwards)
where its overlap check cannot decide, and refuses where it can; the lazy path used to compute
every such op functionally (reads before writes): a silent wrong answer (fuzz_programs seed 482),
or a result where CPU refuses."""
import pytest
import torch

import fuzz_programs as fp
import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config

CASES = {
    "sub_ a column": lambda t: t.sub_(t.split(1, -1)[0], alpha=0.5),
    "addcmul_ a column": lambda t: t.addcmul_(t[:, :1], t[:, :1], value=0.5),
    "copy_ shifted columns": lambda t: t[:, 1:].copy_(t[:, :2]),
    "mul_ a strided view by a column": lambda t: t[:, ::2].mul_(t[:, :1]),
    "div_ a column, after lazy ops": lambda t: t.mul_(2).add_(1).div_(t[:, :1]),
    "columns apart (no shared element)": lambda t: t[:, 0].sub_(t[:, 2]),
    "add_ the transpose (CPU refuses)": lambda t: t[:3].add_(t[:3].t()),
    "add_ a shifted dense view (CPU refuses)": lambda t: t.view(-1)[1:].add_(t.view(-1)[:-1]),
    "copy_ the transpose (CPU refuses)": lambda t: t[:3].copy_(t[:3].t()),
    "copy_ onto itself, expanded": lambda t: (lambda e: e.copy_(e))(t[0].expand(2, 3)),
}


def _run(f, dev):
    t = torch.arange(1., 13.).reshape(4, 3).to(dev)
    try:
        f(t)
        if dev == "hpu":
            htcore.mark_step()
        return t.cpu()
    except RuntimeError as e:
        return str(e)


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("name", list(CASES))
def test_inplace_on_aliased_memory_is_cpus(name, lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        exp, got = _run(CASES[name], "cpu"), _run(CASES[name], "hpu")
        if isinstance(exp, str):
            assert got == exp                     # CPU's refusal, word for word, at the op
            assert torch.equal((torch.ones(2).to("hpu") + 1).cpu(), torch.full((2,), 2.))   # still usable
        else:
            assert isinstance(got, torch.Tensor), got
            assert torch.equal(got, exp)
    finally:
        config.reload()


def test_gradient_through_an_aliased_inplace_op_is_cpus():
    grads = []
    for dev in ("cpu", "hpu"):
        w = torch.arange(1., 13.).reshape(4, 3).to(dev).requires_grad_()
        t = w * 1.5
        t.sub_(t[:, :1], alpha=0.5)
        (t * torch.arange(12.).reshape(4, 3).to(dev)).sum().backward()
        grads.append((t.detach().cpu(), w.grad.cpu()))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


SHRUNK = {   # the random programs that differed, as the shrinker printed them (dev = "hpu" vs "cpu")
    "seed 482 (a silent wrong answer)": [
        "g = torch.Generator().manual_seed(482)", "t0 = torch.randn((4, 3), generator=g).to(dev)",
        "t1 = t0.split(1, -1)[0]", "t0.sub_(t1, alpha=0.5)"],
    "seed 543 (CPU leaves a copy onto itself alone)": [
        "g = torch.Generator().manual_seed(543)", "w0 = torch.randn((2, 3), generator=g).to(dev).requires_grad_()",
        "t1 = (w0 > 0.2).float()", "t2 = t1.expand(2, *t1.shape)", "t3 = t2.float()", "t2.copy_(t3)"],
}


@pytest.mark.parametrize("name", list(SHRUNK))
def test_fuzz_programs_that_differed(name):
    assert fp.check(SHRUNK[name]) is None


@pytest.mark.parametrize("lazy", ["1", "0"])
def test_cpu_refusals_other_than_overlap_come_at_the_op(lazy):
    """An int tensor with a float alpha: CPU refuses at the op; so does hpu, the runtime stays usable."""
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        msgs = []
        for dev in ("cpu", "hpu"):
            t = torch.arange(12).reshape(4, 3).to(dev)
            t.add_(t[:, :1], alpha=2)                 # the same call with an int alpha goes through
            with pytest.raises(RuntimeError) as e:
                t.add_(t[:, :1], alpha=0.5)
            msgs.append(str(e.value))
            assert t.cpu()[1].tolist() == [9, 22, 23]  # 3 + 2*3 first, then 4 + 2*9: CPU's loop order
        assert msgs[0] == msgs[1]
    finally:
        config.reload()


def test_aliased_inplace_op_in_an_hpu_graph_replays_like_cpu():
    from hpu_lab.graphs import HPUGraph

    def ref(x):
        y = x * 2
        y.sub_(y[:, :1], alpha=0.5)
        return y
    x = torch.arange(1., 13.).reshape(4, 3).to("hpu")
    g = HPUGraph()
    g.capture_begin()
    y = ref(x)
    g.capture_end()
    assert torch.equal(y.cpu(), ref(x.cpu()))
    x.copy_(torch.arange(12.).reshape(4, 3).to("hpu") * 3)
    g.replay()
    assert torch.equal(y.cpu(), ref(x.cpu()))
