"""What kind of op is this? Views, in-place ops, random ops, data-dependent ops; and shape
inference on meta tensors, cached, because meta kernels cost ~100 us an op (DESIGN.md).
"""
from __future__ import annotations

import threading

import torch

aten = torch.ops.aten
META = torch.device("meta")

# Ops whose output shape depends on the data: they need the values, so they force a host sync
# (seed 000, "dynamic ops"; seed 001: "Data Dependent dynamic flow is not supported").
DATA_DEPENDENT = {
    aten.nonzero.default, aten.masked_select.default, aten._unique2.default, aten.unique_dim.default,
    aten.unique_consecutive.default, aten._unique.default, aten.repeat_interleave.Tensor,
    aten.bincount.default, aten._local_scalar_dense.default, aten.equal.default,
    aten.is_nonzero.default, aten.argwhere.default,
}

# Random ops: drawn on the host from torch's default generator, at trace time, so that an "hpu"
# run gives exactly the numbers of the same loop on CPU; the draw becomes an input of the graph
# (and graph replay draws again).
RANDOM_INPLACE = {
    aten.normal_.default, aten.uniform_.default, aten.bernoulli_.float, aten.random_.default,
    getattr(aten.random_, "from"), aten.random_.to, aten.exponential_.default, aten.geometric_.default,
    aten.log_normal_.default, aten.cauchy_.default,
}


# In-place view ops: the tensor itself becomes a view (a metadata change, no data moves), and the
# view op computing the new (size, stride, offset). Listed, because neither the inplace_view tag
# (squeeze_ lacks it) nor the name (transpose_ -> transpose.int) finds every twin.
INPLACE_VIEW = {
    aten.as_strided_.default: aten.as_strided.default,
    aten.t_.default: aten.t.default,
    aten.transpose_.default: aten.transpose.int,
    aten.swapdims_.default: aten.transpose.int,
    aten.swapaxes_.default: aten.transpose.int,
    aten.unsqueeze_.default: aten.unsqueeze.default,
    aten.squeeze_.default: aten.squeeze.default,
    aten.squeeze_.dim: aten.squeeze.dim,
    aten.squeeze_.dims: aten.squeeze.dims,
    aten.detach_.default: aten.detach.default,
}


# Ops whose CPU kernel writes arguments their schema does not mark as written (``Tensor(a!)``):
# found by running every OpInfo and ModuleInfo sample on the CPU and comparing each argument's
# memory before and after each aten op (tests/mutation_audit.py; docs/correctness.md lists them).
# op -> (the written arguments' names, whether a call with these bound arguments writes them, a
# pure op taking the same arguments and returning the outputs then the written values, or None).
# A graph node computing such an op would leave the write out of the graph (dead code removal
# dropped it, a read before the result was needed saw the old values): kernels/hidden_writes.py records it.
HIDDEN_WRITES = {
    # training: running_mean/var get the momentum update (nn.BatchNorm*'s forward in train mode);
    # the functional twin runs CPU's batch_norm_cpu on clones of the stats (equal bit for bit)
    aten.native_batch_norm.default: (("running_mean", "running_var"), lambda a: bool(a["training"]),
                                     aten._native_batch_norm_legit_functional.default),
    # the statistics' momentum update alone (torch.batch_norm_update_stats; CPU's kernel writes
    # running_mean/var when given, as native_batch_norm's does)
    aten.batch_norm_update_stats.default: (("running_mean", "running_var"), lambda a: True, None),
    # oneDNN's LSTM backward uses the forward's workspace as scratch (nn.LSTM's backward on CPU)
    aten.mkldnn_rnn_layer_backward.default: (("workspace",), lambda a: True, None),
}


def hidden_writes(func, args, kwargs) -> list:
    """[(position or keyword, tensor)]: the arguments this call of ``func`` writes although its
    schema does not say so (``HIDDEN_WRITES``); empty for every other op."""
    entry = HIDDEN_WRITES.get(func)
    if entry is None:
        return []
    names, writes, _ = entry
    where, bound = {}, {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            where[a.name], bound[a.name] = i, args[i]
        elif a.name in kwargs:
            where[a.name], bound[a.name] = a.name, kwargs[a.name]
        else:
            bound[a.name] = a.default_value if a.has_default_value() else None
    if not writes(bound):
        return []
    return [(where[n], bound[n]) for n in names if isinstance(bound.get(n), torch.Tensor)]


class MetaFailure(Exception):
    """The op has no usable meta kernel (or its output depends on the data)."""


def op_name(func) -> str:
    """'aten::add' for aten.add.Tensor (what the bridge's logs show)."""
    n = _NAMES.get(func)
    if n is None:
        n = _NAMES[func] = func._schema.name if hasattr(func, "_schema") else getattr(func, "__name__", str(func))
    return n


_NAMES: dict = {}

_INPLACE: dict = {}


def inplace_info(func):
    """For an op that writes its inputs: (indices of written positional args, functional op or None).

    Returns None for ops that write nothing. The functional variant (add_ -> add, _foreach_mul_ ->
    _foreach_mul) computes the new values; without one, the op runs on clones of its inputs.
    """
    try:
        return _INPLACE[func]
    except KeyError:
        pass
    schema = func._schema
    written = tuple(i for i, a in enumerate(schema.arguments)
                    if a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only)
    out_kw = tuple(a.name for a in schema.arguments
                   if a.alias_info is not None and a.alias_info.is_write and a.kwarg_only)
    info = None
    if written or out_kw:
        functional = None
        name = schema.name.split("::")[1]
        if written and name.endswith("_") and not out_kw:
            packet = getattr(aten, name[:-1], None)
            if packet is not None:
                functional = _twin(packet, func)
        info = (written, out_kw, functional)
    _INPLACE[func] = info
    return info


_RETURNED: dict = {}


def returned_args(func):
    """For an op writing its inputs: the positions of the args its returns alias, one per return
    (``add_`` -> (0,), ``_foreach_add_`` -> ()), or None if a return aliases no positional arg."""
    try:
        return _RETURNED[func]
    except KeyError:
        pass
    schema = func._schema
    which = []
    for r in schema.returns:
        sets = r.alias_info.before_set if r.alias_info is not None else None
        hit = [i for i, a in enumerate(schema.arguments) if sets and a.alias_info is not None
               and a.alias_info.before_set == sets and not a.kwarg_only]
        if len(hit) != 1:
            which = None
            break
        which.append(hit[0])
    _RETURNED[func] = r = tuple(which) if which is not None else None
    return r


_BUMPED: dict = {}


def bumped_above(func) -> bool:
    """True if autograd's in-place layer (ADInplaceOrView) bumps the version of what ``func`` writes
    before it reaches the device (add_, every out= op); foreach and custom ops have no such kernel."""
    v = _BUMPED.get(func)
    if v is None:
        v = _BUMPED[func] = isinstance(func, torch._ops.OpOverload) and \
            torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "ADInplaceOrView")
    return v


# CPU kernels that write their inputs in native code, calling no in-place op: nothing bumps the
# version of what they write (a fused optimizer step leaves params at the version they had)
_UNBUMPED = {"aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_sgd_", "aten::_fused_adagrad_",
             "aten::_amp_foreach_non_finite_check_and_unscale_"}


def bump_on_device(func) -> bool:
    """Whether the lazy path must bump the version of what ``func`` writes, as CPU's kernel does:
    foreach ops (their kernel runs ``add_`` per tensor) and custom ops, not the ops bumped above
    the device (``bumped_above``) nor the native kernels of ``_UNBUMPED``."""
    return not bumped_above(func) and op_name(func) not in _UNBUMPED


def _arg_types(schema):
    return [(a.name, str(a.type), a.kwarg_only) for a in schema.arguments]


def _twin(packet, func):
    """The functional overload taking the same arguments (names and types): pow_.Scalar's twin is
    pow.Tensor_Scalar, not pow.Scalar (which takes a Scalar base and a Tensor exponent)."""
    want = _arg_types(func._schema)
    same_name = getattr(packet, func._overloadname, None)
    cands = ([same_name] if same_name is not None else []) + [getattr(packet, o) for o in packet.overloads()]
    for ov in cands:
        if _arg_types(ov._schema) == want:
            return ov
    return None


def is_view(func) -> bool:
    v = _VIEW.get(func)
    if v is None:
        v = _VIEW[func] = bool(getattr(func, "is_view", False))
    return v


_VIEW: dict = {}
_COMPOSITE_VIEW: dict = {}


def is_composite_view(func) -> bool:
    """A view-like op torch writes on top of other ops (``contiguous``, ``reshape``, ``flatten``,
    ``narrow``: CompositeImplicitAutograd, its result aliasing the input only *maybe*). Above
    autograd torch runs that composite and the device sees its parts; an op reaching the device
    whole (called below autograd: inside an op handler, ``_AutoDispatchBelowAutograd``) is not a
    view either: ``contiguous`` of a transposed tensor is a copy."""
    v = _COMPOSITE_VIEW.get(func)
    if v is None:
        v = _COMPOSITE_VIEW[func] = is_view(func) and isinstance(func, torch._ops.OpOverload) and \
            torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
    return v


_COMPOSITE: dict = {}


def is_composite(func) -> bool:
    """An op torch writes on top of other ops (CompositeImplicitAutograd) with no kernel of its
    own for the device. The dispatcher decomposes it at the autograd key, so the device sees its
    parts; with autograd off (``torch.inference_mode``) it reaches hpu_lab's dispatch whole, where a
    C++ backend would still get the composite's parts: ``batch_norm`` must reach the device as the
    ``native_batch_norm`` that writes the running statistics (ops.HIDDEN_WRITES)."""
    v = _COMPOSITE.get(func)
    if v is None:
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        try:
            v = isinstance(func, torch._ops.OpOverload) and \
                has(func.name(), "CompositeImplicitAutograd") and not has(func.name(), "PrivateUse1")
        except RuntimeError:    # a Python-only overload (aten::lgamma.int): not in the dispatcher
            v = False
        _COMPOSITE[func] = v
    return v


_POINTWISE: dict = {}


def is_pointwise(op) -> bool:
    v = _POINTWISE.get(op)
    if v is None:
        v = _POINTWISE[op] = isinstance(op, torch._ops.OpOverload) and torch.Tag.pointwise in op.tags
    return v


MME_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
           "aten::convolution", "aten::convolution_backward", "aten::_convolution", "aten::addbmm",
           "aten::mv", "aten::dot", "aten::addmv", "aten::_scaled_dot_product_attention_math",
           "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::einsum", "aten::conv2d",
           # hpex FusedSDPA (hpex/kernels): its matrix products run on the MME
           "hpu_lab::sdpa_recomp_fwd", "hpu_lab::sdpa_recomp_bwd", "hpu_lab::sdpa_fwd", "hpu_lab::sdpa_bwd"}


def engine_of(name: str) -> str:
    """MME for matrix-multiply-like ops, TPC for everything else (Gaudi's two engines)."""
    return "MME" if name in MME_OPS else "TPC"


_META_CACHE: dict = {}


def meta_tensor(size, stride, dtype, offset=0, extent=None):
    if offset or extent is not None:
        base = torch.empty((extent if extent is not None else offset + 1,), dtype=dtype, device=META)
        return base.as_strided(size, stride, offset)
    return torch.empty_strided(size, stride, dtype=dtype, device=META)


_meta_tls = threading.local()


def in_meta_kernel() -> bool:
    """True while shape inference runs: many meta kernels are Python decompositions that call
    torch functions, which user-level casting layers (legacy HMP) must leave alone."""
    return getattr(_meta_tls, "depth", 0) > 0


def run_meta(func, margs, mkwargs):
    """Run func on meta tensors; raise MetaFailure if there is no meta kernel or it needs data."""
    _meta_tls.depth = getattr(_meta_tls, "depth", 0) + 1
    try:
        return _run_meta(func, margs, mkwargs)
    finally:
        _meta_tls.depth -= 1


# ops whose meta decomposition rejects weight=None, which CPU's kernel accepts (torch's
# _get_batch_norm_reserve_tensor passes it to _select_batch_norm_backend): output shapes do not
# depend on the weight's values, so shape inference runs with a stand-in weight and bias
_NEEDS_WEIGHT = {aten._batch_norm_with_update.default, aten._batch_norm_with_update_functional.default,
                 aten._batch_norm_no_update.default}


def _run_meta(func, margs, mkwargs):
    if func in _NEEDS_WEIGHT and len(margs) > 2 and margs[1] is None and isinstance(margs[0], torch.Tensor):
        margs = list(margs)
        c = margs[0].shape[1] if margs[0].dim() > 1 else 1
        margs[1] = torch.empty(c, dtype=margs[0].dtype, device=META)
        if margs[2] is None:
            margs[2] = torch.empty(c, dtype=margs[0].dtype, device=META)
    empties = None if is_view(func) else _empties((margs, mkwargs))
    if empties == "all":
        # every tensor input has zero elements: no value to stand in for, so CPU's own kernel
        # decides the outputs' layouts, and raises CPU's error at the op (max() of nothing)
        return _meta_from_cpu(func, margs, mkwargs)
    try:
        return func(*margs, **mkwargs)
    except (NotImplementedError, torch._subclasses.fake_tensor.DynamicOutputShapeException) as e:
        raise MetaFailure(str(e)) from None
    except RuntimeError as e:
        msg = str(e)
        if ("meta" in msg.lower() and ("not implemented" in msg.lower() or "could not run" in msg.lower())) \
                or "data-dependent" in msg or "Cannot access data pointer" in msg \
                or "cannot be called on meta tensors" in msg or "item() on a meta" in msg.lower() \
                or "Tensor.item()" in msg:
            raise MetaFailure(msg) from None
        if empties:
            return _meta_from_cpu(func, margs, mkwargs)
        raise
    except Exception as e:
        # a Python decomposition standing in for the Meta kernel failed where CPU's C++ kernel need
        # not: mse_loss_backward's 2 / numel() on zero elements (ZeroDivisionError), where CPU's
        # double division gives inf, times no elements
        if empties:
            return _meta_from_cpu(func, margs, mkwargs)
        raise


def _tensors_in(a):
    if isinstance(a, torch.Tensor):
        yield a
    elif isinstance(a, (list, tuple)):
        for x in a:
            yield from _tensors_in(x)
    elif isinstance(a, dict):
        for x in a.values():
            yield from _tensors_in(x)


_STAND_IN_MAX = 1 << 16     # elements, all inputs together: what CPU's kernel may be asked on


def _empties(a):
    """"all" if every tensor in ``a`` has zero elements, True if some do (and the rest are small
    enough to stand in for), else None."""
    ts = list(_tensors_in(a))
    n_empty = sum(1 for t in ts if t.numel() == 0)
    if not n_empty:
        return None
    if n_empty == len(ts):
        return "all"
    return True if sum(t.numel() for t in ts) <= _STAND_IN_MAX else None


def _meta_from_cpu(func, margs, mkwargs):
    """Zero-element inputs: the outputs' metadata from CPU's kernel, run on zero-filled CPU tensors
    of the same layouts (a shape does not depend on values; zeros are valid indices and lengths).
    If CPU's kernel refuses the inputs too, its error is raised, as on CPU."""
    def cpu(a):
        if isinstance(a, torch.Tensor):
            return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype).zero_()
        if isinstance(a, (list, tuple)):
            return type(a)(cpu(x) for x in a)
        if isinstance(a, torch.device) and a.type == "meta":
            return torch.device("cpu")
        return a

    def meta(r):
        if isinstance(r, torch.Tensor):
            return torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device=META)
        if isinstance(r, (list, tuple)):
            return type(r)(meta(x) for x in r)
        return r

    with torch.no_grad():
        try:
            res = func(*cpu(margs), **{k: cpu(v) for k, v in mkwargs.items()})
        except Exception as e:
            raise e from None               # CPU's own error (not the Meta kernel's)
    return meta(res)


class _Failed:
    """A cached failure of an op's meta: the exception's class and arguments, never the exception.
    A raised exception holds its traceback, whose frames hold the caller's frames and their locals:
    cached, the first failure (and each re-raise of it) kept the user's tensors of that step alive
    for the whole process. Their pending values then stayed outputs of every later graph, so a
    second identical training run compiled its first step again, with the first run's last
    validation step in it."""
    __slots__ = ("cls", "args")

    def __init__(self, e: BaseException):
        self.cls, self.args = type(e), e.args

    def raise_again(self):
        raise self.cls(*self.args)


def cached_meta(key, compute):
    r = _META_CACHE.get(key)
    if r is None:
        try:
            r = compute()
        except MetaFailure as e:
            r = _Failed(e)
        except Exception as e:  # a user error (shape mismatch...): re-raise each time, same as eager
            _META_CACHE[key] = _Failed(e)
            raise
        _META_CACHE[key] = r
    if type(r) is _Failed:
        r.raise_again()
    return r
