"""Why did this graph compile? A diff against the last recipe compiled at the same call site.

No real Gaudi tool says this; hpu_lab does: "input 3 shape changed (200, 1, 28, 28) ->
(96, 1, 28, 28)", "new op aten::where at node 14 (train.py:42)", "constant changed 3 -> 4 at
node 7 (train.py:18) (loop variable?)".
"""
from __future__ import annotations


def _layout(meta):
    size, stride, dtype = meta
    return tuple(size), str(dtype).replace("torch.", "")


def _shown(sig):
    """A number as the user wrote it, from its signature (lazy.scalar_sig: type and bits)."""
    if type(sig) is tuple and sig and sig[0] in (int, bool, float, complex):
        if sig[0] is float:
            return float.fromhex(sig[1])
        if sig[0] is complex:
            return complex(float.fromhex(sig[1]), float.fromhex(sig[2]))
        return sig[1]
    if type(sig) is tuple:
        return tuple(_shown(x) for x in sig)
    return sig


def diff(prev, new, default_dtypes=None) -> str:
    """``default_dtypes``: torch's default dtype under each graph (GraphKey.default_dtype), (prev,
    new): with the same ops and arguments, the dtypes they resolve may be all that changed."""
    if prev is None:
        return "first compile"
    (pin, pnodes), (nin, nnodes) = prev, new
    for i, (a, b) in enumerate(zip(pin, nin)):
        if a is None or b is None or a == b:
            continue
        (sa, da), (sb, db) = _layout(a), _layout(b)
        if sa != sb:
            return f"input {i} shape changed {sa} -> {sb}"
        if da != db:
            return f"input {i} dtype changed {da} -> {db}"
        return f"input {i} layout changed (strides {tuple(a[1])} -> {tuple(b[1])})"
    for i, (a, b) in enumerate(zip(pnodes, nnodes)):
        if a[0] != b[0]:
            return f"new op {b[0]} at node {i} ({b[2]}) where there was {a[0]}"
        if a[1] != b[1]:
            for x, y in zip(a[1], b[1]):
                if x != y:
                    return f"constant changed {_shown(x)!r} -> {_shown(y)!r} at node {i} {b[0]} ({b[2]}) (loop variable?)"
            return f"arguments of {b[0]} changed at node {i} ({b[2]})"
    if len(nnodes) > len(pnodes):
        b = nnodes[len(pnodes)]
        return f"new op {b[0]} at node {len(pnodes)} ({b[2]}): graph grew {len(pnodes)} -> {len(nnodes)} nodes"
    if len(nnodes) < len(pnodes):
        return f"graph shrank {len(pnodes)} -> {len(nnodes)} nodes"
    if len(pin) != len(nin):
        return f"number of inputs changed {len(pin)} -> {len(nin)}"
    if default_dtypes is not None and None not in default_dtypes and default_dtypes[0] != default_dtypes[1]:
        was, now = (str(d).replace("torch.", "") for d in default_dtypes)
        return f"torch's default dtype changed {was} -> {now} (torch.set_default_dtype)"
    return "different graph outputs (other tensors are alive at this point)"
