"""Meta kernels that disagree with the CPU kernel they describe, corrected.

hpu_lab infers every lazy op's output shape from its Meta kernel; where torch's Meta kernel gives a
shape the CPU kernel does not, an "hpu" tensor would report a shape its value does not have. Each
correction here is the CPU kernel's rule, checked against it by tests/ops/test_meta_fixes.py.

- ``multilabel_margin_loss_forward``: for a 1-D input with ``reduction="none"`` the CPU returns a
  0-dim loss; torch's Meta kernel says ``[1]``.
- ``take``: Gaudi takes int32 indices as well as int64 (the CPU kernel only int64: hpu_lab widens the
  index when it runs, see ops/widen.py); the Meta kernel refuses int32, so the op could not be recorded.
- **output strides**: torch's Meta kernels pick a layout by asking ``device_hint`` which backend will
  run, and a plain meta tensor answers "cuda". hpu_lab's kernels are the CPU's, so during hpu_lab's
  shape inference the answer is "cpu": LAPACK results (``_linalg_svd``'s Vh, ``linalg_eig``'s vectors)
  are column-major and FFT results (``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c``) take MKL's layout, as on
  CPU. (An hpu tensor with another layout than CPU's changes what later views and in-place writes do.)
- ``max_unpool2d``: CPU's kernel returns a 4-D result in the input's suggested memory format
  (channels-last in, channels-last out); torch's Meta kernel (a decomposition) is always contiguous.
- batch norm in evaluation mode (``native_batch_norm``, ``_native_batch_norm_legit`` and its
  ``_no_training`` form with ``training=False``): CPU's kernel returns empty (``[0]``) saved mean and
  inverse std; torch's Meta kernels say ``[C]``. The hpu op then failed ("Expected Tensor but got
  None", a storage out of bounds) or returned statistics CPU does not have. In training mode the
  saved statistics of a bfloat16 input are bfloat16 on CPU (the Meta kernels say float32).
- ``native_batch_norm_backward``, ``batch_norm_backward``: CPU's kernel returns no gradient where
  ``output_mask`` asks for none (a batch norm whose input needs no gradient: normalising the data);
  torch's Meta kernels return all three. In eager mode, where every output of an op is read back,
  the backward of such a batch norm failed (the executor's output check refused the missing
  input gradient). Found by the module programs of the random-program fuzzer.
- ``convolution``: CPU's kernel returns channels-last when its input or weight is channels-last (the
  layout its backend, oneDNN or the slow kernel, picks); torch's Meta kernel is always contiguous, as
  it cannot tell the backend. The layout is asked of torch's own backend selection for a CPU tensor of
  that shape and layout (what FakeTensor does for torch.compile). A conv net in channels-last then
  stays channels-last on hpu, as on CPU (what later views, reshapes and ``is_contiguous`` see). The
  same for torch.compile's FakeTensors on "hpu" (torch's fake convolution asked PrivateUse1's backend,
  "Overrideable": contiguous). Left as torch has it: torch's references make every elementwise result
  on an "hpu" FakeTensor contiguous on purpose (``torch._refs.is_noncontiguous_supported`` is False
  for device type "hpu", Intel's bridge), so under torch.compile a relu after a channels-last conv
  is contiguous, as with the real bridge.
- ``native_layer_norm``: CPU's statistics are in the input's dtype (float32 only for a bfloat16 or
  float16 input with float32 parameters); torch's Meta kernel says float32 for any reduced precision.
- ``nansum`` with an empty ``dim`` (``nanmean(x, dim=())`` calls it so): CPU's kernel reduces over all
  dimensions, as ``sum`` does; torch's Meta kernel reduced over none and said the input's shape. The
  CPU's one-element result was then broadcast into a tensor of the input's shape: a silent wrong
  answer, found by the gradient sweep (``nanmean``, ``masked.mean``).
- ``_batch_norm_with_update[_functional]``, ``_batch_norm_no_update``: the same statistics rules
  (bfloat16 saved statistics for a bfloat16 input; empty ones without the update), and the
  functional forms' new running statistics (these and ``_native_batch_norm_legit_functional``'s)
  in the running statistics' dtype (torch's said float32 for bfloat16). Found by the
  executor's output check (runtime/executor.py), which refused the float32 the graph predicted.
"""
from __future__ import annotations

import functools

import torch
import torch._meta_registrations as _meta_registrations
from torch._decomp import decomposition_table as _decomposition_table, decompositions as _decompositions
from torch._prims_common import suggest_memory_format as _suggest_memory_format

from .. import ops

_lib = torch.library.Library("aten", "IMPL")


def _multilabel_margin_loss_forward(self, target, reduction):
    if self.dim() > 2 or self.dim() < 0 or (self.dim() == 2 and self.shape[1] == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(self.shape)}")
    if tuple(target.shape) != tuple(self.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: {list(self.shape)}")
    batched = self.dim() == 2
    shape = (self.shape[0],) if (reduction == 0 and batched) else ()
    return self.new_empty(shape), self.new_empty(target.shape)        # is_target: the input's dtype


_lib.impl("multilabel_margin_loss_forward", _multilabel_margin_loss_forward, "Meta")


def _take(self, index):
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"take(): Expected a long or int tensor for index, but got {index.dtype}")
    if self.numel() == 0 and index.numel() != 0:
        raise IndexError("take(): tried to take from an empty tensor")
    return self.new_empty(index.shape)


_lib.impl("take", _take, "Meta")


def _nansum(self, dim=None, keepdim=False, *, dtype=None):
    if self.is_complex():
        raise RuntimeError("nansum does not support complex inputs")
    return torch.ops.aten.sum.dim_IntList(self, list(dim) if dim else None, keepdim, dtype=dtype)


_lib.impl("nansum", _nansum, "Meta")


_device_hint = _meta_registrations.device_hint


def _cpu_device_hint(tensor) -> str:
    if ops.in_meta_kernel() and not isinstance(tensor, torch._subclasses.FakeTensor) \
            and getattr(getattr(tensor, "device", None), "type", None) == "meta":
        return "cpu"                    # hpu_lab's shape inference describes the CPU kernel
    return _device_hint(tensor)


# module attribute: torch's meta kernels look it up at each call (some import it inside the function)
_meta_registrations.device_hint = _cpu_device_hint


def _max_unpool2d(self, indices, output_size):
    out = _decompositions.max_unpool2d(self, indices, output_size)
    if self.dim() == 4:
        return out.contiguous(memory_format=_suggest_memory_format(self))
    return out


_lib.impl("max_unpool2d", _max_unpool2d, "Meta")


def _eval_stats_empty(op, training_arg):
    """The Meta kernel of a batch-norm op, with CPU's empty statistics when not training."""
    meta = _decomposition_table[op]

    def kernel(*args, **kwargs):
        out, mean, invstd, *stats = meta(*args, **kwargs)     # (_functional: new running stats)
        x, w = args[0], args[1]        # CPU's dtype for them: the parameters' if they differ, else the input's
        dtype = w.dtype if isinstance(w, torch.Tensor) and w.dtype != x.dtype else x.dtype
        shape = mean.shape if training_arg is not None and args[training_arg] else (0,)
        running = args[3] if len(args) > 3 else None
        if stats and isinstance(running, torch.Tensor):   # new running stats: in their own dtype, as on CPU
            stats = [t.new_empty(t.shape, dtype=running.dtype) for t in stats]
        return (out, mean.new_empty(shape, dtype=dtype), invstd.new_empty(shape, dtype=dtype), *stats)
    return kernel


def _masked_like_cpu(op, mask_arg):
    """A batch-norm backward's Meta kernel, with no output where ``output_mask`` says none (CPU's
    kernel returns undefined ones there; torch's Meta kernels return all three)."""
    meta = _decomposition_table[op]

    def kernel(*args, **kwargs):
        mask = args[mask_arg] if len(args) > mask_arg else kwargs["output_mask"]
        return tuple(r if m else None for r, m in zip(meta(*args, **kwargs), mask))
    return kernel


for _op in (torch.ops.aten.native_batch_norm_backward.default, torch.ops.aten.batch_norm_backward.default):
    _lib.impl(_op._schema.name.split("::")[1], _masked_like_cpu(_op, 9), "Meta")


for _op, _training_arg in ((torch.ops.aten.native_batch_norm.default, 5),
                           (torch.ops.aten._native_batch_norm_legit.default, 5),
                           (torch.ops.aten._native_batch_norm_legit_functional.default, 5),
                           (torch.ops.aten._native_batch_norm_legit.no_stats, 3),
                           (torch.ops.aten._native_batch_norm_legit_no_training.default, None)):
    _lib.impl(_op, _eval_stats_empty(_op, _training_arg), "Meta")


_meta_conv = _meta_registrations.meta_conv
_fake_mode = []


def _cpu_conv_format(x, weight, kw):
    """The memory format CPU's convolution gives its output: torch's backend choice for CPU tensors
    of these shapes and layouts (fake ones: nothing is allocated). ``x``, ``weight`` and a tensor
    ``bias`` in ``kw``: meta tensors."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    if not _fake_mode:
        _fake_mode.append(FakeTensorMode())
    mode = _fake_mode[0]
    cpu = torch.device("cpu")
    fx, fw = FakeTensor(mode, x, cpu), FakeTensor(mode, weight, cpu)
    if isinstance(kw.get("bias"), torch.Tensor):
        kw = dict(kw, bias=FakeTensor(mode, kw["bias"], cpu))
    with mode:
        backend = torch._C._select_conv_backend(fx, fw, **kw)
        if weight.dim() == 3:            # conv1d runs as a 2-d convolution (as fake_impls does)
            fx, fw = fx.contiguous().unsqueeze(2), fw.unsqueeze(2)
        return torch._C._conv_determine_backend_memory_format(fx, fw, backend)


def _convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    out = _meta_conv(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if not ops.in_meta_kernel() or isinstance(x, torch._subclasses.FakeTensor) or x.device.type != "meta" \
            or x.dim() not in (3, 4, 5):
        return out
    fmt = _cpu_conv_format(x, weight, dict(bias=bias, stride=stride, padding=padding, dilation=dilation,
                                           transposed=transposed, output_padding=output_padding, groups=groups))
    if fmt == torch.contiguous_format or fmt == torch.preserve_format:
        return out
    if out.dim() == 3:
        return out.unsqueeze(2).contiguous(memory_format=fmt).squeeze(2)
    return out.contiguous(memory_format=fmt)


_lib.impl("convolution", _convolution, "Meta")


# torch.compile: dynamo/AOTAutograd trace with FakeTensors whose device is "hpu"; torch's fake
# convolution asks the backend choice of that device (PrivateUse1: "Overrideable", contiguous), so a
# compiled channels-last conv net had contiguous outputs and gradients where CPU's are channels-last.
# The fake result takes the format CPU's backend gives (as it does for a "cpu" FakeTensor).
import torch._subclasses.fake_impls as _fake_impls  # noqa: E402

_fake_conv = _fake_impls.op_implementations_dict[torch.ops.aten.convolution.default]


def _static_meta(t):
    if not isinstance(t, torch.Tensor):
        return t
    if any(not isinstance(d, int) for d in (*t.shape, *t.stride())):
        return None
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _fake_convolution(fake_mode, func, *args, **kwargs):
    out = _fake_conv(fake_mode, func, *args, **kwargs)
    _, kw = _fake_impls._normalize_function_or_error(func, args=args, kwargs=kwargs,
                                                     normalize_to_only_use_kwargs=True)
    x, w = kw["input"], kw["weight"]
    if getattr(getattr(x, "fake_device", None), "type", None) != "hpu" or x.dim() not in (3, 4, 5):
        return out
    mx, mw, mb = _static_meta(x), _static_meta(w), _static_meta(kw.get("bias"))
    if mx is None or mw is None or (kw.get("bias") is not None and mb is None):
        return out                     # symbolic shapes: left as torch leaves them
    sel = {k: kw[k] for k in ("stride", "padding", "dilation", "transposed", "output_padding", "groups")}
    sel["bias"] = mb
    if mb is None:
        sel["bias_sizes"] = kw.get("bias_sizes")
    fmt = _cpu_conv_format(mx, mw, sel)
    if fmt == torch.contiguous_format or fmt == torch.preserve_format:
        return out

    def convert(t):
        if t is None:
            return t
        with _fake_impls.in_kernel_invocation_manager(fake_mode):
            m = t.unsqueeze(2).to(memory_format=fmt).squeeze(2) if t.dim() == 3 else t.to(memory_format=fmt)
        return _fake_impls.FakeTensor(fake_mode, m, t.fake_device)

    if isinstance(out, tuple):         # convolution_backward: grad_input and grad_weight, as torch's does
        return (convert(out[0]), convert(out[1]), out[2])
    return convert(out)


for _op in (torch.ops.aten.convolution.default, torch.ops.aten._convolution.default,
            torch.ops.aten._convolution.deprecated, torch.ops.aten.convolution_backward.default):
    if _fake_impls.op_implementations_dict.get(_op) is _fake_conv:
        _fake_impls.op_implementations_dict[_op] = _fake_convolution


def _update_stats_like_cpu(op, training):
    """The Meta kernel of ``_batch_norm_with_update[_functional]`` / ``_batch_norm_no_update``, with
    CPU's saved statistics (its dtype rule; empty when not training) and, for the functional form,
    new running statistics in the running statistics' dtype (torch's say float32 for bfloat16)."""
    meta = _decomposition_table[op]

    def kernel(*args, **kwargs):
        out, mean, invstd, reserve, *new = meta(*args, **kwargs)
        x, w, running = args[0], args[1], args[3]
        dtype = w.dtype if isinstance(w, torch.Tensor) and w.dtype != x.dtype else x.dtype
        shape = mean.shape if training or running is None else (0,)
        stats = (mean.new_empty(shape, dtype=dtype), invstd.new_empty(shape, dtype=dtype))
        if new and isinstance(running, torch.Tensor):
            new = [t.new_empty(t.shape, dtype=running.dtype) for t in new]
        return (out, *stats, reserve, *new)
    return kernel


for _op, _training in ((torch.ops.aten._batch_norm_with_update.default, True),
                       (torch.ops.aten._batch_norm_with_update_functional.default, True),
                       (torch.ops.aten._batch_norm_no_update.default, False)):
    _lib.impl(_op, _update_stats_like_cpu(_op, _training), "Meta")


def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    """``native_layer_norm``'s Meta kernel with CPU's statistics dtype: the input's, or float32 when
    a reduced-precision input meets float32 parameters (CPU's ``param_scalar_type``); torch's says
    float32 for every bfloat16/float16 input. The hpu op's statistics were predicted float32 and the
    kernel returned bfloat16: the executor refused it (Intel's test_hpu_layer_norm, 7 tests)."""
    out, mean, rstd = torch._refs.native_layer_norm(x, normalized_shape, weight, bias, eps)
    params = [p for p in (weight, bias) if isinstance(p, torch.Tensor)]
    mixed = x.dtype in (torch.bfloat16, torch.float16) and any(p.dtype == torch.float32 for p in params)
    dtype = torch.float32 if mixed else x.dtype
    return out, mean.new_empty(mean.shape, dtype=dtype), rstd.new_empty(rstd.shape, dtype=dtype)


_lib.impl("native_layer_norm", _native_layer_norm, "Meta")


_FAST_SUM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _embedding_bag_like_cpu(op, requires_grad):
    """``_embedding_bag`` / ``_embedding_bag_forward_only``: torch's Meta kernel (its checks, its
    output), with the auxiliary outputs CPU's kernel makes (EmbeddingBag.cpp): ``offset2bag`` is empty
    on CPU's fast ``sum`` path (float32, float16 *and bfloat16*, unit-stride rows, no padding index),
    ``bag_size`` has one entry per bag (``include_last_offset`` drops one) unless a ``sum`` runs
    without gradients (one per offset), ``max_indices`` is ``[bags, D]`` in ``max`` mode, else
    ``bag_size``'s shape; all in the promoted index dtype."""
    meta = _meta_registrations.meta_embedding_bag if requires_grad else \
        _meta_registrations.meta_embedding_bag_forward_only

    def kernel(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
               per_sample_weights=None, include_last_offset=False, padding_idx=-1):
        out = meta(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                   include_last_offset, padding_idx)[0]
        idx_dtype = torch.int64 if torch.int64 in (indices.dtype, offsets.dtype) else offsets.dtype
        bags = offsets.size(0) - (1 if include_last_offset else 0)
        fast = weight.dtype in _FAST_SUM_DTYPES and weight.stride(1) == 1 and out.stride(1) == 1 \
            and padding_idx < 0 and (per_sample_weights is None or per_sample_weights.stride(0) == 1)
        n2b = indices.size(0) if mode in (1, 2) or not fast else 0
        bag_size = (bags,) if requires_grad or mode in (1, 2) else tuple(offsets.shape)
        max_indices = (bags, weight.size(1)) if mode == 2 else bag_size
        new = functools.partial(offsets.new_empty, dtype=idx_dtype)
        return out, new((n2b,)), new(bag_size), new(max_indices)
    return kernel


_lib.impl("_embedding_bag", _embedding_bag_like_cpu(torch.ops.aten._embedding_bag.default, True), "Meta")
_lib.impl("_embedding_bag_forward_only",
          _embedding_bag_like_cpu(torch.ops.aten._embedding_bag_forward_only.default, False), "Meta")
