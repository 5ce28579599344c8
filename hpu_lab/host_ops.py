"""Host ops: an op runs on the host with concrete inputs (a data-dependent op, a random draw, the
CPU fallback), and its result becomes a device buffer. Each input read is a host sync."""
from __future__ import annotations

import torch

from . import ops
from . import widen as _widen  # dtypes the CPU kernel lacks (issue 16)
from ._source import user_src
from .lazy import CPU, S, to_cpu, wrap_new, write_concrete
from .tensor import HPUTensor, Inp


def concrete(t, reason: str) -> torch.Tensor:
    """t's values as a CPU tensor that aliases nothing the user can reach (for host ops)."""
    return to_cpu(t, reason)


def host_op(func, args, kwargs, reason):
    """Run an op on the host with concrete inputs (data-dependent ops, ops with no meta kernel)."""
    src = user_src(3)

    def conv(a):
        if isinstance(a, HPUTensor):
            return concrete(a, reason)
        if isinstance(a, (list, tuple)):
            return type(a)(conv(x) for x in a)
        if isinstance(a, torch.device) and a.type == "hpu":
            return CPU
        return a

    if S.capture is not None:
        S.capture.refuse(ops.op_name(func), src)
    cargs = [conv(a) for a in args]
    ckw = {k: conv(v) for k, v in kwargs.items()}
    info = ops.inplace_info(func)
    try:
        res = func(*cargs, **ckw)
    except (NotImplementedError, RuntimeError) as e:
        if not _widen.missing_kernel(e):   # a dtype Gaudi has and the CPU kernel lacks (issue 16)
            raise
        res = _widen.widened(func)(*cargs, **ckw)
    if info is not None and info[0]:
        # write the mutated args back; a result that *is* a mutated arg returns the hpu arg
        back = {}
        for i in info[0]:
            tgt, new = args[i], cargs[i]
            if isinstance(tgt, (list, tuple)):
                for x, y in zip(tgt, new):
                    write_concrete(x, y)
            else:
                write_concrete(tgt, new)
                back[id(new)] = tgt
            # autograd must see the write (a backward through the old value then errors)
            torch._C._increment_version(list(tgt) if isinstance(tgt, (list, tuple)) else [tgt])
        if not func._schema.returns:
            return None
        if isinstance(res, torch.Tensor) and id(res) in back:
            return back[id(res)]
    return to_hpu_result(res)


def to_hpu_result(res):
    if isinstance(res, torch.Tensor):
        # CPU's layout, when it is a dense one (nonzero's is column-major: flatten must copy, as
        # on CPU); a view with gaps is laid out contiguous
        if res.storage_offset() == 0 and _dense_layout(res):
            c = res
        elif _dense_layout(res):
            c = torch.empty_strided(res.shape, res.stride(), dtype=res.dtype).copy_(res)
        else:
            c = res.contiguous()
        return wrap_new((tuple(c.shape), tuple(c.stride()), c.dtype), Inp(c, (tuple(c.shape), tuple(c.stride()), c.dtype)))
    if isinstance(res, (list, tuple)):
        return type(res)(to_hpu_result(x) for x in res)
    return res


def _dense_layout(t) -> bool:
    return torch._prims_common.is_non_overlapping_and_dense_or_false(t)
