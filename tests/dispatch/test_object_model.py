"""Object-model differential tests (issue 32, point 6): each pattern of tests/objmodel_patterns.py
runs on CPU and on hpu, lazy and eager; parameter values must be equal bit for bit after the
training steps, and every identity CPU has (which objects a module, an optimizer and a view share)
must hold on hpu too. Before "hpu" was a dense device to the object model, accelerate's and
Fabric's orders trained nothing on hpu, silently, and ZeRO's ``.data`` rebinding left each
parameter on its old storage."""
import pytest
import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config

from objmodel_patterns import PATTERNS


def _run(name, dev, lazy):
    step_end = htcore.mark_step if dev == "hpu" and lazy == "1" else (lambda: None)
    return PATTERNS[name](dev, step_end)


@pytest.mark.parametrize("lazy", ["1", "0"], ids=["lazy", "eager"])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern_trains_and_shares_as_on_cpu(name, lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    want, want_facts = _run(name, "cpu", lazy)
    got, got_facts = _run(name, "hpu", lazy)
    assert got_facts == want_facts
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, k
        assert torch.equal(g, w), f"value {k} differs from CPU's"


def test_the_patterns_train():
    """A pattern that trained nothing on CPU either would compare nothing: the values move."""
    config.set(PT_HPU_LAZY_MODE="1")
    for name in ("accelerate_prepare", "fabric_setup", "zero_flat_buffer", "weight_tying", "moved_twice"):
        torch.manual_seed(0)
        fresh = [p.detach().clone() for p in PATTERNS[name].__globals__["Net"](
            tied=name in ("weight_tying", "moved_twice")).parameters()]
        trained, _ = _run(name, "hpu", "1")
        assert any(not torch.equal(a, b) for a, b in zip(fresh, trained)), name
