"""The special ops: ops the generic lazy path cannot take as they are (a copy across devices, a
host draw, a view that needs a physical result, statistics in another dtype, ``out=``...). Each is
a handler ``fn(func, args, kwargs)``; dispatch/route.py sends the ops of ``HANDLERS`` here."""
from __future__ import annotations

import torch

from ..lazy import aliasing
from . import objmodel
from .. import ops
from . import resize as _resize  # out= / resize_ (issue 16)
from ..util._source import user_src
from ..lazy import S, _full, _same_device_error, functional_op, inplace_on_aliases, lazy_op, read_ref, to_cpu, write, write_concrete
from ..tensor import HPU, HPUTensor, Inp, contiguous_strides, new_storage_tensor

aten = torch.ops.aten


def copy_(func, args, kwargs):
    dst, src_t = args[0], args[1]
    non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    if dst._is_zerotensor():   # as CPU's copy_, which checks this first (kernels/zerotensor.py)
        raise RuntimeError("ZeroTensors are immutable. Please materialize the tensor using `.clone()`, "
                           "if you want a mutable zero tensor.")
    if src_t is dst:          # as CPU's copy_: a tensor copied onto itself is left alone, even expanded
        return dst
    if isinstance(dst, HPUTensor):
        if isinstance(src_t, HPUTensor):
            if src_t._st is dst._st and src_t._offset == dst._offset and src_t._size == dst._size and \
                    src_t._stride == dst._stride and src_t.dtype == dst.dtype:
                return dst           # as CPU's copy_: two views of the same memory, nothing to do
            if aliasing.shares_elements(dst, src_t):     # CPU copies through the shared memory
                return inplace_on_aliases(aten.copy_.default, tuple(args), kwargs, 0, [1])
            # functional copy (broadcast + cast) into a tensor laid out as dst, then written into dst.
            # aten::copy clones its first argument's whole storage (clone_preserve_strides) to
            # overwrite it: for a view of a large buffer (a parameter in ZeRO's flat buffer) that
            # cost the buffer on every copy. A blank stand-in of the view's shape costs the view.
            like = dst if _full(dst) else _blank_like(dst)
            r = lazy_op(aten.copy.default, (like, src_t), {})
            write(dst, _value_ref(r), "aten::copy_")
            return dst
        # host -> device: pinned + non_blocking is queued on the current stream, else the host
        # copies now (through a staging buffer if the source is pageable): runtime/transfers.py
        from ..runtime.transfers import host_to_device
        val, launch = host_to_device(dst._size, dst._stride, dst.dtype, src_t, non_blocking, "aten::copy_",
                                     user_src(3), None if S.capture is not None else S.stream)
        if launch is None:
            write_concrete(dst, val, op="aten::copy_", source=src_t)
        else:
            meta = (dst._size, dst._stride, dst.dtype)
            if _full(dst) and meta[1] == dst._st.stride:
                dst._st.value = Inp(None, meta, launch=launch)
                dst._rc = None
            else:
                write(dst, Inp(None, meta, launch=launch), "aten::copy_")
        return dst
    # device -> host into an existing CPU tensor
    dst.copy_(to_cpu(src_t, ".cpu()"), non_blocking=non_blocking)
    return dst


def _blank_like(t):
    """A new, uninitialised tensor of ``t``'s shape and dtype (its memory is allocated when a graph
    first reads it, and every element is overwritten there)."""
    size = t._size
    stride = contiguous_strides(size)
    return new_storage_tensor(size, stride, t.dtype, Inp(meta=(size, stride, t.dtype)))


def _value_ref(t):
    return read_ref(t)


def to_copy(func, args, kwargs):
    x = args[0]
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type == "cpu":
        out = to_cpu(x, ".cpu()")
        kw = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "pin_memory")}
        if kw.get("dtype") is not None or kw.get("memory_format") is not None:
            out = out.to(**{k: v for k, v in kw.items() if k in ("dtype", "memory_format")})
        if kwargs.get("pin_memory"):
            out = out.pin_memory()          # hpu_lab/runtime/pinned.py
        return out
    if dev is not None and torch.device(dev).type == "meta":
        # to the meta device: no values move, a meta tensor laid out as CPU's _to_copy lays it out
        # (torch's own ZeroTensor kernels take shapes this way: mul of an hpu zero tensor)
        return func(ops.meta_tensor(x._size, x._stride, x.dtype), *args[1:], **kwargs)
    return lazy_op(func, args, kwargs)


def complex_on_cpu(func, args, kwargs):
    """``torch.complex(real, imag)`` of hpu tensors returns a CPU tensor, as the bridge's kernel does
    (``complex_hpu``: ``at::native::complex(real.to("cpu"), imag.to("cpu"))``): Gaudi has no complex
    dtypes, so what follows runs on the CPU (Intel's test_complex asserts the device is cpu)."""
    real, imag = args[0], args[1] if len(args) > 1 else kwargs["imag"]
    return torch.complex(*(to_cpu(t, "torch.complex: complex values live on the CPU") if isinstance(t, HPUTensor)
                           else t for t in (real, imag)))


def local_scalar_dense(func, args, kwargs):
    return to_cpu(args[0], "bool/float/int of a tensor").item()


def random_inplace(func, args, kwargs):
    """Draw on the host from torch's default generator (same numbers as the CPU run)."""
    t = args[0]
    if S.capture is not None:
        S.capture.note_random()

    # the closure keeps no tensor: it lives on in the buffer (Inp.regen), and a tensor in it could
    # form a cycle through autograd's C++ graph that the garbage collector cannot free
    size, stride, dtype, rest = t._size, t._stride, t.dtype, args[1:]

    if func is aten.uniform_.default and not dtype.is_floating_point and not dtype.is_complex \
            and dtype is not torch.bool:
        # Gaudi's uniform_ takes integer tensors (Intel's test_hpu_uniform: int32 within [low, high]),
        # CPU's kernel refuses them ("check_uniform_bounds" not implemented for 'Int'): drawn as
        # float32 from the same generator, rounded down (integers uniform over [low, high)). The
        # TPC kernel's own rounding is not documented: the bounds hold, the bits may differ.
        def draw():
            buf = torch.empty_strided(size, stride, dtype=torch.float32)
            return func(buf, *rest, **kwargs).floor_().to(dtype)
    else:
        def draw():
            buf = torch.empty_strided(size, stride, dtype=dtype)
            return func(buf, *rest, **kwargs)

    write_concrete(t, draw(), regen=draw, op=ops.op_name(func))
    return t


def native_dropout(func, args, kwargs):
    """What ``F.dropout`` reaches for an hpu tensor (ATen takes the fused op for PrivateUse1). The
    noise is what CPU's dropout (``_dropout_impl``) draws, into a buffer laid out as CPU's
    ``empty_like(x)``: ``bernoulli_(1 - p)``, divided by ``1 - p``; it becomes a graph input. (Drawn
    contiguous, a transposed ``x`` got CPU's draws on other elements.)"""
    x, p, train = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("train")
    if not train or p == 0:
        return lazy_op(func, args, kwargs)
    if p >= 1:
        return lazy_op(func, args, kwargs)
    size, dtype = tuple(x.shape), x.dtype       # (no tensor in the closure: see random_inplace)
    stride = tuple(torch.empty_like(ops.meta_tensor(x._size, x._stride, dtype)).stride())

    def draw():
        noise = torch.empty_strided(size, stride, dtype=dtype).bernoulli_(1 - p)
        return noise.div_(1 - p)

    noise = new_storage_tensor(size, stride, x.dtype, None)
    noise._st.value = Inp(draw(), (size, stride, x.dtype), regen=draw)
    if S.capture is not None:
        S.capture.created(noise._st.value)
    out = lazy_op(aten.mul.Tensor, (x, noise), {})
    mask = lazy_op(aten.ne.Scalar, (noise, 0), {})
    if len(_DROPOUT_P) > 1024:
        _DROPOUT_P.clear()
    _DROPOUT_P[1.0 / (1.0 - p)] = p             # the scale autograd passes to the backward
    return out, mask


_DROPOUT_P: dict = {}       # 1 / (1 - p), as autograd computes it for native_dropout_backward -> p


def native_dropout_backward(func, args, kwargs):
    """CPU's dropout multiplies the gradient by its noise, whose kept elements are ``1 / (1 - p)``
    computed in the tensor's dtype; ``native_dropout_backward`` by ``1 / (1 - p)`` rounded from a
    double: for 226 of the 999 values p = 0.001 ... 0.999 the two differ in the last bit. For the
    scale of an hpu dropout, the kernel gets CPU's factor (as a double it rounds to itself); any
    other scale (a direct call) is left as given, as on CPU."""
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args), **kwargs)
    p = _DROPOUT_P.get(bound["scale"])
    if p is not None:
        bound["scale"] = float(torch.ones((), dtype=bound["grad_output"].dtype).div_(1 - p))
    return lazy_op(func, (bound["grad_output"], bound["mask"], bound["scale"]), {})


def resize_(func, args, kwargs):
    fmt = kwargs.get("memory_format", args[2] if len(args) > 2 else None)
    return _resize.resize_(args[0], args[1], lambda dst, src: copy_(None, (dst, src), {}), fmt)


def resize_as_(func, args, kwargs):
    """``t.resize_as_(other)``: ``t.resize_(other.shape)``, as CPU's; with memory_format=preserve, in
    the layout ``other`` suggests. (It took the generic in-place path: the wrapper kept its old shape
    while its storage was bound to the new one, and the next read failed.)"""
    t, other = args[0], args[1]
    fmt = kwargs.get("memory_format", args[2] if len(args) > 2 else None)
    if fmt is torch.preserve_format:
        fmt = torch._prims_common.suggest_memory_format(other)
    return _resize.resize_(t, tuple(other.shape), lambda dst, src: copy_(None, (dst, src), {}), fmt)


def lift_fresh(func, args, kwargs):
    """``torch.tensor(data, device="hpu")`` builds its tensor below Python dispatch: a real device
    tensor even while torch.compile traces with fake tensors, which the fake and tracing modes pass
    to us. Under a fake mode it is lifted as a CPU constant moved to the device (the graph then holds
    a real CPU constant and a copy to hpu, as for ``torch.tensor(data).to("hpu")``), so the trace
    never holds a real device tensor among fake ones."""
    from torch._guards import detect_fake_mode
    if detect_fake_mode() is not None:
        t = args[0]
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():           # the constant's value, read outside the trace
            host = to_cpu(t, "torch.tensor constant") if isinstance(t, HPUTensor) else t
        return aten._to_copy.default(aten.lift_fresh.default(host), device=t.device)
    return args[0]


def physical(op):
    """conj/neg views carry a bit the wrapper cannot hold: compute them as new tensors instead."""
    def handler(func, args, kwargs):
        return lazy_op(op, args, kwargs)
    return handler


def batch_norm_with_update(func, args, kwargs):
    """Writes the running stats *and* returns four new tensors (not the written args, which the
    generic in-place path returns): computed by its functional twin, then the stats rebound."""
    res = functional_op(aten._batch_norm_with_update_functional.default, args, kwargs)
    for target, new in zip((args[3], args[4]), res[4:]):
        if not isinstance(target, HPUTensor):
            raise _same_device_error(target.device)
        write(target, read_ref(new), ops.op_name(func))
    out, mean, rstd, reserve = res[:4]
    return (out, *_stats_dtype(args[0], args[1], mean, rstd), reserve)


def native_batch_norm_legit(func, args, kwargs):
    """As batch_norm_with_update: writes the running stats, returns three new tensors."""
    res = functional_op(aten._native_batch_norm_legit_functional.default, args, kwargs)
    for target, new in zip((args[3], args[4]), res[3:]):
        if not isinstance(target, HPUTensor):
            raise _same_device_error(target.device)
        write(target, read_ref(new), ops.op_name(func))
    return (res[0], *_stats_dtype(args[0], args[1], *res[1:3]))


def _stats_dtype(x, w, *stats):
    """Normalisation statistics in the dtype CPU's kernel gives them: the parameters' if they
    differ from the input's (float32 weights on bfloat16 input), else the input's (meta says
    float32 for reduced precision)."""
    want = w.dtype if isinstance(w, torch.Tensor) and w.dtype != x.dtype else x.dtype
    return [t if t.dtype == want else functional_op(aten._to_copy.default, (t,), {"dtype": want})
            for t in stats]


# out= kernels of CPU that resize the out contiguous and copy the result into it, whatever the
# result's layout (the rest take the layout of their result when they resize: torch's structured
# kernels restride a resized out, the linalg ones column-major). Found by comparing every OpInfo op's
# out= layout with CPU's (tests/dispatch/test_out_layouts.py).
_CONTIGUOUS_OUT = frozenset({aten._fft_r2c.out, aten._fft_c2r.out, aten._fft_c2c.out, aten.cholesky.out})


def out_variant(func, args, kwargs):
    """``op(..., out=t)``: compute into fresh buffers and write them into the out tensors. An out of
    the wrong shape is resized, and takes the layout CPU's kernel gives its result (the functional
    form's: column-major for linalg kernels); a list ``out=`` (``split_with_sizes_copy``) is written
    tensor by tensor."""
    out_kw = ops.inplace_info(func)[1]
    outs = [o for k in out_kw for o in (kwargs[k] if isinstance(kwargs[k], (list, tuple)) else (kwargs[k],))]
    kw = {k: v for k, v in kwargs.items() if k not in out_kw}
    # the functional form: the same op without out= (e.g. arange.start_out -> arange.start)
    name = func._schema.name.split("::")[1]
    packet = getattr(aten, name)
    for ov in packet.overloads():
        cand = getattr(packet, ov)
        if not any(a.alias_info is not None and a.alias_info.is_write for a in cand._schema.arguments):
            try:
                res = cand(*args, **kw, **({"device": HPU} if "device" in
                                            [a.name for a in cand._schema.arguments] and not any(
                                                isinstance(a, HPUTensor) for a in args) else {}))
            except (TypeError, RuntimeError):
                continue
            res_list = res if isinstance(res, (list, tuple)) else [res]
            for o, r in zip(outs, res_list):
                # as stock PyTorch: resized (warned if non-empty) and laid out as CPU's out kernel
                # lays it out: as its result, or contiguous (_CONTIGUOUS_OUT)
                _resize.resize_output(o, r.shape, None if func in _CONTIGUOUS_OUT else r.stride())
                copy_(None, (o, r), {})
            if not func._schema.returns:
                return None
            return outs[0] if len(outs) == 1 else tuple(outs)
    raise NotImplementedError(f"{ops.op_name(func)} with out= is not supported on hpu")


def record_stream(func, args, kwargs):
    """``t.record_stream(s)``: on CUDA/Gaudi the caching allocator must not hand ``t``'s block to
    another stream before the work queued on ``s`` ends. hpu_lab's device memory is never pooled
    between tensors: a storage lives while a view of it or a launch that reads it does, so there is
    nothing to defer, and the call is accepted as the real device accepts it (it raised "Could not
    run 'aten::record_stream' with arguments from the 'CPU' backend")."""
    t, s = args[0], args[1] if len(args) > 1 else kwargs["s"]
    if not isinstance(t, HPUTensor):
        raise _same_device_error(t.device)
    if getattr(s, "device_type", None) is not None and torch.device(s.device).type != "hpu":
        raise RuntimeError(f"record_stream: expected a stream on device hpu, got a stream on {s.device}")
    return None


def foreach_scalars_tensor(func, args, kwargs):
    """``_foreach_addcdiv(self, t1, t2, scalars=cpu_tensor)`` (and addcmul, in place or not): CPU's
    kernel reads the packed scalars on the host (``convert_tensor_to_scalar_list``) and runs the
    ScalarList form. So does this: the Tensor form's Meta kernel refuses the device copy hpu_lab
    made of the CPU operand ("Expected scalars to be on CPU, got meta instead"; Intel's
    test_hpu_foreach_ops)."""
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    sc, tensors = bound["scalars"], bound["self"]
    if isinstance(sc, HPUTensor) or not isinstance(sc, torch.Tensor) or sc.device.type != "cpu":
        raise RuntimeError(f"Expected scalars to be on CPU, got {getattr(sc, 'device', type(sc).__name__)} instead.")
    if sc.dim() != 1:
        raise RuntimeError(f"Expected packed scalar Tensor to be of dimension 1. Got {sc.dim()} instead.")
    if sc.size(0) != len(tensors):
        raise RuntimeError(f"Expected length of scalars to match input of length {len(tensors)} but got "
                           f"{sc.size(0)} instead.")
    packet = getattr(aten, func._schema.name.split("::")[1])
    return packet.ScalarList(tensors, bound["tensor1"], bound["tensor2"], sc.tolist())


def composite(func, args, kwargs):
    """An op torch decomposes above the device (``Tensor.to``) that reaches it anyway: torch's
    ZeroTensor layer passes ``to`` through whole (kernels/zerotensor.py). Its own decomposition, as on CPU:
    ``to`` returns the tensor itself when nothing changes, else a ``_to_copy``."""
    return func.decompose(*args, **kwargs)


HANDLERS = {    # the router's special-op table starts as this (dispatch/route.py owns it)
    **{getattr(aten.to, o): composite for o in aten.to.overloads()},
    aten.record_stream.default: record_stream,
    **{f: foreach_scalars_tensor for f in (aten._foreach_addcdiv.Tensor, aten._foreach_addcmul.Tensor,
                                           aten._foreach_addcdiv_.Tensor, aten._foreach_addcmul_.Tensor)},
    aten._batch_norm_with_update.default: batch_norm_with_update,
    aten._native_batch_norm_legit.default: native_batch_norm_legit,
    aten.copy_.default: copy_,
    aten._to_copy.default: to_copy,
    aten._local_scalar_dense.default: local_scalar_dense,
    aten.complex.default: complex_on_cpu,
    aten.native_dropout.default: native_dropout,
    aten.native_dropout_backward.default: native_dropout_backward,
    aten.resize_.default: resize_,
    aten.resize_as_.default: resize_as_,
    aten.set_.source_Tensor: objmodel.set_,
    aten.set_.source_Storage: objmodel.set_,
    aten.set_.source_Storage_storage_offset: objmodel.set_,
    aten.set_.default: objmodel.set_,
    aten.lift_fresh.default: lift_fresh,
    aten._conj.default: physical(aten.conj_physical.default),
    aten._neg_view.default: physical(aten.neg.default),
}
