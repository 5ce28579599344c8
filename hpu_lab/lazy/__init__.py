"""Lazy mode: ops accumulate in the pending graph; mark_step or a value access runs them.

``route.dispatch`` decides where each op goes (docs/ARCHITECTURE.md, "The op path"); the generic
ops land here (``lazy_op``). This module owns the runtime state ``S``: other modules change it
only through the named functions below.
"""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager

import torch

from .. import config
from .. import events as ev
from ..events import user_time as _user_time
from .. import ops
from ..runtime import readback
from ..util._source import user_src
from .capture import GraphCapture
from ..compiler import find
from ..compiler.recipe import GraphKey, graph_key, live_nodes
from . import aliasing, donation, foreach_errors, iter_strides
from ..compiler.graph import PendingGraph, ref_sig, op_key, view, scatter, restride, InplaceOnClone, CastTo, InplaceOnStorages
from ..runtime import executor
from .launch import launch_recipe
from ..tensor import HPUParameter, HPUTensor, Inp, Out, Storage, contiguous_strides, new_storage_tensor, storage_extent

aten = torch.ops.aten
CPU = torch.device("cpu")
_NoneType = type(None)
_SCALARS = (int, float, bool, str, _NoneType, complex)


class State:
    """The runtime's global state (one device, as hpu:0)."""

    def __init__(self):
        self.pg = PendingGraph()
        self.lock = threading.RLock()
        self.max_ops = None          # PT_HPU_MAX_COMPOUND_OP_SIZE
        self.eager = False           # PT_HPU_LAZY_MODE=0
        self.source_lines = True
        self.sync_reason = None      # set by .item()/.tolist()/... for the sync they cause
        self.capture = None          # the GraphCapture underway, if any (lazy/capture.py, graphs/)
        self.stream = 0              # current stream index
        self.observers_before_flush = []
        self.step_closures = []
        # Inp -> weakref of the storage that held it when a pending op read it: an input whose
        # tensor died stays on the device until the graph runs (launch_recipe counts it)

    def reload(self):
        self.max_ops = config.get("PT_HPU_MAX_COMPOUND_OP_SIZE")
        eager = not config.get("PT_HPU_LAZY_MODE")
        if eager and not self.eager and self.pg.nodes:
            flush("switch to eager mode", "")    # what lazy mode accumulated runs now (dispatch/eager.py)
        self.eager = eager
        self.source_lines = config.get("HPU_LAB_SOURCE_LINES")


S = State()


# ---------------------------------------------------------------- the named writers of S
# Other modules change the runtime's state only through these (tests/test_import_graph.py checks it).

def begin_capture(cap: GraphCapture) -> None:
    """An HPU Graph capture starts: from now on the lazy path reports to ``cap``."""
    if not isinstance(cap, GraphCapture):
        raise TypeError(f"begin_capture: {type(cap).__name__} lacks what a capture provides (lazy/capture.py)")
    S.capture = cap


def end_capture(cap) -> None:
    """The capture ``cap`` ended or was abandoned (a no-op if another one is current)."""
    if S.capture is cap:
        S.capture = None


def set_stream(index: int) -> None:
    """Flushes and replays launch on stream ``index`` from now on (graphs/streams.py)."""
    S.stream = index


@contextmanager
def eager_suspended():
    """Accumulate whatever the mode (a compiled graph replays op by op, then launches once)."""
    was, S.eager = S.eager, False
    try:
        yield
    finally:
        S.eager = was


def drop_pending() -> None:
    """Forget the pending graph (eager mode: what a failed op or a dead allocation left)."""
    S.pg = PendingGraph()


def add_step_closure(fn, args: tuple) -> None:
    """Run ``fn(*args)`` right after the next mark_step."""
    S.step_closures.append((fn, args))


_trace = None      # (on_write, on_flush) while perfmodel.estimate traces without launching


@contextmanager
def tracing(on_write, on_flush):
    """Accumulate into a fresh pending graph that is never launched: ``on_write(t)`` is told of each
    write, ``on_flush(trigger, src, needed)`` replaces every flush. Yields the graph; the previous
    graph, mode and tracer are back afterwards (perfmodel.estimate)."""
    global _trace
    old = S.pg, S.eager, _trace
    pg = S.pg = PendingGraph()
    S.eager = False
    _trace = (on_write, on_flush)
    try:
        yield pg
    finally:
        S.pg, S.eager, _trace = old


def _on_config_change():
    S.reload()


config.on_change(_on_config_change)


def _src():
    return user_src(3) if S.source_lines else ""


# ---------------------------------------------------------------- reading and writing tensors

def _full(t) -> bool:
    st = t._st
    return t._offset == 0 and t._size == st.size and t._stride == st.stride


def _whole_reshape(t) -> bool:
    """t is a reshape of its whole, dense storage (e.g. the (3,) result torch's linear makes of a 1-D
    input by squeezing a (1, 3) matmul): writing it updates no part of a tensor, so an HPU Graph
    capture takes it (the bridge's own linear returns a fresh tensor there)."""
    st = t._st
    n = 1
    for s in t._size:
        n *= s
    return (t._offset == 0 and n == storage_extent(st.size, st.stride) and t.is_contiguous()
            and st.stride == contiguous_strides(st.size))


_weak = weakref.ref


def read_ref(t):
    """A reference to t's current value: an Out, an Inp, or a new view node over the storage."""
    st = t._st
    v = st.value
    if S.capture is not None and type(v) is Inp:
        S.capture.saw(v, st)           # replay reads this storage's value then (graphs/)
    if t._offset == 0 and t._size == st.size and t._stride == st.stride:
        return v
    rc = t._rc
    # the cached view node is only valid in the graph that is still pending (not after a flush).
    # A weak reference: a view read once held its node, whose arguments held the storage's value
    # of then, so every view of a buffer written since kept an old copy of the whole buffer alive
    if rc is not None:
        r = rc()
        if r is not None:
            n = r.node
            if n.args[0] is v and n.graph is S.pg and n.launched is None:
                return r
    pg = S.pg
    sig = (ref_sig(pg, v), t._size, t._stride, t._offset, st.stride)
    (r,) = pg.add(view, (v, t._size, t._stride, t._offset, st.stride), {}, [(t._size, t._stride, t.dtype)],
                  None, sig, (), (v,), _src() if S.source_lines else "")
    t._rc = _weak(r)
    return r


# In-place ops CPU lets write through a view whose elements share memory (an expand): all the
# elements sharing a location receive the same value. Every other op refuses, with this message.
OVERLAP_OK = {"aten::fill_", "aten::zero_", "aten::masked_fill_", "aten::index_fill_",
              "aten::index_put_", "aten::_index_put_impl_"}
_OVERLAP_MSG = ("unsupported operation: more than one element of the written-to tensor refers to a single "
                "memory location. Please clone() the tensor before performing the operation.")


def _overlapping(t) -> bool:
    for s, st in zip(t._size, t._stride):
        if st == 0 and s > 1:
            return True
    return False


def write(t, r, op: str = "") -> None:
    """t's elements now hold value r (an Out or Inp with t's shape and dtype); ``op`` names the
    writing op for errors."""
    if _trace is not None:
        _trace[0](t)
    st = t._st
    pg = S.pg
    if op not in OVERLAP_OK and not _full(t) and _overlapping(t):
        raise RuntimeError(_OVERLAP_MSG)       # as CPU, at the op (not when the graph runs)
    if S.capture is not None and not _full(t) and not _whole_reshape(t):
        S.capture.refuse_view_write(t, op or "in-place op", _src())   # seed 001: unsupported
    if _full(t):
        if r.meta[1] != st.stride and r.meta[0] == st.size and storage_extent(st.size, st.stride) > 1:
            (r,) = pg.add(restride, (r, st.size, st.stride), {}, [(st.size, st.stride, st.dtype)], None,
                          (ref_sig(pg, r), st.size, st.stride), (), (r,), "")
        st.value = r
    else:
        base = st.value
        if S.capture is not None and type(base) is Inp:
            S.capture.saw(base, st)
        pg.scatters += 1
        (r2,) = pg.add(scatter, (base, r, t._size, t._stride, t._offset, st.stride), {},
                       [(st.size, st.stride, st.dtype)], None,
                       (ref_sig(pg, base), ref_sig(pg, r), t._size, t._stride, t._offset, st.stride),
                       (), (base, r), _src() if S.source_lines else "")
        st.value = r2
        r = r2
    if type(r) is Out:
        pg.track(st)
    t._rc = None


def write_concrete(t, cpu_tensor, regen=None, op: str = "", source=None) -> None:
    """t's elements now hold a host tensor already on the device (an H2D copy of ``source``, or a
    host draw)."""
    st = t._st
    if _full(t) and tuple(cpu_tensor.stride()) == st.stride and cpu_tensor.storage_offset() == 0:
        st.value = inp = Inp(cpu_tensor, (st.size, st.stride, st.dtype), regen=regen)
        if S.capture is not None:
            S.capture.created(inp, source)   # a constant of the graph, or redrawn at replay (regen)
        t._rc = None
        return
    inp = Inp(cpu_tensor, (tuple(cpu_tensor.shape), tuple(cpu_tensor.stride()), cpu_tensor.dtype), regen=regen)
    if S.capture is not None:
        S.capture.created(inp, source)
    write(t, inp, op)


def wrap_new(meta, value) -> HPUTensor:
    size, stride, dtype = meta
    t = new_storage_tensor(size, stride, dtype, value)
    if type(value) is Out:
        S.pg.track(t._st)
    return t


# ---------------------------------------------------------------- the generic lazy op

_CPU_OPERANDS = [True]     # CPU tensor args of hpu ops are copied to the device (issue 11, point 5)


def _same_device_error(dev):
    return RuntimeError("Expected all tensors to be on the same device, but found at least two "
                        f"devices, hpu:0 and {dev}!")


def scalar_sig(a):
    """A number's signature: its type and exact bits. Python says 1 == 1.0 == True and
    0.0 == -0.0, but ``x + 1`` and ``x + 1.0`` differ in dtype and ``x * -0.0`` in sign: keyed by
    value alone, a cached meta result or recipe of one was reused for the other."""
    t = type(a)
    if t is float:
        return (float, a.hex())
    if t is complex:
        return (complex, a.real.hex(), a.imag.hex())
    return (t, a)


def _walk(a, pg, refs, mkeys):
    """(node arg, graph signature) of one argument; appends refs and meta-cache key parts."""
    t = type(a)
    if t is HPUTensor or (t is not torch.Tensor and isinstance(a, HPUTensor)):
        r = read_ref(a)
        if type(r) is Inp and r.owner is None:
            r.owner = weakref.ref(a._st)
        refs.append(r)
        mkeys.append((a._size, a._stride, a.dtype))
        return r, ref_sig(pg, r)
    if t in _SCALARS:
        sg = a if t is str or t is _NoneType else scalar_sig(a)
        mkeys.append(sg)
        return a, sg
    if t is list or t is tuple:
        nargs, sigs = [], []
        for x in a:
            na, sg = _walk(x, pg, refs, mkeys)
            nargs.append(na)
            sigs.append(sg)
        mkeys.append(len(a))
        return (nargs if t is list else tuple(nargs)), tuple(sigs)
    if isinstance(a, torch.Tensor):
        if a.device.type == "cpu" and a.dim() == 0:
            inp = Inp(a.detach().clone(), ((), (), a.dtype))
            if S.capture is not None:
                S.capture.created(inp, a)       # the graph keeps this copy (graphs/recording.py)
            refs.append(inp)
            mkeys.append(("cpu0", a.dtype))
            return inp, ref_sig(pg, inp)
        if a.device.type == "cpu" and _CPU_OPERANDS:
            # as the bridge's LazyOp::set_inputs: a CPU operand is copied to the device (runtime/transfers.py)
            from ..runtime.transfers import operand
            v = operand(a)
            inp = Inp(v, (tuple(v.shape), tuple(v.stride()), v.dtype))
            if S.capture is not None:
                S.capture.created(inp, a)       # the graph keeps this copy (graphs/recording.py)
            refs.append(inp)
            mkeys.append((inp.meta[0], inp.meta[1], v.dtype))
            return inp, ref_sig(pg, inp)
        raise _same_device_error(a.device)
    if t is torch.device:
        if a.type == "hpu":
            mkeys.append("hpu")
            return CPU, "hpu"
        mkeys.append(a)
        return a, a
    mkeys.append(a)
    return a, a


def _meta_arg(a):
    t = type(a)
    if t is Out or t is Inp:
        size, stride, dtype = a.meta
        return ops.meta_tensor(size, stride, dtype)
    if t is list:
        return [_meta_arg(x) for x in a]
    if t is tuple:
        return tuple(_meta_arg(x) for x in a)
    if t is torch.device and a.type == "cpu":
        return ops.META
    return a


def _out_metas(res):
    """(metas, spec) of a meta result: spec None for one tensor, else index paths per tensor."""
    if isinstance(res, torch.Tensor):
        return [(tuple(res.shape), tuple(res.stride()), res.dtype)], None
    metas, spec = [], []

    def rec(x, path):
        if isinstance(x, torch.Tensor):
            metas.append((tuple(x.shape), tuple(x.stride()), x.dtype))
            spec.append(path)
        elif isinstance(x, (list, tuple)):
            for i, y in enumerate(x):
                rec(y, path + (i,))
        elif x is not None:
            raise ops.MetaFailure(f"non-tensor output {type(x).__name__}")

    rec(res, ())
    return metas, tuple(spec)


def _rebuild(res, outs_iter):
    if isinstance(res, torch.Tensor):
        return next(outs_iter)
    if isinstance(res, (list, tuple)):
        return type(res)(_rebuild(x, outs_iter) for x in res)
    return res


def lazy_op(func, args, kwargs):
    """Append ``func`` to the pending graph and return HPU tensors for its outputs."""
    info = ops.inplace_info(func)
    if info is not None:
        return inplace_op(func, args, kwargs, info)
    return functional_op(func, args, kwargs)


def functional_op(func, args, kwargs, node_op=None):
    """lazy_op for an op known to write nothing (dispatch decides that once per op).

    This is the hottest path of the emulator: tensor args are handled inline, output metadata
    comes from a dict keyed by the argument signature, and only a miss runs the meta kernel.
    ``node_op``: what the node runs instead of ``func`` (its outputs' metas come from it), the
    op event still naming ``func`` (kernels/hidden_writes.py: the op and the values it writes besides).
    """
    pg = S.pg
    refs, mkeys, nargs, sargs = [], [], [], []
    for a in args:
        if type(a) is HPUTensor or type(a) is HPUParameter:
            r = read_ref(a)
            if type(r) is Inp:
                if r.owner is None:
                    r.owner = weakref.ref(a._st)
                sg = ("i", pg.slot(r), r.meta)
            else:
                sg = ("o", r.node.index, r.idx)
            refs.append(r)
            mkeys.append((a._size, a._stride, a.dtype))
            nargs.append(r)
            sargs.append(sg)
        else:
            na, sg = _walk(a, pg, refs, mkeys)
            nargs.append(na)
            sargs.append(sg)
    if kwargs:
        nkw, skw = {}, []
        for k, v in kwargs.items():
            na, sg = _walk(v, pg, refs, mkeys)
            nkw[k] = na
            skw.append((k, sg))
        skw = tuple(skw)
    else:
        nkw, skw = kwargs, ()
    run = func if node_op is None else node_op
    ok = op_key(run)
    # (torch's default dtype is an input of the meta too: a factory's dtype, an integer tensor's
    # true division: see GraphKey.default_dtype)
    mkey = (ok, tuple(mkeys), tuple(kwargs), _default_dtype())
    nargs = tuple(nargs)
    hit = ops._META_CACHE.get(mkey)
    if type(hit) is tuple and len(hit) == 3:
        metas, spec, res_template = hit
    else:
        def compute():
            margs, mkw = [_meta_arg(a) for a in nargs], {k: _meta_arg(v) for k, v in nkw.items()}
            res = ops.run_meta(run, margs, mkw)
            metas, spec = _out_metas(res)
            if ops.is_pointwise(run) and run not in _OWN_LAYOUT:
                metas = _iterator_layout(func, margs, mkw, metas)
            return metas, spec, res

        try:
            metas, spec, res_template = ops.cached_meta(mkey, compute)
        except ops.MetaFailure as e:
            return _meta_failed(func, args, kwargs, e)
    outs = pg.add(run, nargs, nkw, metas, spec, tuple(sargs), skw, tuple(refs), _op_src(func), ok)
    if spec is None:
        t = wrap_new(metas[0], outs[0])
        if S.max_ops is not None:
            after_op(func)
        return t
    tensors = [wrap_new(m, o) for m, o in zip(metas, outs)]
    after_op(func)
    return _rebuild(res_template, iter(tensors))


_OWN_LAYOUT = {aten.clone.default}      # pointwise, but laid out by its memory_format, not TensorIterator


def _iterator_layout(func, margs, mkw, metas):
    """An elementwise op's outputs with the strides CPU's TensorIterator gives them (lazy/iter_strides.py);
    the Meta kernel's differ where dimensions tie."""
    layouts = iter_strides.operand_layouts(func, margs, mkw)
    if not layouts:
        return metas
    out = []
    for size, stride, dtype in metas:
        if all(len(s) <= len(size) for s, _ in layouts):
            stride = iter_strides.output_strides(size, layouts)
        out.append((size, stride, dtype))
    return out


_meta_failure = None    # fn(func, args, kwargs, err): the router's answer to an op with no usable meta


def set_meta_failure_handler(fn) -> None:
    """Who takes an op whose outputs the meta kernel cannot infer (dispatch/route.py: host op or CPU fallback);
    lazy/ must not import the modules that decide it (they import lazy/)."""
    global _meta_failure
    _meta_failure = fn


def _meta_failed(func, args, kwargs, e):
    return _meta_failure(func, args, kwargs, e)


_default_dtype = torch.get_default_dtype


def _op_src(func):
    if not S.source_lines:
        return ""
    src = user_src(4)
    rec = ev.recorder
    if rec.ops_wanted:                      # kept flat, handed to observers in runs (events/recorder.py);
        rec.op_accumulated(func, src)       # the op named only if its event is built
    return src


def after_op(func) -> None:
    if S.max_ops is not None and len(S.pg) >= S.max_ops:
        flush(f"PT_HPU_MAX_COMPOUND_OP_SIZE={S.max_ops}", ops.op_name(func))


def _clone_spec(margs, written):
    """Output paths of an InplaceOnClone node: it returns the written arg (a tensor or a list), or a
    tuple of them when several args are written (e.g. an optimizer writing params and its state)."""
    if len(written) == 1:
        a = margs[written[0]]
        return tuple((j,) for j in range(len(a))) if isinstance(a, (list, tuple)) else None
    paths = []
    for k, i in enumerate(written):
        a = margs[i]
        paths += [(k, j) for j in range(len(a))] if isinstance(a, (list, tuple)) else [(k,)]
    return tuple(paths)


def _dtypes(margs) -> set:
    return {x.dtype for a in margs for x in (a if isinstance(a, (list, tuple)) else [a])
            if isinstance(x, torch.Tensor)}


def inplace_op(func, args, kwargs, info):
    """An op that writes its inputs: compute the new values functionally, then rebind."""
    written, out_kw, functional = info
    if out_kw:      # dispatch/route.py sends out= ops to special_ops.out_variant; nothing else may reach here
        raise RuntimeError(f"{ops.op_name(func)} with out= reached the lazy path directly")
    targets = [args[i] for i in written]
    for t in targets:
        ts = t if isinstance(t, (list, tuple)) else [t]
        for x in ts:
            if not isinstance(x, HPUTensor):
                raise _same_device_error(x.device)
    if len(written) == 1 and isinstance(targets[0], HPUTensor):
        keys = aliasing.aliased_args(targets[0], args, kwargs, written[0])
        if keys:
            return inplace_on_aliases(func, args, kwargs, written[0], keys)
    else:       # a list written (foreach, optimizers) or several args: tensor after tensor on CPU
        slots = aliasing.tensor_slots(args, kwargs)
        if aliasing.writes_over_reads(slots, written):
            return inplace_on_storages(func, args, kwargs, targets, slots)
        if foreach_errors.needs_cpu_checks(func, targets):
            verdict = (op_key(func), aliasing.describe(args), aliasing.describe(tuple(kwargs.items())))
            _cpu_checks_once(verdict, lambda: foreach_errors.raise_like_cpu(func, args, kwargs, written))
    flat_targets = aliasing.flat_targets(targets)
    pg = S.pg
    refs, mkeys = [], []
    nargs, sargs = [], []
    for a in args:
        na, sg = _walk(a, pg, refs, mkeys)
        nargs.append(na)
        sargs.append(sg)
    nkw, skw = {}, []
    for k, v in kwargs.items():
        na, sg = _walk(v, pg, refs, mkeys)
        nkw[k] = na
        skw.append((k, sg))
    nargs = tuple(nargs)
    mkey = (op_key(func), tuple(mkeys), tuple(kwargs), "inplace")

    def compute():
        margs = [_meta_arg(a) for a in nargs]
        mkw = {k: _meta_arg(v) for k, v in nkw.items()}
        ops.run_meta(func, margs, mkw)           # validates (e.g. dtype can't be cast)
        op = functional or InplaceOnClone(func, written)
        if functional is not None:
            res = ops.run_meta(functional, [_meta_arg(a) for a in nargs], mkw)
            metas, spec = _out_metas(res)
            tgt = [t for i in written for t in (margs[i] if isinstance(margs[i], (list, tuple)) else [margs[i]])]
            if len(metas) != len(tgt) or any(m[0] != tuple(x.shape) for m, x in zip(metas, tgt)) or \
                    (len(tgt) > 1 and len(_dtypes(margs)) > 1):
                # (a list over several dtypes: torch's Meta kernels of the functional foreach twins
                # say self's dtype where CPU's kernel promotes per tensor, and one CastTo casts all
                # to one dtype; the in-place kernel itself, on clones, casts each back as CPU does)
                op = InplaceOnClone(func, written)
            elif any(m[2] != x.dtype for m, x in zip(metas, tgt)):
                op = CastTo(functional, tgt[0].dtype)
        tgt = [t for i in written for t in (margs[i] if isinstance(margs[i], (list, tuple)) else [margs[i]])]
        metas = [(tuple(x.shape), tuple(x.stride()), x.dtype) for x in tgt]
        res = op(*[_meta_arg(a) for a in nargs], **mkw) if not isinstance(op, InplaceOnClone) else None
        if res is None:
            spec = _clone_spec(margs, written)
        else:
            _, spec = _out_metas(res)
        return op, metas, spec

    try:
        op, metas, spec = ops.cached_meta(mkey, compute)
    except ops.MetaFailure as e:
        return _meta_failed(func, args, kwargs, e)
    except Exception:
        if len(flat_targets) > 1:     # a list op: CPU's error, after what CPU writes before it
            foreach_errors.raise_like_cpu(func, args, kwargs, written)
        raise
    outs = pg.add(op, nargs, nkw, metas, spec, tuple(sargs), tuple(skw), tuple(refs), _op_src(func))
    for t, o in zip(flat_targets, outs):
        write(t, o, ops.op_name(func))
    # foreach ops and custom ops (hpex optimizers) bump autograd's version counter only in their CPU
    # decomposition, which the lazy path never runs: bump it here, so autograd still refuses a
    # backward through a tensor modified in place. Ops with an ADInplaceOrView kernel were bumped
    # by it already, above the device, as on CPU: a second bump would make _version differ from CPU
    if ops.bump_on_device(func):
        torch._C._increment_version(flat_targets)
    after_op(func)
    return _returned(func, args, targets)


def _returned(func, args, targets):
    """What an in-place op returns: the written args its schema's returns alias (``_amp_update_scale_``
    writes self and growth_tracker and returns self alone), in the schema's order."""
    which = ops.returned_args(func)
    if which is None:
        return targets[0] if len(targets) == 1 else tuple(targets)
    if len(which) == 1:
        return args[which[0]]
    return tuple(args[i] for i in which) if which else None


_ON_ALIASES: dict = {}     # one node op per (op, views, storage layout): op keys are cached by id
_CPU_AGREES: set = set()   # calls (views, layouts, dtypes, numbers) CPU's checks let through


def _cpu_checks_once(verdict, check) -> None:
    """Run CPU's checks (``check()``, which raises CPU's error) once per such call: they read only
    layouts, dtypes and numbers, all in ``verdict``."""
    if verdict not in _CPU_AGREES:
        check()
        if len(_CPU_AGREES) > 4096:
            _CPU_AGREES.clear()
        _CPU_AGREES.add(verdict)


def inplace_on_aliases(func, args, kwargs, w, keys):
    """An in-place op writing ``args[w]`` while reading the same memory through the args ``keys``
    (lazy/aliasing.py): ``inplace_on_storages`` with one written storage, those views of it placed."""
    t = args[w]
    slots = [((w,), t)] + [((k,), args[k] if type(k) is int else kwargs[k]) for k in keys]
    return inplace_on_storages(func, args, kwargs, [t], slots)


def inplace_on_storages(func, args, kwargs, targets, slots):
    """An in-place op writing several tensors, some over memory another of its tensors reads or
    writes (aliasing.writes_over_reads; or one tensor, inplace_on_aliases): CPU's checks decide now;
    then one node runs CPU's kernel, which applies it tensor after tensor, on views of copies of the
    written storages, and those storages take its results."""
    flat = aliasing.flat_targets(targets)
    stores, index = [], {}
    for t in flat:
        if id(t._st) not in index:
            index[id(t._st)] = len(stores)
            stores.append(t._st)
    placed = {}
    for path, t in slots:
        k = index.get(id(t._st))
        if k is not None:
            placed[path] = (k, t._size, t._stride, t._offset)
    layouts = tuple((st.size, st.stride) for st in stores)
    views = tuple((path,) + p for path, p in placed.items())
    ok = (op_key(func), layouts, views)
    op = _ON_ALIASES.get(ok)
    if op is None:
        op = _ON_ALIASES[ok] = InplaceOnStorages(func, layouts, views)
    verdict = (ok, aliasing.describe(args), aliasing.describe(tuple(kwargs.items())))
    _cpu_checks_once(verdict, lambda: aliasing.check_storages_like_cpu(
        func, args, kwargs, placed, [(storage_extent(st.size, st.stride), st.dtype) for st in stores]))
    name = ops.op_name(func)
    for t in flat:
        if _trace is not None:
            _trace[0](t)
        if S.capture is not None and not _full(t):
            S.capture.refuse_view_write(t, name, _src())
    pg = S.pg
    refs, mkeys, nargs, sargs = [], [], [], []
    for st in stores:
        base = st.value
        if S.capture is not None and type(base) is Inp:
            S.capture.saw(base, st)
        refs.append(base)
        nargs.append(base)
        sargs.append(ref_sig(pg, base))

    def walk(key, a):
        if (key,) in placed:
            return None, None
        if isinstance(a, (list, tuple)) and not isinstance(a, HPUTensor):
            parts = [(None, None) if (key, j) in placed else _walk(x, pg, refs, mkeys) for j, x in enumerate(a)]
            return type(a)(p[0] for p in parts), tuple(p[1] for p in parts)
        return _walk(a, pg, refs, mkeys)

    for i, a in enumerate(args):
        na, sg = walk(i, a)
        nargs.append(na)
        sargs.append(sg)
    nkw, skw = {}, []
    for k, v in kwargs.items():
        na, sg = walk(k, v)
        nkw[k] = na
        skw.append((k, sg))
    outs = pg.add(op, tuple(nargs), nkw, [(st.size, st.stride, st.dtype) for st in stores],
                  tuple((k,) for k in range(len(stores))), tuple(sargs), tuple(skw), tuple(refs),
                  _op_src(func), "on_storages:" + repr(ok))
    for st, r in zip(stores, outs):
        st.value = r
        pg.track(st)
    for t in flat:
        t._rc = None
    if ops.bump_on_device(func):      # as inplace_op
        torch._C._increment_version(flat)
    after_op(func)
    return _returned(func, args, targets)


# ---------------------------------------------------------------- flush: pending graph -> launch

def _ancestors(root_nodes):
    seen = set()
    stack = list(root_nodes)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for r in n.refs:
            if type(r) is Out and r.node.launched is None:
                stack.append(r.node)
    return seen


def flush(trigger: str, src: str, needed=None):
    """Compile (or fetch from cache) and launch the pending graph, or only the part ``needed``.

    Returns the Launch, or None if nothing was pending.
    """
    if _trace is not None:
        return _trace[1](trigger, src, needed)
    with S.lock:
        pg = S.pg
        if not pg.nodes:
            return None
        t0 = ev.now()
        if needed is None:
            nodes = pg.nodes
            in_subset = None
        else:
            in_subset = _ancestors([o.node for o in needed])
            nodes = [n for n in pg.nodes if id(n) in in_subset]
            if len(nodes) == len(pg.nodes):
                in_subset = None
        # outputs: every pending value still held by a live storage (+ what the rest still needs)
        outs = {}
        for w in pg.written:
            st = w()
            if st is None:
                continue
            v = st.value
            if type(v) is Out and v.node.graph is pg and v.node.launched is None and \
                    (in_subset is None or id(v.node) in in_subset):
                outs[id(v)] = v
        rest = []
        if in_subset is not None:
            for o in needed:
                outs[id(o)] = o
            rest = [n for n in pg.nodes if id(n) not in in_subset]
            for n in rest:
                for r in n.refs:
                    if type(r) is Out and id(r.node) in in_subset:
                        outs[id(r)] = r
        outs = sorted(outs.values(), key=lambda o: (o.node.index, o.idx))
        traced = len(nodes)
        nodes = live_nodes(nodes, outs, Out)      # the key and the recipe are the live graph's
        if not nodes:                   # nothing pending is held or has effects: nothing to run
            if in_subset is None:
                S.pg = PendingGraph()
                _release(pg.nodes)
                pg.nodes, pg.inps, pg.slots, pg.written = [], [], {}, []
            return None
        # external inputs in first-use order
        externals, seen = [], set()
        for n in nodes:
            for r in n.refs:
                if type(r) is Inp and id(r) not in seen:
                    seen.add(id(r))
                    externals.append(r)
        # writes into part of a buffer nothing else reads go in place (lazy/donation.py counts the
        # references to each buffer: none may be left in this frame's loop names)
        if pg.scatters:
            r = v = st = w = None
            donation.donations(nodes, outs, externals, pg, S.capture is not None)
        key = graph_key(nodes, outs, externals, pg.slots, _default_dtype())
        site = src
        if ev.wants(ev.GraphBuilt):
            # positional, in the event's field order (emit_host: built when a recording reads it)
            ev.emit_host(ev.GraphBuilt, (t0, ev.now(), "host", ev.recorder.step, pg.id, traced,
                                         len(externals), len(outs), trigger, src))
        recipe = find.get_recipe(key, nodes, externals, outs, site)
        cap = S.capture
        launch = launch_recipe(recipe, externals, S.stream, srcs=[n.src for n in nodes]) if cap is None else \
            cap.launch(recipe, externals)
        # rebind: the outputs now live in device buffers that this launch produces
        produced = {}
        for k, o in enumerate(outs):
            inp = Inp(None, o.meta, launch=launch, idx=k)
            produced[id(o)] = inp
        for w in pg.written:
            st = w()
            if st is not None and type(st.value) is Out:
                new = produced.get(id(st.value))
                if new is not None:
                    st.value = new
        if cap is not None:
            cap.on_flush(recipe, externals, produced, pg.written)   # what replay binds and rebinds
        if in_subset is None:
            S.pg = PendingGraph()
            _release(pg.nodes)
            pg.nodes, pg.inps, pg.slots, pg.written = [], [], {}, []
        else:
            _keep_rest(pg, rest, produced, in_subset)
            _release(nodes)
        return launch


def _release(launched_nodes) -> None:
    """Launched nodes are garbage, but each is in cycles (node <-> its outs, graph <-> its nodes)
    holding its inputs' buffers, and through their launches every output those launches made. Left
    to the cyclic collector, a loop's buffers piled up (64 MB copies: gigabytes) and were freed all
    at once wherever the user's thread was: tens of ms of munmap, counted as the user's host time.
    Broken here, each graph is freed by reference counting when its last tensor lets go."""
    for n in launched_nodes:
        n.outs = ()


def _keep_rest(pg, rest, produced, done_ids):
    """After a partial flush: the rest of the graph reads the launched values as inputs."""
    for n in pg.nodes:
        if id(n) in done_ids:
            n.launched = True
    for n in rest:
        if any(type(r) is Out and id(r.node) in done_ids for r in n.refs):
            n.args = tuple(_launched_as_input(a, produced, done_ids) for a in n.args)
            n.kwargs = {k: _launched_as_input(v, produced, done_ids) for k, v in n.kwargs.items()}
            n.refs = tuple(_launched_as_input(r, produced, done_ids) for r in n.refs)
            n.sig = (op_key(n.op), tuple(_resigned(pg, a) for a in n.args),
                     tuple((k, _resigned(pg, v)) for k, v in n.kwargs.items()))
            n.h = hash(n.sig)
    pg.nodes = rest
    pg.written = [w for w in pg.written if w() is not None and type(w().value) is Out]


# module functions, not closures: a recursive closure is a cycle (function -> cell -> function) that
# kept the pending graph, and the buffers it reads, alive until a cyclic collection (see _release)
def _launched_as_input(a, produced, done_ids):
    """``a`` with each Out of a launched node replaced by the device buffer the launch produces."""
    t = type(a)
    if t is Out and id(a.node) in done_ids:
        return produced[id(a)]
    if t is list:
        return [_launched_as_input(x, produced, done_ids) for x in a]
    if t is tuple:
        return tuple(_launched_as_input(x, produced, done_ids) for x in a)
    return a


def _resigned(pg, a):
    """The signature of argument ``a``, as ``_walk`` signs it."""
    t = type(a)
    if t is Out or t is Inp:
        return ref_sig(pg, a)
    if t is list or t is tuple:
        return tuple(_resigned(pg, x) for x in a)
    if t is int or t is float or t is bool or t is complex:
        return scalar_sig(a)
    return a


# ---------------------------------------------------------------- host syncs

def materialize(t, reason: str, src: str):
    """Make t's storage value a device buffer (flushing what it needs); return the Inp."""
    return _materialize(t._st, reason, src)


def _materialize(st, reason: str, src: str):
    v = st.value
    if type(v) is Out:
        flush(reason, src, needed=[v])
        v = st.value
    return v


def to_cpu(t, reason: str, whole_storage: bool = False):
    """A host copy of t's values (a host sync); with ``whole_storage``, of its whole storage, laid
    out as the storage (host ops give the tensors that share it views of that one copy)."""
    if _user_time.open_blocks and not _user_time.emulating:     # inside your own timed code
        return _user_time.as_emulator(to_cpu, t, reason, whole_storage)
    base, t0, src = _synced(t, reason)
    st = t._st
    if whole_storage:
        return readback.copied(t0, torch.empty_strided(st.size, st.stride, dtype=st.dtype).copy_(base), src)
    return readback.copied(t0, base.as_strided(t._size, t._stride, t._offset).clone(), src)


def read_item(t, reason: str):
    """The Python number held by one-element tensor ``t`` (``.item()``, ``float(t)``, ``bool(t)``):
    to_cpu's host sync and DeviceToHost of its one element, read straight from the device buffer
    (no host tensor made for a 4-byte copy: the Gaudi clock times the copy by its size anyway)."""
    if _user_time.open_blocks and not _user_time.emulating:     # inside your own timed code
        return _user_time.as_emulator(read_item, t, reason)
    base, t0, src = _synced(t, reason)
    if t._offset == 0 and base.dim() == 0:
        v = base.item()                      # a 0-d storage (a loss): the buffer is the value
    else:
        v = base.as_strided((), (), t._offset).item()
    if ev.wants(ev.DeviceToHost):
        readback.report(t0, t.element_size(), src)
    return v


def _synced(t, reason: str):
    """(t's device buffer laid out as its storage, the start of the copy out, the user's line),
    after the host sync that makes its values available (flushing what they need; a HostSync event
    even when they already were). The copy out (a DeviceToHost from that start) begins as soon as
    the sync returns: laying the buffer out as its storage is the emulator's memcpy, which the Gaudi
    clock replaces by the modeled transfer, not the user's host work."""
    reason = S.sync_reason or reason
    S.sync_reason = None
    st = t._st
    seen_as = None
    if type(st) is not Storage:     # a view of another dtype (dispatch/dtype_views.py): its base's buffer
        seen_as, st = st, st.base
    v = st.value
    # the user's line names the events and the recipe's call site: found only when one is made
    src = user_src(4) if (type(v) is Out or S.capture is not None or ev.wants(ev.HostSync)
                          or ev.wants(ev.DeviceToHost)) else ""
    if S.capture is not None:
        S.capture.refuse(reason, src)       # "<op> is not supported during HPU Graph capturing"
    if type(v) is Out:
        v = _materialize(st, reason, src)
    base = v.tensor
    if base is None:
        base = v.get(reason, src)
    elif ev.wants(ev.HostSync):
        tt = ev.now()
        ev.emit(ev.HostSync(tt, tt, "host", ev.recorder.step, reason=reason, src=src))
    t0 = ev.now()
    base = build_layout(base, st)
    return (base if seen_as is None else seen_as.host_view(base)), t0, src


def build_layout(base, st):
    if tuple(base.stride()) != st.stride or base.storage_offset() != 0:
        out = torch.empty_strided(st.size, st.stride, dtype=st.dtype)
        out.copy_(base)
        return out
    return base


# ---------------------------------------------------------------- mark_step and synchronize

def mark_step(device_str: str = "", sync: bool = False):
    src = user_src(2)
    t0 = ev.now()
    n = len(S.pg)
    launch = flush("mark_step", src)
    ev.recorder.step += 1
    ev.emit(ev.MarkStep(t0, ev.now(), "host", ev.recorder.step - 1, src=src, pending_nodes=n))
    closures, S.step_closures = S.step_closures, []
    if sync and launch is not None:
        launch.wait("mark_step(sync=True)", src)
    for fn, a in closures:
        fn(*a)
    return launch


def synchronize(reason: str = "synchronize") -> None:
    """Wait for all work on every stream (pending lazy ops are not launched by this)."""
    executor.synchronize_all(reason, user_src(3))


def _set_reason(reason: str) -> None:
    S.sync_reason = reason


def _install():
    from .. import tensor
    tensor._to_cpu = to_cpu
    tensor._read_item = read_item
    tensor._set_reason = _set_reason


_install()
