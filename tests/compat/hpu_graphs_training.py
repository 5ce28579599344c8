"""Training with HPU Graphs the way the bridge's own graph tests and optimum-habana do it: seeds
through ``habana_frameworks.torch.hpu.random``, a pinned-memory DataLoader and non_blocking copies,
``ModuleCacher`` over the model, ``make_graphed_callables`` for a loss head, ``TensorPacker`` for a
dict of outputs, and an evaluation on a side stream ordered with an event.

    python -m hpu_lab run tests/compat/hpu_graphs_training.py [--cpu]
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import habana_frameworks.torch as ht
import habana_frameworks.torch.core as htcore
from habana_frameworks.torch.hpu import random as hpu_random
from habana_frameworks.torch.hpu.graphs import TensorPacker

device = "cpu" if "--cpu" in sys.argv else "hpu"
on_hpu = device == "hpu"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x, scale=1.0):
        return {"logits": self.fc2(F.relu(self.fc1(x))) * scale, "hidden": self.fc1(x)}


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, logits):
        return F.log_softmax(self.proj(logits), dim=1)


torch.manual_seed(5)
hpu_random.manual_seed_all(5)
ds = torch.utils.data.TensorDataset(torch.randn(96, 20), torch.randint(0, 4, (96,)))
loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, drop_last=True, pin_memory=True)

model, head = Net().to(device), Head().to(device)
sample = torch.randn(16, 4, device=device, requires_grad=True)     # drawn on both devices: same RNG use
if on_hpu:
    model = ht.hpu.ModuleCacher(max_graphs=4)(model=model, inplace=True)
    head = ht.hpu.make_graphed_callables(head, (sample,))
opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=0.01)
packer = TensorPacker()

losses = []
for epoch in range(2):
    for data, target in loader:
        data = data.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        out = model(data, scale=0.5)
        tensors, meta = packer.pack(out)               # the graph sees a flat tuple of tensors
        out = packer.unpack(tensors, meta)
        loss = F.nll_loss(head(out["logits"]), target) + 1e-3 * out["hidden"].square().mean()
        loss.backward()
        htcore.mark_step()
        opt.step()
        opt.zero_grad()
        htcore.mark_step()
        losses.append(loss.item())

# evaluation on a side stream, ordered after the training with an event
model.eval()
if on_hpu:
    side = ht.hpu.Stream()
    done = ht.hpu.Event()
    done.record()
    side.wait_event(done)
    with ht.hpu.stream(side):
        with torch.no_grad():
            logits = model(ds.tensors[0].to(device))["logits"]
        htcore.mark_step()
    side.synchronize()
else:
    with torch.no_grad():
        logits = model(ds.tensors[0])["logits"]
accuracy = logits.argmax(1).eq(ds.tensors[1]).float().mean().item()    # labels still on the CPU
stats = {}
if on_hpu:
    cacher = model.module_cacher
    stats = {"graphs": cacher.num_graphs, "hits": sum(cacher.cached_hits_dict.values())}
print("RESULT", json.dumps({"losses": losses, "accuracy": accuracy, "stats": stats}))
