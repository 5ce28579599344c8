"""What a recipe moves through HBM (hpu_lab.perfmodel.onchip, docs/gaudi_clock.md §6, "Memory traffic").

The calibrated clock moves every kernel boundary through HBM (``cost.ONCHIP_WINDOW == 0``); the
on-chip window is a what-if (``recipe_cost(..., onchip=W)``), and ``minimum_bytes`` the yardstick.
Deterministic: estimate() traces, nothing runs.
"""
import functools

import pytest
import torch

from hpu_lab import perfmodel as pm
from hpu_lab.perfmodel import cost, onchip, validation

HPU = "hpu"


def _chain_recipe():
    """One recipe: a matmul whose output runs through a chain of elementwise ops that no fusion
    cluster takes (fusion off), read once more at the end of the graph."""
    a = torch.empty(256, 256, device=HPU)
    b = torch.empty(256, 256, device=HPU)

    def f(a, b):
        y = a @ b
        z = torch.exp(y)
        z = torch.tanh(z)
        z = torch.sigmoid(z)
        z = torch.sqrt(z)
        return z + y              # y: read once more, four kernels after it was written
    (summary, _), = pm.estimate(f, a, b, device="gaudi2").recipes
    return summary


def test_window_zero_is_the_calibrated_accounting_and_a_window_keeps_near_reads_on_chip():
    s = _chain_recipe()
    card = pm.card("gaudi2")
    assert cost.ONCHIP_WINDOW == 0
    base = cost.kernels(s, card, fusion=False)
    assert [k.hbm_bytes for k in base] == [k.hbm_bytes for k in cost.kernels(s, card, fusion=False, onchip=0)]
    t = 256 * 256 * 4                                  # one tensor's bytes
    # mm reads a, b, writes y; exp, tanh, sigmoid, sqrt each read one and write one; add reads two, writes one
    assert sum(k.hbm_bytes for k in base) == 14 * t
    # window 1: each of exp..add reads its producer on chip, and none of them writes to HBM but the
    # result; y is still written (add, five kernels on, reads it) and read back by add
    w1 = cost.kernels(s, card, fusion=False, onchip=1)
    assert sum(k.hbm_bytes for k in w1) == (2 + 1 + 1 + 1) * t
    assert sum(k.hbm_bytes for k in cost.kernels(s, card, fusion=False, onchip=4)) == 5 * t
    # window 5 and more: y stays on chip too; what is left is the minimum: a and b read, the result written
    w8 = cost.kernels(s, card, fusion=False, onchip=8)
    assert sum(k.hbm_bytes for k in w8) == 3 * t == onchip.minimum_bytes(s)
    assert cost.recipe_cost(s, card, fusion=False, onchip=8).ns < cost.recipe_cost(s, card, fusion=False).ns


@functools.lru_cache(maxsize=None)
def _traffic(prefix: str, card: str):
    """(modeled bytes at window 0 and at window 4, minimum bytes) of a validation workload's step."""
    w = next(w for w in validation.WORKLOADS if w.name.startswith(prefix) and w.card == card)
    ss = validation._summaries(w)
    c = pm.card("gaudi2")
    return (sum(cost.recipe_cost(s, c).hbm_bytes for s in ss), sum(cost.recipe_cost(s, c, onchip=4).hbm_bytes
                                                                    for s in ss),
            sum(onchip.minimum_bytes(s) for s in ss))


def test_the_minimum_a_step_moves_and_what_the_model_moves():
    """The figures docs/gaudi_clock.md states: ResNet-50 at 256 and BERT-Large SQuAD at 32 per card."""
    for prefix, card, mn_gb, ratio0 in (("ResNet-50", "gaudi", 34.6, 2.94), ("BERT-Large fine-tuning", "gaudi2",
                                                                              44.5, 4.80)):
        modeled, window4, mn = _traffic(prefix, card)
        assert abs(mn / 1e9 - mn_gb) < 0.1, (prefix, mn)
        assert abs(modeled / mn - ratio0) < 0.02, (prefix, modeled / mn)
        assert mn < window4 < modeled


@pytest.mark.xfail(strict=True, reason="the calibrated clock moves 2.9x (ResNet-50) and 4.8x (BERT-Large) the "
                   "minimum; the on-chip window that brings them near 1.5x breaks the joint fit (docs/gaudi_clock.md "
                   "§6, 'Memory traffic')")
def test_modeled_traffic_is_within_1_5x_of_the_minimum():
    for prefix, card in (("ResNet-50", "gaudi"), ("BERT-Large fine-tuning", "gaudi2")):
        modeled, _, mn = _traffic(prefix, card)
        assert modeled <= 1.5 * mn, prefix
