"""``wrap_in_hpu_graph`` / ``wrap_in_hpu_graph_func``: capture, cache and replay a forward (seed 001).

For inference. Each call is keyed by its arguments (tensors by shape, strides and dtype, other
values by themselves, plus the autocast state). A new key is captured on the default stream (the
capture runs the forward once) and its inputs and outputs are cached; a known key copies the new
inputs into the cached ones, replays, and returns the *same cached output objects* (claim I2).
Past ``max_graphs`` keys, the original forward runs.

Keyword arguments the wrapper takes out before calling the forward: ``bypass_hpu_graphs=True`` runs
the original forward; ``warmup_mode=True`` skips the replay of a cached key (it only marks a step and
returns the cached outputs); ``cache_tensors_list`` is accepted (outputs are always kept).
``disable_tensor_cache=True`` (or ``PT_HPUGRAPH_DISABLE_TENSOR_CACHE=1``, which overrides it) keeps
no input tensors in the cache: the graph reads each call's own inputs (``replayV3``); it implies
``dry_run=True``: the capture compiles without running, and a replay computes the first outputs.
"""
from __future__ import annotations

import functools

import torch
from torch.utils._pytree import tree_flatten

from .. import lazy
from ._common import env_override, require_lazy, static_copy
from .hpugraph import HPUGraph
from .module_cacher import _autocast_state, _leaf_key
from .streams import default_stream, stream as stream_ctx


class CachedParams:
    __slots__ = ("graph_inputs", "graph_outputs", "graph", "host_inputs")

    def __init__(self, graph_inputs, graph_outputs, graph, host_inputs=()):
        self.graph_inputs, self.graph_outputs, self.graph = graph_inputs, graph_outputs, graph
        # without the tensor cache: the capture call's CPU tensors (the graph holds their copies)
        self.host_inputs = host_inputs


def input_key(args, kwargs):
    leaves, spec = tree_flatten((args, kwargs))
    return (str(spec), tuple(_leaf_key(x) for x in leaves), _autocast_state())


def _tensors(tree):
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


def _wrapped_forward(cache, orig, args, kwargs, opts):
    warmup_mode = kwargs.pop("warmup_mode", False)
    if kwargs.pop("bypass_hpu_graphs", False):
        return orig(*args, **kwargs)
    kwargs.pop("cache_tensors_list", None)
    key = input_key(args, kwargs)
    cached = cache.get(key)
    if cached is None:
        if opts["max_graphs"] is not None and len(cache) >= opts["max_graphs"]:
            return orig(*args, **kwargs)
        no_cache = env_override("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", opts["disable_tensor_cache"])
        dry = True if no_cache else opts["dry_run"]
        g = HPUGraph()
        with stream_ctx(default_stream()):
            g.capture_begin(dry_run=dry)
            try:
                if no_cache:
                    g.mark_user_inputs(_tensors((args, kwargs)))
                outputs = orig(*args, **kwargs)
            except BaseException as e:
                g._abandon_on_error(e)
                raise
            g.capture_end()
        tensors = _tensors((args, kwargs))
        cache[key] = CachedParams(None if no_cache else tensors, outputs, g,
                                  [t for t in tensors if t.device.type == "cpu"] if no_cache else ())
        if dry:                         # nothing ran during the capture: run it now
            _replay(cache[key], args, kwargs)
        return outputs
    if warmup_mode:
        lazy.mark_step()
        return cached.graph_outputs
    _replay(cached, args, kwargs)
    return cached.graph_outputs


def _replay(cached, args, kwargs):
    if cached.graph_inputs is None:                 # no tensor cache: read this call's inputs
        tensors = _tensors((args, kwargs))
        # CPU arguments are not graph inputs (the capture copied them); as the bridge's copy_to,
        # their new values go into the captured ones, so the replay's check sees a change
        for dst, src in zip(cached.host_inputs, [t for t in tensors if t.device.type == "cpu"]):
            if dst is not src:
                dst.copy_(src)
        cached.graph.replayV3([t for t in tensors if t.device.type != "cpu"])
    else:
        for dst, src in zip(cached.graph_inputs, _tensors((args, kwargs))):
            static_copy(dst, src)
        cached.graph.replay()


def _opts(asynchronous, disable_tensor_cache, dry_run, max_graphs):
    return {"asynchronous": asynchronous, "disable_tensor_cache": disable_tensor_cache, "dry_run": dry_run,
            "max_graphs": max_graphs}


def wrap_in_hpu_graph_func(func, asynchronous=False, disable_tensor_cache=False, dry_run=False,
                           max_graphs=None):
    """``func`` wrapped: captured per input signature, then replayed. Returns the wrapper, which also
    has ``clear_cache()`` and ``clear_inputs()``."""
    require_lazy("wrap_in_hpu_graph_func")
    cache = {}
    opts = _opts(asynchronous, disable_tensor_cache, dry_run, max_graphs)

    @functools.wraps(func)
    def forward(*args, **kwargs):
        return _wrapped_forward(cache, func, args, kwargs, opts)

    forward.clear_cache = cache.clear
    forward.clear_inputs = functools.partial(_clear_inputs, cache)
    forward.hpu_graph_cache = cache
    return forward


def wrap_in_hpu_graph(module, asynchronous=False, disable_tensor_cache=False, dry_run=False, max_graphs=None,
                      free_inplace=False, verbose=False, log_frequency=100):
    """Replace ``module.forward`` by a capturing, caching, replaying one; add ``module.clear_cache()``
    (drop every graph) and ``module.clear_inputs()``. Returns the module."""
    require_lazy("wrap_in_hpu_graph")
    forward = wrap_in_hpu_graph_func(module.forward, asynchronous, disable_tensor_cache, dry_run, max_graphs)
    module.forward = forward
    module.clear_cache = forward.clear_cache
    module.clear_inputs = forward.clear_inputs
    return module


def _clear_inputs(cache) -> None:
    for c in cache.values():
        c.graph.clear_inputs()
