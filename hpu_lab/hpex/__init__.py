"""hpu_lab.hpex: Habana's PyTorch extensions (habana_frameworks.torch.hpex), emulated.

- ``kernels.FusedSDPA``: fused scaled-dot-product attention with recompute / no-recompute modes;
- ``optimizers.FusedAdamW``, ``optimizers.FusedSGD``: one fused op per optimizer step;
- ``normalization.FusedClipNorm``: one fused op for gradient-norm clipping;
- ``kernels.RotaryPosEmbeddingHelperV1/V2/V3``, ``kernels.CustomSoftmax``, ``normalization.FusedRMSNorm``,
  ``movingavrg.FusedEMA``: LLM / training kernels as ``torch.ops.hpu`` custom ops (``hpu_lab/kernels/custom_ops.py``);
- ``hmp``: the legacy Habana Mixed Precision tool (deprecated; import it explicitly).

Each fused kernel is one node of the lazy graph (a ``hpu_lab::`` custom op), see ``_common.py``.
"""
from . import kernels, normalization, optimizers  # noqa: F401
