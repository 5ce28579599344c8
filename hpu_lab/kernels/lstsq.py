"""``torch.linalg.lstsq`` on hpu: the solution laid out as CPU lays it out.

``linalg_lstsq`` has no Meta kernel (its residuals' shape depends on the matrices' rank), so it runs
on the host (the CPU fallback). CPU's kernel solves in place in a column-major ``max(m, n) x k``
buffer per matrix (LAPACK's ``gels*`` overwrite B with the solution) and returns the first ``n`` rows
of it: for an overdetermined system (``m > n``) the solution is a view with gaps, strides
``(..., max(m, n) * k, 1, max(m, n))``. The host result came back contiguous: values equal, but
what later views do differed (``sol.view(-1)`` raises on CPU; ``sol.mT`` is contiguous there).
Here the solution is copied into a device buffer of CPU's layout (one pad node) and returned as
CPU's view of it. (With ``m <= n`` CPU's solution is the whole buffer: already the same layout.)
"""
from __future__ import annotations

import torch

from ..lazy import functional_op
from ..tensor import HPUTensor
from ..dispatch.view_ops import view_op

aten = torch.ops.aten
_handle = None


def linalg_lstsq(func, args, kwargs):
    res = functional_op(func, args, kwargs)          # no Meta kernel: the host fallback
    a = args[0]
    sol = res[0]
    m, n = a.shape[-2], a.shape[-1]
    if m <= n or not isinstance(sol, HPUTensor) or sol.numel() == 0:
        return res
    vector = sol.dim() == a.dim() - 1                # B was (*, m): the solution is (*, n)
    k = 1 if vector else sol.shape[-1]
    # (*, k, n) rows = CPU's columns, padded to max(m, n): the column-major buffer, row-major seen
    rows = view_op(aten.unsqueeze.default, (sol, -2), {}) if vector else \
        view_op(aten.transpose.int, (sol, -2, -1), {})
    buf = functional_op(aten.constant_pad_nd.default, (rows, [0, m - n], 0.0), {})
    batch = tuple(sol.shape[:-1] if vector else sol.shape[:-2])
    stride, acc = [], m * k
    for s in reversed(batch):
        stride.append(acc)
        acc *= max(s, 1)
    stride = tuple(reversed(stride)) + ((1,) if vector else (1, m))
    out = HPUTensor(buf._st, tuple(sol.shape), stride, 0, sol.dtype)
    return (out, *res[1:])


def install() -> None:
    global _handle
    if _handle is None:
        from ..dispatch import route
        _handle = route.register_special(aten.linalg_lstsq.default, linalg_lstsq)


def uninstall() -> None:
    """Back to the plain host result (tests)."""
    global _handle
    if _handle is not None:
        _handle.remove()
        _handle = None
