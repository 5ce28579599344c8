"""torch.compile on hpu: every op's result laid out as the graph was traced.

torch models the hpu device as one whose kernels return dense, contiguous results: its fake tensors
make an elementwise op of a transposed input contiguous (``torch._subclasses.fake_impls`` and
``torch._refs``: ``is_noncontiguous_supported`` is false for "hpu"), and AOTAutograd then traces a
later reshape of that result as a ``view`` (every HF attention layer: q/k/v are transposed, scaled,
and reshaped for a bmm). hpu_lab's device runs CPU kernels, which keep the input's layout: the same
``view`` on the real result failed ("view size is not compatible with input tensor's size and
stride"), where a Gaudi, whose kernels return what torch traced, runs it.

So a compiled graph's results are made to be what the trace says: after each op that makes a new
tensor (not a view, not an in-place op), ``as_traced`` checks the result's strides against the
traced ones and, where they differ, copies it into a tensor of the traced layout. Values are
unchanged; a copy is made only where CPU's layout and the trace differ.
"""
from __future__ import annotations

import operator

import torch

from .. import ops


def as_traced(t, stride):
    """``t`` itself when laid out with ``stride`` (size-1 dimensions ignored), else a copy that is."""
    if not isinstance(t, torch.Tensor):
        return t
    if all(a == b for a, b, n in zip(t.stride(), stride, t.shape) if n != 1):
        return t
    out = t.new_empty_strided(t.shape, stride)
    out.copy_(t)
    return out


def _static_tensor(val) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(s, int) for s in (*val.shape, *val.stride()))


def _makes_tensor(n) -> bool:
    """An op whose result is a new tensor of its own (not an alias of an input)."""
    if n.target is operator.getitem:
        src = n.args[0]
        return isinstance(src, torch.fx.Node) and isinstance(src.target, torch._ops.OpOverload) and \
            not ops.is_view(src.target) and not src.target._schema.is_mutable
    return isinstance(n.target, torch._ops.OpOverload) and not ops.is_view(n.target) and \
        not n.target._schema.is_mutable


def conform(g: torch.fx.Graph) -> int:
    """Insert ``as_traced`` after every tensor-making op of ``g``; returns how many."""
    count = 0
    for n in list(g.nodes):
        if n.op != "call_function" or not _makes_tensor(n):
            continue
        val = n.meta.get("val")
        if not _static_tensor(val):
            continue
        with g.inserting_after(n):
            fix = g.call_function(as_traced, (n, tuple(val.stride())))
        fix.meta.update({k: v for k, v in n.meta.items() if k in ("val", "stack_trace", "tensor_meta")})
        n.replace_all_uses_with(fix, delete_user_cb=lambda u, fix=fix: u is not fix)
        count += 1
    return count
