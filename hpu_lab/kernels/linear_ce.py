"""``F.linear_cross_entropy`` with chunking options on hpu: the chunked kernel CPU runs, with CPU's picks.

With ``options`` given, torch runs ONE custom op (``torch_nn::_linear_cross_entropy_batch_chunked``,
or ``..._no_reduction`` for ``reduction="none"``): on hpu it is one node of the graph already, whose
kernel is the CPU's. But before calling it, torch resolves the ``"auto"`` options per device type
(``LinearCrossEntropyOptions._adjust``): CPU gets ``acc_policy="accurate"``, ``chunking_method=
"aspect_ratio"`` and a float32 accumulator for bfloat16/float16 inputs; an unlisted device type
("hpu") gets the fallback for a CUDA-like backend with native low-precision matmul (``"compact"``,
chunks half the size, accumulation in bfloat16). hpu_lab's kernels are the CPU's (low-precision
GEMMs computed as the CPU computes them), so the fallback's premise does not hold: the bfloat16 loss
landed 1-4 ulps from CPU's. Here an hpu input resolves the options as a CPU input does, so the op
gets the same chunk size, policy and accumulator dtype, and the result equals CPU's bit for bit.
Explicit (non-"auto") options are untouched; they already resolve the same on both devices.
"""
from __future__ import annotations

import functools

import torch

_orig = None


def _options_class():
    try:
        from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions
    except ImportError:          # a torch without the chunked path: nothing to align
        return None
    return LinearCrossEntropyOptions


def install() -> None:
    global _orig
    cls = _options_class()
    if cls is None or _orig is not None or not hasattr(cls, "_adjust"):
        return
    _orig = cls._adjust

    @functools.wraps(_orig)
    def _adjust(self, num_batches, in_features, num_classes, dtype, device=None):
        if device is not None and torch.device(device).type == "hpu":
            device = torch.device("cpu")         # hpu computes with CPU's kernels: CPU's picks
        return _orig(self, num_batches, in_features, num_classes, dtype, device)

    cls._adjust = _adjust


def uninstall() -> None:
    """Put torch's own ``_adjust`` back (tests)."""
    global _orig
    cls = _options_class()
    if cls is not None and _orig is not None:
        cls._adjust = _orig
        _orig = None
