"""Reference answers and starting code of the exercises (hpu_lab.lab.answers), part 2."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ... import core as htcore
from ._common import DEVICE, Net


# -- notebook 02 (sections 4-6) ---------------------------------------------------------------------
def _seed_net_step(batch: int):
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data, target = torch.randn(batch, 1, 28, 28).to(DEVICE), torch.randint(0, 10, (batch,)).to(DEVICE)

    def step():
        opt.zero_grad(set_to_none=True)
        F.nll_loss(model(data), target).backward()
        htcore.mark_step()
        opt.step()
        htcore.mark_step()
    return step


def start_02_2():
    _seed_net_step(16)()                  # the section's own model runs; nothing is timed


def reference_02_2():
    from ..timing import step_times
    return {b: step_times(_seed_net_step(b), steps=2, warmup=2, card="gaudi2") for b in (200, 800)}


def _accumulate(every: int):
    w = torch.randn(1000, 1000, device=DEVICE) / 30
    htcore.mark_step()
    torch.hpu.reset_peak_memory_stats()
    acc = torch.zeros(1000, 1000, device=DEVICE)
    for i in range(30):
        batch = torch.randn(1000, 1000).to(DEVICE)   # 4 MB copied to the device
        acc = acc + torch.tanh(batch @ w)
        if (i + 1) % every == 0:
            htcore.mark_step()
    htcore.mark_step()
    acc.sum().item()
    return torch.hpu.max_memory_allocated()


def start_02_3():
    return _accumulate(1)


def reference_02_3():
    return _accumulate(5)


def _metric_steps(final_mark: bool):
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data, target = torch.randn(200, 1, 28, 28).to(DEVICE), torch.randint(0, 10, (200,)).to(DEVICE)
    htcore.mark_step()
    accuracies = []
    for n in (50, 80, 120, 160):
        optimizer.zero_grad(set_to_none=True)
        output = model(data)                                  # static: same shapes every step
        F.nll_loss(output, target).backward()
        htcore.mark_step()
        accuracies.append((output[:n].argmax(dim=1) == target[:n]).float().mean())   # dynamic: n changes
        if final_mark:
            htcore.mark_step()
    return accuracies


def start_02_4():
    return _metric_steps(final_mark=True)


def reference_02_4():
    return _metric_steps(final_mark=False)


# -- notebook 03 section 6, 05 sections 1-2, 07 section 3 ------------------------------------------
def _wide_estimates(batches):
    from ... import perfmodel as pm
    torch.manual_seed(0)
    wide = nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 10)).to(DEVICE)
    opt = torch.optim.SGD(wide.parameters(), lr=0.01)
    htcore.mark_step()

    def step(xb, tb):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(wide(xb), tb).backward()
        htcore.mark_step()
        opt.step()
        htcore.mark_step()
    out = {}
    for b in batches:
        xb, tb = torch.randn(b, 784).to(DEVICE), torch.randint(0, 10, (b,)).to(DEVICE)
        htcore.mark_step()
        out[b] = pm.estimate(step, xb, tb, device="gaudi2")
    return out


def start_03_4():
    return _wide_estimates([2048])


def reference_03_4():
    return _wide_estimates([2048, 1024])


def _static_answers(copy: bool):
    torch.manual_seed(0)
    model = Net().to(DEVICE).eval()
    static_in = torch.randn(4, 1, 28, 28, device=DEVICE)
    g = htcore.hpu.HPUGraph()
    with torch.no_grad():
        g.capture_begin()
        static_out = model(static_in)
        g.capture_end()
    answers = []
    for _ in range(6):
        static_in.copy_(torch.randn(4, 1, 28, 28))
        g.replay()
        answers.append(static_out.cpu() if copy else static_out)
    return answers


def start_05_1():
    return _static_answers(copy=True)


def reference_05_1():
    return _static_answers(copy=False)


def _serve_capped(max_graphs):
    torch.manual_seed(0)
    model = torch.hpu.wrap_in_hpu_graph(Net().to(DEVICE).eval(), max_graphs=max_graphs)
    images = torch.randn(197, 1, 28, 28)
    with torch.no_grad():
        return [model(images[i:i + 64].to(DEVICE)).cpu() for i in range(0, 197, 64)]


def start_05_4():
    return _serve_capped(None)


def reference_05_4():
    return _serve_capped(1)


def _batch_epoch(batch_size: int, limit=None):
    from ... import config
    old = config.get("HPU_LAB_MEMORY_LIMIT")
    if limit is not None:
        config.set(HPU_LAB_MEMORY_LIMIT=limit)
    try:
        torch.manual_seed(0)
        model = Net().to(DEVICE)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data, target = torch.randn(batch_size, 1, 28, 28).to(DEVICE), torch.randint(0, 10, (batch_size,)).to(DEVICE)
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data), target).backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
        torch.hpu.synchronize()
    finally:
        config.set(HPU_LAB_MEMORY_LIMIT=str(old))


def start_07_2():
    _batch_epoch(800)


def reference_07_2():
    _batch_epoch(800, "4MiB")          # 800 fits in 4 MiB ...
    _batch_epoch(1600, "4MiB")         # ... 1600 does not


# -- notebook 04 section 3, 06 section 7 ---------------------------------------------------------------
def _paths(merged: bool):
    import random
    random.seed(0)
    torch.manual_seed(0)
    module1 = htcore.hpu.make_graphed_callables(nn.Linear(784, 128).to(DEVICE),   # as in the notebook
                                                (torch.randn(5, 784, device=DEVICE),))
    if not merged:                    # the section's code: a module per path, graphed
        module2 = htcore.hpu.make_graphed_callables(nn.Linear(128, 100).to(DEVICE),
                                                    (torch.randn(5, 128, device=DEVICE, requires_grad=True),))
        module3 = htcore.hpu.make_graphed_callables(nn.Linear(128, 50).to(DEVICE),
                                                    (torch.randn(5, 128, device=DEVICE, requires_grad=True),))
        branches = None
    else:
        class Branches(nn.Module):    # module2 and module3 as one module, the path an argument
            def __init__(self):
                super().__init__()
                self.module2 = nn.Linear(128, 100)
                self.module3 = nn.Linear(128, 50)

            def forward(self, x, path):
                return self.module2(x) if path == 1 else self.module3(x)
        branches = Branches().to(DEVICE)
        htcore.hpu.ModuleCacher(max_graphs=10)(model=branches, inplace=True)
    params = list(module1.parameters()) + list((branches if branches is not None else
                                                nn.ModuleList([module2, module3])).parameters())
    optimizer = torch.optim.Adadelta(params, lr=0.1)
    for _ in range(8):
        data = torch.rand(5, 784).to(DEVICE)
        tmp = module1(data)
        path = 1 if random.random() > 0.5 else 2
        if branches is not None:
            tmp = branches(tmp, path=path)
        else:
            tmp = module2(tmp) if path == 1 else module3(tmp)
        loss = torch.abs(tmp.mean() - data.mean())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        htcore.mark_step()
    return branches.module_cacher.num_graphs if branches is not None else None


def start_04_2():
    return _paths(merged=False)


def reference_04_2():
    return _paths(merged=True)


def _pipelined_step(pipelining: bool):
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
    data, target = torch.randn(200, 1, 28, 28).to(DEVICE), torch.randint(0, 10, (200,)).to(DEVICE)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data), target)
        if pipelining:
            htcore.mark_step()             # launch the forward now
        loss.backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
    return step


def start_06_3():
    _pipelined_step(False)()              # the section's one step, not timed


def reference_06_3():
    from ..timing import step_times
    return {name: step_times(_pipelined_step(p), steps=2, warmup=2, card="gaudi2", name=name)
            for name, p in (("plain", False), ("pipelined", True))}
