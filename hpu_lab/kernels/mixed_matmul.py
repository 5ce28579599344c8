"""Matrix products of two floating dtypes outside autocast (a bf16 input into an fp32 ``Linear``), as
the bridge computes them, not as CPU refuses them.

CPU refuses ``addmm``/``mm`` of mixed dtypes ("mat1 and mat2 must have the same dtype"); hpu_lab
recorded the op anyway and the refusal came at the next sync, as a device error. The bridge
(HabanaAI/gaudi-pytorch-bridge 1.19.0) decides by each op's output-meta function, which its lazy
frontend runs when the op is recorded (``LazyOp::SetOutputMetaFn``, ``scripts/hpu_op.yaml``):

- ``addmm`` (``F.linear`` with a bias, on 2-D or contiguous 3-D input): ``AddMMMeta``
  (``hpu_ops/backend/addmm_gen.cpp``) gives the common dtype of self, mat1 and mat2
  (``DTypeHelper::kPromoteToCommon``): a bf16 input into an fp32 Linear gives an fp32 result. Here
  the inputs are promoted to that dtype and CPU's ``addmm`` computes (bf16 values are exact in
  float32, so this is the product of the values given, rounded once);
- ``mm`` (``F.linear`` without bias, ``torch.mm``, ``matmul`` of 2-D tensors; also the weight
  gradient of such an ``addmm``): ``MmMeta`` (``hpu_ops/backend/mm_gen.cpp``) refuses when the op is
  recorded, with the bridge's message: "expected m1 and m2 to have the same dtype, but got:
  BFloat16 != Float". ``mm`` has no ``promote_to_common_type`` in ``hpu_op.yaml``; its shared-layer
  validator (``hpu_ops/op_validator.cpp``, ``CheckNodeWithSharedLayerValidator::Validate``) and the
  lazy frontend (``habana_kernels/lazy_kernels.h``, ``LazyOp::get_result``) both call ``MmMeta``
  before anything runs.

So a bf16 input into an fp32 ``Linear`` with bias computes forward (fp32 out), and its backward stops
at the weight gradient: torch's ``AddmmBackward0`` computes it as ``mm`` of the fp32 output gradient
and the bf16 input. The bridge's own ``linear``/``linear_backward`` ops (``LinearBackwardMeta`` has no
dtype check) are wired to ``aten::linear`` only under ``PT_HPU_OVERRIDE_LINEAR_MATMUL_EAGER``
(``habana_eager/ops/linear.cpp``; default off, ``scripts/env_flags.yaml``).
"""
from __future__ import annotations

import torch

from ..dispatch import route
from ..lazy import functional_op

aten = torch.ops.aten

# c10::ScalarType names, as the bridge's messages print them
_SCALAR_TYPE = {torch.float32: "Float", torch.bfloat16: "BFloat16", torch.float16: "Half", torch.float64: "Double",
                torch.float8_e5m2: "Float8_e5m2", torch.float8_e4m3fn: "Float8_e4m3fn"}


def _name(dtype) -> str:
    return _SCALAR_TYPE.get(dtype, str(dtype).replace("torch.", ""))


def _mixed_floats(*ts) -> bool:
    dts = {t.dtype for t in ts if isinstance(t, torch.Tensor)}
    return len(dts) > 1 and all(d.is_floating_point for d in dts)


def addmm(func, args, kwargs):
    self, mat1, mat2 = args[:3]
    if not _mixed_floats(self, mat1, mat2):
        return functional_op(func, args, kwargs)
    common = torch.promote_types(torch.promote_types(self.dtype, mat1.dtype), mat2.dtype)
    promoted = [t if t.dtype == common else functional_op(aten._to_copy.default, (t,), {"dtype": common})
                for t in (self, mat1, mat2)]
    return functional_op(func, (*promoted, *args[3:]), kwargs)


def mm(func, args, kwargs):
    a, b = args[:2]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_name(a.dtype)} != {_name(b.dtype)}")
    return functional_op(func, args, kwargs)


def install() -> None:
    route.register_special(aten.addmm.default, addmm)
    route.register_special(aten.mm.default, mm)
