"""``torch._scaled_mm`` on hpu as Gaudi's ``fp8_gemm`` computes it.

torch's CPU kernel wants ``mat2`` column-major ("mat2 must be col_major", a cuBLASLt constraint) and
treats ``scale_result`` differently; Gaudi 2/3 take any layout and compute
``(self @ mat2) * scale_a * scale_b * scale_result + bias``, accumulating in float32 and rounding once
to ``out_dtype`` (``self``'s dtype if None). Here: the fp8 operands are widened to float32 (exact),
multiplied and scaled in float32, and the result rounded once (fp8: round to nearest even,
saturating as torch's cast; Gaudi's MME accumulates in its own order, so a long inner dimension may
differ from this in the last bit). First-gen Gaudi has no FP8 (the bridge's ``device_supports_fp8``
is Gaudi 2 / Gaudi 3 only): with ``HPU_LAB_DEVICE=gaudi`` it fails as the bridge's FP8 ops do.
"""
from __future__ import annotations

import torch

from .. import config
from ..dispatch import route
from ..perfmodel.cards import DEVICES

aten = torch.ops.aten
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _d(op, *args, **kwargs):
    return route.dispatch(op, args, kwargs)


def _f32(t):
    return t if t.dtype == torch.float32 else _d(aten._to_copy.default, t, dtype=torch.float32)


def _scaled_mm(func, args, kwargs):
    names = [a.name for a in func._schema.arguments]
    v = {a.name: a.default_value for a in func._schema.arguments}
    v.update(zip(names, args))
    v.update(kwargs)
    if not DEVICES[config.get("HPU_LAB_DEVICE")].fp8:
        raise RuntimeError("FP8 data type is not available on this device.")
    a, b = v["self"], v["mat2"]
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"_scaled_mm: expected 2-D matrices, got {a.dim()}-D and {b.dim()}-D")
    if a.dtype not in _FP8 or b.dtype not in _FP8:
        raise RuntimeError(f"_scaled_mm: expected float8_e4m3fn/float8_e5m2 operands, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"_scaled_mm: mat1 and mat2 shapes cannot be multiplied "
                           f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    out_dtype = v["out_dtype"] if v["out_dtype"] is not None else a.dtype
    r = _d(aten.mm.default, _f32(a), _f32(b))
    for s in (v["scale_a"], v["scale_b"], v["scale_result"]):
        if s is not None:
            r = _d(aten.mul.Tensor, r, _f32(s))
    if v["bias"] is not None:
        r = _d(aten.add.Tensor, r, _f32(v["bias"]))
    return r if out_dtype == torch.float32 else _d(aten._to_copy.default, r, dtype=out_dtype)


def install() -> None:
    route.register_special(aten._scaled_mm.default, _scaled_mm)
