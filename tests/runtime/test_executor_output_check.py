"""The executor checks each launched output against what the recipe's graph predicted: a shape or
dtype other than hpu_lab's shape inference said is refused with the op's name, not read as the
predicted one (a silent wrong answer); strides other than predicted are laid out as predicted.
Ops here lie on purpose: their Meta kernel says one thing, their CPU kernel returns another."""
import pytest
import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config
from hpu_lab.runtime import executor

LIB = torch.library.Library("lce_check", "DEF")
LIB.define("short(Tensor x) -> Tensor")          # Meta: 2 elements; CPU: 4
LIB.impl("short", lambda x: x[:4] * 2, "CPU")
LIB.impl("short", lambda x: x.new_empty(2), "Meta")
LIB.define("wide(Tensor x) -> Tensor")           # Meta: the input's dtype; CPU: float64
LIB.impl("wide", lambda x: x.double() * 2, "CPU")
LIB.impl("wide", lambda x: torch.empty_like(x), "Meta")
LIB.define("transposed(Tensor x) -> Tensor")     # Meta: column-major; CPU: row-major
LIB.impl("transposed", lambda x: x * 2, "CPU")
LIB.impl("transposed", lambda x: torch.empty_strided(x.shape, (1, x.shape[0]), dtype=x.dtype, device=x.device),
         "Meta")
LIB.define("pair(Tensor x) -> (Tensor, Tensor)")   # second output: Meta [3], CPU [5]
LIB.impl("pair", lambda x: (x * 2, x.new_zeros(5)), "CPU")
LIB.impl("pair", lambda x: (torch.empty_like(x), x.new_empty(3)), "Meta")


@pytest.fixture(params=["1", "0"], ids=["lazy", "eager"])
def mode(request):
    config.set(PT_HPU_LAZY_MODE=request.param)
    yield request.param
    config.reload()


@pytest.mark.parametrize("op, what", [("short", r"float32 \(4,\).* predicted float32 \(2,\)"),
                                      ("wide", r"float64 \(6,\).* predicted float32 \(6,\)")])
def test_a_kernel_that_disagrees_with_its_meta_is_refused_naming_the_op(op, what, mode):
    x = torch.arange(6.0)
    h = getattr(torch.ops.lce_check, op)(x.to("hpu"))
    htcore.mark_step()
    with pytest.raises(RuntimeError, match="lce_check::" + op + r" \(op created at test_executor_output_check.py:\d+\)"
                       ) as info:
        h.cpu()
    assert isinstance(info.value, executor.OutputMismatch)
    assert __import__("re").search(what, str(info.value)), str(info.value)
    # the runtime stays usable
    assert (x.to("hpu") + 1).cpu().tolist() == (x + 1).tolist()
    torch.hpu.synchronize()


def test_other_strides_are_laid_out_as_predicted(mode):
    """Not a wrong value (every reader lays a buffer out as its storage says): the buffer is made
    to match its meta once, at the launch, and the values are the kernel's."""
    x = torch.arange(6.0).reshape(2, 3)
    before = executor.restrided[0]
    h = torch.ops.lce_check.transposed(x.to("hpu"))
    assert h.stride() == (1, 2)                              # the Meta kernel's layout
    got = h.cpu()
    assert executor.restrided[0] == before + 1
    assert torch.equal(got, x * 2)
    assert torch.equal((h + 1).cpu(), x * 2 + 1)             # and as a graph input
    assert torch.equal(h.t().contiguous().cpu(), (x * 2).t())


def test_a_tuple_output_names_its_op_and_index(mode):
    x = torch.arange(4.0)
    a, b = torch.ops.lce_check.pair(x.to("hpu"))
    htcore.mark_step()
    with pytest.raises(executor.OutputMismatch, match=r"lce_check::pair .*float32 \(5,\).*predicted float32 \(3,\)"):
        b.cpu()
    with pytest.raises(executor.OutputMismatch):      # the same launch: its other output is spoiled too
        a.cpu()
    assert torch.equal((x.to("hpu") * 2).cpu(), x * 2)


def test_without_the_check_the_lie_is_a_silent_wrong_answer(monkeypatch):
    """What the check prevents (so the tests above can fail): the host reads the buffer as predicted."""
    config.set(PT_HPU_LAZY_MODE="1")
    monkeypatch.setattr(executor, "check_outputs", lambda r, outputs, srcs=None: outputs)
    try:
        x = torch.arange(6.0)
        got = torch.ops.lce_check.short(x.to("hpu")).cpu()
        assert got.tolist() == [0.0, 2.0]                 # CPU's op returns 4 elements: [0, 2, 4, 6]
        assert torch.ops.lce_check.short(x).tolist() == [0.0, 2.0, 4.0, 6.0]
    finally:
        config.reload()


def test_a_wrong_prediction_injected_into_a_recipe_is_refused(monkeypatch):
    """An ordinary op (add) with the graph's predicted output meta altered after compilation."""
    config.set(PT_HPU_LAZY_MODE="1")
    from hpu_lab.compiler import find
    real, altered = find.get_recipe, []

    def lying(*a, **k):
        r = real(*a, **k)
        out = next(n for n in r.gm.graph.nodes if n.op == "output")
        node = out.args[0][0]
        altered.append((r, node, node.meta["hpu_meta"]))
        size, stride, dtype = node.meta["hpu_meta"]
        node.meta["hpu_meta"] = (size, stride, torch.float16)
        r.__dict__.pop("_predicted", None)
        return r

    monkeypatch.setattr(find, "get_recipe", lying)
    try:
        y = torch.ones(3).to("hpu") * 7.5 - 0.25
        htcore.mark_step()
        with pytest.raises(executor.OutputMismatch, match=r"float32 \(3,\).*predicted float16 \(3,\)"):
            torch.hpu.synchronize()
        del y
    finally:
        monkeypatch.undo()
        for r, node, meta in altered:          # the recipe stays cached: put its truth back
            node.meta["hpu_meta"] = meta
            r.__dict__.pop("_predicted", None)
        config.reload()
