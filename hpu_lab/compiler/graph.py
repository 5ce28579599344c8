"""The pending lazy graph: nodes appended op by op, until mark_step or a value is needed.

A node holds its op (an aten OpOverload or one of the small helpers below), its args with
``Out`` (another pending node's output) and ``Inp`` (a device buffer) references, the metadata of
its outputs, the user's source line, and a *signature*: the node with every reference replaced by
its position. The tuple of signatures is the recipe key (structure + shapes + dtypes + constants).
"""
from __future__ import annotations

import itertools
import weakref

import torch

from ..tensor import Inp, Out, Storage, storage_extent


# ---- helpers used as graph ops (module level, so a recipe can be pickled to the disk cache) ----

def _layout_ok(base, stride):
    if base.stride() != stride or base.storage_offset() != 0:
        # the runtime result did not come out in the planned layout: re-lay it out
        out = torch.empty_strided(base.shape, stride, dtype=base.dtype)
        out.copy_(base)
        return out
    return base


def view(base, size, stride, offset, base_stride):
    """Read a view (size, stride, offset) of a storage whose value is ``base``."""
    return _layout_ok(base, base_stride).as_strided(size, stride, offset)


def scatter(base, src, size, stride, offset, base_stride):
    """The storage value after writing ``src`` into its view (size, stride, offset)."""
    out = _layout_ok(base, base_stride).clone()
    dst = out.as_strided(size, stride, offset)
    for d, (s, st) in enumerate(zip(size, stride)):
        if st == 0 and s > 1:        # an expanded view (fill_ of t.expand(...)): one write per location
            dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
    dst.copy_(src)
    return out


def scatter_into(base, src, size, stride, offset, base_stride):
    """``scatter`` written into ``base`` itself: the flush found that no one else reads its old value
    (lazy/donation.py). A buffer whose memory another tensor shares (a zero-copy view made on the host)
    is copied first, as by ``scatter``."""
    if base.stride() != base_stride or base.storage_offset() != 0 or base._use_count() != 1 or \
            torch._C._storage_Use_Count(base.untyped_storage()._cdata) != _OWN_STORAGE_USES:
        return scatter(base, src, size, stride, offset, base_stride)
    dst = base.as_strided(size, stride, offset)
    for d, (s, st) in enumerate(zip(size, stride)):
        if st == 0 and s > 1:
            dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
    dst.copy_(src)
    return base


def _storage_uses_of_own_buffer() -> int:
    """What ``_storage_Use_Count`` reports for a tensor alone on its memory (the Python storage
    object made to ask counts too)."""
    t = torch.empty(1)
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


_OWN_STORAGE_USES = _storage_uses_of_own_buffer()


def as_dtype(base, base_stride, dtype, n):
    """The bytes of a storage whose value is ``base``, as ``n`` elements of ``dtype`` (its memory in
    address order: ``Tensor.view(dtype)``, dispatch/dtype_views.py)."""
    b = _layout_ok(base, base_stride)
    flat = b.as_strided((storage_extent(tuple(b.shape), tuple(base_stride)),), (1,), 0).view(torch.uint8)
    return flat[:n * torch.empty((), dtype=dtype).element_size()].view(dtype)


def from_dtype(flat, old, size, stride, dtype):
    """A storage's value (size, stride, dtype) whose bytes are ``flat``'s (a value of ``as_dtype``),
    and, past them, ``old``'s (None when ``flat`` covers every byte)."""
    b = flat.view(torch.uint8)
    n = storage_extent(tuple(size), tuple(stride))
    if old is not None:
        whole = _layout_ok(old, stride).as_strided((n,), (1,), 0).view(torch.uint8).clone()
        whole[:b.numel()] = b
        b = whole
    return b.view(dtype).as_strided(size, stride, 0)


def restride(v, size, stride):
    """``v`` laid out with the storage's strides (an in-place result that came out differently)."""
    out = torch.empty_strided(size, stride, dtype=v.dtype)
    out.copy_(v)
    return out


class InplaceOnClone:
    """An in-place op with no functional twin: run it on clones of the written args."""
    __slots__ = ("op", "written", "__name__")

    def __init__(self, op, written):
        self.op, self.written = op, written
        self.__name__ = f"{op._schema.name.split('::')[1]}_on_clone"

    def __call__(self, *args, **kwargs):
        args = list(args)
        for i in self.written:
            a = args[i]
            args[i] = [x.clone() for x in a] if isinstance(a, (list, tuple)) else a.clone()
        self.op(*args, **kwargs)
        res = [args[i] for i in self.written]
        return res[0] if len(res) == 1 else tuple(res)

    def __eq__(self, other):
        return type(other) is InplaceOnClone and other.op == self.op and other.written == self.written

    def __hash__(self):
        return hash((self.op, self.written))

    def __reduce__(self):
        return (InplaceOnClone, (self.op, self.written))


class WithHiddenWrites:
    """An op whose CPU kernel also writes arguments its schema calls read-only (ops.HIDDEN_WRITES):
    run on clones of those arguments (``written``: positions, or keywords), it returns the op's
    outputs and then the clones' new values, so the writes are outputs of the graph like any
    other. (Never traced to TorchScript: the tracer's graph would take the op for a pure one.)"""
    __slots__ = ("op", "written", "__name__")

    def __init__(self, op, written):
        self.op, self.written = op, written
        self.__name__ = f"{op._schema.name.split('::')[1]}_and_writes"

    def __call__(self, *args, **kwargs):
        args, kwargs = list(args), dict(kwargs)
        for w in self.written:
            if type(w) is int:
                args[w] = args[w].clone()
            else:
                kwargs[w] = kwargs[w].clone()
        res = self.op(*args, **kwargs)
        new = tuple(args[w] if type(w) is int else kwargs[w] for w in self.written)
        return (*res, *new) if isinstance(res, (tuple, list)) else (res, *new)

    def __eq__(self, other):
        return type(other) is WithHiddenWrites and other.op == self.op and other.written == self.written

    def __hash__(self):
        return hash((self.op, self.written))

    def __reduce__(self):
        return (WithHiddenWrites, (self.op, self.written))


class InplaceOnStorages:
    """An in-place op writing several tensors (a foreach list, an optimizer's params and state),
    some sharing memory with others it reads or writes (aliasing.writes_over_reads), or one tensor
    whose written view shares memory with views it reads (``t.sub_(t[:, :1])``): CPU's kernel
    runs on views of copies of the written storages, so it applies tensor after tensor as on CPU.
    Called with the storages' values first, then the op's args with ``None`` where a view goes;
    returns the storages' new values, in order."""
    __slots__ = ("op", "layouts", "views", "__name__")

    def __init__(self, op, layouts, views):
        # layouts: ((size, stride), ...) per storage; views: ((path, storage index, size, stride,
        # offset), ...) with path (key,) or (key, list index), key a position or a keyword
        self.op, self.layouts, self.views = op, layouts, views
        self.__name__ = f"{op._schema.name.split('::')[1]}_on_storages"

    def __call__(self, *args, **kwargs):
        n = len(self.layouts)
        outs = [restride(v, size, stride) for v, (size, stride) in zip(args[:n], self.layouts)]
        args = [list(a) if isinstance(a, (list, tuple)) else a for a in args[n:]]
        kwargs = {k: list(a) if isinstance(a, (list, tuple)) else a for k, a in kwargs.items()}
        for path, k, size, stride, offset in self.views:
            holder = args if type(path[0]) is int else kwargs
            v = outs[k].as_strided(size, stride, offset)
            if len(path) == 1:
                holder[path[0]] = v
            else:
                holder[path[0]][path[1]] = v
        self.op(*args, **kwargs)
        return tuple(outs)

    def __eq__(self, other):
        return type(other) is InplaceOnStorages and (other.op, other.layouts, other.views) == \
            (self.op, self.layouts, self.views)

    def __hash__(self):
        return hash((self.op, self.layouts, self.views))

    def __reduce__(self):
        return (InplaceOnStorages, (self.op, self.layouts, self.views))


class CastTo:
    """A functional twin whose result must be cast back to the in-place target's dtype."""
    __slots__ = ("op", "dtype", "__name__")

    def __init__(self, op, dtype):
        self.op, self.dtype = op, dtype
        self.__name__ = f"{op._schema.name.split('::')[1]}_to_{str(dtype).split('.')[-1]}"

    def __call__(self, *args, **kwargs):
        r = self.op(*args, **kwargs)
        if isinstance(r, (list, tuple)):
            return [x.to(self.dtype) for x in r]
        return r.to(self.dtype)

    def __eq__(self, other):
        return type(other) is CastTo and other.op == self.op and other.dtype == self.dtype

    def __hash__(self):
        return hash((self.op, self.dtype))

    def __reduce__(self):
        return (CastTo, (self.op, self.dtype))


HELPER_NAMES = {view: "view", scatter: "scatter", restride: "restride", as_dtype: "as_dtype",
                from_dtype: "from_dtype", scatter_into: "scatter_into"}


def target_name(op) -> str:
    n = HELPER_NAMES.get(op)
    if n is not None:
        return n
    s = getattr(op, "_schema", None)
    if s is not None:
        return s.name
    inner = getattr(op, "op", None)
    if inner is not None and hasattr(inner, "_schema"):
        return inner._schema.name
    return getattr(op, "__name__", str(op))


# ---- the graph ----

class Node:
    __slots__ = ("op", "args", "kwargs", "outs", "spec", "src", "index", "sig", "h", "refs",
                 "graph", "launched")

    def __init__(self, op, args, kwargs, spec, src, index, sig, refs, graph):
        self.op, self.args, self.kwargs, self.spec = op, args, kwargs, spec
        self.src, self.index, self.sig, self.refs, self.graph = src, index, sig, refs, graph
        self.h = hash(sig)
        self.outs = ()
        self.launched = None      # after a partial flush: {out idx: Inp}

    @property
    def name(self) -> str:
        return target_name(self.op)


_graph_ids = itertools.count(1)


class PendingGraph:
    """Nodes accumulated since the last mark_step (or sync)."""

    def __init__(self):
        self.id = next(_graph_ids)
        self.nodes: list = []
        self.slots: dict = {}         # id(Inp) -> slot number
        self.inps: list = []          # keeps the Inps alive while their ids are slot keys
        self.written: list = []       # weakrefs of storages given a pending value
        self.next_index = 0
        self.scatters = 0             # writes into part of a storage (lazy/donation.py looks only then)

    def __len__(self):
        return len(self.nodes)

    def slot(self, inp: Inp) -> int:
        s = self.slots.get(id(inp))
        if s is None:
            s = self.slots[id(inp)] = len(self.inps)
            self.inps.append(inp)
        return s

    def add(self, op, args, kwargs, metas, spec, sig_args, sig_kwargs, refs, src, opkey=None):
        """Append a node; return its Out objects (one per tensor output)."""
        idx = self.next_index
        self.next_index += 1
        node = Node(op, args, kwargs, spec, src, idx,
                    (opkey or op_key(op), sig_args, sig_kwargs), refs, self)
        node.outs = tuple(Out(node, i, m) for i, m in enumerate(metas))
        self.nodes.append(node)
        return node.outs

    def track(self, st) -> None:
        if type(st) is not Storage:     # a storage seen as another dtype: its base holds the value
            st = st.base
        self.written.append(weakref.ref(st))


_OPKEY: dict = {}
_OPKEY_KEEP: list = []


def op_key(op) -> str:
    """A string naming the op, for signatures: hashing an OpOverload runs Python code, a str
    caches its hash."""
    k = _OPKEY.get(id(op))
    if k is None:
        s = getattr(op, "_schema", None)
        if s is not None:
            k = f"{s.name}.{op._overloadname}"
        elif op in HELPER_NAMES:
            k = HELPER_NAMES[op]
        else:
            k = repr((type(op).__name__, target_name(op), getattr(op, "dtype", None),
                      getattr(op, "written", None), getattr(op, "variant", None)))
        _OPKEY[id(op)] = k
        _OPKEY_KEEP.append(op)      # ids stay valid: the op objects are never freed
    return k


def ref_sig(pg: PendingGraph, r):
    """The signature of a reference: position for an Out, slot + layout for an Inp."""
    if type(r) is Out:
        return ("o", r.node.index, r.idx)
    return ("i", pg.slot(r), r.meta)
