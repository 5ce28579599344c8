"""FusedClipNorm: clip_grad_norm_'s numbers, one fused node, the total norm returned."""
import copy

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import events
from hpu_lab.hpex.normalization import FusedClipNorm
from hpu_lab.compiler.graph import HELPER_NAMES

HELPERS = {"input", "output", *HELPER_NAMES.values()}     # view, scatter, scatter_into, ...


def _model_with_grads(dtype=torch.float32, scale=1.0):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dtype)
    mh = copy.deepcopy(m).to("hpu")
    x = torch.randn(5, 8, dtype=dtype) * scale
    m(x).square().sum().backward()
    mh(x.to("hpu")).square().sum().backward()
    return m, mh


@pytest.mark.parametrize("max_norm", [0.5, 1e6])          # clipping, and a norm already below the max
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_clip_grad_norm_on_cpu(max_norm, dtype):
    m, mh = _model_with_grads(dtype)
    expected = torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm)
    total = FusedClipNorm(mh.parameters(), max_norm).clip_norm(mh.parameters())
    assert total.shape == () and total.dtype == dtype and total.device.type == "hpu"
    torch.testing.assert_close(total.cpu(), expected, atol=0, rtol=0)
    for a, b in zip(m.parameters(), mh.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, atol=0, rtol=0)


def test_on_cpu_tensors_too():
    m, _ = _model_with_grads()
    m2 = copy.deepcopy(m)
    for a, b in zip(m.parameters(), m2.parameters()):
        b.grad = a.grad.clone()
    expected = torch.nn.utils.clip_grad_norm_(m.parameters(), 0.3)
    total = FusedClipNorm(m2.parameters(), 0.3).clip_norm(m2.parameters())
    torch.testing.assert_close(total, expected, atol=0, rtol=0)
    for a, b in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=0, rtol=0)


def _clip_graph_ops(mh, clip):
    htcore.mark_step()
    with events.Collector(kinds=[events.Launch]) as c:
        clip()
        htcore.mark_step()
    (graph,) = [e.graph for e in c.events]
    return [n.op for n in graph.nodes if n.op not in HELPERS]


def test_one_fused_node_instead_of_many():
    _, mh = _model_with_grads()
    fused = _clip_graph_ops(mh, lambda: FusedClipNorm(mh.parameters(), 0.5).clip_norm(mh.parameters()))
    _, mh = _model_with_grads()
    unfused = _clip_graph_ops(mh, lambda: torch.nn.utils.clip_grad_norm_(mh.parameters(), 0.5))
    assert fused == ["hpu_lab::fused_clip_norm_"]
    # a norm and a multiply per gradient (4 of them), a stack, a norm, the clip coefficient
    assert len(unfused) >= 2 * 4 + 3, unfused


def test_mark_step_before_and_after(collect):
    _, mh = _model_with_grads()
    FusedClipNorm(mh.parameters(), 0.5).clip_norm(mh.parameters())
    assert len(collect.of(events.MarkStep)) == 2
    assert len(collect.of(events.Launch)) == 2          # the backward graph, then the clip graph


def test_no_gradients_gives_zero():
    p = torch.nn.Parameter(torch.ones(3).to("hpu"))
    total = FusedClipNorm([p], 1.0).clip_norm([p])
    assert total.item() == 0.0
    assert FusedClipNorm(p, 1.0).clip_norm(p).item() == 0.0


def test_single_tensor_argument():
    p = torch.nn.Parameter(torch.ones(4).to("hpu"))
    p.grad = torch.full((4,), 3.0).to("hpu")
    total = FusedClipNorm(p, 1.0).clip_norm(p)
    assert total.item() == pytest.approx(6.0)
    torch.testing.assert_close(p.grad.cpu(), torch.full((4,), 3.0) * (1.0 / (6.0 + 1e-6)))
