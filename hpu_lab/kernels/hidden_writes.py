"""Ops that write arguments their schema calls read-only (``ops.HIDDEN_WRITES``), recorded as writes.

``aten::native_batch_norm`` (what ``nn.BatchNorm*`` dispatches in training) returns three new
tensors, and its CPU kernel also updates ``running_mean`` and ``running_var`` in place; its schema
declares no write. Recorded as a pure node, the update happened only as a side effect of the kernel
when the recipe ran: an unused output was removed as dead code (the statistics stayed as they
were: ``torch.optim.swa_utils.update_bn``, any "calibrate BN" pass), and a read of ``running_mean``
before the output was needed returned the old values. On CPU, CUDA and Gaudi the forward itself
updates them.

Here such an op is one node whose outputs are the op's outputs *and* the new values of what it
writes: either a pure twin of the op (``_native_batch_norm_legit_functional``: CPU's kernel on
clones of the statistics) or the op run on clones (``graph.WithHiddenWrites``); the written
tensors' storages take those values, as an in-place op's do. So a read sees the write, dead code
removal keeps it, and a graph capture replays it. Autograd's version counters are left as CPU's
kernel leaves them (it does not bump what it writes this way).

Which ops: ``tests/mutation_audit.py`` runs every OpInfo and ModuleInfo sample on the CPU and
compares every argument's memory before and after each aten op with what its schema declares.
"""
from __future__ import annotations

from .. import ops
from ..dispatch import route
from ..compiler.graph import WithHiddenWrites
from ..lazy import _same_device_error, functional_op, read_ref, write
from ..tensor import HPUTensor

_NODE_OPS: dict = {}      # (op, written keys) -> its node op (one object each: op keys are by id)


def _node_op(func, keys):
    twin = ops.HIDDEN_WRITES[func][2]
    if twin is not None:
        return twin
    op = _NODE_OPS.get((func, keys))
    if op is None:
        op = _NODE_OPS[(func, keys)] = WithHiddenWrites(func, keys)
    return op


def with_hidden_writes(func, args, kwargs):
    """The route's handler of an op of ``ops.HIDDEN_WRITES``."""
    written = ops.hidden_writes(func, args, kwargs)
    if not written:
        return functional_op(func, args, kwargs)      # e.g. batch norm in evaluation mode
    for _, t in written:
        if not isinstance(t, HPUTensor):
            raise _same_device_error(t.device)
    keys = tuple(k for k, _ in written)
    res = functional_op(func, args, kwargs, node_op=_node_op(func, keys))
    n = len(func._schema.returns)
    if len(res) != n + len(written):
        return res          # no meta kernel: the op ran on the host, which wrote them (dispatch/host_ops.py)
    name = ops.op_name(func)
    for (_, t), new in zip(written, res[n:]):
        write(t, read_ref(new), name)
    out = res[:n]
    return out[0] if len(func._schema.returns) == 1 else tuple(out)


def install() -> None:
    for func in ops.HIDDEN_WRITES:
        route.register_special(func, with_hidden_writes)
