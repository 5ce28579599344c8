"""torch's default dtype is an input of a graph: the same ops with the same arguments give float32 or
float64 (a factory, an integer tensor's true division) as ``torch.set_default_dtype`` says. A
Gaudi's lazy graph holds the resolved dtypes; here the meta cache and the recipe cache are keyed by
the default too. Before, a recipe cached under float32 and found again under float64 ran, returned
float64 where it had predicted float32, and the next sync raised an OutputMismatch."""
import torch

import hpu_lab  # noqa: F401
from hpu_lab import core as htcore
from hpu_lab.compiler.recipe import GraphKey
from hpu_lab import disk_cache
from hpu_lab import events as ev


def _ops(device):
    return (torch.ones(3, device=device) * 0.1,
            torch.arange(3, device=device) / 3,
            torch.full((2,), 1.0 / 3, device=device))


def test_the_same_ops_after_a_new_default_dtype_give_cpus_dtypes_and_values():
    before = torch.get_default_dtype()
    try:
        for dt in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dt)
            got = _ops("hpu")
            htcore.mark_step()
            for h, c in zip(got, _ops("cpu")):
                h = h.cpu()
                assert h.dtype == c.dtype == dt and torch.equal(h, c)
    finally:
        torch.set_default_dtype(before)


def test_graph_keys_and_their_disk_text_differ_by_the_default_dtype():
    sigs, outs, hashes = (("aten::ones.default", (), ()),), ((0, 0),), (1,)
    a, b = GraphKey(sigs, outs, hashes, torch.float32), GraphKey(sigs, outs, hashes, torch.float64)
    assert a != b and a == GraphKey(sigs, outs, hashes, torch.float32)
    assert disk_cache.key_text(a) != disk_cache.key_text(b)


def test_the_recompile_says_the_default_dtype_changed():
    before = torch.get_default_dtype()
    try:
        with ev.Collector() as c:
            for dt in (torch.float32, torch.float64):
                torch.set_default_dtype(dt)
                y = torch.ones(5, device="hpu") * 0.25       # a graph no other test builds
                htcore.mark_step()
                y.cpu()
    finally:
        torch.set_default_dtype(before)
    reasons = [e.reason for e in c.of(ev.Compile)]
    assert reasons[-1] == "torch's default dtype changed float32 -> float64 (torch.set_default_dtype)"


def test_a_replay_under_another_default_dtype_fails_naming_it_and_the_runtime_recovers():
    """Known limit: the device reads the default dtype when a recipe runs (on a Gaudi a captured
    graph keeps the dtypes it was built with). Replayed after torch.set_default_dtype, it fails
    loudly, naming both dtypes and what to do; set back, the same graph replays."""
    import pytest
    from hpu_lab.graphs import HPUGraph
    from hpu_lab.runtime.executor import OutputMismatch
    before = torch.get_default_dtype()
    x = torch.ones(4, device="hpu")
    g = HPUGraph()
    g.capture_begin()
    y = x * 0.3 + torch.arange(4, device="hpu") / 7
    g.capture_end()
    expected = torch.ones(4) * 0.3 + torch.arange(4) / 7
    try:
        torch.set_default_dtype(torch.float64)
        g.replay()
        with pytest.raises(OutputMismatch, match=r"built while torch's default dtype was float32, and it ran "
                                                 r"after torch.set_default_dtype\(float64\)"):
            y.cpu()
    finally:
        torch.set_default_dtype(before)
    g.replay()
    assert torch.equal(y.cpu(), expected)
