"""``habana_frameworks.torch.hpex.experimental.transformer_engine`` (``import ... as te``).

Intel's Transformer Engine for Gaudi 2/3, as far as hpu_lab's fp8 ops reach: ``te.Linear``,
``te.fp8_autocast``, ``te.recipe`` (``Format``, ``DelayedScaling``) and ``te.fp8``
(``is_fp8_available``, ``is_fp8_enabled``). The GEMMs run through ``torch.ops.hpu.cast_to_fp8_v2`` and
``fp8_gemm_v2`` (hpu_lab/kernels/fp8_ops.py); see linear.py for the computation. Other TE modules
(LayerNormLinear, LayerNormMLP, the fp8 attention of ``te.FusedAttention``) are not emulated:
using one raises AttributeError naming it.
"""
from __future__ import annotations

from . import fp8, recipe  # noqa: F401
from .fp8 import fp8_autocast, is_fp8_available, is_fp8_enabled  # noqa: F401
from .linear import Linear  # noqa: F401

__all__ = ["Linear", "fp8", "fp8_autocast", "is_fp8_available", "is_fp8_enabled", "recipe"]

_NOT_EMULATED = ("LayerNormLinear", "LayerNormMLP", "LayerNorm", "RMSNorm", "FusedAttention",
                 "TransformerLayer", "DotProductAttention")


def __getattr__(name):
    if name in _NOT_EMULATED:
        raise AttributeError(f"transformer_engine.{name} is not emulated by hpu_lab (emulated: Linear, "
                             f"fp8_autocast, recipe, fp8)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
