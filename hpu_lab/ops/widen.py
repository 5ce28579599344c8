"""Dtypes Gaudi computes and the CPU kernel lacks: compute in float32, round once to the result dtype.

The emulated device runs the CPU's kernels, and many have no fp8 (``float8_e4m3fn``/``float8_e5m2``),
some no bf16/fp16 (``cdist``, ...): ``"add_stub" not implemented for 'Float8_e4m3fn'``. Gaudi 2/3's TPC
kernels take these dtypes. When a recipe fails on the device with that error, the failing node is
rewritten to a *widened* call: its fp8/bf16/fp16 tensor arguments are converted to float32 (exact: each
of those values is a float32 value), the op runs, and each result is rounded once to the dtype the op
gives for the original arguments (its Meta kernel says which). In-place ops write the rounded result
back into their argument. The recipe keeps the rewritten node, so later launches run it directly.

Where this differs from Gaudi: the result is the exactly computed value rounded once (round to nearest
even, saturating as torch's fp8 conversion does). Gaudi's kernels accumulate long reductions in their
own order and precision and may differ from that in the last bit; for fp8 add/sub the TPC computes in
float32 as well, so single elementwise ops agree.
"""
from __future__ import annotations

import re

import torch
import torch.fx
import torch.utils._pytree as pytree

_LOW = {torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2: "Float8_e5m2",
        torch.bfloat16: "BFloat16", torch.float16: "Half"}
_MISSING = re.compile(r"not implemented for '(Float8_e4m3fn|Float8_e5m2|BFloat16|Half)'"
                      # the CPU's add_relu reports its missing dtypes with an internal assert
                      r"|Unsupported datatype for add_relu:c10::(BFloat16|Half|Float8_e4m3fn|Float8_e5m2)")
# int32 indices: Gaudi's kernels take them, some CPU kernels want int64 ("take(): Expected a long tensor
# for index, but got torch.int32"); the index is widened to int64, which changes no value
_INT32_INDEX = re.compile(r"Expected a long tensor for index, but got (torch\.int32|Int)\b")
# integer and bool tensors Gaudi's TPC takes where the CPU has no integer kernel (Intel's test_hpu_lerp
# on int32, test_randint's trunc of a bool result): computed in float32, converted back to the op's
# dtype by truncation, as the bridge's own test computes its reference (float32 lerp, then .to(int))
_aten = torch.ops.aten
_INT_AS_FLOAT = {_aten.lerp.Scalar, _aten.lerp.Tensor, _aten.lerp_.Scalar, _aten.lerp_.Tensor,
                 _aten.trunc.default, _aten.trunc_.default}
_MISSING_INT = re.compile(r"not implemented for '(Int|Long|Short|Char|Byte|Bool)'")
_INTS = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)


ANY_NODE = object()     # missing_kernel's op for "some node of the graph": any dtype listed


def missing_kernel(exc: BaseException, op=None) -> bool:
    """True if ``exc`` is the CPU saying it has no kernel for one of the widenable dtypes (of ``op``)."""
    return isinstance(exc, (NotImplementedError, RuntimeError)) and bool(
        _MISSING.search(str(exc)) or _INT32_INDEX.search(str(exc))
        or ((op is ANY_NODE or op in _INT_AS_FLOAT) and _MISSING_INT.search(str(exc))))


_WIDENED: dict = {}


def widened(op):
    """``op`` computed in float32 for fp8/bf16/fp16 tensor arguments, results rounded back."""
    fn = _WIDENED.get(op)
    if fn is not None:
        return fn
    written = [i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]

    names = [a.name for a in op._schema.arguments]

    def run(*args, **kwargs):
        low = next((t.dtype for t in pytree.tree_leaves((args, kwargs))
                    if isinstance(t, torch.Tensor) and t.dtype in _LOW), None)
        if low in (torch.bfloat16, torch.float16) and _SCALED_SCALAR.get(op) is not None:
            # add_relu(x, o, alpha): the operand is o * alpha, rounded to the tensor's dtype (a scalar
            # o: computed in double, then rounded as any scalar): relu(x + bf16(o * alpha))
            args, kwargs = _fold_alpha(args, kwargs, names)
        if low in (torch.bfloat16, torch.float16):
            # a Python scalar operand takes the tensor's dtype first, as in torch's CPU kernels for
            # bf16/fp16 (bf16(x + bf16(s)), not bf16(x + s)); ``alpha`` stays in the compute dtype
            args = tuple(_round_scalar(a, low) if names[i:i + 1] != ["alpha"] else a for i, a in enumerate(args))
            kwargs = {k: (_round_scalar(v, low) if k != "alpha" else v) for k, v in kwargs.items()}
        as_float = op in _INT_AS_FLOAT
        wide_args, wide_kw = pytree.tree_map_only(
            torch.Tensor, lambda t: t.float() if t.dtype in _LOW or (as_float and t.dtype in _INTS)
            else t.long() if t.dtype == torch.int32 else t, (args, kwargs))
        res = op(*wide_args, **wide_kw)
        meta_args, meta_kw = pytree.tree_map_only(torch.Tensor, lambda t: t.to("meta"), (args, kwargs))
        try:
            meta = op(*meta_args, **meta_kw)      # the result dtypes for the original arguments
        except (NotImplementedError, RuntimeError):
            # no Meta kernel (e.g. multilabel_margin_loss_backward): a float32 result takes the
            # dtype of the narrow floating arguments, as for ops of one floating dtype
            low = next((t.dtype for t in pytree.tree_leaves((args, kwargs))
                        if isinstance(t, torch.Tensor) and t.dtype in _LOW), torch.float32)
            meta = pytree.tree_map_only(torch.Tensor, lambda r: r.new_empty((), device="meta",
                                        dtype=low if r.dtype == torch.float32 else r.dtype), res)
        out = pytree.tree_map(lambda r, m: r.to(m.dtype) if isinstance(r, torch.Tensor) and r.dtype != m.dtype else r,
                              res, meta)
        for i in written:                 # in-place: the argument itself must hold the result
            if i < len(args) and isinstance(args[i], torch.Tensor) and (
                    args[i].dtype in _LOW or args[i].dtype == torch.int32 or (as_float and args[i].dtype in _INTS)):
                src = out if isinstance(out, torch.Tensor) else out[written.index(i)]
                args[i].copy_(src)
                out = args[i] if isinstance(out, torch.Tensor) else out
        return out

    run.__name__ = f"widened_{str(op).replace('.', '_').replace('::', '_')}"
    run.__qualname__ = run.__name__
    run.op = op                           # what passes and descriptions see through
    _WIDENED[op] = run
    return run


# ops whose ``other`` is scaled by ``alpha`` first (the bridge's add_relu on a bf16/fp16 tensor:
# relu(x + other * alpha), the product rounded to the tensor's dtype; Intel's test_hpu_add_relu)
_SCALED_SCALAR = {torch.ops.aten._add_relu.Scalar: True, torch.ops.aten._add_relu.Tensor: True}


def _fold_alpha(args, kwargs, names):
    v = dict(zip(names, args))
    v.update(kwargs)
    other, alpha = v.get("other"), v.get("alpha", 1)
    if isinstance(other, torch.Tensor) and other.dtype in (torch.bfloat16, torch.float16):
        v["other"], v["alpha"] = other * alpha, 1          # rounded to other's dtype, as on the device
    elif isinstance(other, (int, float)) and not isinstance(other, bool):
        v["other"], v["alpha"] = float(other) * float(alpha), 1
    else:
        return args, kwargs
    return tuple(v[n] for n in names[:len(args)]), {k: v[k] for k in kwargs}


def _round_scalar(v, dtype):
    if isinstance(v, float):
        return float(torch.tensor(v, dtype=dtype))
    return v


def _failing_node(gm, args):
    failing = []

    class Finder(torch.fx.Interpreter):
        def run_node(self, n):
            try:
                return super().run_node(n)
            except Exception as e:
                if not failing:
                    failing.append((n, e))
                raise

    try:
        Finder(gm).run(*args)
    except Exception:
        pass
    return failing[0] if failing else (None, None)


def rerun(recipe, args, exc):
    """Run ``recipe`` again with each node that lacks a CPU kernel for its dtype widened; the recipe
    keeps the rewritten graph. Any other failure is raised as it was."""
    for _ in range(len(recipe.gm.graph.nodes)):
        node, err = _failing_node(recipe.gm, args)
        if node is None or not isinstance(node.target, torch._ops.OpOverload) or not missing_kernel(err, node.target):
            raise exc
        node.target = widened(node.target)
        recipe.gm.recompile()
        recipe.fn = recipe.gm.forward         # the TorchScript lowering, if any, had the old node
        recipe.backend = "fx"
        try:
            return recipe.fn(*args)
        except Exception as e:  # noqa: BLE001 - the next node may lack a kernel too
            if not missing_kernel(e, ANY_NODE):
                raise
            exc = e
    raise exc
