"""``habana_frameworks.torch.hpu.graphs``: HPU Graphs (``hpu_lab/graphs/``) and ``TensorPacker``."""
from __future__ import annotations

import copy

import torch

from ..graphs import (HPUGraph, ModuleCacher, graph, is_current_stream_capturing,  # noqa: F401
                      make_graphed_callables, wrap_in_hpu_graph, wrap_in_hpu_graph_func)

__all__ = ["HPUGraph", "graph", "make_graphed_callables", "ModuleCacher", "wrap_in_hpu_graph",
           "wrap_in_hpu_graph_func", "is_current_stream_capturing", "TensorPacker"]


class TensorPacker:
    """Splits a nested structure (tuples, lists, dicts) into its tensors and a template, and back:
    what an HPU Graph sees (a flat tuple of tensors) against what the model takes and returns.

        tensors, meta = TensorPacker().pack({"x": x, "n": 3, "ys": [y, z]})   # (x, y, z)
        TensorPacker().unpack(tensors, meta)                                   # the dict again

    Non-tensor leaves stay in the template: they are constants of the graph (``verbose=True``
    prints a warning for each).
    """

    class Index:
        """The template's placeholder for the ``value``-th tensor."""

        def __init__(self, value: int):
            self.value = value

        def __repr__(self):
            return f"#{self.value}"

        def __eq__(self, other):
            return isinstance(other, TensorPacker.Index) and other.value == self.value

        def __hash__(self):
            return hash(("TensorPacker.Index", self.value))

    def __init__(self, is_out_pack: bool = False, verbose: bool = False):
        self._is_out_pack = is_out_pack
        self._verbose = verbose

    def pack(self, outs):
        tensors = []
        meta = self._pack(outs, tensors)
        return tuple(tensors), meta

    def _pack(self, x, tensors):
        if torch.is_tensor(x):
            tensors.append(x)
            return self.Index(len(tensors) - 1)
        if isinstance(x, tuple):
            return tuple(self._pack(v, tensors) for v in x)
        if isinstance(x, list):
            meta = copy.copy(x)          # keeps a list subclass's type
            for i, v in enumerate(x):
                meta[i] = self._pack(v, tensors)
            return meta
        if isinstance(x, dict):
            meta = copy.copy(x)          # keeps an OrderedDict / ModelOutput's type and order
            for k in x:
                meta[k] = self._pack(x[k], tensors)
            return meta
        if self._verbose:
            print(f"[WARNING] Variable of type {type(x)} will not be dynamic")
        return x

    def unpack(self, tensors, meta):
        if isinstance(meta, self.Index):
            return tensors[meta.value]
        if isinstance(meta, tuple):
            return tuple(self.unpack(tensors, v) for v in meta)
        if isinstance(meta, list):
            out = copy.copy(meta)
            for i, v in enumerate(meta):
                out[i] = self.unpack(tensors, v)
            return out
        if isinstance(meta, dict):
            out = copy.copy(meta)
            for k in meta:
                out[k] = self.unpack(tensors, meta[k])
            return out
        return meta
