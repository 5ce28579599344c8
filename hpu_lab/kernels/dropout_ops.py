"""``aten::dropout`` and its feature / alpha variants on hpu when they arrive whole: under
``torch.inference_mode()`` (or with autograd otherwise out of the way) these CompositeImplicit ops
are not decomposed before an hpu tensor's ``__torch_dispatch__`` sees them.

They used to go to the host as random ops: a host sync each call in lazy mode, even for
``nn.Dropout`` in eval mode (where dropout is the identity), and "aten::dropout is not supported
during HPU Graph capturing" inside a capture (lightning-habana's inference loops capture under
``torch.inference_mode()``). On a Gaudi a captured dropout is recorded like any op, its seed a
graph input drawn again at each replay (``get_seed_tensor_hpu`` in the bridge's
``backend/random.cpp`` registers the seed tensor with the capture; ``HPUGraph::mark_step`` keeps
that map and the replay passes it to ``ExecuteCachedGraph``).

Here each op does what ATen's ``dropout.cpp`` does for a PrivateUse1 tensor:

- ``p == 0``, ``train=False`` or no elements: the input itself (the same tensor, as CPU returns);
- ``dropout`` with ``0 < p < 1``: ``native_dropout`` (the fused path ATen takes for PrivateUse1),
  which hpu_lab draws on the host (special_ops.native_dropout): a graph input redrawn at replay;
- otherwise ``_dropout_impl``: ``p == 1`` multiplies by a zero scalar; else a bernoulli(1 - p) mask
  (per feature map for the feature variants) drawn on the host from torch's generator, as CPU
  draws it, becomes a graph input redrawn at each replay, and the scaling is recorded on the
  device with CPU's op sequence (``div`` by 1 - p, or alpha dropout's affine ``a``, ``b``).
"""
from __future__ import annotations

import math

import torch

from ..dispatch import route
from ..lazy import S, lazy_op, write_concrete
from ..dispatch.special_ops import native_dropout
from ..tensor import contiguous_strides, new_storage_tensor

aten = torch.ops.aten
_ALPHA = 1.7580993408473766          # ATen's alpha dropout constant (SELU's alpha * lambda)


def _args(args, kwargs):
    x = args[0]
    p = args[1] if len(args) > 1 else kwargs["p"]
    train = args[2] if len(args) > 2 else kwargs["train"]
    return x, p, train


def _mask(x, p, feature):
    """The bernoulli(1 - p) mask CPU draws (``empty_like`` or ``make_feature_noise``), as an hpu
    tensor whose buffer is drawn again at each replay of a capture."""
    if feature:
        if x.dim() < 2:
            raise RuntimeError(f"Feature dropout requires at least 2 dimensions in the input")
        size = (x.shape[0], x.shape[1]) + (1,) * (x.dim() - 2)
        stride = contiguous_strides(size)
    else:
        size = tuple(x.shape)
        stride = tuple(torch.empty_like(torch.empty_strided(size, x.stride(), device="meta")).stride())
    dtype = x.dtype                       # no tensor in the closure: it outlives the call (Inp.regen)

    def draw():
        return torch.empty_strided(size, stride, dtype=dtype).bernoulli_(1 - p)

    if S.capture is not None:
        S.capture.note_random()
    m = new_storage_tensor(size, stride, dtype, None)
    write_concrete(m, draw(), regen=draw, op="aten::bernoulli_")
    return m


def _handler(feature: bool, alpha: bool):
    def handler(func, args, kwargs):
        x, p, train = _args(args, kwargs)
        if not 0 <= p <= 1:
            raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")
        if p == 0 or not train or x.numel() == 0:
            return x
        if not feature and not alpha and p < 1:
            return native_dropout(aten.native_dropout.default, (x, p, True), {})[0]
        if p == 1:
            return lazy_op(aten.mul.Tensor, (x, torch.zeros((), dtype=x.dtype, device=x.device)), {})
        m = _mask(x, p, feature)
        if alpha:
            a = 1.0 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
            b = lazy_op(aten.add.Tensor, (lazy_op(aten.mul.Tensor, (lazy_op(aten.add.Tensor, (m, -1), {}),
                                                                    _ALPHA * a), {}), _ALPHA * a * p), {})
            noise = lazy_op(aten.mul.Tensor, (m, a), {})
            return lazy_op(aten.add.Tensor, (lazy_op(aten.mul.Tensor, (x, noise), {}), b), {})
        noise = lazy_op(aten.div.Tensor, (m, 1 - p), {})
        return lazy_op(aten.mul.Tensor, (x, noise), {})
    return handler


def install() -> None:
    route.register_special(aten.dropout.default, _handler(False, False))
    route.register_special(aten.feature_dropout.default, _handler(True, False))
    route.register_special(aten.alpha_dropout.default, _handler(False, True))
    route.register_special(aten.feature_alpha_dropout.default, _handler(True, True))
