"""What the reference answers share: seed 000's model, its data and its training loop."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import core as htcore
from ..examples import Net  # noqa: F401  (seed 000's model; the answers import it from here)

DEVICE = "hpu"


def _batches(total: int, batch_size: int):
    torch.manual_seed(0)
    data, target = torch.randn(total, 1, 28, 28), torch.randint(0, 10, (total,))
    return [(data[i:i + batch_size], target[i:i + batch_size]) for i in range(0, total, batch_size)]


def _train(batches, first_mark=True, print_loss=False, mark_after_forward=False):
    """Seed 000's training loop (notebook 00 section 3), with the exercises' switches."""
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
    model.train()
    for data, target in batches:
        data, target = data.to(DEVICE), target.to(DEVICE)
        optimizer.zero_grad(set_to_none=True)
        output = model(data)
        if mark_after_forward:
            htcore.mark_step()
        loss = F.nll_loss(output, target)
        loss.backward()
        if first_mark:
            htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
        if print_loss:
            print(loss.item())
    return loss
