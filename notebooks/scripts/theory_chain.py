"""Notebook 01, section 4: the 20-layer chain, run in the notebook (lazy mode) and by
theory_compiled_chain.py (torch.compile)."""
import torch


def chain(x, ws):                       # 20 matmul + tanh layers, then a sum: 41 ops
    for w in ws:
        x = torch.tanh(x @ w)
    return x.sum()


def chain_weights():
    return [torch.randn(32, 32, device="hpu") / 6 for _ in range(20)]
