"""Intel's Gaudi inference tutorial (PyTorch/Inference, examples 1 and 2), as written for Gaudi:
lazy mode, model.eval(), an HPU Graph around the model, mark_step after each batch, and the
accuracy computed with the labels still on the CPU (``output.max(1)[1].eq(label)``).

    python -m hpu_lab run tests/compat/inference_tutorial.py            # on hpu
    python -m hpu_lab run tests/compat/inference_tutorial.py --cpu      # the same on the CPU
"""
import json
import os
import sys

os.environ['PT_HPU_LAZY_MODE'] = '1'

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

import habana_frameworks.torch as ht
import habana_frameworks.torch.core as htcore

from hpu_lab.lab.data import MNISTLike      # stands for torchvision's MNIST (no download here)

device = "cpu" if "--cpu" in sys.argv else "hpu"


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        out = x.view(-1, 28 * 28)
        out = F.relu(self.fc1(out))
        out = F.relu(self.fc2(out))
        out = self.fc3(out)
        out = F.log_softmax(out, dim=1)
        return out


torch.manual_seed(0)
model = Net()
# a few steps of training on the CPU stand for the tutorial's downloaded checkpoint
train = DataLoader(torch.utils.data.Subset(MNISTLike(train=True), range(512)), batch_size=64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for data, label in train:
    opt.zero_grad()
    F.nll_loss(model(data), label).backward()
    opt.step()
checkpoint = model.state_dict()

model = Net()
model.load_state_dict(checkpoint)
model = model.eval()
model = model.to(device)
if device == "hpu":
    model = ht.hpu.wrap_in_hpu_graph(model)          # example 2

test_loader = DataLoader(torch.utils.data.Subset(MNISTLike(train=False), range(192)), batch_size=32)
correct = 0
with torch.no_grad():
    for batch_idx, (data, label) in enumerate(test_loader):
        data = data.to(device)
        output = model(data)
        # In Lazy mode execution, mark_step() need to be added after inference
        htcore.mark_step()
        correct += output.max(1)[1].eq(label).sum()

print('Accuracy: {:.2f}%'.format(100. * correct / (len(test_loader) * 32)))
print("RESULT", json.dumps({"correct": int(correct), "device": str(output.device.type)}))
