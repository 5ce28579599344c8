"""ModuleCacher: one graph pair per input signature, capped (claims G7, G11), numbers vs CPU."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from hpu_lab import config
from hpu_lab import events as ev
from hpu_lab.lab.examples import train


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x, scale=1.0, mask=None, *, shift=0.0):
        h = F.relu(self.fc1(x)) * scale + shift
        if mask is not None:
            h = h * mask
        return self.fc2(h)


def _captures(c):
    return len(c.of(ev.CaptureEnd))


def test_one_graph_pair_per_signature_including_non_tensor_and_keyword_args():
    torch.manual_seed(0)
    model = Net().to("hpu")
    mc = torch.hpu.ModuleCacher(max_graphs=10)
    assert mc(model=model, inplace=True) is model
    x4, x5 = torch.randn(4, 12).to("hpu"), torch.randn(5, 12).to("hpu")
    with ev.Collector(kinds=[ev.CaptureEnd, ev.Replay]) as c:
        model(x4)
        model(x4)                          # same signature: replays
        model(x5)                          # new shape: new graphs
        model(x4, 2.0)                     # new non-tensor value
        model(x4, scale=2.0)               # the same call spelled with a keyword: same graphs
        model(x4, shift=1.0)               # keyword-only argument
        model(x4, mask=torch.ones(4, 16).to("hpu"))
    assert mc.num_graphs == 5
    assert _captures(c) == 2 * 5
    assert mc.stats()["cached_hits"] == 7


def test_max_graphs_then_uncached():
    model = Net().to("hpu")
    mc = torch.hpu.ModuleCacher(max_graphs=2)
    mc(model=model, inplace=True)
    with ev.Collector(kinds=[ev.CaptureEnd]) as c:
        for n in (2, 3, 4, 5, 2):
            model(torch.randn(n, 12).to("hpu"))
    assert mc.num_graphs == 2 and _captures(c) == 4
    assert mc.stats()["uncached_train_hits"] == 2


def test_caches_only_in_training_with_grad():
    model = Net().to("hpu")
    mc = torch.hpu.ModuleCacher()
    mc(model=model, inplace=True)
    x = torch.randn(4, 12).to("hpu")
    with ev.Collector(kinds=[ev.CaptureEnd]) as c:
        with torch.no_grad():
            model(x)
        model.eval()
        model(x)
    assert not c.events and mc.stats()["uncached_eval_hits"] == 1 and mc.stats()["uncached_train_hits"] == 1


def test_use_lfu_caches_the_most_frequent_signatures():
    model = Net().to("hpu")
    mc = torch.hpu.ModuleCacher(max_graphs=1)
    mc(model=model, use_lfu=True)
    a, b = torch.randn(2, 12).to("hpu"), torch.randn(3, 12).to("hpu")
    model.capture_start()
    for x in (a, b, b, b):
        model(x)                           # counted, not cached
    model.capture_end()
    with ev.Collector(kinds=[ev.CaptureEnd]) as c:
        model(a)
        model(b)
        model(b)
    assert mc.num_graphs == 1 and _captures(c) == 2         # only b's signature got graphs


def test_inplace_false_leaves_the_model_alone():
    model = Net().to("hpu")
    wrapped = torch.hpu.ModuleCacher()(model=model, inplace=False)
    assert wrapped is not model and "forward" not in model.__dict__
    assert wrapped.fc1.weight is model.fc1.weight


def _train(model, opt, batches, device):
    return train(model, opt, batches, device, F.cross_entropy)


def test_last_batch_of_another_shape_is_one_more_graph_and_training_equals_cpu():
    """Claim G11: 50 samples in batches of 16 -> three of 16 and one of 2: one more graph."""
    data = torch.utils.data.TensorDataset(torch.randn(50, 12), torch.randint(0, 3, (50,)))
    batches = list(torch.utils.data.DataLoader(data, batch_size=16))
    torch.manual_seed(0)
    cpu = Net()
    cpu_losses = _train(cpu, torch.optim.Adam(cpu.parameters(), lr=0.01), batches * 2, "cpu")
    torch.manual_seed(0)
    model = Net().to("hpu")
    mc = torch.hpu.ModuleCacher(max_graphs=10)
    mc(model=model, inplace=True)
    with ev.Collector(kinds=[ev.CaptureEnd, ev.Replay]) as c:
        losses = _train(model, torch.optim.Adam(model.parameters(), lr=0.01), batches * 2, "hpu")
    assert mc.num_graphs == 2 and _captures(c) == 4
    assert losses == cpu_losses
    # with drop_last=True there is one shape only: one graph pair
    batches = list(torch.utils.data.DataLoader(data, batch_size=16, drop_last=True))
    model2 = Net().to("hpu")
    mc2 = torch.hpu.ModuleCacher()
    mc2(model=model2)
    _train(model2, torch.optim.SGD(model2.parameters(), lr=0.1), batches, "hpu")
    assert mc2.num_graphs == 1


def test_outputs_with_non_tensor_parts():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return {"y": self.lin(x), "n": 3, "z": (x * 2, None)}

    m = Two().to("hpu")
    torch.hpu.ModuleCacher()(model=m)
    x = torch.randn(2, 3).to("hpu")
    for _ in range(2):
        out = m(x)
    assert out["n"] == 3 and out["z"][1] is None
    assert torch.allclose(out["z"][0].cpu(), x.cpu() * 2)
    out["y"].sum().backward()
    assert m.lin.weight.grad is not None


def test_env_overrides_disable_tensor_cache_and_dry_run():
    config.set(PT_HPUGRAPH_DISABLE_TENSOR_CACHE="1", PT_HPUGRAPH_ENABLE_DRY_RUN="1")
    model = Net().to("hpu")
    mc = torch.hpu.ModuleCacher()
    mc(model=model, disable_tensor_cache=False, dry_run=False)
    assert mc.disable_tensor_cache is True and mc.dry_run is True
    x = torch.randn(4, 12).to("hpu")
    y = model(x)
    ref = Net()
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    assert torch.allclose(y.detach().cpu(), ref(x.cpu()), atol=1e-6)


def test_eager_mode_runs_uncached():
    config.set(PT_HPU_LAZY_MODE="0")
    model = Net().to("hpu")
    mc = torch.hpu.ModuleCacher()
    mc(model=model)
    with ev.Collector(kinds=[ev.CaptureEnd]) as c:
        model(torch.randn(2, 12).to("hpu"))
    assert not c.events and mc.num_graphs == 0


def test_a_new_shape_is_a_capture_whose_compile_says_why():
    """Each new graph is an event, and its compile names what changed against the last capture."""
    from hpu_lab import events as ev
    model = Net().to("hpu")
    torch.hpu.ModuleCacher()(model=model)
    reasons = []
    for n in (4, 4, 6):
        with ev.Collector(kinds=[ev.Compile]) as c:
            model(torch.randn(n, 12).to("hpu")).sum().backward()
        reasons.append([e.reason for e in c.events if "capture of the forward of Net" in e.src])
    assert reasons[1] == []                                   # same shape: replayed, nothing compiled
    assert len(reasons[2]) == 1 and reasons[2][0].endswith("shape changed (4, 12) -> (6, 12)")
