"""Host ops: an op runs on the host with concrete inputs (a data-dependent op, a random draw, the
CPU fallback), and its result becomes a device buffer. Each input read is a host sync.

Every tensor the op writes gets what CPU's kernel left in its host copy: the values, and the shape
and strides when the kernel resized it (an ``out=`` tensor of the wrong shape; nonzero's column-major
result). That holds for the written positional arguments (``bernoulli_(p)``) and for the keyword-only
``out=`` tensors, single, tuple (``sort(out=(v, i))``) or list. An ``out=`` tensor is not read: CPU's
kernel overwrites it, so its host copy is an empty buffer of its layout (no host sync for it).

Autograd's version counter: the in-place/view layer above the device (ADInplaceOrView) has already
bumped the written tensors, exactly as it does for CPU tensors; the host call runs below that layer,
so its host copies are bumped only by what the CPU kernel itself does inside (a kernel written with
other in-place ops). The device tensors get that same count, no more: e.g. ``rrelu_with_noise`` leaves
``noise`` at version 0 on CPU and on hpu, and autograd accepts the saved ``noise`` in the backward.
"""
from __future__ import annotations

import torch

from .. import ops
from . import resize as _resize
from ..ops import widen as _widen  # dtypes the CPU kernel lacks (issue 16)
from ..util._source import user_src
from ..lazy import CPU, S, to_cpu, wrap_new, write_concrete
from ..tensor import HPUTensor, Inp
from .view_ops import set_view_meta


def _flat(a):
    return list(a) if isinstance(a, (list, tuple)) else [a]


def _shared_storages(args, kwargs) -> set:
    """ids of the storages that more than one of the op's hpu tensor arguments (or one tensor
    twice, ``[a, a]``) are on."""
    seen, shared = set(), set()
    for a in list(args) + list(kwargs.values()):
        for x in _flat(a):
            if isinstance(x, HPUTensor):
                (shared if id(x._st) in seen else seen).add(id(x._st))
    return shared


class _HostCopies:
    """The host copies of an op's hpu arguments. A tensor alone on its storage gets a copy of its
    own; the tensors sharing a storage get views of one copy of that storage, so CPU's kernel sees
    the aliasing CPU tensors have (``_foreach_add_([a, a], [b, b])`` adds b twice; an overlap CPU
    refuses is refused). Each such view has a version counter of its own (``.data``), so that what
    the kernel bumps is counted per device tensor, as CPU counts it."""

    def __init__(self, args, kwargs, reason):
        self.shared = _shared_storages(args, kwargs)
        self.reason = reason
        self.bufs: dict = {}          # id(storage) -> its host copy
        self.views: dict = {}         # id(device tensor) -> its host view

    def conv(self, a, out=False):
        """The host copy of argument ``a`` (``out``: a keyword-only ``out=`` argument)."""
        if isinstance(a, HPUTensor):
            if id(a._st) in self.shared:
                return self._view(a)
            if out:      # not read (CPU's kernel overwrites it): an empty buffer of its layout; an
                # expanded out stays overlapping, so CPU's kernel refuses it with CPU's message
                return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype)
            return to_cpu(a, self.reason)         # its values, aliasing nothing the user can reach
        if isinstance(a, (list, tuple)):
            return type(a)(self.conv(x, out) for x in a)
        if out:
            return a
        if isinstance(a, torch.device) and a.type == "hpu":
            return CPU
        return a

    def _view(self, a):
        """``a``'s view of the one host copy of its (shared) storage: read whole, once."""
        h = self.views.get(id(a))
        if h is None:
            buf = self.bufs.get(id(a._st))
            if buf is None:
                buf = self.bufs[id(a._st)] = to_cpu(a, self.reason, whole_storage=True)
            h = self.views[id(a)] = buf.as_strided(a._size, a._stride, a._offset).data
        return h


def _version(h) -> int:
    """A host copy's version counter; a copy made under ``torch.inference_mode`` is an inference
    tensor, which keeps none (CPU's kernel bumps nothing we could read: 0)."""
    return 0 if h.is_inference() else h._version


def host_op(func, args, kwargs, reason):
    """Run an op on the host with concrete inputs (data-dependent ops, ops with no meta kernel)."""
    src = user_src(3)
    if S.capture is not None:
        S.capture.refuse(ops.op_name(func), src)
    info = ops.inplace_info(func)
    out_kw = info[1] if info is not None else ()
    copies = _HostCopies(args, kwargs, reason)
    cargs = [copies.conv(a) for a in args]
    ckw = {k: copies.conv(v, out=k in out_kw) for k, v in kwargs.items()}
    # (device tensor, its host copy) for every written tensor, positional then keyword-only
    pairs = []
    if info is not None:
        for i in info[0]:
            if i < len(args):
                pairs += zip(_flat(args[i]), _flat(cargs[i]))
        for k in out_kw:
            if k in kwargs:
                pairs += zip(_flat(kwargs[k]), _flat(ckw[k]))
    for k, t in ops.hidden_writes(func, args, kwargs):     # written too, schema or not (ops/)
        pairs.append((t, cargs[k] if type(k) is int else ckw[k]))
    pairs = [(t, h) for t, h in pairs if isinstance(t, HPUTensor) and isinstance(h, torch.Tensor)]
    pairs = list({id(h): (t, h) for t, h in pairs}.values())    # [a, a]: one host view, bumped twice
    before = [(tuple(h.shape), tuple(h.stride()), _version(h)) for _, h in pairs]
    try:
        res = _cpu_call(func, cargs, ckw)
    except (NotImplementedError, RuntimeError) as e:
        if not _widen.missing_kernel(e, func):   # a dtype Gaudi has and the CPU kernel lacks (issue 16)
            raise
        res = _widen.widened(func)(*cargs, **ckw)
        _fill_outs(func, res, ckw, out_kw)
    if not pairs:
        return to_hpu_result(res)
    back = {}
    for (t, h), (shape, stride, version) in zip(pairs, before):
        if (tuple(h.shape), tuple(h.stride())) != (shape, stride):
            _take_layout(t, h)
        write_concrete(t, _owned(h), op=ops.op_name(func))
        for _ in range(_version(h) - version):     # what CPU's kernel bumped inside, and only that
            torch._C._increment_version([t])
        back[id(h)] = t
    if not func._schema.returns:
        return None
    return _back(res, back)


_ADINPLACE = torch._C.DispatchKey.ADInplaceOrView


def _cpu_call(func, cargs, ckw):
    """``func`` on the host copies, in the dispatch state CPU's kernel runs in. An op with no kernel in
    autograd's in-place layer (foreach ops, custom ops) reaches CPU's kernel with that layer still on,
    so the in-place ops the kernel runs inside bump what they write (``_foreach_add_`` bumps each
    tensor once); inside ``__torch_dispatch__`` the layer is off, so it is turned back on for them."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    if ops.bumped_above(func) or not exclude.has(_ADINPLACE):
        return func(*cargs, **ckw)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude.remove(_ADINPLACE)):
        return func(*cargs, **ckw)


def _fill_outs(func, res, ckw, out_kw):
    """The widened op (ops/widen.py) returns its results instead of writing keyword-only ``out=`` host
    copies: put them there, resized as CPU's ``resize_output`` resizes."""
    if not out_kw or res is None:
        return
    outs = [h for k in out_kw if k in ckw for h in _flat(ckw[k])]
    for h, r in zip(outs, _flat(res)):
        if isinstance(r, torch.Tensor) and r is not h:
            torch._refs._maybe_resize_out(h, r.shape)      # warns for a non-empty out, as CPU
            h.copy_(r)


def _take_layout(t, h):
    """CPU's kernel resized or restrided the host copy ``h``: ``t`` takes that shape and layout
    (its storage is fresh, as a resize gives; dispatch/resize.py says where views of the old one differ)."""
    if tuple(h.shape) != tuple(t.shape):
        _resize.rebind(t, h.shape)
    if tuple(h.stride()) != tuple(t.stride()):
        if not torch._prims_common.is_non_overlapping_and_dense_or_false(h):
            raise NotImplementedError(
                f"an out= tensor restrided to {list(h.stride())} (shape {list(h.shape)}) is not emulated")
        set_view_meta(t, tuple(h.shape), tuple(h.stride()), 0)


def _owned(h):
    """``h``'s values in a buffer of its own layout at offset 0 (what a device buffer holds)."""
    if h.storage_offset() == 0 and torch._prims_common.is_non_overlapping_and_dense_or_false(h):
        return h
    return h.contiguous() if not torch._prims_common.is_non_overlapping_and_dense_or_false(h) \
        else torch.empty_strided(h.shape, h.stride(), dtype=h.dtype).copy_(h)


def _back(res, back):
    """The op's result with each written host copy replaced by its device tensor (``add_`` and
    ``sort(out=...)`` return their arguments, as on CPU)."""
    if isinstance(res, torch.Tensor):
        t = back.get(id(res))
        return t if t is not None else to_hpu_result(res)
    if isinstance(res, (list, tuple)):
        return type(res)(_back(x, back) for x in res)
    return res


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
