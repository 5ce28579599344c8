"""torch.compile(backend="hpu_backend") on hpu tensors (seed 004; claim T4)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hpu_lab  # noqa: F401  (registers hpu_backend)
from hpu_lab import config, events as ev, lazy
from hpu_lab.lab.examples import Net         # seed 000's MNIST model
from hpu_lab.tensor import HPUTensor

from helpers import counts

torch._dynamo = pytest.importorskip("torch._dynamo")


@pytest.fixture(autouse=True)
def eager_and_fresh_dynamo():
    config.set(PT_HPU_LAZY_MODE="0")          # torch.compile is the eager mode's graph mode
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    config.reload()


def _pair(seed=0):
    torch.manual_seed(seed)
    ref = Net()
    model = Net()
    model.load_state_dict(ref.state_dict())
    return ref, model.to("hpu")


def _compile_events(collect, first=0):
    return [e for e in collect.of(ev.Compile)[first:] if "dynamo" in e.reason]


def test_seed_004_mnist_train_function_matches_cpu(collect):           # claim T4
    ref, model = _pair()
    cmodel = torch.compile(model, backend="hpu_backend")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    ropt = torch.optim.Adadelta(ref.parameters(), lr=0.1)

    def train_function(data, target):        # seed 004, verbatim
        output = cmodel(data)
        loss = F.nll_loss(output, target)
        return loss

    keys = None
    for step in range(4):
        data, target = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
        torch.manual_seed(100 + step)         # dropout draws the same noise as the CPU run
        loss = train_function(data.to("hpu"), target.to("hpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.manual_seed(100 + step)
        rloss = F.nll_loss(ref(data), target)
        ropt.zero_grad()
        rloss.backward()
        ropt.step()
        assert torch.equal(loss.cpu(), rloss.detach())
        if step == 0:
            compiled = _compile_events(collect)
            # one forward and one backward recipe, each compiled once
            assert [e.reason.split(":")[0] for e in compiled] == \
                ["first compile of dynamo graph 0/0", "backward of"]
            keys = {e.key for e in compiled}
            n_compiles = counts("graph_compilation")["TotalNumber"]
    assert _compile_events(collect) == compiled                 # no recompiles
    assert counts("graph_compilation")["TotalNumber"] == n_compiles   # eager parts hit too
    hits = [e for e in collect.of(ev.CacheLookup) if e.key in keys and e.hit]
    assert len(hits) == 2 * 3                                    # fw + bw, steps 2..4
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach())


def test_compiled_forward_is_one_launch_and_the_rest_is_eager(collect):
    ref, model = _pair()
    cmodel = torch.compile(model, backend="hpu_backend")
    x = torch.randn(8, 1, 28, 28)
    with torch.no_grad():
        out = cmodel(x.to("hpu"))                    # compile (inference graph) + one launch
        collect.events.clear()
        out = cmodel(x.to("hpu"))
        launches = collect.of(ev.Launch)
        assert len(launches) == 1 and launches[0].graph is not None
        assert sum(1 for n in launches[0].graph.nodes if n.engine == "MME") == 2   # fc1, fc2
        y = out.exp().sum(1)                        # outside the compiled part: op by op
    assert len(collect.of(ev.Launch)) == 3
    model.eval()
    ref.eval()
    with torch.no_grad():
        assert torch.allclose(cmodel(x.to("hpu")).cpu(), ref(x)) and y.device.type == "hpu"


def test_graph_breaks_run_eagerly(collect):
    def f(x, w):
        y = (x @ w).relu()
        print("a graph break")
        return (y * 2).sum()

    cf = torch.compile(f, backend="hpu_backend")
    x, w = torch.randn(4, 5), torch.randn(5, 3)
    for _ in range(2):
        assert torch.allclose(cf(x.to("hpu"), w.to("hpu")).cpu(), f(x, w))
    compiled = _compile_events(collect)
    assert len(compiled) == 2                        # one graph each side of the break
    assert len({e.key for e in compiled}) == 2


def test_recompile_reason_is_dynamos_guard_failure(collect):
    cf = torch.compile(lambda x: (x * 2 + 1).tanh(), backend="hpu_backend", dynamic=False)
    for n in (4, 4, 6):
        x = torch.randn(n)
        assert torch.allclose(cf(x.to("hpu")).cpu(), (x * 2 + 1).tanh())
    reasons = [e.reason for e in _compile_events(collect)]
    assert len(reasons) == 2
    assert reasons[0].startswith("first compile of dynamo graph")
    assert reasons[1].startswith("dynamo recompile:") and "size mismatch at index 0" in reasons[1] \
        and "expected 4, actual 6" in reasons[1]


def _batch_sizes(collect):
    ref, model = _pair(1)
    cmodel = torch.compile(model, backend="hpu_backend")       # dynamo's default: automatic dynamic
    model.eval()
    ref.eval()
    with torch.no_grad():
        for n in (8, 5, 6, 5, 11):
            x = torch.randn(n, 1, 28, 28)
            assert torch.allclose(cmodel(x.to("hpu")).cpu(), ref(x), atol=1e-6)
    return [e.reason for e in _compile_events(collect)]


def test_a_dynamic_graph_is_one_dynamic_recipe(collect):
    # as the bridge's hpu_backend (is_module_dynamic -> a dynamic recipe): 8 compiles a static recipe,
    # 5 makes dynamo retrace with a symbolic batch, compiled once; 6, 5 and 11 run it
    reasons = _batch_sizes(collect)
    assert counts("graph_compilation")["TotalNumber"] == 2
    assert len(reasons) == 2 and "dynamic recipe over s" in reasons[1]


def test_forced_static_compile_gets_one_static_recipe_per_shape(collect):
    from hpu_lab.dynamo.compile_backend import config as backend_config
    with backend_config.patch(force_static_compile=True):            # PT_HPU_FORCE_STATIC_COMPILE=1
        _batch_sizes(collect)
    # 8: static graph; 5, 6 and 11: the dynamic graph replayed, one recipe per shape; 5 again: a hit
    assert counts("graph_compilation")["TotalNumber"] == 4


def test_compiled_function_in_lazy_mode_flushes_its_inputs():
    config.set(PT_HPU_LAZY_MODE="1")
    cf = torch.compile(lambda a, b: a @ b + 1, backend="hpu_backend")
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    ha = a.to("hpu") * 2                               # pending in lazy mode
    out = cf(ha, b.to("hpu"))
    assert len(lazy.S.pg) == 0
    assert torch.allclose(out.cpu(), (a * 2) @ b + 1)


def test_model_to_hpu_is_not_affected_by_the_traceable_protocol():
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    m = nn.Linear(3, 2)
    w = m.weight
    m.to("hpu")                       # Module._apply takes CUDA's path (.data =), not swap_tensors
    assert isinstance(m.weight, HPUTensor) and isinstance(m.weight, nn.Parameter)
    assert m.weight is w and m.weight.device.type == "hpu"      # the same Parameter, as on CUDA
    assert is_traceable_wrapper_subclass(m.weight)    # dynamo sees it as traceable
    m.float()
    m.to("cpu")
    assert m.weight is w and m.weight.device.type == "cpu" and type(w) is nn.Parameter


def test_view_input_mutated_in_place_updates_its_base():
    def f(a, b):
        a.add_(1)
        return a[1:] * b

    cf = torch.compile(f, backend="hpu_backend")
    base, b = torch.randn(6, 3), torch.randn(4, 3)
    hbase = base.to("hpu")
    out = cf(hbase[1:], b.to("hpu"))          # a view of a bigger storage
    rbase = base.clone()
    rout = f(rbase[1:], b)
    assert torch.equal(out.cpu(), rout) and torch.equal(hbase.cpu(), rbase)


def test_batchnorm_buffers_are_updated_like_on_cpu():
    torch.manual_seed(0)

    def net():
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3))
    ref, m = net(), net()
    m.load_state_dict(ref.state_dict())
    m.to("hpu")
    cm = torch.compile(m, backend="hpu_backend")
    opt, ropt = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        x, y = torch.randn(5, 1, 8, 8), torch.randint(0, 3, (5,))
        loss = F.cross_entropy(cm(x.to("hpu")), y.to("hpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        rloss = F.cross_entropy(ref(x), y)
        ropt.zero_grad()
        rloss.backward()
        ropt.step()
        assert torch.allclose(loss.cpu(), rloss.detach())
    assert torch.equal(m[1].running_mean.cpu(), ref[1].running_mean)
    assert m[1].num_batches_tracked.item() == 2
