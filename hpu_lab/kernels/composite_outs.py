"""``out=`` overloads whose composite kernel, for a tensor subclass, never writes ``out``.

torch's ``linalg.matrix_rank(..., out=o)`` (``matrix_rank_impl``) computes the rank with
``at::sum_out(o, ...)`` on a plain tensor, but for a tensor subclass (composite compliance) it
assigns ``o = at::sum(...)``: the C++ handle is rebound to a new tensor and the caller's ``o``, an
HPUTensor, keeps whatever its memory held, silently (a rank of 140532281609552 on hpu, 5 on CPU).

hpu's autograd kernel for these overloads sends them, whole, below autograd to the device's own
dispatch, which computes the functional form and writes ``out`` (special_ops.out_variant); the one
version bump CPU's ``sum_out`` gives ``out`` is given here too.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
_lib = None

# below autograd, straight to the Python key: HPUTensor.__torch_dispatch__ (route.dispatch)
_PYTHON = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)

OVERLOADS = [aten.linalg_matrix_rank.out, aten.linalg_matrix_rank.out_tol_tensor,
             aten.linalg_matrix_rank.atol_rtol_tensor_out, aten.linalg_matrix_rank.atol_rtol_float_out]


def _to_device(func):
    def kernel(*args, **kwargs):
        res = func.redispatch(_PYTHON, *args, **kwargs)
        torch._C._increment_version([kwargs["out"]])       # CPU's sum_out bumps out once
        return res
    return kernel


def install() -> None:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        for func in OVERLOADS:
            _lib.impl(func._schema.name.split("::")[1] + "." + func._overloadname, _to_device(func),
                      "AutogradPrivateUse1")
