"""ModuleCacher as Intel's examples use it (issue 11, point 6): dry_run / disable_tensor_cache train
from the first step, and torch's decomposition of linear on a 1-D input does not count as a user's
in-place view update."""
import copy

import pytest
import torch

import hpu_lab.core as htcore


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 5)
        self.fc2 = torch.nn.Linear(5, 3)

    def forward(self, x):
        return self.fc2(torch.relu_(self.fc1(x)))


def _train(model, device, steps, cacher_kw=None, batch=(4, 6)):
    model = copy.deepcopy(model).to(device)
    if cacher_kw is not None:
        model = torch.hpu.ModuleCacher(max_graphs=4)(model=model, inplace=True, **cacher_kw)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(*batch, generator=g).to(device)
        loss = model(x).square().sum()
        loss.backward()
        if device == "hpu":
            htcore.mark_step()
        opt.step()
        opt.zero_grad()
        if device == "hpu":
            htcore.mark_step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("kw", [dict(dry_run=True), dict(disable_tensor_cache=True), {}],
                         ids=["dry_run", "disable_tensor_cache", "default"])
def test_module_cacher_trains_like_cpu_from_the_first_step(kw):
    torch.manual_seed(0)
    net = Net()
    cpu, _ = _train(net, "cpu", 4)
    hpu, model = _train(net, "hpu", 4, kw)
    assert hpu == pytest.approx(cpu, rel=1e-5)
    cacher = model.module_cacher
    assert cacher.num_graphs == 1 and sum(cacher.cached_hits_dict.values()) == 4


def test_inplace_relu_of_linear_on_a_1d_input():
    torch.manual_seed(0)
    net = Net()
    cpu, _ = _train(net, "cpu", 3, batch=(6,))
    hpu, model = _train(net, "hpu", 3, {}, batch=(6,))
    assert hpu == pytest.approx(cpu, rel=1e-5) and model.module_cacher.num_graphs == 1


def test_a_users_inplace_update_of_part_of_a_tensor_is_still_refused():
    from hpu_lab.graphs import HPUGraphError

    class Partial(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            y[:, 0].add_(1)                 # a part of y: the documented limitation (seed 001)
            return y

    m = torch.hpu.ModuleCacher(max_graphs=2)(model=Partial().to("hpu"), inplace=True)
    with pytest.raises(HPUGraphError, match="in-place update of a view"):
        m(torch.ones(2, 3, device="hpu", requires_grad=True))
