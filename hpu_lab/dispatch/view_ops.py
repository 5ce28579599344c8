"""Views: no graph node, only new (size, stride, offset) over the same storage (from the meta kernel)."""
from __future__ import annotations

import torch

from .. import ops
from .dtype_views import storage_as
from ..lazy import lazy_op
from ..tensor import HPUTensor, storage_extent

aten = torch.ops.aten


def view_op(func, args, kwargs):
    """Views share the storage: no node, just new (size, stride, offset) from the meta kernel."""
    x = args[0]
    if not isinstance(x, HPUTensor):
        return lazy_op(func, args, kwargs)
    st = x._st
    extent = storage_extent(st.size, st.stride)
    margs = [ops.meta_tensor(x._size, x._stride, x.dtype, x._offset, extent)]
    mkey = [func, x._size, x._stride, x._offset, extent, x.dtype]
    for a in args[1:]:
        if isinstance(a, torch.Tensor):
            return lazy_op(func, args, kwargs)      # e.g. view_as_real with a tensor arg: rare
        mkey.append(tuple(a) if isinstance(a, list) else a)
        margs.append(a)
    mkey.append(tuple(sorted(kwargs.items())))

    def compute():
        res = ops.run_meta(func, margs, dict(kwargs))
        for r in (res if isinstance(res, (list, tuple)) else [res]):
            if r.is_conj() or r.is_neg():
                raise NotImplementedError(f"{ops.op_name(func)}: conjugate/negative views are not "
                                          "supported on hpu in hpu_lab; call .resolve_conj() first")
        if isinstance(res, torch.Tensor):
            return [(tuple(res.shape), tuple(res.stride()), res.storage_offset(), res.dtype)], True
        return [(tuple(r.shape), tuple(r.stride()), r.storage_offset(), r.dtype) for r in res], False

    metas, single = ops.cached_meta(tuple(mkey), compute)
    outs = []
    zero = x._is_zerotensor()       # a view of torch's zero tensor is one too, as on CPU
    for size, stride, off, dtype in metas:
        if dtype is not st.dtype:       # t.view(torch.uint8): the same bytes as another dtype
            try:
                seen_as = storage_as(st, dtype)
            except NotImplementedError as e:
                raise NotImplementedError(f"{ops.op_name(func)}: {e}") from None
            outs.append(HPUTensor(seen_as, size, stride, off, dtype, zero=zero))
            continue
        outs.append(HPUTensor(st, size, stride, off, dtype, zero=zero))
    return outs[0] if single else type(metas)(outs) if False else outs


def inplace_view(func, args, kwargs):
    """squeeze_, unsqueeze_, t_, transpose_, swapdims_, as_strided_: the tensor itself becomes the
    view. No node and no data moves: the view's (size, stride, offset) comes from the functional
    twin (squeeze, ...), then the wrapper's own metadata is set to it (torch's decompositions use
    these, e.g. matmul(vector, matrix) and quantile)."""
    x = args[0]
    functional = ops.INPLACE_VIEW.get(func)
    if functional is None or not isinstance(x, HPUTensor):
        raise NotImplementedError(f"{ops.op_name(func)} is not supported on hpu in hpu_lab")
    v = view_op(functional, args, kwargs)
    set_view_meta(x, v._size, v._stride, v._offset)
    return x


def set_view_meta(x, size, stride, offset) -> None:
    """Make the wrapper ``x`` the view (size, stride, offset) of its storage, in place."""
    with torch._C._DisableTorchDispatch():
        aten.as_strided_.default(x, size, stride, offset)
    x._size, x._stride, x._offset = tuple(size), tuple(stride), offset
    x._rc = None
