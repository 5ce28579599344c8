"""Permutation placement for channels-last convolutions (seed 004, the bridge's Lowering Module:
"Optimal placement of permutations for channel last memory format of tensors").

Gaudi's convolutions read and write activations channels-last (NHWC). A PyTorch tensor is NCHW
(logically always; in memory too unless it is ``channels_last``), so a convolution's input must be
permuted to NHWC and its output back. Lowered op by op, every convolution gets that pair of
permutes, and between two convolutions the output is permuted back to NCHW only to be permuted to
NHWC again. The graph compiler places the permutes on the graph instead: values stay NHWC from one
convolution to the next, through the layout-agnostic elementwise ops between them, and are
permuted only where they leave that region (a graph output, a view, a matmul, a backward op) or
enter it (a graph input, another op's result).

``place_permutes(g)`` rewrites a recipe's fx graph so: each convolution becomes a ``conv_nhwc``
node (NHWC in, NHWC out), ``aten::permute`` nodes mark each layout change, and elementwise ops in
the region work on NHWC values. A permute is a real transpose (TPC/DMA traffic on the Gaudi
clock, perfmodel/cost.py) only when the tensor's memory changes layout; when the tensor outside
the region is ``channels_last`` its memory already is NHWC and the permute only re-describes it
(a view: no kernel, no traffic). That is what the channels-last memory format buys on Gaudi.

The emulator's values do not move: every permute here is a view of the same memory the plain
graph computes in, so the rewritten graph computes bit for bit what the plain graph computes.

    from hpu_lab.perfmodel import placement
    r = placement.compare(model, x)   # placed vs a permute pair per convolution, on the Gaudi clock
    r["placed"]["permutes"], r["placed"]["device us"], r["per convolution"]["graphs"][0]

(``compare`` lives with the Gaudi clock, which it uses: the compiler does not import the clock back.)

The switch is the bridge's ``PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING`` (default true: the graph
compiler, Synapse, handles layouts; gaudi-pytorch-bridge ``env_flags``). With false the real
bridge permutes layouts in its own JIT passes; hpu_lab models false as no placement: one permute
pair around every convolution. Read when a recipe compiles; changing it drops the in-memory recipe
cache (a real Gaudi reads it once, at start-up).
"""
from __future__ import annotations

import contextlib
from typing import Dict, List, Optional

import torch

from .. import config, ops

aten = torch.ops.aten
TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]


def conv_nhwc(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """A convolution as Gaudi runs it: NHWC activations in and out (``x`` is N, H, W, C).
    Computed here by the plain convolution on the same memory, seen as NCHW again."""
    y = aten.convolution.default(aten.permute.default(x, TO_NCHW), weight, bias, stride, padding, dilation,
                                 transposed, output_padding, groups)
    return aten.permute.default(y, TO_NHWC)


HELPERS = (conv_nhwc,)


_forced: List[bool] = []          # placement() overrides the setting for a block (stack)


def enabled() -> bool:
    if _forced:
        return _forced[-1]
    return config.get("PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING")


@contextlib.contextmanager
def placement(on: bool):
    """Compile (or estimate) with placement on or off for this block only, whatever the setting.
    For comparing the two in one process (recipes it compiles stay cached under their key: use
    it with perfmodel.estimate, which compiles nothing, or clear the recipe cache)."""
    _forced.append(bool(on))
    try:
        yield
    finally:
        _forced.pop()


def _meta(n):
    return n.meta.get("hpu_meta") if hasattr(n, "meta") else None


def _is_4d(n) -> bool:
    m = _meta(n)
    return bool(m) and len(m[0]) == 4


def _nhwc_meta(m):
    size, stride, dtype = m
    return (tuple(size[i] for i in TO_NHWC), tuple(stride[i] for i in TO_NHWC), dtype)


def nhwc_in_memory(m) -> bool:
    """Is a 4-D tensor of meta ``m`` laid out NHWC in memory (``channels_last``, dense)?"""
    size, stride, _ = m
    want, expect = [], 1
    for d in (1, 3, 2, 0):                   # C varies fastest, then W, H, N
        want.append(expect)
        expect *= max(size[d], 1)
    return all(size[d] == 1 or stride[d] == w for d, w in zip((1, 3, 2, 0), want))


def _is_conv(n) -> bool:
    return (n.op == "call_function" and n.target is aten.convolution.default and len(n.args) == 9
            and not n.kwargs and _is_4d(n) and _is_4d(n.args[0]) and not n.args[6])   # 2-D, not transposed


def _is_elementwise(n, region) -> bool:
    """An elementwise op whose tensor inputs are all region values of its own shape: it runs on
    NHWC values as well as on NCHW ones."""
    if n.op != "call_function" or not ops.is_pointwise(n.target) or not _is_4d(n):
        return False
    tensors = [a for a in n.all_input_nodes]
    return bool(tensors) and all(a in region and _meta(a)[0] == _meta(n)[0] for a in tensors)


def _region(g, placement: bool) -> List[List]:
    """The groups of nodes that keep NHWC values: with placement, each connected run of
    convolutions and the elementwise ops between them (one region); without, every convolution
    on its own."""
    convs = [n for n in g.nodes if _is_conv(n)]
    if not placement:
        return [[c] for c in convs]
    region = set()
    for n in g.nodes:                         # graph order is topological: inputs come first
        if _is_conv(n) or (region and _is_elementwise(n, region)):
            region.add(n)
    return [[n for n in g.nodes if n in region]] if region else []


def _permute(g, src, dims, like, meta, view: bool):
    p = g.call_function(aten.permute.default, (src, list(dims)))
    p.meta.update(op_name="aten::permute", src=like.meta.get("src", ""), node_index=like.meta.get("node_index"),
                  helper=False, hpu_meta=meta, layout_change="view" if view else "transpose")
    return p


def place_permutes(g, placement: Optional[bool] = None) -> Dict[str, int]:
    """Rewrite ``g`` (in place) so that its convolutions run NHWC, with the layout changes as
    permute nodes placed as described above. Returns counts: convolutions, permutes, and of
    those the real transposes (the rest are views)."""
    placement = enabled() if placement is None else placement
    groups = _region(g, placement)
    counts = {"convolutions": 0, "permutes": 0, "transposes": 0}
    for members in groups:
        inside = set(members)
        entries: Dict[object, object] = {}          # producer outside -> its NHWC permute
        for n in members:
            if _is_conv(n):
                counts["convolutions"] += 1
                src = n.args[0]
                if src not in inside:
                    entry = entries.get(src)
                    if entry is None:
                        m = _meta(src)
                        with g.inserting_before(n):
                            entry = entries[src] = _permute(g, src, TO_NHWC, n, _nhwc_meta(m), nhwc_in_memory(m))
                    src = entry
                original = _meta(n)
                with g.inserting_after(n):
                    new = g.call_function(conv_nhwc, (src,) + tuple(n.args[1:]), dict(n.kwargs))
                new.meta.update(n.meta)
                new.meta.update(op_name="aten::convolution", hpu_meta=_nhwc_meta(original), layout="NHWC",
                                nchw_meta=original)
                n.replace_all_uses_with(new)
                g.erase_node(n)
                inside.discard(n)
                inside.add(new)
                members[members.index(n)] = new
            else:
                n.meta["nchw_meta"] = _meta(n)
                n.meta["hpu_meta"] = _nhwc_meta(_meta(n))
                n.meta["layout"] = "NHWC"
        for n in members:                            # exits: one per value used outside the region
            outside = [u for u in n.users if u not in inside]
            if not outside:
                continue
            m = n.meta["nchw_meta"]
            with g.inserting_after(n):
                exit_ = _permute(g, n, TO_NCHW, n, m, nhwc_in_memory(m))
            for u in outside:
                u.replace_input_with(n, exit_)
        made = [p for p in list(entries.values()) + [u for n in members for u in n.users
                                                      if u.meta.get("layout_change")]]
        counts["permutes"] += len(made)
        counts["transposes"] += sum(1 for p in made if p.meta["layout_change"] == "transpose")
    return counts


def mark_views(g) -> None:
    """A permute that only re-describes memory already in the target layout is an alias: no
    kernel runs for it (after classify_tensors, which would call it an intermediate)."""
    for n in g.nodes:
        if n.meta.get("layout_change") == "view":
            n.meta["tensor_class"] = "alias"


_last = {"value": None}
try:
    _last["value"] = enabled()
except config.ConfigError:                    # reported where the setting is read
    pass


def _on_config_change() -> None:
    """Recipes compiled under the other setting hold the other layout plan: drop them."""
    try:
        v = enabled()
    except config.ConfigError:
        return                                # reported by whoever reads the malformed value
    if _last["value"] is not None and v != _last["value"]:
        from . import cache
        cache.clear()
    _last["value"] = v


config.on_change(_on_config_change)
