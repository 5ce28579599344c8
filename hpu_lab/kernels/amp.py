"""``torch.autocast("hpu")``: PyTorch's own autocast, with the Gaudi op lists.

PyTorch runs autocast as a dispatch key that sits above autograd: for "hpu" (PrivateUse1 renamed)
it is ``AutocastPrivateUse1``. torch registers no kernels there, not even a fallthrough, so this
module registers both: a fallthrough for every op, and for each op of the lists a Python kernel that
casts the inputs and redispatches below autocast, exactly as torch's C++ kernels do for CPU/CUDA:

- lower-precision list: eligible inputs cast to the autocast dtype (bf16 by default, or fp16);
- fp32 list: eligible inputs cast to float32;
- promote list: eligible inputs cast to the widest of their types (starting from the autocast dtype).

"Eligible" is torch's rule: a floating tensor on the autocast device that is not float64. The casts
are ordinary ``aten::_to_copy`` ops, so autograd records them and the lazy graph shows them as
nodes (``NodeInfo.is_cast``). An op in several lists takes the first of lower, fp32, promote.

The lists are those of the bridge (REFERENCE.md section 5). ``PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST``
and ``PT_HPU_AUTOCAST_FP32_OPS_LIST`` name files (one op a line, ``#`` comments allowed) that
*replace* the default lower / fp32 list; they are read when hpu_lab is imported (and by ``reload()``);
an unreadable file gives a warning and the default list.

Not emulated: torch's autocast weight-cast cache (a weight used twice in one region is cast twice).
"""
from __future__ import annotations

import contextlib
import warnings

import torch

from .. import config

DEVICE = "hpu"
LOWER, FP32, PROMOTE = "lower", "fp32", "promote"

# BR hpu_ops/autocast_helpers.h (REFERENCE.md section 5)
DEFAULT_LOWER = (
    "addmm", "addbmm", "batch_norm", "baddbmm", "bmm", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "dot", "dropout", "feature_dropout", "group_norm",
    "instance_norm", "layer_norm", "leaky_relu", "linear", "matmul", "mean", "mm", "mul", "mv", "softmax",
    "log_softmax", "scaled_dot_product_attention")
DEFAULT_FP32 = (
    "acos", "addcdiv", "asin", "atan2", "bilinear", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "cdist", "cosh", "cosine_embedding_loss", "cosine_similarity", "cross_entropy_loss", "dist", "div",
    "divide", "embedding", "embedding_bag", "erfinv", "exp", "expm1", "hinge_embedding_loss", "huber_loss",
    "kl_div", "l1_loss", "log", "log10", "log1p", "log2", "logsumexp", "margin_ranking_loss", "mse_loss",
    "multi_margin_loss", "multilabel_margin_loss", "nll_loss", "pdist", "poisson_nll_loss", "pow",
    "reciprocal", "renorm", "rsqrt", "sinh", "smooth_l1_loss", "soft_margin_loss", "softplus", "tan", "topk",
    "triplet_margin_loss", "truediv", "true_divide")
DEFAULT_PROMOTE = ("add", "addcmul", "addcdiv", "cat", "div", "exp", "mul", "pow", "sub", "iadd", "truediv",
                   "stack")

# Python-level names in the lists and the aten op they reach. In-place ops (iadd = add_) cannot change
# their target's dtype, so autocast leaves them alone, as torch's own autocast does.
_ALIASES = {"truediv": "div", "iadd": None}

# Normalisations: only the input is cast to lower precision (torch's CPU kernels take a bf16 input with
# fp32 weight and statistics); running statistics are never cast, since the op updates them in place.
_NORMS = {"batch_norm", "instance_norm", "group_norm", "layer_norm"}
_NEVER_CAST = {"running_mean", "running_var"}

_state = {"lists": None, "lib": None, "fallthrough": None, "table": {}}


# ---------------------------------------------------------------- the lists

def _read_file(env: str, default: tuple) -> tuple:
    path = config.get(env)
    if not path:
        return default
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        warnings.warn(f"{env}={path!r} cannot be read ({e.strerror or e}); using the default list", stacklevel=3)
        return default
    ops = []
    for line in lines:
        name = line.split("#", 1)[0].strip()
        if name:
            ops.append(name[len("aten::"):] if name.startswith("aten::") else name)
    return tuple(ops)


def lists() -> dict:
    """The op lists in force: {"lower": (...), "fp32": (...), "promote": (...)}."""
    if _state["lists"] is None:
        reload()
    return dict(_state["lists"])


def policy_of(name: str):
    """'lower', 'fp32', 'promote' or None for an op name as the lists spell it (e.g. 'mm')."""
    ls = lists()
    for policy in (LOWER, FP32, PROMOTE):
        if name in ls[policy]:
            return policy
    return None


# ---------------------------------------------------------------- casting

def eligible(t, device_type: str) -> bool:
    """torch's autocast rule: a floating tensor on the autocast device, not float64."""
    return (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype is not torch.float64
            and t.device.type == device_type)


def cast(a, dtype, device_type: str):
    """``a`` (a tensor, or a list/tuple of them) with eligible tensors cast to ``dtype``."""
    if isinstance(a, torch.Tensor):
        return a.to(dtype) if eligible(a, device_type) and a.dtype != dtype else a
    if isinstance(a, (list, tuple)):
        return type(a)(cast(x, dtype, device_type) for x in a)
    return a


def widest(values, start, device_type: str):
    """The promote policy's dtype: the widest eligible input type, starting from ``start``."""
    dtype = start
    for a in values:
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if eligible(t, device_type):
                dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _kernel(op, policy, device_type, key, cast_names):
    """The autocast kernel of one overload: cast, then run the op below the autocast key."""
    exclude = torch._C.DispatchKeySet(key)
    names = [a.name for a in op._schema.arguments]
    pos = tuple(i for i, n in enumerate(names) if n in cast_names)

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            if policy == LOWER:
                dtype = torch.get_autocast_dtype(device_type)
            elif policy == FP32:
                dtype = torch.float32
            else:
                dtype = widest(list(args) + list(kwargs.values()), torch.get_autocast_dtype(device_type),
                               device_type)
            args = tuple(cast(a, dtype, device_type) if i in pos else a for i, a in enumerate(args))
            kwargs = {k: (cast(v, dtype, device_type) if k in cast_names else v) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    kernel.__name__ = f"autocast_{policy}_{op.__name__}"
    return kernel


def _overloads(name: str) -> list:
    """The functional aten overloads an autocast list name stands for (no in-place/out variants)."""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return []
    found = []
    for ov in packet.overloads():
        op = getattr(packet, ov)
        args = op._schema.arguments
        if any(a.alias_info is not None and a.alias_info.is_write for a in args):
            continue
        if not any(_is_tensor_type(a.type) for a in args):
            continue            # div.int and friends: Python numbers only
        found.append(op)
    return found


def _is_tensor_type(t) -> bool:
    s = str(t)
    return s.startswith("Tensor") or s.startswith("Optional[Tensor") or s.startswith("List[Tensor")


def register(lower, fp32, promote, key: str = "AutocastPrivateUse1", device_type: str = DEVICE):
    """Register autocast kernels for the lists on dispatch ``key``; return (Library, {op: policy}).

    Tests use ``key="AutocastCPU", device_type="cpu"`` to run the same lists on CPU as a reference
    (destroy the returned Library with ``lib._destroy()`` to get torch's own CPU autocast back).
    """
    dk = getattr(torch._C.DispatchKey, key)
    lib = torch.library.Library("aten", "IMPL")
    table, unknown = {}, []
    for policy, names in ((LOWER, lower), (FP32, fp32), (PROMOTE, promote)):
        for name in names:
            target = _ALIASES.get(name, name)
            if target is None:
                continue
            ops = _overloads(target)
            if not ops:
                unknown.append(name)
                continue
            for op in ops:
                if op in table:      # already in an earlier list: lower > fp32 > promote
                    continue
                arg_names = {a.name for a in op._schema.arguments if _is_tensor_type(a.type)}
                if target in _NORMS:
                    arg_names = {"input"} if policy == LOWER else arg_names - _NEVER_CAST
                table[op] = policy
                lib.impl(op, _kernel(op, policy, device_type, dk, frozenset(arg_names)), key)
    if unknown:
        warnings.warn(f"autocast: no aten op named {', '.join(sorted(set(unknown)))}; ignored", stacklevel=3)
    return lib, table


def reload() -> None:
    """Read the env-var lists again and re-register the hpu autocast kernels."""
    lower = _read_file("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", DEFAULT_LOWER)
    fp32 = _read_file("PT_HPU_AUTOCAST_FP32_OPS_LIST", DEFAULT_FP32)
    if _state["lib"] is not None:
        _state["lib"]._destroy()
        _state["lib"] = None
    _state["lists"] = {LOWER: lower, FP32: fp32, PROMOTE: DEFAULT_PROMOTE}
    _state["lib"], _state["table"] = register(lower, fp32, DEFAULT_PROMOTE)


def policy_table() -> dict:
    """{aten OpOverload: policy} of the kernels registered for hpu."""
    return dict(_state["table"])


@contextlib.contextmanager
def cpu_reference():
    """Inside the block, ``torch.autocast("cpu")`` follows the hpu lists and nothing else.

    For comparing an hpu run with plain CPU PyTorch: the hpu lists' kernels are registered on
    AutocastCPU, and torch's own CPU autocast kernels of other ops are replaced by fallthroughs.
    On exit torch's CPU autocast is back as it was.
    """
    ls = lists()
    with warnings.catch_warnings():          # "Overriding a previously registered kernel": intended
        warnings.simplefilter("ignore")
        lib, table = register(ls[LOWER], ls[FP32], ls[PROMOTE], key="AutocastCPU", device_type="cpu")
        ours = {op._schema.name + ("." + op._overloadname if op._overloadname != "default" else "")
                for op in table}
        for name in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"):
            if name not in ours and name.startswith("aten::"):
                lib.impl(name[len("aten::"):], torch.library.fallthrough_kernel, "AutocastCPU")
    try:
        yield
    finally:
        lib._destroy()


def install() -> None:
    """At ``import hpu_lab``: the fallthrough, the default dtype (bf16, as on Gaudi), the lists."""
    if _state["fallthrough"] is None:
        # without a fallback, every op on an hpu tensor inside autocast("hpu") would fail with
        # "Could not run ... with arguments from the 'Autocasthpu' backend"
        fb = torch.library.Library("_", "IMPL")
        fb.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
        _state["fallthrough"] = fb
    torch.set_autocast_dtype(DEVICE, torch.bfloat16)
    reload()
