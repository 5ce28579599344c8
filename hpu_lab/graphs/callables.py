"""``make_graphed_callables``: a forward and a backward HPU Graph per callable (seed 000; claim G8).

Modelled on ``torch.cuda.make_graphed_callables``: optional warm-up iterations, then a forward
graph and a backward graph are captured for each callable on its sample arguments; the result is an
``autograd.Function`` whose forward copies the new inputs into the static ones and replays the
forward graph, and whose backward copies the incoming gradients into static buffers and replays the
backward graph. For an ``nn.Module``, ``forward`` is replaced, and the graphs are used only while
``module.training`` equals its value at capture time.

.. warning::
    - Inputs must be tensors, positional, of the captured shapes and dtypes (checked at each call).
    - A sample arg's ``requires_grad`` decides whether a gradient flows to that input: a real input
      that requires grad where the sample did not gets no gradient (as on Gaudi and CUDA; warned).
    - One set of static buffers per callable: run the backward of a call before calling the graphed
      callable again (checked; an earlier call's backward raises).

    Each call returns its own outputs and gradients (zero-copy snapshots of the static buffers, see
    ``_common.snapshot``): unlike CUDA's, they are not overwritten by the next replay.
"""
from __future__ import annotations

import warnings

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import lazy
from ._common import HPUGraphError, check_replay_inputs, describe_tensor, require_lazy, snapshot, static_copy
from .hpugraph import HPUGraph, graph
from .streams import default_stream, stream as stream_ctx


def _check_module(c) -> None:
    if c._backward_hooks or c._forward_hooks or c._forward_pre_hooks or \
            getattr(c, "_backward_pre_hooks", None):
        raise HPUGraphError("make_graphed_callables: Modules must not have hooks registered at the time "
                            "they are passed. However, registering hooks on modules after passing them "
                            "through make_graphed_callables is allowed.")
    if any(b.requires_grad for b in c.buffers()):
        raise HPUGraphError("make_graphed_callables: In any nn.Module passed to make_graphed_callables, "
                            "only parameters may be trainable. All buffers must have requires_grad=False.")


def _flat_tensors(out, what: str):
    flat, spec = tree_flatten(out)
    for i, o in enumerate(flat):
        if not isinstance(o, torch.Tensor):
            raise TypeError(f"make_graphed_callables: {what} must be tensors (or tuples/lists of tensors); "
                            f"output {i} is {type(o).__name__}. HPU Graphs training API mandates the use "
                            "of only tensors as inputs and outputs (seed 000).")
    return tuple(flat), spec


def make_graphed_callables(callables, sample_args, warmups: int = 0, allow_unused_input: bool = False,
                           asynchronous: bool = False, disable_tensor_cache: bool = False,
                           dry_run: bool = False, *, warmup=None):
    """Graph ``callables`` (a module or function, or a tuple of them) on ``sample_args``.

    ``warmup`` is the Gaudi docs' spelling of ``warmups``. ``asynchronous`` and
    ``disable_tensor_cache`` are accepted for API parity (hpu_lab's device is always asynchronous;
    the graph never caches intermediates); ``dry_run`` captures without running.
    """
    require_lazy("make_graphed_callables")
    if warmup is not None:
        warmups = warmup
    if lazy.S.capture is not None:
        lazy.S.capture.refuse("make_graphed_callables", "")
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    if not isinstance(sample_args, tuple) or len(sample_args) != len(callables):
        raise TypeError("make_graphed_callables: sample_args must be a tuple of tensors (a tuple of such "
                        "tuples when several callables are given)")
    for c, args in zip(callables, sample_args):
        if isinstance(c, torch.nn.Module):
            _check_module(c)
            if "_hpu_orig_forward" in c.__dict__:     # graphed before: capture the original forward
                c.forward = c._hpu_orig_forward
        if not isinstance(args, tuple) or not all(isinstance(a, torch.Tensor) for a in args):
            got = describe_tensor(args) if not isinstance(args, tuple) else \
                ", ".join(describe_tensor(a) for a in args)
            raise TypeError("make_graphed_callables: sample_args for each callable must be a tuple of Tensors. "
                            f"Other types and keyword args are not allowed (got {got}).")
    dry = True if disable_tensor_cache else dry_run

    params = [tuple(c.parameters()) if isinstance(c, torch.nn.Module) else () for c in callables]
    surfaces = [tuple(a) + p for a, p in zip(sample_args, params)]   # everything a gradient can flow to

    if warmups > 0:
        lazy.synchronize("make_graphed_callables: before warm-up")
        with stream_ctx(default_stream()):
            for func, args, surface in zip(callables, sample_args, surfaces):
                for _ in range(warmups):
                    outs, _ = _flat_tensors(func(*args), "outputs")
                    outs = tuple(o for o in outs if o.requires_grad)
                    inputs = tuple(i for i in surface if i.requires_grad)
                    if outs and inputs:
                        torch.autograd.grad(outs, inputs, grad_outputs=tuple(torch.empty_like(o) for o in outs),
                                            only_inputs=True, allow_unused=allow_unused_input)
                    del outs

    # forward graphs, in order
    fwd_graphs = [HPUGraph() for _ in callables]
    names = [_name(c) for c in callables]
    for g, n in zip(fwd_graphs, names):
        g.label = f"the forward of {n}"
    static_outs, specs = [], []
    for func, args, g in zip(callables, sample_args, fwd_graphs):
        with graph(g, stream=default_stream(), dry_run=dry):
            if disable_tensor_cache:
                g.mark_user_inputs(args)
            outs, spec = _flat_tensors(func(*args), "outputs")
        static_outs.append(outs)
        specs.append(spec)

    # backward graphs, in reverse order (as autograd will run them)
    bwd = [None] * len(callables)
    for i in reversed(range(len(callables))):
        outs = static_outs[i]
        # fresh buffers, not empty_like(o): that op reads o, and o holds no value after a dry-run
        # forward capture, so the backward's copies into these buffers would depend on nothing-yet
        grad_outs = tuple(torch.empty_strided(o.size(), o.stride(), dtype=o.dtype, device=o.device)
                          if o.requires_grad else None for o in outs)
        inputs = tuple(x for x in surfaces[i] if x.requires_grad)
        if not any(o.requires_grad for o in outs) or not inputs:
            continue                                   # nothing to differentiate: no backward graph
        g = HPUGraph()
        g.label = f"the backward of {names[i]}"
        with graph(g, stream=default_stream(), dry_run=dry):
            grads = torch.autograd.grad(tuple(o for o in outs if o.requires_grad), inputs,
                                        grad_outputs=tuple(x for x in grad_outs if x is not None),
                                        only_inputs=True, allow_unused=allow_unused_input,
                                        materialize_grads=allow_unused_input)
        it = iter(grads)
        static_grad_inputs = tuple(next(it) if x.requires_grad else None for x in surfaces[i])
        bwd[i] = (g, grad_outs, static_grad_inputs)

    ret = []
    for i, func in enumerate(callables):
        graphed = _graphed_function(fwd_graphs[i], bwd[i], params[i], sample_args[i], static_outs[i],
                                    specs[i], asynchronous, names[i])
        if isinstance(func, torch.nn.Module):
            func._hpu_orig_forward = func.forward
            func.forward = _graphed_forward(func, func.training, graphed, func.forward)
            func._hpu_graphs = (fwd_graphs[i], bwd[i][0] if bwd[i] else None)
            ret.append(func)
        else:
            graphed._hpu_graphs = (fwd_graphs[i], bwd[i][0] if bwd[i] else None)
            ret.append(graphed)
    return ret[0] if just_one else tuple(ret)


def _name(c) -> str:
    if isinstance(c, torch.nn.Module):
        inner = getattr(c, "model", None)        # ModuleCacher's wrapper: name the user's module
        return type(inner if isinstance(inner, torch.nn.Module) else c).__name__
    return getattr(c, "__name__", type(c).__name__)


def _graphed_forward(module, training, graphed, orig_forward):
    def forward(*args, **kwargs):
        if module.training == training:
            return graphed(*args, **kwargs)
        return orig_forward(*args, **kwargs)
    return forward


def _graphed_function(fwd_graph, bwd, params, static_args, static_outs, spec, asynchronous, name):
    n_user = len(static_args)
    state = {"calls": 0, "warned": False}
    api = f"graphed callable {name!r}"
    static_needs_grad = [a.requires_grad for a in static_args]

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for i in range(n_user):
                static_copy(static_args[i], inputs[i])
            fwd_graph.replay(asynchronous)
            state["calls"] += 1
            ctx.call = state["calls"]
            outs = tuple(snapshot(o) for o in static_outs)
            ctx.mark_non_differentiable(*[o for o, s in zip(outs, static_outs) if not s.requires_grad])
            return outs

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            if bwd is None:
                return (None,) * (n_user + len(params))
            if ctx.call != state["calls"]:
                raise HPUGraphError(
                    f"{api}: backward of call {ctx.call}, but call {state['calls']} has already replayed the "
                    "forward graph over the same static buffers (one set per callable). Run the backward "
                    "of a call before calling the graphed callable again.")
            g, grad_outs, static_grad_inputs = bwd
            for s, gr in zip(grad_outs, grads):
                if s is not None:
                    if gr is None:
                        gr = torch.zeros_like(s)
                    static_copy(s, gr)
            g.replay(asynchronous)
            return tuple(snapshot(b) if b is not None else None for b in static_grad_inputs)

    def functionalized(*user_args, **kwargs):
        if kwargs:
            raise TypeError(f"{api}: keyword arguments ({', '.join(kwargs)}) are not supported: the basic "
                            "HPU Graph APIs take only tensors, positionally (seed 000). Use ModuleCacher.")
        check_replay_inputs(api, user_args, static_args)
        if not state["warned"] and torch.is_grad_enabled() and any(
                a.requires_grad and not s for a, s in zip(user_args, static_needs_grad)):
            state["warned"] = True
            warnings.warn(f"{api}: an input requires grad but its sample arg did not, so the backward graph "
                          "computes no gradient for it (as on Gaudi and CUDA). Give the sample arg "
                          "requires_grad=True to capture that gradient.", stacklevel=2)
        flat = Graphed.apply(*(tuple(user_args) + params))
        return tree_unflatten(list(flat), spec)

    functionalized.__name__ = f"graphed_{name}"
    return functionalized
