"""Eager mode (PT_HPU_LAZY_MODE=0) and PT_HPU_MAX_COMPOUND_OP_SIZE (seed 004, claims T1 and T3)."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import config, events as ev, lazy

from helpers import counts


def _chain(x, w):
    y = x * w
    y = y + 1
    y = y.relu()
    return y.sum(0)


@pytest.fixture
def eager():
    config.set(PT_HPU_LAZY_MODE="0")
    yield
    config.reload()


def test_eager_runs_each_op_as_its_own_launch(eager, collect):     # claim T1
    x, w = torch.randn(4, 3), torch.randn(4, 3)
    hx, hw = x.to("hpu"), w.to("hpu")
    collect.events.clear()
    out = _chain(hx, hw)
    assert len(lazy.S.pg) == 0                       # nothing waits for a mark_step
    launches = collect.of(ev.Launch)
    built = collect.of(ev.GraphBuilt)
    assert len(launches) == 4 and [g.node_count for g in built] == [1, 1, 1, 1]
    assert all(g.trigger.startswith("eager op aten::") for g in built)
    assert torch.equal(out.cpu(), _chain(x, w))


def test_eager_compiles_once_per_op_signature_then_hits(eager, collect):
    x, w = torch.randn(4, 3).to("hpu"), torch.randn(4, 3).to("hpu")
    _chain(x, w)
    assert counts("graph_compilation")["TotalNumber"] == 4
    for _ in range(3):
        _chain(x, w)
    assert counts("graph_compilation")["TotalNumber"] == 4      # same signatures: cache hits
    assert counts("recipe_cache")["TotalHit"] == 12
    assert counts("graph_launch")["TotalNumber"] == 16
    _chain(torch.randn(2, 3).to("hpu"), torch.randn(2, 3).to("hpu"))  # new shapes: new recipes
    assert counts("graph_compilation")["TotalNumber"] == 8


def test_eager_host_draws_and_copies_are_not_launches(eager, collect):
    torch.manual_seed(3)
    h = torch.randn(5, device="hpu")
    torch.manual_seed(3)
    assert torch.equal(h.cpu(), torch.randn(5))
    assert collect.of(ev.Launch) == []


def test_mark_step_in_eager_mode_warns_and_does_nothing(eager, collect):
    htcore._warned.discard("mark_step")
    x = torch.ones(3).to("hpu") * 2
    with pytest.warns(UserWarning, match="Calling mark_step function does not have any effect. "
                                         "It's lazy mode only functionality"):
        htcore.mark_step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # once only
        htcore.mark_step()
    assert collect.of(ev.MarkStep) == []
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]


def test_switching_to_eager_runs_what_lazy_mode_accumulated(collect):
    x = torch.ones(3).to("hpu") + 1
    assert len(lazy.S.pg) == 1 and collect.of(ev.Launch) == []
    config.set(PT_HPU_LAZY_MODE="0")
    assert len(lazy.S.pg) == 0 and len(collect.of(ev.Launch)) == 1
    y = x * 3
    assert len(collect.of(ev.Launch)) == 2
    config.set(PT_HPU_LAZY_MODE="1")
    z = y - 1
    assert len(lazy.S.pg) == 1                         # lazy again: z waits
    assert z.cpu().tolist() == [5.0, 5.0, 5.0]


def test_eager_training_step_matches_cpu(eager):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model.load_state_dict(ref.state_dict())
    model.to("hpu")
    opt, ropt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
        loss = F.cross_entropy(model(x.to("hpu")), y.to("hpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        rloss = F.cross_entropy(ref(x), y)
        ropt.zero_grad()
        rloss.backward()
        ropt.step()
        assert torch.equal(loss.cpu(), rloss.detach())
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach())


def test_eager_error_is_clear_and_the_runtime_goes_on(eager):
    a, b = torch.ones(2, 3).to("hpu"), torch.ones(4, 5).to("hpu")
    with pytest.raises(RuntimeError, match="broadcast"):
        a + b
    assert len(lazy.S.pg) == 0
    assert (a * 2).cpu().tolist() == [[2.0] * 3] * 2


@pytest.mark.parametrize("cap", [1, 3])
def test_max_compound_op_size_caps_lazy_graphs(cap, collect):          # claim T3 (cap 1)
    config.set(PT_HPU_MAX_COMPOUND_OP_SIZE=str(cap))
    x = torch.randn(8).to("hpu")
    y = x
    for _ in range(6):
        y = y * 1.5 + 0.25                            # 12 ops
    built = collect.of(ev.GraphBuilt)
    assert len(built) == 12 // cap and all(g.node_count == cap for g in built)
    ref = torch.clone(x.cpu())
    for _ in range(6):
        ref = ref * 1.5 + 0.25
    assert torch.equal(y.cpu(), ref)


def test_max_compound_op_size_one_equals_eager_op_by_op(collect):
    config.set(PT_HPU_MAX_COMPOUND_OP_SIZE="1")
    x, w = torch.randn(4, 3).to("hpu"), torch.randn(4, 3).to("hpu")
    collect.events.clear()
    _chain(x, w)
    assert len(collect.of(ev.GraphBuilt)) == 4 == len(collect.of(ev.Launch))    # graphs == ops
    assert hpu_lab.lazy.S.max_ops == 1
