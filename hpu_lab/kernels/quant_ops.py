"""``quantized_decomposed`` (de)quantization on hpu as Gaudi's own kernels compute it.

The bridge registers its TPC kernels ``quantize_per_tensor_<dtype>`` / ``quantize_per_channel`` /
``dequantize_per_*`` for PyTorch's ``quantized_decomposed`` ops (PT2E quantization, fp8 inference),
and they differ from torch's reference decomposition in two ways that Intel's tests pin down:

- **fp8 targets are not rounded to integers**: ``x / scale + zero_point`` is clamped to
  [quant_min, quant_max] and cast to ``float8_e4m3fn``/``float8_e5m2`` (round to nearest even, as
  torch's cast). torch's decomposition rounds to an integer first, which throws away fp8's fraction
  bits; for integer targets both round half to even.
- **the quantize kernel computes in the input's precision**: a bf16 input is scaled, rounded,
  shifted and clamped in bf16 (the scale taken to bf16 first), as the ``_bf16`` kernel does; torch
  widens to float32.

Dequantize is ``(x - zero_point) * scale`` computed in float32 and rounded once to ``out_dtype``;
torch's decomposition fails on fp8 input (``Promotion for Float8 Types is not supported``), and for
integer input this is the value torch computes.

Each op is built from aten ops on the hpu tensors (a few lazy nodes instead of the fused kernel);
the values are the ones the kernel's arithmetic gives.
"""
from __future__ import annotations

import torch

from ..dispatch import route

aten = torch.ops.aten
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _d(op, *args, **kwargs):
    return route.dispatch(op, args, kwargs)


def _bind(func, args, kwargs):
    sch = func._schema.arguments
    v = {a.name: (args[i] if i < len(args) else kwargs.get(a.name, a.default_value)) for i, a in enumerate(sch)}
    return [v[a.name] for a in sch]


def _to(t, dtype):
    return t if t.dtype == dtype else _d(aten._to_copy.default, t, dtype=dtype)


def _channel(t, x, axis, dtype):
    """Per-channel parameters as a tensor that broadcasts along ``axis`` of ``x``."""
    shape = [1] * x.dim()
    shape[axis] = -1
    return _to(_d(aten.view.default, t, shape), dtype)


def _apply(x, param, dtype, tensor_op, scalar_op):
    if isinstance(param, torch.Tensor):
        return _d(tensor_op, x, _to(param, dtype) if param.dim() == 0 or param.is_floating_point() else param)
    return _d(scalar_op, x, param)


def _quantize(x, scale, zero_point, quant_min, quant_max, dtype, axis=None):
    if not x.is_floating_point() or x.dtype in _FP8:
        raise RuntimeError(f"quantize: expected a float32/bfloat16/float16 input, got {x.dtype}")
    cd = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.float32
    v = _to(x, cd)
    if axis is not None:
        axis = axis % x.dim()
        inv = _d(aten.reciprocal.default, _channel(scale, x, axis, cd))
        v = _d(aten.mul.Tensor, v, inv)
    elif isinstance(scale, torch.Tensor):
        v = _d(aten.mul.Tensor, v, _d(aten.reciprocal.default, _to(scale, cd)))
    else:   # the kernel takes the scale as a constant of the input's dtype
        inv = 1.0 / float(torch.tensor(scale, dtype=cd))
        v = _d(aten.mul.Scalar, v, float(torch.tensor(inv, dtype=cd)))
    if dtype not in _FP8:
        v = _d(aten.round.default, v)
    if axis is not None:
        v = _d(aten.add.Tensor, v, _channel(zero_point, x, axis, cd))
    else:
        v = _apply(v, zero_point, cd, aten.add.Tensor, aten.add.Scalar)
    if isinstance(quant_min, torch.Tensor) or isinstance(quant_max, torch.Tensor):
        lo, hi = (_to(q, cd) if isinstance(q, torch.Tensor) else q for q in (quant_min, quant_max))
        v = _d(aten.clamp_min.Tensor, v, lo) if isinstance(lo, torch.Tensor) else _d(aten.clamp_min.default, v, lo)
        v = _d(aten.clamp_max.Tensor, v, hi) if isinstance(hi, torch.Tensor) else _d(aten.clamp_max.default, v, hi)
    else:
        v = _d(aten.clamp.default, v, quant_min, quant_max)
    return _to(v, dtype)


def _dequantize(x, scale, zero_point, out_dtype, axis=None):
    out_dtype = out_dtype or torch.float32
    v = _to(x, torch.float32)
    if axis is not None:
        axis = axis % x.dim()
        if zero_point is not None:
            v = _d(aten.sub.Tensor, v, _channel(zero_point, x, axis, torch.float32))
        v = _d(aten.mul.Tensor, v, _channel(scale, x, axis, torch.float32))
    else:
        v = _apply(v, zero_point, torch.float32, aten.sub.Tensor, aten.sub.Scalar)
        v = _apply(v, scale, torch.float32, aten.mul.Tensor, aten.mul.Scalar)
    return _to(v, out_dtype)


def _quantize_per_tensor(func, args, kwargs):
    x, scale, zp, qmin, qmax, dtype = _bind(func, args, kwargs)
    return _quantize(x, scale, zp, qmin, qmax, dtype)


def _dequantize_per_tensor(func, args, kwargs):
    x, scale, zp, _qmin, _qmax, dtype, out_dtype = _bind(func, args, kwargs)
    if x.dtype != dtype:
        raise RuntimeError(f"dequantize_per_tensor: expecting input to have dtype {dtype}, but got {x.dtype}")
    return _dequantize(x, scale, zp, out_dtype)


def _quantize_per_channel(func, args, kwargs):
    x, scales, zps, axis, qmin, qmax, dtype = _bind(func, args, kwargs)
    return _quantize(x, scales, zps, qmin, qmax, dtype, axis=axis)


def _dequantize_per_channel(func, args, kwargs):
    x, scales, zps, axis, _qmin, _qmax, dtype, out_dtype = _bind(func, args, kwargs)
    if x.dtype != dtype:
        raise RuntimeError(f"dequantize_per_channel: expecting input to have dtype {dtype}, but got {x.dtype}")
    return _dequantize(x, scales, zps, out_dtype, axis=axis)


def install() -> None:
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines the quantized_decomposed ops
    q = torch.ops.quantized_decomposed
    for name, handler in (("quantize_per_tensor", _quantize_per_tensor),
                          ("dequantize_per_tensor", _dequantize_per_tensor)):
        for overload in ("default", "tensor", "tensor2"):
            route.register_special(getattr(getattr(q, name), overload), handler)
    route.register_special(q.quantize_per_channel.default, _quantize_per_channel)
    route.register_special(q.dequantize_per_channel.default, _dequantize_per_channel)
