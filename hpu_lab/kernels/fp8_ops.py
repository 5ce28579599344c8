"""``torch.ops.hpu`` fp8 casts and GEMM: ``cast_to_fp8_v2``, ``cast_from_fp8``, ``fp8_gemm_v2``.

The bridge's fp8 kernels (hpu_ops/backend/fp8_ops.cpp, schemas in eager_custom_op_register.cpp),
which Intel's Transformer Engine, DeepSpeed's HPU FP quantizer and optimum-habana call:

- ``cast_to_fp8_v2(input, scale=None, stochastic_rounding=False, is_amax=False, dtype=None,
  scale_shape=None) -> (out, amax)``: ``out = input * scale`` cast to ``dtype`` (float8_e4m3fn by
  default), rounding half to even; ``amax = max|input|`` (float32, shape []) when ``is_amax``, else
  an empty tensor. ``scale`` is a tensor (one value, or one per row with ``scale_shape``), a float
  (``.scalar``) or a list of floats (``.scalar_list``).
- ``cast_from_fp8(input, scale, out_dtype, scale_shape=None)``: ``input * scale`` in ``out_dtype``
  (``scale`` is the inverse of the cast's).
- ``fp8_gemm_v2(A, trans_A, B, trans_B, D, out_dtype, A_scale_inv=None, B_scale_inv=None, bias=None,
  accumulate=False, B_scale_shape=None)``: ``op(A) @ op(B) * A_scale_inv * B_scale_inv (+ bias)
  (+ D if accumulate)``, accumulated in float32 and rounded once to ``out_dtype``; batched operands
  broadcast as ``torch.matmul``'s.

Per card, as the hardware: Gaudi 2's E4M3 format tops out at +-240 (Gaudi 3's, as torch's
float8_e4m3fn, at +-448), so a cast to E4M3 on a Gaudi 2 saturates at 240; E5M2 saturates at
57344 on both. First-gen Gaudi has no fp8: every op fails there with the bridge's message.
Stochastic rounding draws random bits in the cast kernel; hpu_lab does not emulate it and says so.

Each op is one node of the lazy graph (a custom op with a Meta kernel), computed on the host in
float32 from the exact fp8 values, as the other custom ops (kernels/custom_ops.py).
"""
from __future__ import annotations

import torch

from .. import config
from ._common import device_kernel
from ..perfmodel.cards import DEVICES

LIB = torch.library.Library("hpu", "FRAGMENT")
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def fp8_max(dtype) -> float:
    """The largest finite value a cast to ``dtype`` gives on the emulated card."""
    if dtype == torch.float8_e4m3fn and config.get("HPU_LAB_DEVICE") == "gaudi2":
        return 240.0
    return float(torch.finfo(dtype).max)


def _check_device():
    if not DEVICES[config.get("HPU_LAB_DEVICE")].fp8:
        raise RuntimeError("FP8 data type is not available on this device.")


def _scale_tensor(scale, scale_shape, like):
    if scale is None:
        return None
    if isinstance(scale, torch.Tensor):
        s = scale.to(torch.float32)
    else:
        s = torch.tensor(scale, dtype=torch.float32)
    if scale_shape is not None:
        if s.numel() != _numel(scale_shape):
            raise RuntimeError(f"Number of scale elements ({s.numel()}) is not equal to number of scale_shape "
                               f"elements ({_numel(scale_shape)})")
        s = s.reshape(scale_shape)
    return s


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _cast_to_check(x, stochastic_rounding, is_amax, dtype):
    _check_device()
    if dtype not in _FP8:
        raise RuntimeError(f"CastToFp8V2 output dtype must be float8_e5m2 or float8_e4m3fn, not {dtype}")
    if x.dtype in _FP8:
        if is_amax:
            raise RuntimeError("CastToFp8V2 must have no amax for float8.")
        if x.dtype != dtype:
            raise RuntimeError(f"CastToFp8V2 input and output must have the same dtype for float8, but are "
                               f"{x.dtype} and {dtype}")
    elif x.dtype not in (torch.float32, torch.bfloat16):
        raise RuntimeError("CastToFp8V2 input dtype must be one of [float, bfloat16, float8_e5m2, float8_e4m3fn].")
    if stochastic_rounding:
        raise RuntimeError("cast_to_fp8_v2: stochastic_rounding draws random bits in the Gaudi cast kernel, "
                           "which hpu_lab does not emulate (use stochastic_rounding=False)")


def _cast_to(x, scale=None, stochastic_rounding=False, is_amax=False, dtype=None, scale_shape=None):
    dtype = torch.float8_e4m3fn if dtype is None else dtype
    _cast_to_check(x, stochastic_rounding, is_amax, dtype)
    xf = x.to(torch.float32)
    s = _scale_tensor(scale, scale_shape, x)
    y = xf if s is None else xf * s
    m = fp8_max(dtype)
    out = y.clamp(-m, m).to(dtype) if x.dtype not in _FP8 else x.clone()
    amax = xf.abs().amax() if is_amax else torch.empty(0, dtype=torch.float32)
    return out, amax.to(torch.float32)


def _cast_to_meta(x, scale=None, stochastic_rounding=False, is_amax=False, dtype=None, scale_shape=None):
    dtype = torch.float8_e4m3fn if dtype is None else dtype
    _cast_to_check(x, stochastic_rounding, is_amax, dtype)
    return (torch.empty(x.shape, dtype=dtype, device="meta"),
            torch.empty(() if is_amax else (0,), dtype=torch.float32, device="meta"))


def _cast_from_check(x):
    _check_device()
    if x.dtype not in _FP8:
        raise RuntimeError(f"cast_from_fp8: expected a float8_e5m2 or float8_e4m3fn input, got {x.dtype}")


def _cast_from(x, scale, out_dtype, scale_shape=None):
    _cast_from_check(x)
    s = _scale_tensor(scale, scale_shape, x)
    y = x.to(torch.float32)
    if s is not None:
        y = y * s
    return y.to(out_dtype)


def _cast_from_meta(x, scale, out_dtype, scale_shape=None):
    _cast_from_check(x)
    return torch.empty(x.shape, dtype=out_dtype, device="meta")


def _t(m, trans):
    return m.transpose(-2, -1) if trans else m


def _gemm_check(A, B, D, accumulate):
    _check_device()
    if A.dtype not in _FP8 + (torch.float32, torch.bfloat16) or B.dtype not in _FP8 + (torch.float32, torch.bfloat16):
        raise RuntimeError(f"fp8_gemm_v2: unsupported operand dtypes {A.dtype} and {B.dtype}")
    if accumulate and D is None:
        raise RuntimeError("Accumulation tensor must be provided at index 4 for Fp8GemmV2, when accumulate is true")


def _gemm(A, trans_A, B, trans_B, D, out_dtype, A_scale_inv=None, B_scale_inv=None, bias=None, accumulate=False,
          B_scale_shape=None):
    _gemm_check(A, B, D, accumulate)
    r = torch.matmul(_t(A.to(torch.float32), trans_A), _t(B.to(torch.float32), trans_B))
    if A_scale_inv is not None:
        r = r * _scale_tensor(A_scale_inv, None, A)
    if B_scale_inv is not None:
        r = r * _scale_tensor(B_scale_inv, B_scale_shape, B)
    if bias is not None:
        r = r + bias.to(torch.float32)
    if accumulate:
        r = r + D.to(torch.float32)
    return r.to(out_dtype)


def _gemm_meta(A, trans_A, B, trans_B, D, out_dtype, A_scale_inv=None, B_scale_inv=None, bias=None,
               accumulate=False, B_scale_shape=None):
    _gemm_check(A, B, D, accumulate)
    a = torch.empty(A.shape, device="meta")
    b = torch.empty(B.shape, device="meta")
    return torch.matmul(_t(a, trans_A), _t(b, trans_B)).to(out_dtype)


def _define(schema, cpu, meta):
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, device_kernel(cpu), "CPU")
    LIB.impl(name, meta, "Meta")


_TO = ("bool stochastic_rounding=False, bool is_amax=False, ScalarType? dtype=None, int[]? scale_shape=None) "
       "-> (Tensor, Tensor)")
_define(f"cast_to_fp8_v2(Tensor input, Tensor? scale=None, {_TO}", _cast_to, _cast_to_meta)
_define(f"cast_to_fp8_v2.scalar(Tensor input, float scale, {_TO}", _cast_to, _cast_to_meta)
_define(f"cast_to_fp8_v2.scalar_list(Tensor input, float[] scale, {_TO}", _cast_to, _cast_to_meta)
_FROM = "ScalarType out_dtype, int[]? scale_shape=None) -> Tensor"
_define(f"cast_from_fp8(Tensor input, Tensor? scale, {_FROM}", _cast_from, _cast_from_meta)
_define(f"cast_from_fp8.scalar(Tensor input, float scale, {_FROM}", _cast_from, _cast_from_meta)
_define(f"cast_from_fp8.scalar_list(Tensor input, float[] scale, {_FROM}", _cast_from, _cast_from_meta)
_GEMM = "(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor? D, ScalarType out_dtype, "
_GEMM_END = "Tensor? bias=None, bool accumulate=False, int[]? B_scale_shape=None) -> Tensor"
_define(f"fp8_gemm_v2{_GEMM}Tensor? A_scale_inv=None, Tensor? B_scale_inv=None, {_GEMM_END}", _gemm, _gemm_meta)
_define(f"fp8_gemm_v2.scalar{_GEMM}float A_scale_inv, float B_scale_inv, {_GEMM_END}", _gemm, _gemm_meta)
_define(f"fp8_gemm_v2.scalar_list{_GEMM}float[] A_scale_inv, float[] B_scale_inv, {_GEMM_END}", _gemm, _gemm_meta)
