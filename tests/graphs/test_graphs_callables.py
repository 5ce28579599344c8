"""make_graphed_callables: a forward and a backward graph per callable (claim G8), numbers vs CPU."""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab.lab.examples import train
from hpu_lab.graphs import HPUGraphError

TRACING = (ev.OpAccumulated, ev.GraphBuilt, ev.CacheLookup, ev.Compile)


def _mlp(seed=0, dropout=0.5):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 4))


def _train(model, opt, batches, device, set_to_none=True):
    return train(model, opt, batches, device, F.cross_entropy, set_to_none)


def _batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(6, 10, generator=g), torch.randint(0, 4, (6,), generator=g)) for _ in range(n)]


@pytest.mark.parametrize("set_to_none", [True, False])
def test_training_equals_cpu(set_to_none):
    batches = _batches(8)
    cpu = _mlp()
    cpu_opt = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    sample = torch.randn(6, 10)
    cpu(sample)                                    # the forward capture draws the dropout once
    cpu_losses = _train(cpu, cpu_opt, batches, "cpu", set_to_none)

    model = _mlp().to("hpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sample = torch.randn(6, 10)                    # same draw as the CPU run's sample
    with ev.Collector(kinds=[ev.CaptureEnd]) as c:
        graphed = torch.hpu.make_graphed_callables(model, (sample.to("hpu"),))
    assert graphed is model and len(c.events) == 2        # a forward and a backward graph (G8)
    losses = _train(model, opt, batches, "hpu", set_to_none)
    assert losses == cpu_losses
    assert all(torch.equal(a.detach(), b.detach().cpu()) for a, b in zip(cpu.parameters(), model.parameters()))


def test_forward_and_backward_replay_without_tracing_the_model():
    model = _mlp(dropout=0.0).to("hpu")
    x = torch.randn(6, 10).to("hpu")
    torch.hpu.make_graphed_callables(model, (x,))
    xb = torch.randn(6, 10).to("hpu")
    htcore.mark_step()
    with ev.Collector() as c:
        out = model(xb)
        grad_out = torch.ones_like(out)
        out.backward(grad_out)
    replays = c.of(ev.Replay)
    assert len(replays) == 2                              # forward graph, then backward graph
    # what is traced is only the glue (ones_like), never the model's ops
    traced = {e.op for e in c.of(ev.OpAccumulated)}
    assert not traced & {"aten::addmm", "aten::mm", "aten::relu", "aten::threshold_backward"}, traced
    ref = _mlp(dropout=0.0)
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ref(xb.cpu()).backward(torch.ones(6, 4))
    assert torch.allclose(model[0].weight.grad.cpu(), ref[0].weight.grad, atol=1e-6)


def test_training_flag_rule():
    model = _mlp(dropout=0.0).to("hpu")
    x = torch.randn(6, 10).to("hpu")
    torch.hpu.make_graphed_callables(model, (x,))
    model.eval()                                         # captured in training mode: eval runs eagerly
    with ev.Collector(kinds=[ev.Replay, ev.OpAccumulated]) as c:
        y = model(x)
    assert not c.of(ev.Replay) and c.of(ev.OpAccumulated)
    model.train()
    with ev.Collector(kinds=[ev.Replay]) as c:
        y2 = model(x)
    assert len(c.of(ev.Replay)) == 1
    assert torch.allclose(y.detach().cpu(), y2.detach().cpu())


def test_outputs_and_grads_are_each_calls_own():
    """Unlike the static buffers they come from, returned outputs survive the next replay."""
    f = torch.hpu.make_graphed_callables(lambda a: a * 2, (torch.ones(3, requires_grad=True).to("hpu"),))
    a = f(torch.tensor([1.0, 2.0, 3.0]).to("hpu"))
    b = f(torch.tensor([5.0, 6.0, 7.0]).to("hpu"))
    assert a.tolist() == [2.0, 4.0, 6.0] and b.tolist() == [10.0, 12.0, 14.0]


def test_functions_tuples_warmups_and_unused_inputs():
    lin = nn.Linear(4, 4).to("hpu")

    def f(x, y):
        return lin(x) * 2, y.sum() + 0 * x.sum()

    def g(u):
        return u.relu()

    x = torch.randn(2, 4, requires_grad=True).to("hpu").detach().requires_grad_(True)
    y = torch.randn(3).to("hpu").requires_grad_(True)
    u = torch.randn(5).to("hpu").requires_grad_(True)
    with ev.Collector(kinds=[ev.CaptureEnd]) as c:
        gf, gg = torch.hpu.make_graphed_callables((f, g), ((x, y), (u,)), warmups=2)
    assert len(c.events) == 4
    o1, o2 = gf(x, y)
    (o1.sum() + o2).backward()
    gg(u).sum().backward()
    assert torch.allclose(y.grad.cpu(), torch.ones(3))
    assert torch.allclose(u.grad.cpu(), (u.detach().cpu() > 0).float())
    # an input that does not reach the outputs: refused unless allow_unused_input
    unused = torch.randn(3).to("hpu").requires_grad_(True)
    with pytest.raises(RuntimeError, match="unused|not have been used"):
        torch.hpu.make_graphed_callables(lambda a, b: a * 3, (x, unused))
    h = torch.hpu.make_graphed_callables(lambda a, b: a * 3, (x, unused), allow_unused_input=True)
    out = h(x, unused)
    out.sum().backward()
    assert unused.grad is None or torch.equal(unused.grad.cpu(), torch.zeros(3))


def test_graphing_a_module_twice_captures_its_original_forward():
    model = _mlp(dropout=0.0).to("hpu")
    x = torch.randn(6, 10).to("hpu")
    torch.hpu.make_graphed_callables(model, (x,))
    torch.hpu.make_graphed_callables(model, (torch.randn(3, 10).to("hpu"),))   # now for 3 rows
    assert model(torch.randn(3, 10).to("hpu")).shape == (3, 4)


def test_requires_grad_mismatch_warns_once():
    lin = nn.Linear(3, 3).to("hpu")
    sample = torch.randn(2, 3).to("hpu")                 # does not require grad
    f = torch.hpu.make_graphed_callables(lin, (sample,))
    inp = torch.randn(2, 3).to("hpu").requires_grad_(True)
    with pytest.warns(UserWarning, match="sample arg did not"):
        f(inp).sum().backward()
    assert inp.grad is None                              # no gradient flows to it, as on Gaudi
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(inp)


def test_recompiles_are_not_needed_across_replays(collect):
    model = _mlp(dropout=0.0).to("hpu")
    x = torch.randn(6, 10).to("hpu")
    torch.hpu.make_graphed_callables(model, (x,))
    per_step = []
    for _ in range(5):
        n = len(collect.of(ev.Compile))
        model(torch.randn(6, 10).to("hpu")).sum().backward()
        htcore.mark_step()
        per_step.append(len(collect.of(ev.Compile)) - n)
    # only the glue around the graphs compiles (.grad created, then accumulated): then nothing
    assert per_step[2:] == [0, 0, 0], per_step


def test_rejections():
    m = nn.Linear(2, 2).to("hpu")
    h = m.register_forward_hook(lambda *a: None)
    with pytest.raises(HPUGraphError, match="must not have hooks"):
        torch.hpu.make_graphed_callables(m, (torch.randn(1, 2).to("hpu"),))
    h.remove()
    m.register_buffer("b", torch.zeros(2).to("hpu").requires_grad_(True))
    with pytest.raises(HPUGraphError, match="buffers must have requires_grad=False|All buffers"):
        torch.hpu.make_graphed_callables(m, (torch.randn(1, 2).to("hpu"),))
