"""Habana Mixed Precision (HMP), the legacy tool that torch.autocast replaced (seed 002).

``hmp.convert(opt_level="O1", bf16_file_path="", fp32_file_path="", isVerbose=False)`` wraps torch
functions, as the real tool does: each listed op (``torch.nn.functional.linear``, ``torch.Tensor.
__add__``, ...) gets a wrapper that casts its tensor inputs before calling it, so the casts become
``aten::_to_copy`` nodes of the graph, the same visible casts autocast inserts (``amp.cast``).

- O1: ops in the bf16 list take bf16 inputs, ops in the fp32 list take fp32 inputs (the files, or
  the bridge's default lists); "multi-input" ops (add, mul, cat, ...) cast to fp32 if any tensor input
  is fp32, else to bf16; their in-place forms cast to the type of the tensor they write. Any other op
  follows the type of its inputs. Normalisations cast their first input only.
- O2: conv*, bmm, addmm, mm, mv and dot in bf16, every other op HMP knows in fp32.

``hmp.disable_casts()`` turns casting off in a block (e.g. around ``optimizer.step()``).

As Optimum Habana did, ``hmp_bf16_ops`` / ``hmp_fp32_ops`` give Optimum's old defaults for a
GaudiConfig. Casting applies in the thread that called ``convert`` (the training loop), never inside
hpu_lab's own device kernels. ``hmp._restore()`` (lab-only) undoes ``convert``.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
import warnings

import torch
import torch.nn.functional as F

from ..kernels._common import in_device_kernel
from ..ops import in_meta_kernel

DEPRECATION = ("Habana Mixed Precision (HMP) module is deprecated and will be removed in version 1.13.0.\n"
               "Please use native PyTorch autocast for mixed precision training and inference")
logging.warning(DEPRECATION)        # as the real module does, once, when it is imported

# Optimum Habana's old GaudiConfig defaults (REFERENCE.md section 5)
hmp_bf16_ops = ["add", "addmm", "bmm", "div", "dropout", "gelu", "iadd", "linear", "layer_norm", "matmul", "mm",
                "rsub", "softmax", "truediv"]
hmp_fp32_ops = ["embedding", "nll_loss", "log_softmax"]

# the bridge's default O1 lists (hpex/hmp/ops_bf16.txt, ops_fp32.txt, ops_multi_inputs.txt)
DEFAULT_BF16 = ("addmm", "batch_norm", "bmm", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                "conv_transpose3d", "dot", "dropout", "group_norm", "instance_norm", "layer_norm", "leaky_relu",
                "linear", "matmul", "mean", "mm", "mul", "mv", "relu", "t")
DEFAULT_FP32 = ("binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "div", "divide",
                "embedding_bag", "log", "log2", "log_softmax", "nll_loss", "smooth_l1_loss", "softmax", "topk",
                "truediv")
MULTI_INPUT = ("add", "addcmul", "addcdiv", "cat", "div", "exp", "mul", "pow", "sub", "iadd", "truediv", "stack")
O2_BF16 = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "bmm", "addmm",
           "mm", "mv", "dot")

# The ops HMP knows and where they live: F = torch.nn.functional, T = torch, M = torch.Tensor methods
_F, _T, _M = F, torch, torch.Tensor
OPS = {
    **{n: (_F, _T) for n in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                             "conv_transpose3d")},
    **{n: (_F,) for n in ("avg_pool2d", "max_pool2d", "max_pool2d_with_indices", "linear", "batch_norm", "dropout",
                          "layer_norm", "instance_norm", "group_norm", "interpolate", "binary_cross_entropy",
                          "binary_cross_entropy_with_logits", "cross_entropy", "log_softmax", "softmax",
                          "nll_loss", "mse_loss", "smooth_l1_loss", "l1_loss", "gelu", "relu", "leaky_relu",
                          "relu6", "hardtanh", "tanh", "embedding_bag")},
    **{n: (_T, _M) for n in ("sum", "mean", "any", "addmm", "bmm", "dot", "matmul", "mm", "mv", "sort", "topk",
                             "add", "addcmul", "addcdiv", "div", "divide", "exp", "mul", "pow", "rsub", "rsqrt",
                             "sqrt", "sub", "max", "min", "eq", "ge", "gt", "ne", "log", "log2", "t", "flatten",
                             "index_put", "index_fill", "stack")},
    **{n: (_M,) for n in ("iadd", "idiv", "imul", "ipow", "isub", "itruediv", "truediv", "view")},
    "embedding": (_T,),
    "cat": (_T,),
}
_NORMS = ("layer_norm", "batch_norm", "instance_norm", "group_norm")    # cast the first input only


class _State:
    def __init__(self):
        self.patched = []          # (owner, attribute, original or _MISSING)
        self.thread = None
        self.disabled = False
        self.verbose = False
        self.opt_level = None


_MISSING = object()
_state = _State()


def _vprint(*args):
    if _state.verbose:
        print(*args)


def _active() -> bool:
    return (not _state.disabled and threading.get_ident() == _state.thread and not in_device_kernel()
            and not in_meta_kernel())


def to_bf16(t):
    return t.to(torch.bfloat16) if t.dtype == torch.float32 else t


def to_fp32(t):
    return t.to(torch.float32) if t.dtype == torch.bfloat16 else t


def _cast_all(fn, args, kwargs, first_only=False):
    args = tuple(fn(a) if isinstance(a, torch.Tensor) and (not first_only or i == 0) else a
                 for i, a in enumerate(args))
    if not first_only:
        kwargs = {k: fn(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    return args, kwargs


def _dynamic_fn(tensors):
    """Multi-input ops: fp32 if any tensor input is fp32, else bf16."""
    return to_fp32 if any(t.dtype == torch.float32 for t in tensors) else to_bf16


def _wrap(op, name, cast_fn):
    first_only = name in _NORMS

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        if not _active():
            return op(*args, **kwargs)
        _vprint("casting ", name, cast_fn.__name__)
        args, kwargs = _cast_all(cast_fn, args, kwargs, first_only)
        return op(*args, **kwargs)
    return wrapper


def _wrap_dynamic(op, name):
    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        if not _active():
            return op(*args, **kwargs)
        if args and isinstance(args[0], (list, tuple)):          # cat, stack: a list of tensors
            tensors = [t for t in args[0] if isinstance(t, torch.Tensor)]
            fn = _dynamic_fn(tensors + [v for v in kwargs.values() if isinstance(v, torch.Tensor)])
            _vprint("casting ", name, " to ", fn.__name__)
            return op(type(args[0])(fn(t) if isinstance(t, torch.Tensor) else t for t in args[0]), *args[1:],
                      **kwargs)
        fn = _dynamic_fn([a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)])
        _vprint("casting ", name, " to ", fn.__name__)
        args, kwargs = _cast_all(fn, args, kwargs)
        return op(*args, **kwargs)
    return wrapper


def _wrap_inplace(op, name):
    """In-place form of a multi-input op: cast the other inputs to the written tensor's type."""
    @functools.wraps(op)
    def wrapper(self, *args, **kwargs):
        if not _active():
            return op(self, *args, **kwargs)
        fn = to_fp32 if self.dtype == torch.float32 else to_bf16
        _vprint("casting ", name, " to ", fn.__name__)
        args, kwargs = _cast_all(fn, args, kwargs)
        return op(self, *args, **kwargs)
    return wrapper


def _attributes(name):
    """(owner, attribute) pairs HMP wraps for an op name: the op and its __op__ override."""
    found = []
    for owner in OPS.get(name, ()):
        for attr in (name, f"__{name}__"):
            if hasattr(owner, attr):
                found.append((owner, attr))
    return found


def _patch(owner, attr, wrapper):
    _state.patched.append((owner, attr, owner.__dict__.get(attr, _MISSING)))
    setattr(owner, attr, wrapper)


def _cast_ops(names, kind):
    for name in names:
        if name not in OPS:
            print(name, "OP not supported. Please add it to OPs dict and try again")
            continue
        for owner, attr in _attributes(name):
            op = getattr(owner, attr)
            if kind == "bf16":
                _patch(owner, attr, _wrap(op, name, to_bf16))
            elif kind == "fp32":
                _patch(owner, attr, _wrap(op, name, to_fp32))
            else:
                _patch(owner, attr, _wrap_dynamic(op, name))
        if kind == "any" and owner_has_inplace(name):
            op = getattr(torch.Tensor, name + "_")
            _patch(torch.Tensor, name + "_", _wrap_inplace(op, name + "_"))


def owner_has_inplace(name) -> bool:
    return torch.Tensor in OPS.get(name, ()) and hasattr(torch.Tensor, name + "_")


def _read(path):
    with open(path) as f:
        return [line.strip() for line in f.read().splitlines() if line.strip()]


def convert(opt_level="O1", bf16_file_path="", fp32_file_path="", isVerbose=False):
    """Start Habana Mixed Precision: wrap the listed torch ops with casts (see the module docstring)."""
    warnings.warn(DEPRECATION, FutureWarning, stacklevel=2)
    if opt_level not in ("O1", "O2"):
        raise ValueError(f"hmp.convert: Optlevel should be either O1 or O2, got {opt_level!r}")
    if opt_level == "O2" and (bf16_file_path or fp32_file_path):
        print("Input op list would be overridden in opt_level O2")
    _restore()                       # a second convert replaces the first
    _state.verbose, _state.opt_level = bool(isVerbose), opt_level
    print("hmp:verbose_mode ", _state.verbose)
    print("hmp:opt_level", opt_level)
    if opt_level == "O1":
        bf16 = _read(bf16_file_path) if bf16_file_path else list(DEFAULT_BF16)
        fp32 = _read(fp32_file_path) if fp32_file_path else list(DEFAULT_FP32)
        both = sorted(set(bf16) & set(fp32))
        if both:
            raise ValueError(f"hmp.convert: {both} in both fp32 & bf16 list")
        multi = [n for n in MULTI_INPUT if n not in bf16 and n not in fp32]   # the lists win over multi-input
        _vprint(bf16, fp32, multi)
        _cast_ops(multi, "any")
    else:
        bf16 = list(O2_BF16)
        fp32 = [n for n in OPS if n not in O2_BF16]
    _cast_ops(bf16, "bf16")
    _cast_ops(fp32, "fp32")
    _state.thread = threading.get_ident()


@contextlib.contextmanager
def disable_casts():
    """No HMP casts inside the block (e.g. around optimizer.step())."""
    _vprint("Disabled HMP casting")
    prev, _state.disabled = _state.disabled, True
    try:
        yield
    finally:
        _state.disabled = prev
        _vprint("Enabled HMP casting")


def is_active() -> bool:
    return bool(_state.patched)


def _restore() -> None:
    """Undo convert(): put every wrapped torch function back (lab-only; the real tool cannot)."""
    while _state.patched:
        owner, attr, original = _state.patched.pop()
        if original is _MISSING:
            delattr(owner, attr)
        else:
            setattr(owner, attr, original)
    _state.thread = None
    _state.opt_level = None
