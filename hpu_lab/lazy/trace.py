"""The generic lazy op: an op on hpu tensors becomes a node of the pending graph, its outputs new
storages holding the node's values (``functional_op``); an in-place op computes its functional
twin and writes the result back (``inplace_op``). Output metadata comes from meta tensors (cached per
signature in ``ops.cached_meta``); ``route.dispatch`` decides which ops come here.
"""
from __future__ import annotations

import weakref

import torch

from .. import events as ev
from .. import ops
from ..compiler.graph import CastTo, InplaceOnClone, InplaceOnStorages, op_key, ref_sig
from ..tensor import HPUParameter, HPUTensor, Inp, Out, storage_extent
from ..util._source import user_src
from . import aliasing, foreach_errors, iter_strides, state
from .flushing import flush
from .state import S, _default_dtype, _src
from .storage import _full, read_ref, scalar_sig, wrap_new, write

aten = torch.ops.aten
CPU = torch.device("cpu")
_NoneType = type(None)
_SCALARS = (int, float, bool, str, _NoneType, complex)


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
        if state._trace is not None:
            state._trace[0](t)
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
