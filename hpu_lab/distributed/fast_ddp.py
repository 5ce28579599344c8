"""optimum-habana's ``fast_ddp``: ``all_reduce_gradients`` (REFERENCE.md section 6; seed 002, claim O6).

Instead of DDP's buckets (one all_reduce each, issued from backward hooks), after backward every
gradient is scaled by 1/world, packed into one fusion buffer (bf16 by default), all-reduced once,
and unpacked into the gradients. The fusion buffer and its per-parameter views are made on the
first call and kept on the model; so is the set of gradients, which must not change afterwards.

``use_hpu_graphs=True`` (optimum's ``use_hpu_graph``, also accepted) captures the packing and the
unpacking as two HPU Graphs and replays them on later calls. One difference from optimum's code:
optimum packs with ``fused_view.copy_(grad)`` into views of the buffer, an in-place update of a
view, which hpu_lab's HPU Graphs refuse as the bridge documents (seed 001); here the packing graph
writes the whole buffer at once (``torch.cat`` of the scaled gradients), the same values. If the
gradient tensors are replaced (``zero_grad(set_to_none=True)`` makes new ones) the graphs would read
the old ones: they are captured again, and the ``fast_ddp_recaptures`` attribute counts that. A
gradient that is a view of a larger buffer (autograd makes a bias gradient as a view of a ``(1, n)``
sum) is given its own storage once, before the capture, for the same reason.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..graphs._common import _full


def all_reduce_gradients(model: torch.nn.Module, fusion_buffer_dtype: torch.dtype = torch.bfloat16,
                         use_hpu_graphs: bool = True, *, use_hpu_graph=None, group=None) -> None:
    """All-reduce (average) the gradients of ``model`` across the group with one collective."""
    if use_hpu_graph is not None:            # optimum-habana's spelling
        use_hpu_graphs = use_hpu_graph
    group = group if group is not None else dist.group.WORLD
    d = model.__dict__
    entries = d.get("_all_reduce_fusion_entries")
    if entries is None:
        entries = _build(model, fusion_buffer_dtype)
    if not entries:
        return
    buf = d["_all_reduce_fusion_buffer"]
    graphs = use_hpu_graphs and buf.device.type == "hpu"
    grads = []
    for p, _ in entries:
        if p.grad is None:
            raise NotImplementedError("`all_reduce_gradients()` does not support changing the set of active "
                                      "gradients after first invocation.")
        if graphs and not _full(p.grad):
            # e.g. a bias gradient that autograd made as a view of a (1, n) sum: the unpacking graph
            # could not write it (an in-place update of a view); give it its own storage, once
            # (accumulation then keeps this tensor)
            with torch.no_grad():
                p.grad = p.grad.clone()
        grads.append(p.grad)
    inv = 1.0 / dist.get_world_size(group)

    def pack():
        parts = [(g if g.dtype == buf.dtype else g.to(buf.dtype)) * inv for g in grads]
        buf.copy_(torch.cat([x.reshape(-1) for x in parts]))

    def unpack():
        for g, (_, view) in zip(grads, entries):
            g.copy_(view if view.dtype == g.dtype else view.to(g.dtype))

    with torch.no_grad():
        if graphs:
            _graph(model, "pack", grads, pack).replay()
        else:
            pack()
        dist.all_reduce(buf, group=group, async_op=True)
        if graphs:
            _graph(model, "unpack", grads, unpack).replay()
        else:
            unpack()


def _build(model, dtype):
    d = model.__dict__
    params = [p for p in model.parameters() if p.grad is not None]
    n = sum(p.grad.numel() for p in params)
    if n == 0:
        d["_all_reduce_fusion_entries"] = []
        return []
    device = params[0].grad.device
    buf = torch.zeros((n,), dtype=dtype, device=device)
    entries, off = [], 0
    for p in params:
        k = p.grad.numel()
        entries.append((p, buf[off:off + k].view(p.grad.shape)))
        off += k
    d["_all_reduce_fusion_buffer"] = buf
    d["_all_reduce_fusion_entries"] = entries
    return entries


def _graph(model, name, grads, fn):
    """The packing or unpacking HPU Graph: captured on first use (the capture runs ``fn`` once, as
    optimum's does), and again if the gradient tensors changed."""
    import hpu_lab.graphs as g
    d = model.__dict__
    ids = tuple(id(x._st) for x in grads)
    attr = f"_all_reduce_gradient_{name}_graph"
    cur = d.get(attr)
    if cur is not None and cur[0] == ids:
        return cur[1]
    if cur is not None:
        d["fast_ddp_recaptures"] = d.get("fast_ddp_recaptures", 0) + 1
    graph = g.HPUGraph()
    graph.label = f"fast_ddp {name}"
    with g.stream(g.Stream()):
        graph.capture_begin()
        try:
            fn()
        except BaseException as e:
            graph._abandon_on_error(e)
            raise
        graph.capture_end()
    # the grads' storages stay alive with the graph, so their ids keep naming them
    d[attr] = (ids, graph, [x._st for x in grads])
    return graph
