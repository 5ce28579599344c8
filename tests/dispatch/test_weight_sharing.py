"""Weight sharing survives Module.to("hpu") and trains like CPU (claim M12; issue 10, point 2).

Before the fix, ``_apply`` made a new Parameter per module slot for the hpu wrapper subclass: a tied
embedding / output layer became two tensors that trained apart, a silent divergence from CPU."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hpu_lab  # noqa: F401
from hpu_lab import config


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lin = nn.Linear(8, 8)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.emb.weight            # a language model's tied embedding
        self.block = nn.Linear(8, 8)
        self.again = nn.Sequential(self.block, nn.Tanh(), self.block)   # a module used twice

    def forward(self, x):
        return self.head(self.again(torch.tanh(self.lin(self.emb(x)))))


def _train(model, steps=4):
    dev = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    torch.manual_seed(1)
    for _ in range(steps):
        x, y = torch.randint(0, 20, (4, 6)), torch.randint(0, 20, (4, 6))
        opt.zero_grad()
        F.cross_entropy(model(x.to(dev)).flatten(0, 1), y.to(dev).flatten()).backward()
        opt.step()


@pytest.mark.parametrize("lazy", ["1", "0"])
def test_shared_weight_stays_shared_on_hpu_and_trains_like_cpu(lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    torch.manual_seed(0)
    ref = Tied()
    model = Tied()
    model.load_state_dict(ref.state_dict())
    n_params = len(list(ref.parameters()))
    model.to("hpu")
    assert model.head.weight is model.emb.weight
    assert model.again[0] is model.again[2] and model.block.weight.device.type == "hpu"
    assert len(list(model.parameters())) == n_params
    _train(ref)
    _train(model)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(p.cpu(), q), name
    assert torch.equal(model.head.weight.cpu(), ref.head.weight)


def test_sharing_survives_the_way_back_and_dtype_changes():
    model = Tied().to("hpu")
    model.half()
    assert model.head.weight is model.emb.weight and model.emb.weight.dtype == torch.float16
    model.to("cpu")
    assert model.head.weight is model.emb.weight and model.emb.weight.device.type == "cpu"


def test_unshared_parameters_are_not_tied():
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b.weight = nn.Parameter(a.weight.detach().clone())        # equal values, not shared
    m = nn.Sequential(a, b).to("hpu")
    assert m[0].weight is not m[1].weight
