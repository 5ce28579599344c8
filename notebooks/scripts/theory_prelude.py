"""What every fresh-process script of notebook 01 (01_theory_of_operations) starts with: the imports,
`report` (prints the counts as one JSON object, the last line of output: hpu_lab/lab/fresh.py) and
section 1's 5-op forward pass with its inputs. The scripts beside it import it."""
import json, torch, torch.nn as nn, torch.nn.functional as F
import hpu_lab, hpu_lab.core as htcore
from hpu_lab import events as ev


def report(**values):
    print(json.dumps(values))


def forward(x, w1, w2):               # the 5 ops of section 1
    h = torch.relu(x @ w1)
    return torch.softmax(h @ w2, dim=1).sum()


torch.manual_seed(0)
x, w1, w2 = torch.randn(64, 32, device="hpu"), torch.randn(32, 16, device="hpu"), torch.randn(16, 8, device="hpu")
