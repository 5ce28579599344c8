"""The same program gives the same graph, so its recipe is found again (a real Gaudi's recipe cache
hits): whatever ran before it, whatever died before the flush, and however often it has run. And a
graph that differs still compiles. lightning-habana's test_dynamic_shapes_recipe_caching trains the
same model twice in one process and requires the second fit to compile nothing."""
import gc
import weakref

import torch
import torch.nn as nn

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import events as ev


def _compiles(collect):
    return [c.reason for c in collect.of(ev.Compile)]


def _masked_step(x):
    y = x * 2
    return weakref.ref(x), weakref.ref(y), y[y > 100]         # boolean mask: the meta cannot tell


def test_a_data_dependent_op_keeps_none_of_the_callers_tensors_alive():
    # the op's meta failure was cached as the exception, whose traceback held the caller's frames
    for _ in range(2):
        rx, ry, _ = _masked_step(torch.randn(4, 1).to("hpu"))
        htcore.mark_step()
        gc.collect()
        assert rx() is None and ry() is None


def _fit(steps=3):
    """A training run with a data-dependent op, ending, as Lightning's validation does, with a
    step whose values nothing reads (left pending when the run returns)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2).to("hpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        out = model(torch.randn(8, 4).to("hpu"))
        loss = out[out < 0].pow(2).sum() + out.sum()
        loss.backward()
        htcore.mark_step()
        opt.step()
        opt.zero_grad()
        htcore.mark_step()
    with torch.no_grad():
        val = model(torch.randn(8, 4).to("hpu"))
        val = val[val < 0].sum()
    return [p.detach().cpu() for p in model.parameters()]


def test_a_second_identical_training_run_compiles_nothing(collect):
    first = _fit()
    n = len(_compiles(collect))
    second = _fit()
    assert _compiles(collect)[n:] == []
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert n > 0


def test_a_sync_after_other_pending_ops_finds_the_same_graph(collect):
    # the part a sync needs kept the pending graph's numbering: after another op it was another key
    u = torch.randn(5).to("hpu")
    (u + 1).sum().item()
    htcore.mark_step()
    n = len(_compiles(collect))
    kept = u * 3                                    # alive and pending: not part of what .item() needs
    (u + 1).sum().item()
    assert _compiles(collect)[n:] == []
    htcore.mark_step()                              # the rest: kept's graph, new
    assert len(_compiles(collect)) == n + 1
    assert torch.equal(kept.cpu(), u.cpu() * 3)


def test_dead_ops_are_not_part_of_the_graph(collect):
    u = torch.randn(5).to("hpu")
    y = u + 1
    htcore.mark_step()
    n = len(_compiles(collect))
    u * 3                                           # nothing holds it
    y = u + 1
    htcore.mark_step()
    assert _compiles(collect)[n:] == []
    assert torch.equal(y.cpu(), u.cpu() + 1)


def test_a_different_graph_still_compiles(collect):
    u = torch.randn(5).to("hpu")
    y = u + 1
    htcore.mark_step()
    n = len(_compiles(collect))
    z = u * 3                                       # held: an output of this graph
    y = u + 1
    htcore.mark_step()
    assert len(_compiles(collect)) == n + 1
    assert torch.equal(z.cpu(), u.cpu() * 3) and torch.equal(y.cpu(), u.cpu() + 1)
    kept = u + 1                                    # the same ops, other outputs: (u + 1) - 2 kept too
    other = kept - 2
    htcore.mark_step()
    assert len(_compiles(collect)) == n + 2
    assert torch.equal(other.cpu(), u.cpu() + 1 - 2)
