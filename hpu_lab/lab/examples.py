"""The seeds' example models and training loops, written once for the tests and the benchmark.

Seed 000 ("HPU Graphs for Training"): the MNIST MLP ``Net`` and one step of its loops -- lazy mode
(``train_step``: mark_step before and after the optimizer step; the make_graphed_callables and
ModuleCacher loops are the same step on the wrapped model) and capture and replay
(``capture_train_step``). Seed 001 ("Run Inference Using HPU Graphs"): ``GraphTest``.

The notebooks show the seeds' code itself where that code is the lesson; this module serves code
that only needs the model or the loop.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import core as htcore


class Net(nn.Module):
    """Seed 000's MNIST model: 784-128-10 with dropout 0.5 and a log-softmax, as the seed writes it."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train_step(model, optimizer, data, target, device="hpu", loss_fn=F.nll_loss, set_to_none=True):
    """One step of seed 000's ``train`` loop (lazy mode); returns the loss tensor (not read, so no sync).
    On device "cpu" the same step is plain eager PyTorch (mark_step has nothing pending)."""
    data, target = data.to(device), target.to(device)
    optimizer.zero_grad(set_to_none=set_to_none)
    loss = loss_fn(model(data), target)
    loss.backward()
    # mark step is needed for HPU Lazy mode before and after the optimizer step
    htcore.mark_step()
    optimizer.step()
    htcore.mark_step()
    return loss


def train(model, optimizer, batches, device="hpu", loss_fn=F.nll_loss, set_to_none=True) -> list:
    """``train_step`` over ``batches`` of (data, target); the losses as floats (one host sync a step)."""
    return [train_step(model, optimizer, x, t, device, loss_fn, set_to_none).item() for x, t in batches]


def capture_train_step(model, optimizer, static_input, static_target, loss_fn=F.nll_loss, warmup=3):
    """Seed 000's capture-and-replay loop up to its main loop: ``warmup`` steps on a side stream, then
    forward, loss, backward and the optimizer step captured in one HPUGraph.

    Returns ``(step, graph, static_loss)``: ``step(data, target)`` copies a batch into the static
    tensors and replays; the step's loss is then in ``static_loss``."""
    with torch.hpu.stream(torch.hpu.Stream()):
        for _ in range(warmup):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(static_input), static_target).backward()
            optimizer.step()
    g = torch.hpu.HPUGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.hpu.graph(g):
        static_loss = loss_fn(model(static_input), static_target)
        static_loss.backward()
        optimizer.step()

    def step(data, target):
        # data must be copied to existing tensors that were used in the capture phase
        static_input.copy_(data)
        static_target.copy_(target)
        g.replay()
    return step, g, static_loss


class GraphTest:
    """Seed 001's capture-and-replay object, completed as the docs have it: the first call captures
    ``b = full(size, 1) + 1`` on its own stream, every later call replays; ``b`` is the graph's output
    (one device tensor, rewritten by each replay)."""

    def __init__(self, size: int) -> None:
        self.g = torch.hpu.HPUGraph()
        self.s = torch.hpu.Stream()
        self.size = size
        self.b = None

    def wrap_func(self, first: bool) -> None:
        if first:
            with torch.hpu.stream(self.s):
                self.g.capture_begin()
                a = torch.full((self.size,), 1, device="hpu")
                b = a
                b = b + 1
                self.g.capture_end()
            self.b = b
        else:
            self.g.replay()
