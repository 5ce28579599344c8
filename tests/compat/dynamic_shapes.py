"""The Gaudi tutorial "Detecting Dynamic Shapes" (dyn_ops.py and the data-dynamicity cell), unchanged
but for the dataset: a model with a data-dependent op, wrapped in Intel's detection tool.

    python -m hpu_lab run tests/compat/dynamic_shapes.py [--cpu]
"""
import json
import os
import sys

os.environ['PT_HPU_LAZY_MODE'] = '1'

import torch
from torch.utils.data import DataLoader
from habana_frameworks.torch.utils.experimental import data_dynamicity, detect_recompilation_auto_model

device = "cpu" if "--cpu" in sys.argv else "hpu"


class InnerNet(torch.nn.Module):
    def __init__(self):
        super(InnerNet, self).__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, 3)

    def forward(self, x):
        x = torch.flatten(self.conv(x), 1)
        x = x[x > 0]  # This is dynamic
        return x.sum()


torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.ReLU(), InnerNet()).to(device)
net = detect_recompilation_auto_model(net, csv_out=os.path.join(os.getcwd(), "dyn"))

outs = []
for bs in [20, 20, 30, 30]:  # Input shape changes at 3rd step
    inp = torch.rand(bs, 1, 50, 50).to(device)
    out = net(inp)
    print(out)
    outs.append(out.item())
rows, counts = net.analyse_dynamicity()  # Call this after a few steps to generate the dynamicity report

# the data-dynamicity cell: a loader whose last batch is smaller
ds = torch.utils.data.TensorDataset(torch.zeros(45, 3), torch.zeros(45))
hist = data_dynamicity(DataLoader(ds, batch_size=7))
comments = sorted({r[6].split(".")[0] for r in rows})
print("RESULT", json.dumps({"outs": outs, "shapes": len(hist), "comments": comments if device == "hpu" else None}))
