"""The seed-000 MLP trained on "hpu" gives the numbers of the same loop on CPU."""
import pytest
import torch
import torch.nn.functional as F

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab.lab.examples import Net, train_step      # seed 000


def train(device, opt_cls, steps=20, **opt_kw):
    torch.manual_seed(0)
    model = Net().to(device)
    opt = opt_cls(model.parameters(), lr=0.05, **opt_kw)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g))
               for _ in range(4)]
    losses = []
    for i in range(steps):
        data, target = batches[i % 4]                  # a small set seen again: loss must fall
        losses.append(train_step(model, opt, data, target, device))
    return [l.item() for l in losses], [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("opt_cls, kw", [
    (torch.optim.Adadelta, {}),
    (torch.optim.Adadelta, {"foreach": False}),
    (torch.optim.SGD, {"momentum": 0.9}),
    (torch.optim.SGD, {"momentum": 0.9, "foreach": False}),
    (torch.optim.Adam, {}),
    (torch.optim.Adam, {"foreach": False}),
    (torch.optim.AdamW, {}),
    (torch.optim.AdamW, {"foreach": False}),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_mlp_20_steps_equals_cpu(opt_cls, kw):
    lc, pc = train("cpu", opt_cls, **kw)
    lh, ph = train("hpu", opt_cls, **kw)
    # the same ops in the same order on the same CPU kernels: equal, not merely close
    assert lc == lh
    for a, b in zip(pc, ph):
        assert torch.equal(a, b)
    assert sum(lh[-4:]) < sum(lh[:4])


def test_issue_example_runs_unchanged():
    """The loop of the foundation issue, with the seed's Adadelta and a DataLoader."""
    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,)))
    loader = torch.utils.data.DataLoader(ds, batch_size=64)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    for data, target in loader:
        data, target = data.to("hpu"), target.to("hpu")
        loss = F.nll_loss(model(data), target)
        loss.backward()
        htcore.mark_step()
        opt.step()
        opt.zero_grad()
        htcore.mark_step()
    assert isinstance(loss.item(), float)


@pytest.mark.parametrize("lazy", ["1", "0"], ids=["lazy", "eager"])
def test_batch_norm_bumps_its_running_stats_as_cpu(lazy):
    # CPU's batch-norm kernel writes running_mean/var without a bump; num_batches_tracked.add_(1)
    # bumps once. (A module moved with .to("hpu") starts at version 0, as after any .to(device):
    # the tensors are new; compare modules made on their device, as here.)
    from hpu_lab import config
    config.set(PT_HPU_LAZY_MODE=lazy)
    try:
        seen = []
        for dev in ("cpu", "hpu"):
            torch.manual_seed(0)
            bn = torch.nn.BatchNorm2d(3, device=dev)
            x = torch.randn(2, 3, 4, 4).to(dev).requires_grad_()
            versions = []
            for train in (True, True, False):
                bn.train(train)
                bn(x).sum().backward()
                if dev == "hpu" and lazy == "1":
                    htcore.mark_step()
                versions.append(tuple(t._version for t in (bn.running_mean, bn.running_var,
                                                           bn.num_batches_tracked, bn.weight)))
            seen.append((versions, bn.running_mean.cpu(), bn.running_var.cpu()))
        assert seen[1][0] == seen[0][0] == [(1, 1, 2, 1), (1, 1, 3, 1), (1, 1, 3, 1)]
        assert torch.allclose(seen[1][1], seen[0][1]) and torch.allclose(seen[1][2], seen[0][2])
    finally:
        config.reload()
