"""Reference answers and starting code of the exercises (hpu_lab.lab.answers), part 1."""
from __future__ import annotations

import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F

from ... import core as htcore
from ._common import DEVICE, Net, _batches, _train


# -- notebook 00 (my_epoch: one epoch of the 1600-image training set, 8 steps) ----------------
def start_00_1():
    return _train(_batches(1600, 200))


def reference_00_1():
    return _train(_batches(1600, 200), first_mark=False)


def start_00_2():
    return _train(_batches(1600, 200))


def reference_00_2():
    return _train(_batches(1600, 256))


start_00_3 = start_00_1


def reference_00_3():
    return _train(_batches(1600, 200), print_loss=True)


# -- notebook 01 (section 4: y = forward(x, w1, w2), then its value) --------------------------
def _forward_01():
    torch.manual_seed(0)
    x, w1, w2 = (torch.randn(4, 4, device=DEVICE) for _ in range(3))
    return torch.sigmoid(torch.relu(x @ w1) * 2 - 1).sum() * w2.sum()


def start_01_1():
    return _forward_01().item()


def reference_01_1():
    print(_forward_01())


# -- notebook 02 (section 3: the graphs of one training step) --------------------------------
def start_02_1():
    return _train(_batches(800, 200))


def reference_02_1():
    return _train(_batches(800, 200), first_mark=True, mark_after_forward=True)


# -- notebook 03 (section 4: ModuleCacher) ------------------------------------------------------
def _cacher_epoch(batch_size):
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
    htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)
    for data, target in _batches(1600, batch_size):
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data.to(DEVICE)), target.to(DEVICE)).backward()
        optimizer.step()
        htcore.mark_step()
    return model.module_cacher.num_graphs


def start_03_3():
    return _cacher_epoch(200)


def reference_03_3():
    return _cacher_epoch(256)


# -- notebook 04 ---------------------------------------------------------------------------------
def _dynamic_batches(sizes):
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for n in sizes:
        data, target = torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data.to(DEVICE)), target.to(DEVICE)).backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()


def start_04_1():
    _dynamic_batches([200, 200, 96, 200, 96])


def reference_04_1():
    _dynamic_batches([200, 200, 96, 200, 96, 97])


def _dynamic_op(relu: bool, iterations: int = 8):
    torch.manual_seed(0)
    module1 = nn.Linear(10, 3).to(DEVICE)
    module2 = nn.ReLU().to(DEVICE)
    optimizer = torch.optim.Adadelta(itertools.chain(module1.parameters(), module2.parameters()), lr=0.1)
    htcore.hpu.ModuleCacher(max_graphs=10)(model=module1, inplace=True)
    htcore.hpu.ModuleCacher(max_graphs=10)(model=module2, inplace=True)
    inputs = [torch.randn(5, 10) for _ in range(iterations)]
    for data in inputs:
        data, target = data.to(DEVICE), data.mean().to(DEVICE)
        tmp = module1(data)
        tmp = torch.relu(tmp) if relu else tmp[torch.where(tmp > 0)]
        tmp = module2(tmp)
        loss = torch.abs(tmp.mean() - target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        htcore.mark_step()
    return module2.module_cacher.num_graphs


def start_04_3():
    return _dynamic_op(relu=False)


def reference_04_3():
    return _dynamic_op(relu=True)


# -- notebook 01 section 5 (lowering) and 7 (the recipe cache, async launch) ----------------------
def _lowering(keep_y: bool):
    torch.manual_seed(0)
    x, w1, b = torch.randn(8, 16, device=DEVICE), torch.randn(16, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    if keep_y:
        y = torch.relu(x @ w1 + b) * 2 - 1
        z = torch.sigmoid(y).sum(dim=1)
    else:
        z = torch.sigmoid(torch.relu(x @ w1 + b) * 2 - 1).sum(dim=1)
    htcore.mark_step()
    return z


def start_01_2():
    return _lowering(keep_y=True)


def reference_01_2():
    return _lowering(keep_y=False)


def _lr_steps(change_lr: bool):
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (data, target) in enumerate(_batches(600, 200)):
        if change_lr and i == 2:
            optimizer.param_groups[0]["lr"] = 0.05
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data.to(DEVICE)), target.to(DEVICE)).backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()


def start_01_3():
    _lr_steps(change_lr=False)


def reference_01_3():
    _lr_steps(change_lr=True)


def _async(n: int):
    a = torch.randn(n, n, device=DEVICE) / 30
    htcore.mark_step()

    def heavy(h):
        for _ in range(8):
            h = torch.tanh(h @ a)
        return h
    h = heavy(a)
    htcore.mark_step()                 # returns as soon as the recipe is queued
    more = torch.ones(4, device=DEVICE)
    for _ in range(100):               # the host traces the next ops while the device is busy
        more = more * 1.01 + 0.1
    htcore.mark_step()
    torch.hpu.synchronize()
    return h


def start_01_4():
    return _async(700)


def reference_01_4():
    return _async(1500)


# -- notebook 03 ----------------------------------------------------------------------------------
def _captured_constant(change: bool):
    torch.manual_seed(0)
    static_x, w = torch.randn(4, 8, device=DEVICE), torch.randn(8, 3, device=DEVICE)
    step = 2.0
    g = htcore.hpu.HPUGraph()
    g.capture_begin()
    static_y = torch.tanh(static_x @ w) * step
    g.capture_end()
    if change:
        step = 5.0
    static_x.copy_(torch.randn(4, 8))
    g.replay()
    base = torch.tanh(static_x.cpu() @ w.cpu())
    return {"multiplier_used": round((static_y.cpu() / base).mean().item(), 3), "step_now": step}


def start_03_1():
    return _captured_constant(change=False)


def reference_03_1():
    return _captured_constant(change=True)


def _mgc_epoch(only_fc1: bool):
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
    if only_fc1:
        model.fc1 = htcore.hpu.make_graphed_callables(model.fc1, (torch.randn(200, 784, device=DEVICE),))
    else:
        model = htcore.hpu.make_graphed_callables(model, (torch.randn(200, 1, 28, 28, device=DEVICE),))
    return _train_model(model, optimizer, _batches(800, 200))


def _train_model(model, optimizer, batches):
    for data, target in batches:
        data, target = data.to(DEVICE), target.to(DEVICE)
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data), target)
        loss.backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
    return loss


def start_03_2():
    return _mgc_epoch(only_fc1=False)


def reference_03_2():
    return _mgc_epoch(only_fc1=True)


# -- notebook 05 (section 2: wrap_in_hpu_graph) --------------------------------------------------
def _serve(batch_size: int):
    torch.manual_seed(0)
    model = torch.hpu.wrap_in_hpu_graph(Net().to(DEVICE).eval())
    images = torch.randn(197, 1, 28, 28)
    with torch.no_grad():
        return [model(images[i:i + batch_size].to(DEVICE)).cpu() for i in range(0, 197, batch_size)]


def start_05_2():
    return _serve(64)


def reference_05_2():
    return _serve(197)


# -- notebook 06 (section 10: the update's graph) --------------------------------------------------
def _update_graph(make_optimizer):
    from ... import events as ev
    torch.manual_seed(0)
    data, target = torch.randn(200, 1, 28, 28).to(DEVICE), torch.randint(0, 10, (200,)).to(DEVICE)
    model = Net().to(DEVICE)
    opt = make_optimizer(model.parameters())
    sizes = []
    for _ in range(2):                       # the second step: optimizer state exists
        opt.zero_grad(set_to_none=True)
        F.nll_loss(model(data), target).backward()
        htcore.mark_step()
        with ev.Collector(kinds=[ev.GraphBuilt]) as c:
            opt.step()
            htcore.mark_step()
        sizes = [g.node_count for g in c.events]
    return sizes


def start_06_4():
    from ...hpex.optimizers import FusedAdamW
    return _update_graph(lambda p: FusedAdamW(p, lr=1e-3))


def reference_06_4():
    return _update_graph(lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=True))


# -- notebook 07 ------------------------------------------------------------------------------------
def _fallback(op):
    x = torch.linspace(1, 3, 6, device=DEVICE).to(torch.bfloat16)
    y = op(x)
    htcore.mark_step()
    return y


def start_07_1():
    return _fallback(torch.digamma)


def reference_07_1():
    return _fallback(torch.lgamma)


def _printing(print_freq: int, after_update: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(d.to(DEVICE), t.to(DEVICE)) for d, t in _batches(1600, 200)]
    for i, (data, target) in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        htcore.mark_step()
        if print_freq and i % print_freq == 0 and not after_update:
            print(f"step {i}: loss {loss.item():.3f}")
        optimizer.step()
        htcore.mark_step()
        if print_freq and i % print_freq == 0 and after_update:
            print(f"step {i}: loss {loss.item():.3f}")
    return loss


def start_07_3():
    return _printing(1, after_update=False)


def reference_07_3():
    return _printing(4, after_update=True)


def _sample(item: bool, num_steps: int = 10):
    torch.manual_seed(0)
    x = torch.randn(4, 16, device=DEVICE)
    steps = torch.linspace(1, 0, num_steps + 1, device=DEVICE)
    htcore.mark_step()
    for i in range(4, num_steps):
        t_1 = steps[i].item() if item else steps[i]
        t_2 = steps[i + 1].item() if item else steps[i + 1]
        x = x * t_1 + (t_2 - t_1) * torch.tanh(x)
        htcore.mark_step()
    return x


def start_07_4():
    return _sample(item=False)


def reference_07_4():
    return _sample(item=True)
