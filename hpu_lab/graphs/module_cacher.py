"""``ModuleCacher``: one pair of HPU Graphs per input signature of a training model (seed 000).

``htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)`` replaces ``model.forward``.
Each call is keyed by its arguments: tensors by (shape, strides, dtype, requires_grad), every other
value by itself, keyword arguments included (claim G7), plus the autocast state. A new key gets its
own ``make_graphed_callables`` capture (``allow_unused_input=True``) with the call's own arguments
as samples; a known key replays. Caching happens only while the model is training, grad is enabled
and lazy mode is on; past ``max_graphs`` keys the original forward runs uncached. With
``use_lfu=True``, the keys seen between ``model.capture_start()`` and ``model.capture_end()`` are
counted and only the ``max_graphs`` most frequent get graphs.

This handles dynamic *inputs* (e.g. a last batch of another size: one more graph, claim G11). It
does not handle dynamic control flow or data-dependent ops inside the model (claim G14): those are
refused during capture with the documented message; keep them outside the cached modules.
"""
from __future__ import annotations

import copy
import inspect

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import config
from ._common import env_override
from .callables import make_graphed_callables


def _autocast_state():
    try:
        return (torch.is_autocast_enabled("hpu"), torch.get_autocast_dtype("hpu"))
    except (RuntimeError, TypeError, AttributeError):   # "hpu" not an autocast device here
        return None


def _leaf_key(x):
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), tuple(x.stride()), x.dtype, x.requires_grad, x.device.type)
    try:
        hash(x)
        return ("V", type(x).__name__, x)
    except TypeError:
        return ("R", type(x).__name__, repr(x))


class _Signature:
    """A call's arguments split into the tensors (graph inputs) and everything else (the key)."""

    def __init__(self, sig, args, kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        self.leaves, self.spec = tree_flatten((bound.args, bound.kwargs))
        self.tensor_pos = [i for i, x in enumerate(self.leaves) if isinstance(x, torch.Tensor)]
        self.key = (str(self.spec), tuple(_leaf_key(x) for x in self.leaves), _autocast_state())

    def tensors(self):
        return tuple(self.leaves[i] for i in self.tensor_pos)

    def rebuild(self, tensors):
        leaves = list(self.leaves)
        for i, t in zip(self.tensor_pos, tensors):
            leaves[i] = t
        return tree_unflatten(leaves, self.spec)


class _GraphModel(torch.nn.Module):
    """The model as a function of the tensors among its arguments: what make_graphed_callables sees."""

    def __init__(self, model, orig_forward, call_sig: _Signature):
        super().__init__()
        self.model = model                          # registers the model's parameters
        object.__setattr__(self, "_orig", orig_forward)
        object.__setattr__(self, "_sig", call_sig)
        self.out_leaves = self.out_spec = self.out_pos = None

    def forward(self, *tensors):
        args, kwargs = self._sig.rebuild(tensors)
        out = self._orig(*args, **kwargs)
        leaves, self.out_spec = tree_flatten(out)
        self.out_pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        self.out_leaves = [None if isinstance(x, torch.Tensor) else x for x in leaves]   # constants
        return tuple(leaves[i] for i in self.out_pos)

    def unpack(self, tensors):
        leaves = list(self.out_leaves)
        for i, t in zip(self.out_pos, tensors):
            leaves[i] = t
        return tree_unflatten(leaves, self.out_spec)


class ModuleCacher(torch.nn.Module):
    """``ModuleCacher(max_graphs=10)(model, ...)`` returns ``model`` with a caching ``forward``."""

    def __init__(self, max_graphs: int = 10):
        super().__init__()
        self.max_graphs = max_graphs
        self.model_dict = {}            # key -> (graphed _GraphModel, its _GraphModel)
        self.input_count_dict = {}      # use_lfu: key -> calls seen while counting
        self.priority_keys = set()
        self.is_capturing = False
        self.hpugraph_tracing = False
        self.iteration_cnt = -1
        self.forward_cnt = 0
        self.set_iterations_call_cnt = 0
        self.cached_hits_dict = {}
        self.uncached_train_hits = 0
        self.uncached_eval_hits = 0

    def __call__(self, model, use_lfu=False, inplace=True, allow_unused_input=False, asynchronous=False,
                 have_grad_accumulation=False, log_frequency=100, verbose=False,
                 disable_tensor_cache=False, dry_run=False):
        if isinstance(model, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
            raise TypeError("ModuleCacher: wrap the model before DataParallel/DistributedDataParallel")
        if not inplace:
            model = copy.copy(model)
        orig_forward = model.forward
        object.__setattr__(self, "model", model)     # not a submodule: the cacher is not part of it
        object.__setattr__(self, "orig_forward", orig_forward)
        self.signature = inspect.signature(orig_forward)
        self.use_lfu = use_lfu
        self.allow_unused_input = allow_unused_input    # graphs always allow unused inputs (below)
        self.asynchronous = asynchronous
        self.have_grad_accumulation = have_grad_accumulation
        self.log_frequency = log_frequency
        self.verbose = verbose
        self.disable_tensor_cache = env_override("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", disable_tensor_cache)
        self.dry_run = env_override("PT_HPUGRAPH_ENABLE_DRY_RUN", dry_run)
        model.orig_forward = orig_forward
        model.forward = self._forward_lfu if use_lfu else self._forward
        model.set_iteration_count = self.set_iteration_count
        model.capture_start = self.capture_start
        model.capture_end = self.capture_end
        model.is_hpugraph_tracing = self.is_hpugraph_tracing
        object.__setattr__(model, "module_cacher", self)   # an attribute, not a submodule
        return model

    # ---- the bridge's small API
    def set_iteration_count(self, iter_num) -> None:
        self.forward_cnt = iter_num
        self.set_iterations_call_cnt += 1

    def is_hpugraph_tracing(self) -> bool:
        return self.hpugraph_tracing

    def capture_start(self) -> None:
        self.is_capturing = True

    def capture_end(self) -> None:
        ranked = sorted(self.input_count_dict, key=self.input_count_dict.get, reverse=True)
        self.priority_keys = set(ranked[: self.max_graphs])
        self.is_capturing = False
        if self.verbose:
            self.log_stats()
        self.input_count_dict = {}

    # ---- forward
    def _key(self, call):
        key = call.key
        if self.have_grad_accumulation and self.forward_cnt == 0:
            key = (key, "first micro-batch")
        return key

    def _use_cache(self) -> bool:
        return self.model.training and torch.is_grad_enabled() and config.lazy_mode()

    def _forward(self, *args, **kwargs):
        self.iteration_cnt += 1
        call = _Signature(self.signature, args, kwargs)
        key = self._key(call)
        self._maybe_log()
        if self._use_cache():
            if key in self.model_dict:
                return self._replay(key, call)
            if len(self.model_dict) < self.max_graphs:
                return self._insert(key, call)
        return self._uncached(args, kwargs)

    def _forward_lfu(self, *args, **kwargs):
        self.iteration_cnt += 1
        call = _Signature(self.signature, args, kwargs)
        key = self._key(call)
        if self.is_capturing:
            self.input_count_dict[key] = self.input_count_dict.get(key, 0) + 1
        self._maybe_log()
        if self._use_cache() and not self.is_capturing:
            if key in self.model_dict:
                return self._replay(key, call)
            if key in self.priority_keys:
                return self._insert(key, call)
        return self._uncached(args, kwargs)

    def _uncached(self, args, kwargs):
        if self.model.training:
            self.uncached_train_hits += 1
        else:
            self.uncached_eval_hits += 1
        return self.orig_forward(*args, **kwargs)

    def _insert(self, key, call):
        self.hpugraph_tracing = True
        try:
            gm = _GraphModel(self.model, self.orig_forward, call)
            graphed = make_graphed_callables(gm, call.tensors(), allow_unused_input=True,
                                             asynchronous=self.asynchronous,
                                             disable_tensor_cache=self.disable_tensor_cache,
                                             dry_run=self.dry_run)
            self.model_dict[key] = (graphed, gm)
        finally:
            self.hpugraph_tracing = False
        return self._replay(key, call)

    def _replay(self, key, call):
        self.cached_hits_dict[key] = self.cached_hits_dict.get(key, 0) + 1
        graphed, gm = self.model_dict[key]
        return gm.unpack(graphed(*call.tensors()))

    # ---- statistics
    @property
    def num_graphs(self) -> int:
        """Input signatures with graphs (each has a forward and a backward HPU Graph)."""
        return len(self.model_dict)

    def stats(self) -> dict:
        return {"graphs": len(self.model_dict), "cached_hits": sum(self.cached_hits_dict.values()),
                "uncached_train_hits": self.uncached_train_hits, "uncached_eval_hits": self.uncached_eval_hits,
                "max_graphs": self.max_graphs, "use_lfu": self.use_lfu}

    def _maybe_log(self) -> None:
        if self.verbose and self.iteration_cnt % self.log_frequency == 0:
            self.log_stats()

    def log_stats(self) -> None:
        s = self.stats()
        print("HPU Graph Statistics")
        print(f"    Max graphs                :- {s['max_graphs']}")
        print(f"    LFU Cache                 :- {s['use_lfu']}")
        print(f"    No. of HPUGraphs cached   :- {s['graphs']}")
        print(f"    Total cached hits         :- {s['cached_hits']}")
        print(f"    Uncached train hits       :- {s['uncached_train_hits']}")
        print(f"    Uncached eval hits        :- {s['uncached_eval_hits']}")
