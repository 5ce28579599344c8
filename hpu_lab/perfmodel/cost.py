"""The cost of device work on a card: recipes (from their graph), copies and collectives.

A recipe runs its nodes one after another on the card (the real graph compiler overlaps MME and
TPC work; the efficiency factors absorb that). Per node:

  MME (matmul, conv):  max(FLOPs / (peak for the dtype x eff_mme), HBM bytes / (HBM bw x eff_hbm))
  TPC (everything else): max(HBM bytes / (HBM bw x eff_hbm), FLOPs / (vector rate x eff_tpc))
  a fusion cluster is one TPC kernel: it reads the tensors entering the cluster and writes the
  ones leaving it (its intermediates stay on chip), so fusion, casts and permutes change the cost
  a view (alias) costs nothing; a CPU-fallback node is host work, not device work

plus ``kernel_ns`` per kernel and ``recipe_launch_ns`` per recipe. All times in nanoseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from .cards import Card

# Efficiency factors: the fraction of a peak figure real kernels reach. Documented and
# calibrated in docs/gaudi_clock.md ("Validation"); change them here, nowhere else.
EFFICIENCY: Dict[str, float] = {
    "mme": 0.62,            # of peak matrix FLOP/s (calibrated: ResNet-50 training)
    "hbm": 0.70,            # of peak HBM bandwidth (calibrated: BERT-Large phase 1)
    "tpc": 0.50,            # of peak vector FLOP/s (assumed)
    "host_link": 0.80,      # of PCIe bandwidth per direction (assumed)
    "nic": 0.75,            # of the card's NIC bandwidth (assumed)
}
HOST_STAGING_BW = 8e9       # bytes/s: the host copies pageable memory into a pinned bounce buffer (assumed)
COPY_LATENCY_NS = 10_000    # one DMA transfer set-up (assumed)
COLLECTIVE_HOP_NS = 5_000   # one ring step's latency over RoCE (assumed)

_ITEMSIZE = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "bfloat16": 2,
             "float16": 2, "int16": 2, "uint8": 1, "int8": 1, "bool": 1, "float8_e4m3fn": 1,
             "float8_e5m2": 1}

# ops whose result sits at position 1 of the args (bias first): the contraction dim comes from there
_BIAS_FIRST = {"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv"}
_CONTRACT_FIRST = {"aten::mm", "aten::bmm", "aten::matmul", "aten::linear", "aten::mv", "aten::dot"}
# vector ops that cost more than one FLOP per element (transcendentals on the TPC; assumed)
_HEAVY = ("exp", "log", "tanh", "sigmoid", "gelu", "erf", "softmax", "pow", "sqrt", "rsqrt", "div",
          "silu", "norm", "sin", "cos")


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

    def __add__(self, o: "RecipeCost") -> "RecipeCost":
        return RecipeCost(self.ns + o.ns, self.mme_ns + o.mme_ns, self.tpc_ns + o.tpc_ns,
                          self.kernels + o.kernels, self.flops + o.flops, self.hbm_bytes + o.hbm_bytes)


ZERO = RecipeCost(0, 0, 0, 0, 0, 0)


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE.get(dtype, 4)


def recipe_cost(summary, card: Card, fusion: bool = True, eff: Optional[Dict[str, float]] = None) -> RecipeCost:
    """Modeled device time of one launch of a recipe whose graph is ``summary`` (a GraphSummary)."""
    e = dict(EFFICIENCY, **(eff or {}))
    bw = card.hbm_bw * e["hbm"]
    nodes = summary.nodes if summary is not None else ()
    consumers: Dict[int, set] = {}
    for a, b in summary.edges if summary is not None else ():
        consumers.setdefault(a, set()).add(b)
    out_nodes = {n.index for n in nodes if n.op == "output"}
    mme_ns = tpc_ns = kernels = flops_total = bytes_total = 0
    clusters: Dict[int, list] = {}
    for n in nodes:
        if n.op in ("input", "output") or n.engine in ("", "CPU") or n.tensor_class == "alias":
            continue
        if n.engine == "MME":
            fl = mme_flops(n.op, n.shape, n.in_shapes)
            by = sum(n.in_bytes) + n.out_bytes
            t = max(fl / (card.mme_rate(n.dtype or "float32") * e["mme"]), by / bw)
            mme_ns += int(t * 1e9) + card.kernel_ns
            kernels += 1
            flops_total += fl
            bytes_total += by
            continue
        if fusion and n.cluster >= 0:
            clusters.setdefault(n.cluster, []).append(n)
            continue
        fl = vector_flops(n.op, max([_numel(n.shape)] + [_numel(s) for s in n.in_shapes]))
        by = sum(n.in_bytes) + n.out_bytes
        t = max(by / bw, fl / (card.vector_rate(n.dtype or "float32") * e["tpc"]))
        tpc_ns += int(t * 1e9) + card.kernel_ns
        kernels += 1
        flops_total += fl
        bytes_total += by
    for members in clusters.values():
        inside = {m.index for m in members}
        read: Dict[int, int] = {}
        for m in members:
            for src, b in zip(m.inputs, m.in_bytes):
                if src not in inside:
                    read[src] = max(read.get(src, 0), b)     # each entering tensor read once
        written = sum(m.out_bytes for m in members
                      if (consumers.get(m.index, set()) - inside) or m.index in out_nodes)
        by = sum(read.values()) + written
        fl = sum(vector_flops(m.op, max([_numel(m.shape)] + [_numel(s) for s in m.in_shapes])) for m in members)
        dtype = members[-1].dtype or "float32"
        t = max(by / bw, fl / (card.vector_rate(dtype) * e["tpc"]))
        tpc_ns += int(t * 1e9) + card.kernel_ns
        kernels += 1
        flops_total += fl
        bytes_total += by
    return RecipeCost(card.recipe_launch_ns + mme_ns + tpc_ns, mme_ns, tpc_ns, kernels, flops_total, bytes_total)


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
