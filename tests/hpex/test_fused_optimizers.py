"""FusedAdamW / FusedSGD: the same numbers as torch.optim on CPU, and one fused node per step."""
import copy

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import config, events
from hpu_lab.hpex.optimizers import FusedAdagrad, FusedAdamW, FusedSGD
from hpu_lab.compiler.graph import HELPER_NAMES

HELPERS = {"input", "output", *HELPER_NAMES.values()}     # view, scatter, scatter_into, ...


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _step(model, opt, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _train_pair(make_cpu_opt, make_hpu_opt, steps=4, lr_change=None):
    mc = _model()
    mh = copy.deepcopy(mc).to("hpu")
    oc, oh = make_cpu_opt(mc.parameters()), make_hpu_opt(mh.parameters())
    torch.manual_seed(1)
    for i in range(steps):
        if lr_change is not None and i == lr_change:
            for o in (oc, oh):
                for g in o.param_groups:
                    g["lr"] *= 0.5
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        _step(mc, oc, x, y)
        _step(mh, oh, x.to("hpu"), y.to("hpu"))
        if config.lazy_mode():
            htcore.mark_step()
    return mc, mh


def _assert_same(mc, mh):
    for a, b in zip(mc.parameters(), mh.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=0, rtol=0)


def test_fused_adamw_default_eps_is_habanas():
    assert FusedAdamW([torch.zeros(1, requires_grad=True)]).defaults["eps"] == 1e-6
    assert torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults["eps"] == 1e-8


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_fused_adamw_equals_torch_adamw_on_cpu(wd):
    mc, mh = _train_pair(lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-6, weight_decay=wd),
                         lambda p: FusedAdamW(p, lr=1e-2, weight_decay=wd), lr_change=2)
    _assert_same(mc, mh)


def test_fused_adamw_on_cpu_tensors_equals_torch_adamw():
    ma, mb = _model(), _model()
    oa = torch.optim.AdamW(ma.parameters(), lr=1e-2, eps=1e-6, weight_decay=0.05)
    ob = FusedAdamW(mb.parameters(), lr=1e-2, weight_decay=0.05)
    for _ in range(3):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        _step(ma, oa, x, y)
        _step(mb, ob, x, y)
    _assert_same(ma, mb)


def test_fused_adamw_without_bias_correction():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    p.grad = torch.tensor([0.5, 0.25])
    FusedAdamW([p], lr=0.1, bias_correction=False).step()
    m, v = 0.1 * p.grad, 0.001 * p.grad ** 2
    expected = torch.tensor([1.0, -2.0]) - 0.1 * m / (v.sqrt() + 1e-6)
    torch.testing.assert_close(p.detach(), expected)


@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True, weight_decay=0.01),
                                dict(momentum=0.5, dampening=0.1), dict(weight_decay=0.1)])
def test_fused_sgd_equals_torch_sgd_on_cpu(kw):
    mc, mh = _train_pair(lambda p: torch.optim.SGD(p, lr=0.1, **kw), lambda p: FusedSGD(p, lr=0.1, **kw),
                         lr_change=2)
    _assert_same(mc, mh)


@pytest.mark.parametrize("kw", [dict(), dict(lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.2),
                                dict(eps=1e-4)])
def test_fused_adagrad_equals_torch_adagrad_on_cpu(kw):
    mc, mh = _train_pair(lambda p: torch.optim.Adagrad(p, lr=0.05, **kw), lambda p: FusedAdagrad(p, lr=0.05, **kw),
                         lr_change=2)
    _assert_same(mc, mh)


def _optimizer_graph(model, opt, fused):
    """The ops of the graph that runs the optimizer update (steady state: after two warm-up steps)."""
    x, y = torch.randn(5, 8).to("hpu"), torch.randn(5, 4).to("hpu")
    for _ in range(2):
        _step(model, opt, x, y)
        htcore.mark_step()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    htcore.mark_step()
    with events.Collector(kinds=[events.Launch]) as c:
        opt.step()
        htcore.mark_step()
    graphs = [e.graph for e in c.events]
    assert len(graphs) == 1, "the update is one graph"
    return [n.op for n in graphs[0].nodes if n.op not in HELPERS]


CASES = {  # name: (torch optimizer, fused optimizer, fused op, ops torch traces per parameter)
    "adamw": (lambda p: torch.optim.AdamW(p, eps=1e-6), FusedAdamW, "hpu_lab::optimizer_adamw_", 8),
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.1), lambda p: FusedSGD(p, lr=0.1), "hpu_lab::optimizer_sgd_", 1),
    "sgd_momentum": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: FusedSGD(p, lr=0.1, momentum=0.9),
                     "hpu_lab::optimizer_sgd_momentum_", 3),
    "adagrad": (lambda p: torch.optim.Adagrad(p), FusedAdagrad, "hpu_lab::optimizer_adagrad_", 4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_fused_node_instead_of_many(name):
    make_torch, make_fused, op, per_param = CASES[name]
    m = _model().to("hpu")
    fused_ops = _optimizer_graph(m, make_fused(m.parameters()), True)
    m = _model().to("hpu")
    torch_ops = _optimizer_graph(m, make_torch(m.parameters()), False)
    assert fused_ops == [op]                                # one node for the 4 parameters
    assert len(torch_ops) == per_param * 4
    assert not any(o.startswith("hpu_lab::") for o in torch_ops)


def test_learning_rate_change_does_not_recompile(collect):
    m = _model().to("hpu")
    opt = FusedAdamW(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = torch.randn(5, 8).to("hpu"), torch.randn(5, 4).to("hpu")
    for _ in range(5):
        _step(m, opt, x, y)
        sched.step()
        htcore.mark_step()
    compiles = [e for e in collect.of(events.Compile)
                if any(n.op == "hpu_lab::optimizer_adamw_" for n in e.graph.nodes)]
    # the first step creates the moments (zeros_like) in its graph; every later step is one recipe
    assert len(compiles) == 2


def test_inplace_update_is_seen_by_autograd():
    w = torch.randn(4, 4).to("hpu").requires_grad_()
    w.grad = torch.randn(4, 4).to("hpu")
    y = (w @ w).sum()
    FusedSGD([w], lr=0.1).step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_closure_and_params_without_grad():
    m = _model().to("hpu")
    m[2].bias.requires_grad_(False)
    opt = FusedAdamW(m.parameters(), lr=1e-2)
    x, y = torch.randn(5, 8).to("hpu"), torch.randn(5, 4).to("hpu")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        return loss

    before = m[2].bias.detach().cpu().clone()
    loss = opt.step(closure)
    assert loss.item() > 0
    torch.testing.assert_close(m[2].bias.detach().cpu(), before, atol=0, rtol=0)


def test_eager_mode():
    config.set(PT_HPU_LAZY_MODE="0")
    mc, mh = _train_pair(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                         lambda p: FusedSGD(p, lr=0.1, momentum=0.9), steps=2)
    _assert_same(mc, mh)


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_bad_arguments_are_refused():
    p = [torch.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="Invalid learning rate"):
        FusedAdamW(p, lr=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter"):
        FusedAdamW(p, betas=(1.0, 0.999))
    with pytest.raises(ValueError, match="Invalid epsilon"):
        FusedAdamW(p, eps=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum"):
        FusedSGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid momentum"):
        FusedSGD(p, lr=0.1, momentum=-1)
    s = torch.nn.Parameter(torch.zeros(3))
    s.grad = torch.sparse_coo_tensor([[0]], [1.0], (3,))
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        FusedAdamW([s]).step()
