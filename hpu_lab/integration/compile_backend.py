"""``torch.compile(model, backend="hpu_backend")``: dynamo's graphs become hpu_lab recipes.

Seed 004: wrapped parts compile once, then the compiled part is just called; the rest runs
eagerly. Here dynamo traces the user's code, AOTAutograd turns each captured graph into aten-level
forward and backward graphs, and each of those becomes ONE Recipe (the same passes as lazy
mode: engines, fusion clusters, memory plan). A call launches that recipe on the device buffers
of its inputs, asynchronously, with no per-op dispatch and no graph hashing: that is the host
time torch.compile saves over lazy mode (claim T6). Graph breaks run eagerly (``dispatch/eager.py``);
a recompile is a ``Compile`` event whose reason is dynamo's own guard failure.

How dynamo gets to see an HPUTensor: dynamo only traces tensors that are plain or a *traceable*
wrapper subclass (``__tensor_flatten__``/``__tensor_unflatten__``). HPUTensor gets that protocol
here, in a form where fakeification yields a *plain* FakeTensor on device "hpu" (its single inner
tensor is an ``HPUBuffer``, a wrapper dynamo treats as plain). So the graphs dynamo and AOTAutograd
build contain plain "hpu" tensors, and at run time the compiled functions receive the real
HPUTensors. The protocol is hidden from ``nn.Module._apply`` (and parametrize's ``_maybe_set``):
with it, ``model.to("hpu")`` would take the ``swap_tensors`` path where CUDA takes ``param.data =``
(dispatch/objmodel.py), which keeps a parameter's version counter and hooks on its own implementation.
"""
from __future__ import annotations

import importlib.abc
import inspect
import operator
import re
import sys

import torch
import torch.utils._pytree as pytree

from .. import events as ev
from . import compile_dynamic, compile_layouts
from .. import lazy, ops
from ..util._source import source_name, user_src
from ..compiler import passes
from ..compiler.recipe import Recipe
from ..lazy.launch import launch_recipe
from ..compiler.graph import view as _view
from ..tensor import HPU, HPUTensor, Inp, new_storage_tensor

aten = torch.ops.aten
CPU = torch.device("cpu")


# ---------------------------------------------------------------- HPUTensor, traceable for dynamo

_DYNAMO_MARKS = ("_dynamo_dynamic_indices", "_dynamo_unbacked_indices", "_dynamo_weak_dynamic_indices",
                 "_dynamo_static_indices", "_dynamo_dynamic_range", "_dynamo_hint_overrides")


class HPUBuffer(torch.Tensor):
    """HPUTensor's inner tensor for dynamo: the same device memory, as a plain-looking tensor."""
    __slots__ = ("_t",)

    @staticmethod
    def __new__(cls, t):
        r = torch.Tensor._make_wrapper_subclass(cls, t._size, strides=t._stride, storage_offset=t._offset,
                                                dtype=t.dtype, device=HPU)
        r._t = t
        # mark_dynamic marks the HPUTensor; dynamo fakes the inner tensor with its own symbolic
        # context, which must be as dynamic, or the outer size would be specialised to its value
        for name in _DYNAMO_MARKS:
            v = t.__dict__.get(name)
            if v is not None:
                setattr(r, name, type(v)(v))
        return r

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # AOTAutograd may touch a tangent (e.g. make it contiguous): compute on the HPUTensor
        a, k = pytree.tree_map_only(HPUBuffer, lambda b: b._t, (args, kwargs or {}))
        return pytree.tree_map_only(HPUTensor, HPUBuffer, func(*a, **k))


def _flatten(self):
    return ["_hpu_inner"], None


def _unflatten(inner, ctx, outer_size, outer_stride):
    x = inner["_hpu_inner"]
    return x._t if isinstance(x, HPUBuffer) else x     # a FakeTensor stays a plain FakeTensor


_HIDDEN_FROM: set = set()     # code objects that must not see the protocol (nn.Module._apply)
_HIDDEN_FROM_VIEWS: set = set()   # ... or not for a view (fakeification of a view input)
# (function, file) pairs, for code that cannot be imported when hpu_lab is: a tangent AOTAutograd
# restrides to the traced layout comes back from torch.empty_strided as an HPUTensor, and where
# the trace saw a plain tensor it must stay one (not a subclass to unflatten)
_HIDDEN_NAMES = {("process_runtime_tangent", "runtime_wrappers.py")}


class _Protocol:
    """``__tensor_flatten__``, visible to everyone but ``nn.Module._apply`` (see the docstring),
    and but fakeification of a view: a view input is then faked as a plain view of its base."""

    def __get__(self, obj, cls=None):
        f = sys._getframe(1)
        for _ in range(4):                    # hasattr <- is_traceable_wrapper_subclass <- caller
            if f is None:
                break
            code = f.f_code
            if code in _HIDDEN_FROM or (code in _HIDDEN_FROM_VIEWS and obj is not None and obj._is_view()) \
                    or (code.co_name, code.co_filename.rsplit("/", 1)[-1]) in _HIDDEN_NAMES:
                raise AttributeError("__tensor_flatten__")
            f = f.f_back
        return _flatten if obj is None else _flatten.__get__(obj, cls)


def _make_traceable() -> None:
    from torch.nn.utils import parametrize
    _HIDDEN_FROM.add(inspect.unwrap(torch.nn.Module._apply).__code__)
    _HIDDEN_FROM.add(parametrize._maybe_set.__code__)      # the other swap_tensors user
    from torch._subclasses.meta_utils import MetaTensorDescriber
    _HIDDEN_FROM_VIEWS.add(MetaTensorDescriber.describe_tensor.__code__)

    HPUTensor.__tensor_flatten__ = _Protocol()
    HPUTensor.__tensor_unflatten__ = staticmethod(_unflatten)
    HPUTensor._hpu_inner = property(HPUBuffer)
    # a tangent arriving where AOTAutograd traced a plain tensor: hand it over as a plain one
    HPUTensor.__coerce_same_metadata_as_tangent__ = lambda self, meta, typ=None: HPUBuffer(self)


# ---------------------------------------------------------------- one aten graph -> one recipe

def _as_view(base, spec):
    """An input that is a partial view of its storage: read the view (``spec`` (): the whole)."""
    return _view(base, *spec) if spec else base


def _to_cpu_device(a):
    if isinstance(a, torch.device) and a.type == "hpu":
        return CPU
    return a


def _dropout_noise(size, dtype, p):
    # what special_ops.native_dropout draws, so compiled and eager runs give CPU's numbers
    return torch.empty(size, dtype=dtype).bernoulli_(1 - p).div_(1 - p)


def _symbolic(val) -> bool:
    if isinstance(val, torch.SymInt):
        return True
    return isinstance(val, torch.Tensor) and any(not isinstance(x, int) for x in (*val.shape, *val.stride()))


def _random_ok(n) -> bool:
    """Can this random op be drawn on the host before the launch (no input computed in-graph)?"""
    if n.target is aten.native_dropout.default:
        return True
    return not any(isinstance(a, torch.fx.Node) for a in pytree.tree_leaves((n.args, n.kwargs)))


def _is_random(n) -> bool:
    return n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) \
        and torch.Tag.nondeterministic_seeded in n.target.tags


class CompiledGraph:
    """One aten graph of AOTAutograd, compiled into a Recipe; calling it launches the recipe.

    A graph with symbolic sizes is one dynamic recipe, run at every size (integration/compile_dynamic.py). A graph
    with a random op on values computed in the graph, or a symbolic one that draws random numbers or
    under ``PT_HPU_FORCE_STATIC_COMPILE=1``, is instead *replayed*: run op by op through lazy mode and
    flushed as one graph, so the lazy recipe cache compiles one static recipe per shape and random
    numbers come from the host as in eager mode. That costs per-op host time, as lazy mode does."""

    def __init__(self, gm: torch.fx.GraphModule, kind: str, reason: str, site: str):
        t0 = ev.now()
        self.gm, self.kind, self.site, self.calls = gm, kind, site, 0
        g = gm.graph
        compile_layouts.conform(g)       # results laid out as traced (torch's model of hpu: dense)
        symbolic = any(_symbolic(n.meta.get("val")) for n in g.nodes)
        random = [n for n in g.nodes if _is_random(n)]
        # a symbolic graph is one dynamic recipe (integration/compile_dynamic.py), unless static compiles are forced
        # or it draws random numbers (drawn on the host at traced sizes): then it is replayed
        self.dynamic = symbolic and not random and not _force_static()
        self.replay = (symbolic and not self.dynamic) or any(not _random_ok(n) for n in random)
        self.recipe = None                     # a replayed graph has none: lazy mode's recipes run it
        if self.replay:
            return
        phs = [n for n in g.nodes if n.op == "placeholder"]
        self.placeholders = phs if self.dynamic else None
        if self.dynamic:
            reason = f"{reason}; dynamic recipe over {', '.join(compile_dynamic.symbols_of(g))}"
        self.n_inputs = len(phs)
        self.draws = []                  # host draws, appended to the inputs at each launch
        self._hoist_random(g, phs)
        self._views(g, phs)
        for n in g.nodes:
            n.args = pytree.tree_map(_to_cpu_device, n.args)
            n.kwargs = pytree.tree_map(_to_cpu_device, n.kwargs)
        out = next(n for n in g.nodes if n.op == "output")
        self.out_vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in out.args[0]]
        self.out_metas = [_meta(a.meta.get("val")) if isinstance(a, torch.fx.Node) else ("const", a)
                          for a in out.args[0]]
        g.lint()
        gm.recompile()
        info = _passes(g)
        r = self.recipe = Recipe(None, gm, info["node_count"], info["clusters"], info["peak_bytes"],
                                 info["summary"], ([], []), site, ev.now() - t0)
        r.reason = reason
        if self.dynamic:
            # the executor checks each output against the graph's sizes as traced; one of symbolic size
            # has this launch's size instead (evaluated in __call__), so only the others are checked
            from ..runtime.executor import _predicted
            r._predicted = tuple(None if _symbolic(v) else p for v, p in zip(self.out_vals, _predicted(r)))
        t1 = ev.now()
        ev.emit(ev.CacheLookup(t0, t0, "host", ev.recorder.step, hit=False, key=r.short_key))
        ev.emit(ev.Compile(t1 - r.compile_ns, t1, "host", ev.recorder.step, key=r.short_key, recipe_id=r.id,
                           node_count=r.node_count, reason=reason, src=site, peak_bytes=r.peak_bytes,
                           clusters=r.clusters, graph=r.summary))

    def _hoist_random(self, g, phs):
        """Random ops are drawn on the host at launch, in graph order (CPU's numbers, lazy/)."""
        last = phs[-1] if phs else None
        for n in [n for n in g.nodes if _is_random(n)]:
            dropout = n.target is aten.native_dropout.default
            if dropout and not (n.args[2] if len(n.args) > 2 else n.kwargs.get("train")):
                continue                         # eval-mode dropout: the identity, nothing drawn
            with g.inserting_after(last) if last is not None else g.inserting_before(next(iter(g.nodes))):
                ph = g.placeholder(f"draw{len(self.draws)}")
            last = ph
            if dropout:
                x, p = n.args[0], n.args[1]
                val = x.meta["val"]
                self.draws.append(lambda s=tuple(val.shape), d=val.dtype, p=p: _dropout_noise(s, d, p))
                ph.meta["val"] = val
                with g.inserting_before(n):
                    res = (g.call_function(aten.mul.Tensor, (x, ph)), g.call_function(aten.ne.Scalar, (ph, 0)))
                for u in list(n.users):          # getitem 0 / 1 of the (output, mask) pair
                    res[u.args[1]].meta["val"] = u.meta.get("val")
                    u.replace_all_uses_with(res[u.args[1]])
                    g.erase_node(u)
            else:
                args, kw = pytree.tree_map(_to_cpu_device, (n.args, n.kwargs))
                self.draws.append(lambda f=n.target, a=args, k=kw: f(*a, **k))
                ph.meta["val"] = n.meta.get("val")
                n.replace_all_uses_with(ph)
            g.erase_node(n)

    def _views(self, g, phs):
        """Each input comes with a view spec: () when it is its whole storage."""
        last = next(n for n in reversed(list(g.nodes)) if n.op == "placeholder")
        for i, ph in enumerate(phs):
            with g.inserting_after(last):
                spec = g.placeholder(f"view{i}")
            last = spec
            users = list(ph.users)
            with g.inserting_after(spec):
                v = g.call_function(_as_view, (ph, spec))
            v.meta["val"] = ph.meta.get("val")
            for u in users:
                u.replace_input_with(ph, v)

    # ---- run time
    def __call__(self, args):
        self.calls += 1
        if self.calls > 1 and ev.wants(ev.CompiledCall):
            t = ev.now()
            ev.emit(ev.CompiledCall(t, t, "host", ev.recorder.step, key=self.recipe.short_key if self.recipe else ""))
        if self.replay:
            return self._replay(args)
        metas = self.out_metas
        if self.dynamic:                        # this launch's sizes, from its inputs' (compile_dynamic)
            env = compile_dynamic.binding(self.placeholders, args)
            metas = [compile_dynamic.output(v, env) for v in self.out_vals]
        ext, specs = [], []
        for a in args[:self.n_inputs]:
            buf, spec = _buffer(a)
            ext.append(buf)
            specs.append(Inp(spec, None))
        args.clear()                            # boxed call: drop the caller's references early
        ext += [Inp(fn(), None) for fn in self.draws]
        ext += specs
        r = self.recipe
        if self.calls > 1 and ev.wants(ev.CacheLookup):
            t = ev.now()
            ev.emit(ev.CacheLookup(t, t, "host", ev.recorder.step, hit=True, key=r.short_key))
        launch = launch_recipe(r, ext, lazy.S.stream)
        outs = []
        for k, m in enumerate(metas):
            if m is None or m[0] == "const":
                outs.append(None if m is None else m[1])
            else:
                size, stride, dtype = m
                outs.append(new_storage_tensor(size, stride, dtype, Inp(None, m, launch=launch, idx=k)))
        return outs

    def _replay(self, args):
        S = lazy.S
        args = [a._t if isinstance(a, HPUBuffer) else a for a in args]
        with S.lock:
            with lazy.eager_suspended():        # accumulate, whatever the mode, then launch once
                outs = torch.fx.Interpreter(self.gm).run(*args)
            lazy.flush(f"torch.compile {self.kind} graph", f"{self.site} ({self.kind})")
        return list(outs)


def _buffer(a):
    """(device buffer, view spec) of one runtime input."""
    if isinstance(a, HPUBuffer):
        a = a._t
    if isinstance(a, HPUTensor):
        st = a._st
        inp = lazy.materialize(a, "torch.compile input", "") if type(st.value) is not Inp else st.value
        full = a._offset == 0 and a._size == st.size and a._stride == st.stride
        return inp, (() if full else (a._size, a._stride, a._offset, st.stride))
    if isinstance(a, torch.Tensor):
        if a.device.type != "cpu" or a.dim() != 0:
            raise RuntimeError(f"hpu_backend: graph input on {a.device} with shape {tuple(a.shape)}; "
                               "move it to hpu first")
        return Inp(a, ((), (), a.dtype)), ()
    return Inp(a, None), ()                     # an int/float argument of the graph


def _meta(val):
    """(size, stride, dtype) of a node's value; a symbolic size as traced (dynamo's hint)."""
    if isinstance(val, torch.Tensor):
        return (tuple(compile_dynamic.hint(s) for s in val.shape), tuple(compile_dynamic.hint(s) for s in val.stride()),
                val.dtype)
    if val is None:
        return None
    return ("const", compile_dynamic.hint(val))


def _force_static() -> bool:
    from ..dynamo.compile_backend import config as backend_config
    return bool(backend_config.force_static_compile)


def _passes(g) -> dict:
    """hpu_lab's graph passes on an aten graph: the node metadata they read, then run them."""
    for n in g.nodes:
        val = n.meta.get("val")
        n.meta["hpu_meta"] = _meta(val) if isinstance(val, torch.Tensor) else None
        if n.op == "placeholder":
            n.meta["op_name"] = "input"
        elif n.op == "call_function":
            if n.target is _as_view:
                name = "view"
            elif n.target is compile_layouts.as_traced:
                name = "layout"
            elif isinstance(n.target, torch._ops.OpOverload):
                name = ops.op_name(n.target)
            else:
                name = getattr(n.target, "__name__", str(n.target))      # operator.getitem
            n.meta["op_name"] = name
            n.meta["helper"] = n.target is _as_view or n.target is compile_layouts.as_traced
            n.meta["src"] = _src_of(n.meta.get("stack_trace") or "")
    passes.assign_engines(g)
    clusters = passes.fuse_elementwise(g)
    passes.classify_tensors(g)
    for n in g.nodes:                 # aten views alias their input: no new device memory
        if n.op == "call_function" and n.meta.get("tensor_class") == "non-persistent" and \
                (n.target is _as_view or n.target is compile_layouts.as_traced or (isinstance(n.target, torch._ops.OpOverload) and ops.is_view(n.target))):
            n.meta["tensor_class"] = "alias"
    peak = passes.memory_plan(g)
    node_count = sum(1 for n in g.nodes if n.op == "call_function" and not n.meta.get("helper")
                     and n.target is not operator.getitem)
    return {"clusters": clusters, "peak_bytes": peak, "node_count": node_count, "summary": passes.summarize(g)}


def _src_of(stack_trace: str) -> str:
    """'train.py:42' (or 'cell [5], line 18') from the user frame dynamo recorded for a node."""
    found = re.findall(r'File "([^"]+)", line (\d+)', stack_trace)
    return source_name(found[-1][0], int(found[-1][1])) if found else ""


# ---------------------------------------------------------------- the backend

_seen_failures: dict = {}


def _recompile_reason() -> str:
    """Why dynamo is compiling this frame: its latest guard failure, if this is a recompile."""
    from torch._dynamo.utils import guard_failures
    from torch._guards import CompileContext
    cid = CompileContext.current_compile_id()
    latest = None
    for code, reasons in list(guard_failures.items()):
        if len(reasons) > _seen_failures.get(code, 0):
            latest = reasons[-1]
            _seen_failures[code] = len(reasons)
    if cid is not None and cid.frame_compile_id and latest:
        return f"dynamo recompile: {latest.splitlines()[0]}"
    return f"first compile of dynamo graph {cid}" if cid is not None else "first compile"


def hpu_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The torch.compile backend: AOTAutograd, then one recipe per forward/backward graph."""
    from torch._dynamo.backends.common import aot_autograd

    reason = _recompile_reason()
    site = user_src(2)

    def compiler(kind):
        def compile_fn(aten_gm, aten_inputs):
            why = reason if kind != "backward" else f"backward of: {reason}"
            cg = CompiledGraph(aten_gm, kind, why, site)

            def run(args):               # AOTAutograd's boxed convention: one list, ours to clear
                return cg(args)
            run._boxed_call = True
            run.compiled = cg
            return run
        return compile_fn

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"))(gm, example_inputs)


def _register(registry) -> None:
    if "hpu_backend" not in registry._COMPILER_FNS:
        registry.register_backend(hpu_backend, name="hpu_backend")


# hpu_lab's modules that hold user code (seed 000's Net and loops): dynamo traces them like the
# user's own, so a torch.compile'd examples.Net compiles instead of silently running eagerly
USER_CODE = {"examples"}


def _skip_runtime(trace_rules) -> None:
    """dynamo must not trace the runtime itself (graph breaks run it): every module of hpu_lab but
    USER_CODE is skipped (skipping the package's folder would skip the examples too)."""
    import pkgutil
    pkg = sys.modules[__package__]
    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name not in USER_CODE:
            trace_rules.add(f"{__package__}.{m.name}")


_ON_IMPORT = {"torch._dynamo.trace_rules": _skip_runtime, "torch._dynamo.backends.registry": _register}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``_ON_IMPORT[name](module)`` right after torch imports ``name``: importing dynamo costs
    over a second, and ``import hpu_lab`` must stay light for scripts that never compile."""

    def find_spec(self, name, path, target=None):
        fn = _ON_IMPORT.get(name)
        if fn is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_hook(module):
            exec_module(module)
            fn(module)
        spec.loader.exec_module = exec_then_hook
        return spec


def install() -> None:
    """Make HPUTensor traceable and register "hpu_backend" once dynamo is imported (idempotent)."""
    if "__tensor_flatten__" in HPUTensor.__dict__:
        return
    _make_traceable()
    for name, fn in _ON_IMPORT.items():
        if name in sys.modules:
            fn(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport())
