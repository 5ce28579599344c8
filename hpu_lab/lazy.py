"""Lazy mode: ops accumulate in the pending graph; mark_step or a value access runs them.

``dispatch`` receives every aten op on an HPUTensor (from ``HPUTensor.__torch_dispatch__``) and
every factory op for device "hpu" (from the PrivateUse1 kernels in ``device.py``).
"""
from __future__ import annotations

import threading
import weakref

import torch

from . import config
from . import events as ev
from . import ops
from ._source import user_src
from . import resize as _resize  # out= / resize_ (issue 16)
from . import widen as _widen  # dtypes the CPU kernel lacks (issue 16)
from .compiler import build, cache
from .compiler.recipe import GraphKey
from .compiler.reasons import diff
from .graph import PendingGraph, ref_sig, op_key, view, scatter, restride, InplaceOnClone, CastTo
from .runtime import executor, memory
from .tensor import HPU, HPUTensor, Inp, Out, Storage, new_storage_tensor, storage_extent, _itemsize

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
        self.capture = None          # the HPU Graph being captured, if any (graphs/)
        self.stream = 0              # current stream index
        self.observers_before_flush = []
        self.step_closures = []
        # Inp -> weakref of the storage that held it when a pending op read it: an input whose
        # tensor died stays on the device until the graph runs (launch_recipe counts it)

    def reload(self):
        self.max_ops = config.get("PT_HPU_MAX_COMPOUND_OP_SIZE")
        eager = not config.get("PT_HPU_LAZY_MODE")
        if eager and not self.eager and self.pg.nodes:
            flush("switch to eager mode", "")    # what lazy mode accumulated runs now (eager.py)
        self.eager = eager
        self.source_lines = config.get("HPU_LAB_SOURCE_LINES")


S = State()


def _on_config_change():
    S.reload()
    _HANDLER.clear()


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
            and st.stride == _contiguous_strides(st.size))


def _contiguous_strides(size):
    stride, acc = [], 1
    for s in reversed(size):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))


def read_ref(t):
    """A reference to t's current value: an Out, an Inp, or a new view node over the storage."""
    st = t._st
    v = st.value
    if S.capture is not None and type(v) is Inp:
        S.capture.saw(v, st)           # replay reads this storage's value then (graphs/)
    if t._offset == 0 and t._size == st.size and t._stride == st.stride:
        return v
    rc = t._rc
    # the cached view node is only valid in the graph that is still pending (not after a flush)
    if rc is not None and rc[0] is v and rc[1].node.graph is S.pg and rc[1].node.launched is None:
        return rc[1]
    pg = S.pg
    sig = (ref_sig(pg, v), t._size, t._stride, t._offset, st.stride)
    (r,) = pg.add(view, (v, t._size, t._stride, t._offset, st.stride), {}, [(t._size, t._stride, t.dtype)],
                  None, sig, (), (v,), _src() if S.source_lines else "")
    t._rc = (v, r)
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
        (r2,) = pg.add(scatter, (base, r, t._size, t._stride, t._offset, st.stride), {},
                       [(st.size, st.stride, st.dtype)], None,
                       (ref_sig(pg, base), ref_sig(pg, r), t._size, t._stride, t._offset, st.stride),
                       (), (base, r), _src() if S.source_lines else "")
        st.value = r2
        r = r2
    if type(r) is Out:
        pg.track(st)
    t._rc = None


def write_concrete(t, cpu_tensor, regen=None, op: str = "") -> None:
    """t's elements now hold a host tensor already on the device (an H2D copy or a host draw)."""
    st = t._st
    if _full(t) and tuple(cpu_tensor.stride()) == st.stride and cpu_tensor.storage_offset() == 0:
        st.value = inp = Inp(cpu_tensor, (st.size, st.stride, st.dtype), regen=regen)
        if S.capture is not None:
            S.capture.created(inp)      # a constant of the graph, or redrawn at replay (regen)
        t._rc = None
        return
    inp = Inp(cpu_tensor, (tuple(cpu_tensor.shape), tuple(cpu_tensor.stride()), cpu_tensor.dtype), regen=regen)
    if S.capture is not None:
        S.capture.created(inp)
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
        mkeys.append(a)
        return a, a
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
            refs.append(inp)
            mkeys.append(("cpu0", a.dtype))
            return inp, ref_sig(pg, inp)
        if a.device.type == "cpu" and _CPU_OPERANDS:
            # as the bridge's LazyOp::set_inputs: a CPU operand is copied to the device (transfers.py)
            from .transfers import operand
            v = operand(a)
            inp = Inp(v, (tuple(v.shape), tuple(v.stride()), v.dtype))
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


def functional_op(func, args, kwargs):
    """lazy_op for an op known to write nothing (dispatch decides that once per op).

    This is the hottest path of the emulator: tensor args are handled inline, output metadata
    comes from a dict keyed by the argument signature, and only a miss runs the meta kernel.
    """
    pg = S.pg
    refs, mkeys, nargs, sargs = [], [], [], []
    for a in args:
        if type(a) is HPUTensor:
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
    ok = op_key(func)
    mkey = (ok, tuple(mkeys), tuple(kwargs))
    nargs = tuple(nargs)
    hit = ops._META_CACHE.get(mkey)
    if type(hit) is tuple and len(hit) == 3:
        metas, spec, res_template = hit
    else:
        def compute():
            res = ops.run_meta(func, [_meta_arg(a) for a in nargs], {k: _meta_arg(v) for k, v in nkw.items()})
            metas, spec = _out_metas(res)
            return metas, spec, res

        try:
            metas, spec, res_template = ops.cached_meta(mkey, compute)
        except ops.MetaFailure as e:
            return _meta_failed(func, args, kwargs, e)
    outs = pg.add(func, nargs, nkw, metas, spec, tuple(sargs), skw, tuple(refs), _op_src(func), ok)
    if spec is None:
        t = wrap_new(metas[0], outs[0])
        if S.max_ops is not None:
            after_op(func)
        return t
    tensors = [wrap_new(m, o) for m, o in zip(metas, outs)]
    after_op(func)
    return _rebuild(res_template, iter(tensors))


def _meta_failed(func, args, kwargs, e):
    """No usable meta kernel: data-dependent ops run on the host, the rest fall back (fallback.py)."""
    from . import fallback
    return fallback.on_meta_failure(func, args, kwargs, e)


def _op_src(func):
    if not S.source_lines:
        return ""
    src = user_src(4)
    if ev.wants(ev.OpAccumulated):
        t = ev.now()
        ev.emit(ev.OpAccumulated(t, t, "host", ev.recorder.step, op=ops.op_name(func), src=src))
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


def inplace_op(func, args, kwargs, info):
    """An op that writes its inputs: compute the new values functionally, then rebind."""
    written, out_kw, functional = info
    if out_kw:
        return out_variant_op(func, args, kwargs, out_kw)
    targets = [args[i] for i in written]
    for t in targets:
        ts = t if isinstance(t, (list, tuple)) else [t]
        for x in ts:
            if not isinstance(x, HPUTensor):
                raise _same_device_error(x.device)
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
            if len(metas) != len(tgt) or any(m[0] != tuple(x.shape) for m, x in zip(metas, tgt)):
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
    outs = pg.add(op, nargs, nkw, metas, spec, tuple(sargs), tuple(skw), tuple(refs), _op_src(func))
    flat_targets = [x for t in targets for x in (t if isinstance(t, (list, tuple)) else [t])]
    for t, o in zip(flat_targets, outs):
        write(t, o, ops.op_name(func))
    # foreach ops and custom ops (hpex optimizers) bump autograd's version counter only in their CPU
    # decomposition, which the lazy path never runs: bump it here (twice is harmless), so autograd
    # still refuses a backward through a tensor modified in place
    torch._C._increment_version(flat_targets)
    after_op(func)
    if func._schema.returns:
        return targets[0] if len(targets) == 1 else tuple(targets)
    return None


def out_variant_op(func, args, kwargs, out_kw):
    """``op(..., out=t)``: compute into fresh buffers and write them into the out tensors."""
    outs = [kwargs[k] for k in out_kw]
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
                _resize.resize_output(o, r.shape)      # as stock PyTorch: resized, warned if non-empty
                copy_(None, (o, r), {})
            return outs[0] if len(outs) == 1 else tuple(outs)
    raise NotImplementedError(f"{ops.op_name(func)} with out= is not supported on hpu")


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
        # external inputs in first-use order
        externals, seen = [], set()
        for n in nodes:
            for r in n.refs:
                if type(r) is Inp and id(r) not in seen:
                    seen.add(id(r))
                    externals.append(r)
        key = GraphKey(tuple(n.sig for n in nodes), tuple((o.node.index, o.idx) for o in outs),
                       tuple(n.h for n in nodes))
        site = src
        if ev.wants(ev.GraphBuilt):
            ev.emit(ev.GraphBuilt(t0, ev.now(), "host", ev.recorder.step, graph_id=pg.id,
                                  node_count=len(nodes), input_count=len(externals),
                                  output_count=len(outs), trigger=trigger, src=src))
        recipe = get_recipe(key, nodes, externals, outs, site)
        cap = S.capture
        launch = launch_recipe(recipe, externals, srcs=[n.src for n in nodes]) if cap is None else \
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
        else:
            _keep_rest(pg, rest, produced, in_subset)
        return launch


def _keep_rest(pg, rest, produced, done_ids):
    """After a partial flush: the rest of the graph reads the launched values as inputs."""
    def sub(a):
        t = type(a)
        if t is Out and id(a.node) in done_ids:
            return produced[id(a)]
        if t is list:
            return [sub(x) for x in a]
        if t is tuple:
            return tuple(sub(x) for x in a)
        return a

    def resig(a):
        t = type(a)
        if t is Out or t is Inp:
            return ref_sig(pg, a)
        if t is list or t is tuple:
            return tuple(resig(x) for x in a)
        return a

    for n in pg.nodes:
        if id(n) in done_ids:
            n.launched = True
    for n in rest:
        if any(type(r) is Out and id(r.node) in done_ids for r in n.refs):
            n.args = tuple(sub(a) for a in n.args)
            n.kwargs = {k: sub(v) for k, v in n.kwargs.items()}
            n.refs = tuple(sub(r) for r in n.refs)
            n.sig = (op_key(n.op), tuple(resig(a) for a in n.args),
                     tuple((k, resig(v)) for k, v in n.kwargs.items()))
            n.h = hash(n.sig)
    pg.nodes = rest
    pg.written = [w for w in pg.written if w() is not None and type(w().value) is Out]


def get_recipe(key, nodes, externals, outs, site):
    t0 = ev.now()
    recipe = cache.lookup(key)
    hit = recipe is not None
    if hit:
        if ev.wants(ev.CacheLookup):
            ev.emit(ev.CacheLookup(t0, ev.now(), "host", ev.recorder.step, hit=True, key=key.short))
        return recipe
    recipe = _find_elsewhere(key, nodes, externals, outs, site)
    if recipe is not None:
        return recipe
    if ev.wants(ev.CacheLookup):
        ev.emit(ev.CacheLookup(t0, ev.now(), "host", ev.recorder.step, hit=False, key=key.short))
    recipe = build.compile_graph(nodes, externals, outs, key, site)
    prev = cache.nearest(site, recipe.desc)
    if prev is not None and _unrelated(prev.desc, recipe.desc):
        prev = None          # another graph cut at the same line (e.g. the optimizer's): not a recompile
    reason = diff(prev.desc if prev is not None else None, recipe.desc)
    recipe.reason = reason
    cache.store(key, recipe, site)
    t1 = ev.now()
    ev.emit(ev.Compile(t1 - recipe.compile_ns, t1, "host", ev.recorder.step, key=key.short,
                       recipe_id=recipe.id, node_count=recipe.node_count, reason=reason, src=site,
                       peak_bytes=recipe.peak_bytes, clusters=recipe.clusters, graph=recipe.summary))
    for hook in _compile_hooks:
        hook(recipe)
    if config.get("GRAPH_VISUALIZATION"):
        from .profiler import dump_graph_if_enabled
        dump_graph_if_enabled(recipe.summary, f"recipe_{recipe.id}_{key.short}")
    return recipe


def _unrelated(a, b) -> bool:
    """No op in common at the start and a different number of inputs: a different graph."""
    (ain, anodes), (bin_, bnodes) = a, b
    first_same = bool(anodes) and bool(bnodes) and anodes[0][0] == bnodes[0][0]
    return not first_same and len(ain) != len(bin_)


_compile_hooks: list = []      # e.g. the disk cache storing a new recipe
_lookup_hooks: list = []       # e.g. the disk cache: fn(key, nodes, externals, outs, site) -> Recipe|None


def _find_elsewhere(key, nodes, externals, outs, site):
    for hook in _lookup_hooks:
        r = hook(key, nodes, externals, outs, site)
        if r is not None:
            cache.store(key, r, site)
            return r
    return None


def _held_bytes(externals) -> int:
    """Device bytes of inputs whose tensors died while the graph was pending: only the graph holds
    them now, so they are in use until it runs (not in InUse any more). A long lazy graph that
    reads many freed inputs needs more memory than the same work cut by mark_step (seed 003)."""
    n = 0
    for inp in externals:
        w = inp.owner
        if w is not None and w() is None and inp.meta is not None:
            size, stride, dtype = inp.meta
            n += storage_extent(size, stride) * _itemsize(dtype)
    return n


def launch_recipe(recipe, externals, stream=None, srcs=None):
    """Check memory, then queue the recipe on the device; return at once."""
    memory.reserve_transient(recipe.peak_bytes, f"recipe {recipe.short_key} ({recipe.node_count} nodes)",
                             held=_held_bytes(externals))
    s = executor.stream(S.stream if stream is None else stream)
    for inp in externals:
        src_launch = inp.launch
        if src_launch is not None and src_launch.stream != s.index and not src_launch.done.is_set():
            s.submit_fn(src_launch.done.wait)    # cross-stream dependency: wait, never read too early
    launch = executor.Launch(recipe, list(externals), s.index, srcs)
    recipe.launches += 1
    if ev.wants(ev.Launch):
        t = ev.now()
        ev.emit(ev.Launch(t, t, "host", ev.recorder.step, launch_id=launch.id, recipe_id=recipe.id,
                          key=recipe.short_key, stream=s.index, graph=recipe.summary))
    s.submit(launch)
    return launch


# ---------------------------------------------------------------- host syncs

def materialize(t, reason: str, src: str):
    """Make t's storage value a device buffer (flushing what it needs); return the Inp."""
    st = t._st
    v = st.value
    if type(v) is Out:
        flush(reason, src, needed=[v])
        v = st.value
    return v


def to_cpu(t, reason: str):
    """A host copy of t's values (a host sync)."""
    reason = S.sync_reason or reason
    S.sync_reason = None
    src = user_src(3)
    if S.capture is not None:
        S.capture.refuse(reason, src)       # "<op> is not supported during HPU Graph capturing"
    inp = materialize(t, reason, src)
    st = t._st
    if inp.tensor is None:
        base = inp.get(reason, src)
    else:
        base = inp.tensor
        if ev.wants(ev.HostSync):
            tt = ev.now()
            ev.emit(ev.HostSync(tt, tt, "host", ev.recorder.step, reason=reason, src=src))
    base = build_layout(base, st)
    return base.as_strided(t._size, t._stride, t._offset).clone()


def build_layout(base, st):
    if tuple(base.stride()) != st.stride or base.storage_offset() != 0:
        out = torch.empty_strided(st.size, st.stride, dtype=st.dtype)
        out.copy_(base)
        return out
    return base


def concrete(t, reason: str) -> torch.Tensor:
    """t's values as a CPU tensor that aliases nothing the user can reach (for host ops)."""
    return to_cpu(t, reason)


def host_op(func, args, kwargs, reason):
    """Run an op on the host with concrete inputs (data-dependent ops, ops with no meta kernel)."""
    src = user_src(3)

    def conv(a):
        if isinstance(a, HPUTensor):
            return concrete(a, reason)
        if isinstance(a, (list, tuple)):
            return type(a)(conv(x) for x in a)
        if isinstance(a, torch.device) and a.type == "hpu":
            return CPU
        return a

    if S.capture is not None:
        S.capture.refuse(ops.op_name(func), src)
    cargs = [conv(a) for a in args]
    ckw = {k: conv(v) for k, v in kwargs.items()}
    info = ops.inplace_info(func)
    try:
        res = func(*cargs, **ckw)
    except (NotImplementedError, RuntimeError) as e:
        if not _widen.missing_kernel(e):   # a dtype Gaudi has and the CPU kernel lacks (issue 16)
            raise
        res = _widen.widened(func)(*cargs, **ckw)
    if info is not None and info[0]:
        # write the mutated args back; a result that *is* a mutated arg returns the hpu arg
        back = {}
        for i in info[0]:
            tgt, new = args[i], cargs[i]
            if isinstance(tgt, (list, tuple)):
                for x, y in zip(tgt, new):
                    write_concrete(x, y)
            else:
                write_concrete(tgt, new)
                back[id(new)] = tgt
            # autograd must see the write (a backward through the old value then errors)
            torch._C._increment_version(list(tgt) if isinstance(tgt, (list, tuple)) else [tgt])
        if not func._schema.returns:
            return None
        if isinstance(res, torch.Tensor) and id(res) in back:
            return back[id(res)]
    return to_hpu_result(res)


def to_hpu_result(res):
    if isinstance(res, torch.Tensor):
        # CPU's layout, when it is a dense one (nonzero's is column-major: flatten must copy, as
        # on CPU); a view with gaps is laid out contiguous
        if res.storage_offset() == 0 and _dense_layout(res):
            c = res
        elif _dense_layout(res):
            c = torch.empty_strided(res.shape, res.stride(), dtype=res.dtype).copy_(res)
        else:
            c = res.contiguous()
        return wrap_new((tuple(c.shape), tuple(c.stride()), c.dtype), Inp(c, (tuple(c.shape), tuple(c.stride()), c.dtype)))
    if isinstance(res, (list, tuple)):
        return type(res)(to_hpu_result(x) for x in res)
    return res


def _dense_layout(t) -> bool:
    return torch._prims_common.is_non_overlapping_and_dense_or_false(t)


# ---------------------------------------------------------------- special ops

def copy_(func, args, kwargs):
    dst, src_t = args[0], args[1]
    non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    if isinstance(dst, HPUTensor):
        if isinstance(src_t, HPUTensor):
            r = lazy_op(aten.copy.default, (dst, src_t), {})   # functional copy (broadcast + cast)
            write(dst, _value_ref(r), "aten::copy_")
            return dst
        # host -> device: pinned + non_blocking is queued on the current stream, else the host
        # copies now (through a staging buffer if the source is pageable): transfers.py
        from .transfers import host_to_device
        val, launch = host_to_device(dst._size, dst._stride, dst.dtype, src_t, non_blocking, "aten::copy_",
                                     user_src(3), None if S.capture is not None else S.stream)
        if launch is None:
            write_concrete(dst, val, op="aten::copy_")
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
            out = out.pin_memory()          # hpu_lab/pinned.py
        return out
    return lazy_op(func, args, kwargs)


def local_scalar_dense(func, args, kwargs):
    return to_cpu(args[0], "bool/float/int of a tensor").item()


def view_op(func, args, kwargs):
    """Views share the storage: no node, just new (size, stride, offset) from the meta kernel."""
    x = args[0]
    if not isinstance(x, HPUTensor):
        return lazy_op(func, args, kwargs)
    st = x._st
    extent = storage_extent(st.size, st.stride)
    margs = [ops.meta_tensor(x._size, x._stride, x.dtype, x._offset, extent)]
    mkey = [func, x._size, x._stride, x._offset, extent, x.dtype]
    for a in args[1:]:
        if isinstance(a, torch.Tensor):
            return lazy_op(func, args, kwargs)      # e.g. view_as_real with a tensor arg: rare
        mkey.append(tuple(a) if isinstance(a, list) else a)
        margs.append(a)
    mkey.append(tuple(sorted(kwargs.items())))

    def compute():
        res = ops.run_meta(func, margs, dict(kwargs))
        for r in (res if isinstance(res, (list, tuple)) else [res]):
            if r.is_conj() or r.is_neg():
                raise NotImplementedError(f"{ops.op_name(func)}: conjugate/negative views are not "
                                          "supported on hpu in hpu_lab; call .resolve_conj() first")
        if isinstance(res, torch.Tensor):
            return [(tuple(res.shape), tuple(res.stride()), res.storage_offset(), res.dtype)], True
        return [(tuple(r.shape), tuple(r.stride()), r.storage_offset(), r.dtype) for r in res], False

    metas, single = ops.cached_meta(tuple(mkey), compute)
    outs = []
    for size, stride, off, dtype in metas:
        if dtype != st.dtype:
            raise NotImplementedError(f"{ops.op_name(func)}: dtype-reinterpreting views are not supported on hpu")
        outs.append(HPUTensor(st, size, stride, off, dtype))
    return outs[0] if single else type(metas)(outs) if False else outs


def random_inplace(func, args, kwargs):
    """Draw on the host from torch's default generator (same numbers as the CPU run)."""
    t = args[0]
    if S.capture is not None:
        S.capture.note_random()

    # the closure keeps no tensor: it lives on in the buffer (Inp.regen), and a tensor in it could
    # form a cycle through autograd's C++ graph that the garbage collector cannot free
    size, stride, dtype, rest = t._size, t._stride, t.dtype, args[1:]

    def draw():
        buf = torch.empty_strided(size, stride, dtype=dtype)
        return func(buf, *rest, **kwargs)

    write_concrete(t, draw(), regen=draw, op=ops.op_name(func))
    return t


def native_dropout(func, args, kwargs):
    x, p, train = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("train")
    if not train or p == 0:
        return lazy_op(func, args, kwargs)
    if p >= 1:
        return lazy_op(func, args, kwargs)
    # the noise is what CPU's dropout draws: bernoulli(1-p) / (1-p); it becomes a graph input
    size, dtype = tuple(x.shape), x.dtype       # (no tensor in the closure: see random_inplace)

    def draw():
        noise = torch.empty(size, dtype=dtype).bernoulli_(1 - p)
        return noise.div_(1 - p)

    noise = new_storage_tensor(size, _contig(size), x.dtype, None)
    noise._st.value = Inp(draw(), (size, _contig(size), x.dtype), regen=draw)
    if S.capture is not None:
        S.capture.created(noise._st.value)
    out = lazy_op(aten.mul.Tensor, (x, noise), {})
    mask = lazy_op(aten.ne.Scalar, (noise, 0), {})
    return out, mask


def _contig(size):
    stride, acc = [], 1
    for s in reversed(size):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))


def resize_(func, args, kwargs):
    return _resize.resize_(args[0], args[1], lambda dst, src: copy_(None, (dst, src), {}))


def set_(func, args, kwargs):
    raise RuntimeError(f"{ops.op_name(func)} on hpu tensors is not supported in hpu_lab")


def lift_fresh(func, args, kwargs):
    return args[0]


def inplace_view(func, args, kwargs):
    """squeeze_, unsqueeze_, t_, transpose_, swapdims_, as_strided_: the tensor itself becomes the
    view. No node and no data moves: the view's (size, stride, offset) comes from the functional
    twin (squeeze, ...), then the wrapper's own metadata is set to it (torch's decompositions use
    these, e.g. matmul(vector, matrix) and quantile)."""
    x = args[0]
    functional = ops.INPLACE_VIEW.get(func)
    if functional is None or not isinstance(x, HPUTensor):
        raise NotImplementedError(f"{ops.op_name(func)} is not supported on hpu in hpu_lab")
    v = view_op(functional, args, kwargs)
    set_view_meta(x, v._size, v._stride, v._offset)
    return x


def set_view_meta(x, size, stride, offset) -> None:
    """Make the wrapper ``x`` the view (size, stride, offset) of its storage, in place."""
    with torch._C._DisableTorchDispatch():
        aten.as_strided_.default(x, size, stride, offset)
    x._size, x._stride, x._offset = tuple(size), tuple(stride), offset
    x._rc = None


def physical(op):
    """conj/neg views carry a bit the wrapper cannot hold: compute them as new tensors instead."""
    def handler(func, args, kwargs):
        return lazy_op(op, args, kwargs)
    return handler


def native_layer_norm(func, args, kwargs):
    """CPU's kernel returns mean and rstd in the input's dtype (the parameters' when they differ,
    e.g. float32 weights on bfloat16 input); the meta kernel says float32 for reduced precision.
    The device runs CPU's kernel, so the tensors must say what it returns."""
    out, mean, rstd = functional_op(func, args, kwargs)
    w = args[2] if len(args) > 2 else kwargs.get("weight")
    return (out, *_stats_dtype(args[0], w, mean, rstd))


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


SPECIAL = {
    aten._batch_norm_with_update.default: batch_norm_with_update,
    aten._native_batch_norm_legit.default: native_batch_norm_legit,
    aten.native_layer_norm.default: native_layer_norm,
    aten.copy_.default: copy_,
    aten._to_copy.default: to_copy,
    aten._local_scalar_dense.default: local_scalar_dense,
    aten.native_dropout.default: native_dropout,
    aten.resize_.default: resize_,
    aten.set_.source_Tensor: set_,
    aten.set_.source_Storage: set_,
    aten.set_.source_Storage_storage_offset: set_,
    aten.lift_fresh.default: lift_fresh,
    aten._conj.default: physical(aten.conj_physical.default),
    aten._neg_view.default: physical(aten.neg.default),
}
for _f in ops.RANDOM_INPLACE:
    SPECIAL[_f] = random_inplace


def _data_dependent(func, args, kwargs):
    return host_op(func, args, kwargs, f"data-dependent op {ops.op_name(func)}")


def _random_on_host(func, args, kwargs):
    # drawn on the host from torch's default generator, in program order: same numbers as CPU
    return host_op(func, args, kwargs, f"random op {ops.op_name(func)} (drawn on the host)")


def _resolve(func):
    """The handler of an op, decided once per op (dispatch is on every op's path)."""
    h = SPECIAL.get(func)
    if h is not None:
        return h
    if func in ops.INPLACE_VIEW:
        return inplace_view
    if func in ops.DATA_DEPENDENT:
        return _data_dependent
    if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
        return _random_on_host
    info = ops.inplace_info(func)
    if ops.is_view(func):
        return inplace_view if info is not None and info[0] else view_op
    if info is not None and info[2] is not None and ops.is_view(info[2]):
        return inplace_view          # squeeze_, t_, transpose_: the functional twin is a view
    if info is None:
        return functional_op
    return lazy_op


_HANDLER: dict = {}
_HANDLER_KEEP: list = []


def dispatch(func, args, kwargs):
    h = _HANDLER.get(id(func))
    if h is None:
        h = _HANDLER[id(func)] = _resolve(func)
        _HANDLER_KEEP.append(func)
    if S.eager:
        from .eager import run          # eager mode: this op is launched as soon as it returns
        return run(h, func, args, kwargs)
    return h(func, args, kwargs)


def register_special(func, handler) -> None:
    """Route ``func`` to ``handler(func, args, kwargs)`` (used by fallback, amp, graphs)."""
    SPECIAL[func] = handler
    _HANDLER.pop(id(func), None)


def reset_dispatch_cache() -> None:
    _HANDLER.clear()


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
    from . import tensor
    tensor._dispatch = dispatch
    tensor._to_cpu = to_cpu
    tensor._set_reason = _set_reason


_install()
