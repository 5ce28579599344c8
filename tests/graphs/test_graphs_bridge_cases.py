"""HPU Graph cases taken from the real bridge (issue 32 item 4, issue 35 item 5).

- A CPU tensor read inside a capture: the bridge copies it to the device when the op is recorded
  (LazyOp::set_inputs) and every replay reuses that copy. hpu_lab keeps the copy too, warns at the
  capture's end, and refuses a replay once the CPU tensor has changed (it used to replay the stale
  copy in silence).
- A replay of a graph never captured (or reset) is the bridge's step marker and nothing more; a
  graph whose capture failed is never replayed.
- Dropout under torch.inference_mode() is captured like any op, its noise drawn again per replay.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab.graphs import HPUGraph, HPUGraphError
from hpu_lab.graphs.recording import HPUGraphWarning

ht = htcore.hpu


@pytest.mark.parametrize("kind", ["operand", "scalar operand", "list operand", "copy"])
def test_cpu_tensor_changed_after_capture_refuses_the_replay(kind):
    x = torch.ones(3).to("hpu")
    c = torch.ones(3) if kind != "scalar operand" else torch.tensor(1.0)
    g = HPUGraph()
    with pytest.warns(HPUGraphWarning, match="is a constant of the graph"):
        with ht.graph(g):
            if kind == "copy":
                y = x + c.to("hpu")
            elif kind == "list operand":
                y = torch.cat([x, c])
            else:
                y = x + c
    g.replay()                                    # unchanged: the captured copy is right
    htcore.mark_step()
    assert torch.equal(y.cpu(), (torch.cat([x.cpu(), c]) if kind == "list operand" else x.cpu() + c))
    c.add_(1)                                     # on a Gaudi the replay would still add the old c
    with pytest.raises(HPUGraphError, match="CPU tensor .* read during the capture at .* has changed since"):
        g.replay()
    c.sub_(1)                                     # back to the captured values: replays again
    g.replay()


def test_cpu_tensor_viewed_inside_the_capture_is_watched_through_its_base():
    """The operand is a temporary view (``buf[0]``); the buffer it views is what the program updates."""
    buf = torch.zeros(2, 3)
    x = torch.ones(3).to("hpu")
    g = HPUGraph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPUGraphWarning)
        with ht.graph(g):
            y = x * buf[0]
    buf[0] = 2.0
    with pytest.raises(HPUGraphError, match="has changed since"):
        g.replay()


def test_wrap_in_hpu_graph_without_tensor_cache_refuses_a_new_cpu_argument():
    """disable_tensor_cache reads this call's hpu inputs; a CPU argument was copied at the capture:
    as the bridge's copy_to, its new values go into the captured one, and the replay refuses."""
    model = torch.nn.Linear(3, 3).to("hpu")

    class M(torch.nn.Module):
        def forward(self, x, bias):
            return model(x) + bias

    m = ht.wrap_in_hpu_graph(M(), disable_tensor_cache=True)
    x = torch.randn(2, 3).to("hpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPUGraphWarning)
        m(x, torch.zeros(3))
    m(x, torch.zeros(3))                          # same values: fine
    with pytest.raises(HPUGraphError, match="has changed since"):
        m(x, torch.ones(3))


def test_replay_of_a_graph_never_captured_is_a_step_marker(collect):
    """lightning-habana's test_automatic_optimization_graph_capture replays a graph it never
    captured: the bridge's HPUGraph::replay marks a step and replays its (zero) captured graphs."""
    x = torch.ones(3).to("hpu")
    y = x * 2                                     # pending lazy work
    g = HPUGraph()
    g.replay()
    assert [e.recipes for e in collect.of(ev.Replay)] == [0]
    assert collect.of(ev.Launch)                  # the pending work was launched (the step marker)
    g.replayV3([x])
    g.replayV2([x], [x])
    assert y.tolist() == [2.0, 2.0, 2.0]
    assert g.replays == 0


def test_a_failed_capture_is_never_replayed():
    x = torch.ones(3).to("hpu")
    g = HPUGraph()
    with pytest.raises(HPUGraphError, match="not supported during HPU Graph capturing"):
        with ht.graph(g):
            y = x * 2
            y.sum().item()
    for replay in (g.replay, lambda: g.replayV3([x]), lambda: g.replayV2([x], [x])):
        with pytest.raises(HPUGraphError, match="cannot replay: the capture was abandoned"):
            replay()
    g.reset()                                     # emptied: a step marker again
    g.replay()


@pytest.mark.parametrize("train", [True, False])
def test_dropout_under_inference_mode_is_captured(train):
    """nn.Dropout under torch.inference_mode() reaches the device as aten::dropout; it used to run on
    the host (refused in a capture). Captured, each replay draws CPU's noise for the same seed."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train(train)
    mod = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train(train)
    mod.load_state_dict(ref.state_dict())
    mod.to("hpu")
    x = torch.randn(8, 4)
    hx = x.to("hpu")
    g = HPUGraph()
    with torch.inference_mode():
        with ht.graph(g):
            y = mod(hx)
        for seed in (1, 2, 3):
            torch.manual_seed(seed)
            g.replay()
            torch.manual_seed(seed)
            assert torch.equal(y.cpu(), ref(x))


@pytest.mark.parametrize("fn,shape", [(F.dropout, (4, 6)), (F.dropout2d, (2, 3, 4, 4)), (F.alpha_dropout, (4, 6)),
                                      (F.feature_alpha_dropout, (2, 3, 4))],
                         ids=["dropout", "dropout2d", "alpha", "feature_alpha"])
@pytest.mark.parametrize("p", [0.3, 1.0])
def test_dropout_variants_under_inference_mode_equal_cpu_without_a_sync(fn, shape, p, collect):
    x = torch.randn(*shape)
    with torch.inference_mode():
        hx = x.to("hpu")
        n = len(collect.of(ev.HostSync))
        torch.manual_seed(5)
        out = fn(hx, p, training=True)
        assert len(collect.of(ev.HostSync)) == n          # a graph node, not a host op
        torch.manual_seed(5)
        assert torch.equal(out.cpu(), fn(x, p, training=True))
        assert fn(hx, p, training=False) is hx            # the identity returns the input, as CPU
