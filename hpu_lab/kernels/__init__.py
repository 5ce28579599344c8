"""Ops with a handler of their own, each registered with the router or torch.library by ``install()``
at ``import hpu_lab``: autocast, SDPA, RNNs, fp8 and quantization, the bridge's custom ops
(``torch.ops.hpu.*``), and CPU-identical formulas.
"""
