"""The cost of device work on a card: recipes (from their graph), copies and collectives.

A recipe's MME kernels run one after another, and so do its TPC kernels; the two engines overlap
by a documented share (EFFICIENCY["overlap"]: the graph compiler pipelines slices of MME and TPC
work). Per node:

  MME (matmul, conv):  max(FLOPs / (peak for the dtype x eff_mme), HBM bytes / (HBM bw x eff_hbm))
  TPC (everything else): max(HBM bytes / (HBM bw x eff_hbm), FLOPs / (vector rate x eff_tpc))
  a fusion cluster is one TPC kernel: it reads the tensors entering the cluster and writes the
  ones leaving it (its intermediates stay on chip), so fusion, casts and permutes change the cost
  a view (alias) costs nothing; a CPU-fallback node is host work, not device work

plus ``kernel_ns`` per kernel and ``recipe_launch_ns`` per recipe. The MME term is scaled by the
card's ``mme_derate`` (Gaudi 3: its engines are harder to keep busy than Gaudi 2's). Which kernel
boundaries reach HBM is ``onchip.hbm_bytes``'s (``ONCHIP_WINDOW``; 0, every one, in the calibrated
model). Views and reshapes cost nothing;
a transpose costs nothing when only the MME reads it (it takes strided operands). A float cast no
fusion cluster took is part of the MME node when only the MME reads it or the MME produced its
input (the MME converts on load / store): the MME then reads the operand as it is stored and writes
the cast's dtype. An FP8 GEMM's output scales, bias and cast are part of its MME node too (Gaudi's
``fp8_gemm`` node takes them), so it moves its fp8 operands and its output in the output dtype.
Otherwise (a cast between TPC ops, a transpose feeding a TPC op) they cost their HBM traffic,
unless the compiler fused them into a cluster. Times in ns.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from .cards import Card
from .onchip import VIEW_OPS, hbm_bytes, is_view as _is_view

# Efficiency factors: the fraction of a peak figure real kernels reach. Documented and
# calibrated in docs/gaudi_clock.md ("Validation"); change them here, nowhere else.
EFFICIENCY: Dict[str, float] = {
    "mme": 0.88,            # of peak matrix FLOP/s (calibrated, validation.calibrate)
    "hbm": 0.69,            # of peak HBM bandwidth (calibrated, validation.calibrate)
    "tpc": 0.50,            # of peak vector FLOP/s (assumed)
    "host_link": 0.80,      # of PCIe bandwidth per direction (assumed)
    "nic": 0.75,            # of the card's NIC bandwidth (assumed)
    "overlap": 0.6,         # share of the shorter engine's time (MME or TPC) hidden under the other (assumed)
}
HOST_STAGING_BW = 8e9       # bytes/s: the host copies pageable memory into a pinned bounce buffer (assumed)
COPY_LATENCY_NS = 10_000    # one DMA transfer set-up (assumed)
COLLECTIVE_HOP_NS = 5_000   # one ring step's latency over RoCE (assumed)
# A tensor every reader of which runs within this many kernels of its producer stays on chip
# (onchip.py: the graph compiler slices and pipelines producer and consumer through SRAM); 0: every
# kernel boundary goes through HBM
ONCHIP_WINDOW = 0

_ITEMSIZE = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "bfloat16": 2,
             "float16": 2, "int16": 2, "uint8": 1, "int8": 1, "bool": 1, "float8_e4m3fn": 1,
             "float8_e5m2": 1}

# ops whose result sits at position 1 of the args (bias first): the contraction dim comes from there
_BIAS_FIRST = {"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv"}
_CONTRACT_FIRST = {"aten::mm", "aten::bmm", "aten::matmul", "aten::linear", "aten::mv", "aten::dot"}
# vector ops that cost more than one FLOP per element (transcendentals on the TPC; assumed)
_HEAVY = ("exp", "log", "tanh", "sigmoid", "gelu", "erf", "softmax", "pow", "sqrt", "rsqrt", "div",
          "silu", "norm", "sin", "cos")


# layout changes: free when only the MME reads them (it takes strided / transposed operands)
_TRANSPOSES = {"aten::t", "aten::transpose", "aten::permute", "aten::numpy_T"}


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def mme_flops(op: str, shape: Tuple[int, ...], in_shapes: Tuple[Tuple[int, ...], ...]) -> int:
    """FLOPs of a matrix-engine node from its output and input shapes (multiply-add = 2)."""
    ins = in_shapes
    try:
        if op in _CONTRACT_FIRST and ins and ins[0]:
            return 2 * max(_numel(shape), 1) * ins[0][-1]
        if op in _BIAS_FIRST and len(ins) > 1 and ins[1]:
            return 2 * max(_numel(shape), 1) * ins[1][-1]
        if op in ("aten::convolution", "aten::_convolution", "aten::conv2d") and len(ins) > 1:
            return 2 * _numel(shape) * _numel(ins[1][1:])
        if op == "aten::convolution_backward" and len(ins) > 2:
            fwd = 2 * _numel(ins[0]) * _numel(ins[2][1:])      # grad_output x weight
            return 2 * fwd                                       # grad_input + grad_weight
        if "sdpa" in op or "scaled_dot_product" in op:
            q, k = ins[0], ins[1]
            fwd = 4 * _numel(q[:-1]) * k[-2] * q[-1]
            return fwd * (2 if "bwd" in op else 1)
    except (IndexError, TypeError):
        pass
    return 2 * _numel(shape)          # unknown contraction: counted by its traffic only


def vector_flops(op: str, numel: int) -> int:
    name = op.split("::")[-1]
    return numel * (4 if any(h in name for h in _HEAVY) else 1)


@dataclass(frozen=True)
class RecipeCost:
    ns: int                 # modeled device time of one launch
    mme_ns: int
    tpc_ns: int
    kernels: int
    flops: int
    hbm_bytes: int
    nic_ns: int = 0         # its collectives (lazy collectives: graph nodes), part of ns
    fp32_mme_ns: int = 0    # MME kernels timed at the FP32 matrix rate (published for Gaudi 3 only)

    def __add__(self, o: "RecipeCost") -> "RecipeCost":
        return RecipeCost(self.ns + o.ns, self.mme_ns + o.mme_ns, self.tpc_ns + o.tpc_ns,
                          self.kernels + o.kernels, self.flops + o.flops, self.hbm_bytes + o.hbm_bytes,
                          self.nic_ns + o.nic_ns, self.fp32_mme_ns + o.fp32_mme_ns)

    @property
    def fp32_assumed(self) -> bool:
        """Whether the FP32 matrix rate decides a tenth or more of the recipe's time: then a verdict
        on it says so (assumed on Gaudi and Gaudi 2; on Gaudi 3 published, but not the precision the
        bridge runs a float32 matmul in)."""
        return self.fp32_mme_ns >= 0.1 * self.ns


ZERO = RecipeCost(0, 0, 0, 0, 0, 0)


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE.get(dtype, 4)


@dataclass(frozen=True)
class Kernel:
    """One device kernel of a recipe: a node, or a fusion cluster of TPC nodes."""
    name: str               # "aten::addmm", or "cluster 3: aten::mul+aten::add"
    engine: str             # "MME" or "TPC"
    ns: int
    flops: int
    hbm_bytes: int
    fp32_rate: bool = False     # an MME kernel whose time is its FLOPs at the (assumed) FP32 rate


def _through_layouts(m, by_index, stop=()):
    """The producer behind node ``m`` through views and transposes of a single input (what an MME
    operand really is), stopping early at a node in ``stop``; None past the graph's inputs."""
    while m is not None and (_is_view(m) or m.op in _TRANSPOSES) and len(m.inputs) == 1 and m.index not in stop:
        m = by_index.get(m.inputs[0])
    return m


def _is_float_cast(n) -> bool:
    return n.is_cast and n.dtype.startswith(("float", "bfloat"))


def _mme_dtype(n, by_index) -> str:
    """The dtype an MME node multiplies in: its own, unless both operands were cast up to it from a
    narrower float type (the MME converts on load). torch._scaled_mm on hpu is fp8 operands cast to
    float32 and a float32 mm (hpu_lab/kernels/scaled_mm.py): on a Gaudi that is one FP8 GEMM, at the FP8
    rate, not a float32 one."""
    own = n.dtype or "float32"

    def source(i):
        m = by_index.get(i)
        while m is not None and (m.op in VIEW_OPS or m.op in _TRANSPOSES) and len(m.inputs) == 1:
            m = by_index.get(m.inputs[0])
        if m is None or not m.is_cast or not m.inputs or m.inputs[0] not in by_index:
            return own
        return by_index[m.inputs[0]].dtype or own
    srcs = [source(i) for i in n.inputs[:2]]
    if len(srcs) == 2 and all(d.startswith(("float", "bfloat")) and _itemsize(d) < _itemsize(own) for d in srcs):
        return max(srcs, key=_itemsize)
    return own


def _users(n, by_index, consumers) -> list:
    """The nodes that read node ``n``'s value (the graph's output aside)."""
    return [by_index[u] for u in consumers.get(n.index, ()) if u in by_index]


def _mme_only(by_index, consumers):
    """A test: every consumer of a node is an MME node, looking through views and transposes."""
    memo: Dict[int, bool] = {}

    def mme_only(n) -> bool:
        r = memo.get(n.index)
        if r is None:
            memo[n.index] = False            # cycles cannot happen; this only guards re-entry
            users = _users(n, by_index, consumers)
            r = bool(users) and all(u.engine == "MME" or ((_is_view(u) or u.op in _TRANSPOSES) and mme_only(u))
                                    for u in users)
            memo[n.index] = r
        return r
    return mme_only


def _epilogue_step(u, prev, shape) -> bool:
    """``u`` (the only consumer of ``prev``) is work Gaudi's FP8 GEMM node does on its output:
    ``fp8_gemm`` takes scale_a, scale_b, scale_result and a bias and writes ``out_dtype``
    (the bridge lowers ``aten::_scaled_mm`` to that one node), so a multiply or divide by a
    one-element scale, the add of a bias vector and a cast are part of the MME node."""
    others = [s for i, s in zip(u.inputs, u.in_shapes) if i != prev]
    if _is_float_cast(u):
        return True
    if u.op in ("aten::mul", "aten::div"):
        return all(_numel(s) <= 1 for s in others)
    if u.op == "aten::add":
        return len(others) == 1 and _numel(others[0]) <= (shape[-1] if shape else 1)
    return False


def _mme_fusions(nodes, by_index, consumers, mme_only):
    """What the graph compiler folds into each MME node (conversion on load and on store, the FP8
    GEMM's output scaling): ``{mme index: (absorbed input casts, absorbed output nodes)}``.

    - a cast no fusion cluster took whose every consumer is an MME node (through views and
      transposes) is done by the MME as it loads the operand (the compiler's FUSE_CONVERT_MME pass);
    - a cast no cluster took of an MME's output (through views) is done as the MME stores it;
    - for an FP8 GEMM (both operands cast up from fp8), the chain of scales, bias and cast on its
      output, one consumer after the other, is part of the node (``_epilogue_step``).

    ``mme_only``: the graph's ``_mme_only`` test (kernels() uses the same one, and its memo).
    """

    def users(n):
        return _users(n, by_index, consumers)
    out: Dict[int, Tuple[set, set]] = {}
    for n in nodes:
        if n.engine != "MME":
            continue
        loads, stores = set(), set()
        for i in n.inputs:
            m = _through_layouts(by_index.get(i), by_index)
            if m is not None and _is_float_cast(m) and m.cluster < 0 and mme_only(m):
                loads.add(m.index)
        frontier = [n]
        while frontier:                       # casts of the output, through views
            for u in users(frontier.pop()):
                if _is_view(u):
                    frontier.append(u)
                elif _is_float_cast(u) and u.cluster < 0:
                    stores.add(u.index)
        if _mme_dtype(n, by_index).startswith("float8"):
            prev, cur = n, n
            while True:
                us = users(cur)
                if len(us) != 1:
                    break
                u = us[0]
                if not _is_view(u) and not _epilogue_step(u, cur.index, prev.shape):
                    break
                if not _is_view(u):
                    stores.add(u.index)
                    for i in u.inputs:           # the bias (a scale) converted as the node loads it
                        m = by_index.get(i)
                        if m is not None and i != cur.index and _is_float_cast(m) and m.cluster < 0 \
                                and len(users(m)) == 1:
                            loads.add(m.index)
                    prev = u
                cur = u
        out[n.index] = (loads, stores)
    stored = set().union(*(st for _, st in out.values()))
    # a cast between two MMEs is the producer's store conversion: the consumer reads what it wrote
    return {i: (ld - stored, st) for i, (ld, st) in out.items()}


def _mme_bytes(n, by_index, consumers, out_nodes, loads, stores) -> int:
    """HBM bytes of an MME node with its fused conversions: each operand as it is stored (an fp8
    operand one byte an element, not the float32 it is cast to), and each tensor it stores that
    something other than the fused nodes reads (the FP8 GEMM's output in its output dtype)."""
    fused = stores | {n.index}
    read = 0
    for x in fused:                 # the operands, and the scales and bias of an FP8 GEMM's output
        for i, b in zip(by_index[x].inputs, by_index[x].in_bytes):
            if i in fused:
                continue
            m = _through_layouts(by_index.get(i), by_index, stop=loads)
            if m is not None and m.index in fused:
                continue                 # a view of the node's own result: it never left the MME
            if m is not None and m.index in loads and m.inputs and m.inputs[0] in by_index:
                src = by_index[m.inputs[0]].dtype or m.dtype
                b = b * _itemsize(src) // _itemsize(m.dtype)
            read += b

    def leaves(x):
        """x's value is read by something outside the fused nodes (or is a recipe output)."""
        for u in consumers.get(x.index, ()):
            m = by_index.get(u)
            if m is None or u in out_nodes or m.op == "output":
                return True
            if _is_view(m):
                if leaves(m):
                    return True
            elif u not in fused:
                return True
        return False
    written = sum(by_index[x].out_bytes for x in fused if leaves(by_index[x]))
    return read + written


# a lazy collective's node (distributed/lazy_collectives.DeviceCollective): hccl_<kind>_..._of<ranks>
_COLLECTIVE_NODE = re.compile(r"^hccl_(all_reduce|broadcast|all_gather_into_tensor|all_gather)_.*_of(\d+)$")


def collective_node(op: str):
    """(kind, ranks) of a lazy collective's graph node, else None."""
    m = _COLLECTIVE_NODE.match(op)
    return (m.group(1), int(m.group(2))) if m else None


def kernels(summary, card: Card, fusion: bool = True, eff: Optional[Dict[str, float]] = None,
            onchip: Optional[int] = None):
    """The kernels of a recipe whose graph is ``summary`` (a GraphSummary), each with its cost.

    ``onchip``: the on-chip window (default ``ONCHIP_WINDOW``; 0: every kernel boundary goes
    through HBM), see ``onchip.hbm_bytes``."""
    e = dict(EFFICIENCY, **(eff or {}))
    bw = card.hbm_bw * e["hbm"]
    nodes = summary.nodes if summary is not None else ()
    consumers: Dict[int, set] = {}
    for a, b in summary.edges if summary is not None else ():
        consumers.setdefault(a, set()).add(b)
    out_nodes = {n.index for n in nodes if n.op == "output"}
    plans = []          # (name, engine, flops (a NIC kernel: its ns), bytes, member nodes, dtype)
    clusters: Dict[int, list] = {}

    def numel(n):
        return max([_numel(n.shape)] + [_numel(s) for s in n.in_shapes])
    by_index = {n.index: n for n in nodes}
    mme_only = _mme_only(by_index, consumers)
    fusions = _mme_fusions(nodes, by_index, consumers, mme_only)
    in_mme = set().union(*(a | b for a, b in fusions.values()))
    for n in nodes:
        if n.op in ("input", "output") or n.engine in ("", "CPU") or _is_view(n) or n.index in in_mme:
            continue
        coll = collective_node(n.op)
        if coll is not None:             # the NIC's work, by the ring model (not a TPC kernel)
            by = sum(n.in_bytes)
            plans.append((n.op, "NIC", collective_ns(coll[0], by, coll[1], card, eff), by, {n.index}, None))
            continue
        if n.op in _TRANSPOSES and mme_only(n):
            continue
        if n.engine == "MME":
            fl = mme_flops(n.op, n.shape, n.in_shapes)
            by = _mme_bytes(n, by_index, consumers, out_nodes, *fusions[n.index])
            loads, stores = fusions[n.index]
            plans.append((n.op, "MME", fl, by, {n.index} | loads | stores, _mme_dtype(n, by_index)))
        elif fusion and n.cluster >= 0:
            clusters.setdefault(n.cluster, []).append(n)
        else:
            plans.append((n.op, "TPC", vector_flops(n.op, numel(n)), sum(n.in_bytes) + n.out_bytes, {n.index},
                          n.dtype or "float32"))
    for cid, members in clusters.items():
        inside = {m.index for m in members}
        read: Dict[int, int] = {}
        for m in members:
            for src, b in zip(m.inputs, m.in_bytes):
                if src not in inside:
                    read[src] = max(read.get(src, 0), b)     # each entering tensor read once
        written = sum(m.out_bytes for m in members
                      if (consumers.get(m.index, set()) - inside) or m.index in out_nodes)
        fl = sum(vector_flops(m.op, numel(m)) for m in members)
        name = f"cluster {cid}: " + "+".join(m.op.split("::")[-1] for m in members)
        plans.append((name, "TPC", fl, sum(read.values()) + written, inside, members[-1].dtype or "float32"))
    window = ONCHIP_WINDOW if onchip is None else onchip
    moved = hbm_bytes(plans, by_index, consumers, out_nodes, window)
    out = []
    for (name, engine, fl, _by, _members, dt), by in zip(plans, moved):
        if engine == "NIC":
            out.append(Kernel(name, "NIC", fl, 0, by))
        elif engine == "MME":
            compute = fl / (card.mme_rate(dt) * e["mme"] * card.mme_derate)
            t = max(compute, by / bw)
            fp32 = card.mme_rate(dt) == card.mme_flops["float32"] and compute >= by / bw
            out.append(Kernel(name, "MME", int(t * 1e9) + card.kernel_ns, fl, by, fp32))
        else:
            t = max(by / bw, fl / (card.vector_rate(dt) * e["tpc"]))
            out.append(Kernel(name, "TPC", int(t * 1e9) + card.kernel_ns, fl, by))
    return out


def recipe_cost(summary, card: Card, fusion: bool = True, eff: Optional[Dict[str, float]] = None,
                onchip: Optional[int] = None) -> RecipeCost:
    """Modeled device time of one launch of a recipe whose graph is ``summary`` (a GraphSummary)."""
    ks = kernels(summary, card, fusion, eff, onchip)
    mme = sum(k.ns for k in ks if k.engine == "MME")
    tpc = sum(k.ns for k in ks if k.engine == "TPC")
    nic = sum(k.ns for k in ks if k.engine == "NIC")
    # the graph compiler pipelines MME and TPC work (slices of one feed the other): part of the
    # shorter engine's time hides under the longer one's. A collective in the graph is not
    # overlapped: what follows it in the graph reads its result (assumed: the worst case)
    overlap = dict(EFFICIENCY, **(eff or {}))["overlap"]
    ns = card.recipe_launch_ns + max(mme, tpc) + int((1 - overlap) * min(mme, tpc)) + nic
    fp32 = sum(k.ns for k in ks if k.fp32_rate)
    return RecipeCost(ns, mme, tpc, len(ks), sum(k.flops for k in ks), sum(k.hbm_bytes for k in ks), nic, fp32)


def copy_ns(nbytes: int, card: Card, pinned: bool = False, eff: Optional[Dict[str, float]] = None) -> int:
    """A host<->device copy over the host link. Pageable memory is first staged by the host into a
    pinned bounce buffer, then DMA'd: the two do not overlap for one copy (assumed)."""
    e = dict(EFFICIENCY, **(eff or {}))
    dma = nbytes / (card.host_link_bw * e["host_link"])
    staging = 0.0 if pinned else nbytes / HOST_STAGING_BW
    return COPY_LATENCY_NS + int((dma + staging) * 1e9)


def staging_ns(nbytes: int) -> int:
    """The host's share of a pageable copy (the bounce-buffer memcpy)."""
    return int(nbytes / HOST_STAGING_BW * 1e9)


_RING_FACTOR = {"all_reduce": lambda p: 2 * (p - 1) / p, "allreduce": lambda p: 2 * (p - 1) / p,
                "reduce_scatter": lambda p: (p - 1) / p, "all_gather": lambda p: (p - 1) / p,
                "allgather": lambda p: (p - 1) / p, "broadcast": lambda p: (p - 1) / p,
                "reduce": lambda p: (p - 1) / p, "all_to_all": lambda p: (p - 1) / p,
                "barrier": lambda p: 0.0}


def collective_ns(op: str, nbytes: int, world_size: int, card: Card, eff: Optional[Dict[str, float]] = None) -> int:
    """A collective by the ring model over the card's NIC: the bytes each card sends
    (2(p-1)/p x N for all_reduce, (p-1)/p x N for all_gather / reduce_scatter / broadcast) at the
    NIC bandwidth, plus one hop latency per ring step."""
    p = max(int(world_size or 1), 1)
    if p == 1:
        return 0
    e = dict(EFFICIENCY, **(eff or {}))
    key = op.split("::")[-1].lower()
    factor = next((f for k, f in _RING_FACTOR.items() if k in key), _RING_FACTOR["all_reduce"])(p)
    steps = 2 * (p - 1) if "all_reduce" in key or "allreduce" in key or key == "barrier" else (p - 1)
    return steps * COLLECTIVE_HOP_NS + int(factor * nbytes / (card.nic_bw * e["nic"]) * 1e9)
