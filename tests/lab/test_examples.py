"""hpu_lab.lab.examples: the shared models are the seeds' models."""
import torch

from hpu_lab import events as ev
from hpu_lab.lab.examples import GraphTest, Net

from test_seeds_000_001 import MNIST_SEED


def _seed_net():
    g = {}
    exec(compile(MNIST_SEED.split("device = torch.device")[0].replace(
        "import habana_frameworks.torch.core as htcore", ""), "seed_000", "exec"), g)
    return g["Net"]


def test_net_is_seed_000s_model():
    SeedNet = _seed_net()
    torch.manual_seed(0)
    seed = SeedNet()
    torch.manual_seed(0)
    ours = Net()
    assert [(k, v.shape) for k, v in seed.state_dict().items()] == \
           [(k, v.shape) for k, v in ours.state_dict().items()]
    assert all(torch.equal(a, b) for a, b in zip(seed.parameters(), ours.parameters()))
    x = torch.randn(5, 1, 28, 28)
    for mode in ("train", "eval"):                  # dropout draws the same noise in the same place
        getattr(seed, mode)(), getattr(ours, mode)()
        torch.manual_seed(1)
        want = seed(x)
        torch.manual_seed(1)
        assert torch.equal(ours(x), want)


def test_graphtest_captures_once_then_replays_into_the_same_output():
    gt = GraphTest(size=1000)
    with ev.Collector(kinds=[ev.CaptureEnd, ev.Replay]) as c:
        gt.wrap_func(True)
        out = gt.b
        for _ in range(3):
            gt.wrap_func(False)
    assert len(c.of(ev.CaptureEnd)) == 1 and len(c.of(ev.Replay)) == 3
    assert gt.b is out and torch.equal(out.cpu(), torch.full((1000,), 2.0))
