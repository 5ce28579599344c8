"""``torch.ops.hpu.*``: the bridge's custom ops that LLM code calls, as reference implementations.

optimum-habana's model code (and Intel's own tests) call these fused TPC kernels directly. Here each is
a torch custom op in the ``hpu`` namespace (``torch.library``) with a Meta kernel (shapes, for the lazy
graph) and a CPU kernel written in plain torch ops, with the semantics learned from the bridge's
schemas and tests. On an "hpu" tensor each call is ONE node of the lazy graph, as the fused kernel is.

Numerics: the kernels compute in float32 and round once to the output dtype, so a bf16/fp16 result is
the exact value rounded (the real TPC kernels approximate exp/reciprocal, e.g. with lookup tables in
``mode``s 1 and 15 of ``scaled_masked_triangular_softmax``: those modes are accepted and computed
exactly). ``*_fast_math`` ops are the exact functions here.

Ops:
- ``scaled_triangular_softmax(self, inv_scale_attn, exp_sum_recpr=None, max=None)``: causal softmax of
  ``self * inv_scale_attn`` over the last dim (query i sees keys j <= i); given the retained
  ``exp_sum_recpr`` and ``max`` of an earlier call it reuses them instead of reducing again.
- ``scaled_triangular_softmax_retain(self, inv_scale_attn) -> (out, exp_sum_recpr, max)``: the same,
  also returning the row maximum (input dtype) and 1/sum of exponentials (float32), shaped [..., 1].
- ``scaled_masked_triangular_softmax(self, start_end, inv_scale_attn, grouped_batch_size, use_max,
  mode, out_dtype=None)``: softmax of ``self * inv_scale_attn`` over keys ``start <= j < end`` (one
  [start, end] pair per group of ``grouped_batch_size`` batch entries), causal with the last query on
  the last key; a row with no key left is all zeros (as the kernel, where softmax would give 1/n).
- ``scaled_masked_softmax(input, mask, scale)``: ``softmax(input * scale + mask)``; ``mask`` is additive
  (a bool mask is refused at the call: added, it would be a 0/1 bias).
- ``kv_reorder_(self, start, end, beam_idx)`` / ``kv_reorder``: beam search's KV-cache reorder. For
  batch entry b, along dim -2 rows ``start[b] <= s < end[b]`` of the beams (dim 1) are replaced by
  those of the source beams packed in ``beam_idx[b]`` (uint8, 2 bits per beam, beam 0 in the high
  bits: at most 4 beams).
- ``mixture_of_experts(hidden_states, expert_routing_table, router_weights, w1, w2, w3,
  permuted_weights, activation, experts_min, experts_max)`` (and ``.fused_weights`` with w12 = [w1|w2]):
  Mixtral's sparse MoE block: ``sum_k router_weights[t,k] * ((act(x@w1[e]) * (x@w2[e])) @ w3[e])``
  over the chosen experts e = routing_table[t,k] in [experts_min, experts_max] (the experts this
  card holds). ``permuted_weights``: weights are stored transposed ([out, in]).
- ``exp_fast_math``, ``sqrt_fast_math``, ``rsqrt_fast_math``.
- ``in_place_interleave_(self)`` / ``in_place_interleave``: each group of 4 consecutive entries of
  dim 0 becomes 4 copies of the group's first entry.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._common import device_kernel

LIB = torch.library.Library("hpu", "FRAGMENT")


def _define(schema: str, cpu, meta) -> None:
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, device_kernel(cpu), "CPU")
    LIB.impl(name, meta, "Meta")


def _same(x, *_, **__):
    return torch.empty_like(x)


# ---------------------------------------------------------------- softmax variants

def _masked_softmax_f32(s, keep):
    """softmax of float32 scores ``s`` over the last dim where ``keep``; fully masked rows give 0.
    Returns (probabilities, row max, 1/row sum)."""
    s = s.masked_fill(~keep, float("-inf"))
    mx = s.amax(-1, keepdim=True)
    e = torch.exp(s - mx.masked_fill(torch.isinf(mx), 0.0))
    total = e.sum(-1, keepdim=True)
    recpr = torch.where(total > 0, 1.0 / total, torch.zeros_like(total))
    return e * recpr, mx, recpr


def _causal(shape, device=None):
    """keep[i, j] = key j visible to query i, the last query aligned with the last key."""
    q, k = shape[-2], shape[-1]
    return torch.ones(q, k, dtype=torch.bool, device=device).tril(k - q)


def _tri_softmax(x, inv_scale, exp_sum_recpr=None, max=None):  # noqa: A002 - the schema's name
    s = x.float() * inv_scale
    keep = _causal(x.shape)
    if exp_sum_recpr is None and max is None:
        p, _, _ = _tri_softmax_retain(x, inv_scale)
        return p
    if exp_sum_recpr is None or max is None:
        raise RuntimeError("scaled_triangular_softmax: exp_sum_recpr and max are given together or not at all")
    e = torch.exp(s - max.float()).masked_fill(~keep, 0.0)
    return (e * exp_sum_recpr.float()).to(x.dtype)


def _tri_softmax_retain(x, inv_scale):
    s = (x.float() * inv_scale).masked_fill(~_causal(x.shape), float("-inf"))
    # the kept max is in the input dtype: the probabilities are computed from that rounded max, so
    # that recomputing from (max, exp_sum_recpr) gives the same bits
    mx = s.amax(-1, keepdim=True).to(x.dtype)
    e = torch.exp(s - mx.float())
    recpr = 1.0 / e.sum(-1, keepdim=True)
    return (e * recpr).to(x.dtype), recpr, mx


def _tri_softmax_retain_meta(x, inv_scale):
    r = x.shape[:-1] + (1,)
    return torch.empty_like(x), x.new_empty(r, dtype=torch.float32), x.new_empty(r)


def _masked_tri_softmax(x, start_end, inv_scale, grouped_batch_size, use_max, mode, out_dtype=None):
    if x.dim() != 3:
        raise RuntimeError(f"scaled_masked_triangular_softmax: expected a 3-D input [batch, q, k], got {list(x.shape)}")
    if mode not in (0, 1, 15):
        raise RuntimeError(f"scaled_masked_triangular_softmax: mode must be 0, 1 or 15, got {mode}")
    b, _, k = x.shape
    se = start_end.reshape(-1, 2).long()
    if grouped_batch_size <= 0 or b % grouped_batch_size or se.shape[0] != b // grouped_batch_size:
        raise RuntimeError(f"scaled_masked_triangular_softmax: {b} batch entries in groups of "
                           f"{grouped_batch_size} need {max(b // max(grouped_batch_size, 1), 1)} [start, end] pairs, "
                           f"got {se.shape[0]}")
    se = se.repeat_interleave(grouped_batch_size, dim=0)                  # [b, 2]
    j = torch.arange(k)
    window = (j >= se[:, :1]) & (j < se[:, 1:])                          # [b, k]
    keep = window[:, None, :] & _causal(x.shape)
    p, _, _ = _masked_softmax_f32(x.float() * inv_scale, keep)
    return p.to(out_dtype if out_dtype is not None else x.dtype)


def _masked_tri_softmax_meta(x, start_end, inv_scale, grouped_batch_size, use_max, mode, out_dtype=None):
    return x.new_empty(x.shape, dtype=out_dtype if out_dtype is not None else x.dtype)


def _additive_mask_only(mask) -> None:
    # the kernel adds ``mask`` (the bridge's test: a 0/1 mask cast to bf16 is a bias). A bool mask
    # would be added as 0/1 too, where attention code means "keep / mask out": refused, not guessed
    if mask.dtype == torch.bool:
        raise TypeError("hpu::scaled_masked_softmax: mask is added to input * scale (an additive mask, in "
                        "the input's dtype); got a bool mask. Convert it first, e.g. "
                        "torch.zeros_like(x).masked_fill(~mask, float('-inf')) for True = attend")


def _scaled_masked_softmax(x, mask, scale):
    _additive_mask_only(mask)
    return torch.softmax(x.float() * scale + mask.float(), dim=-1).to(x.dtype)


def _scaled_masked_softmax_meta(x, mask, scale):
    _additive_mask_only(mask)
    return torch.empty_like(x)


_define("scaled_triangular_softmax(Tensor self, float inv_scale_attn, Tensor? exp_sum_recpr=None, "
        "Tensor? max=None) -> Tensor", _tri_softmax, _same)
_define("scaled_triangular_softmax_retain(Tensor self, float inv_scale_attn) -> (Tensor, Tensor, Tensor)",
        _tri_softmax_retain, _tri_softmax_retain_meta)
_define("scaled_masked_triangular_softmax(Tensor self, Tensor start_end, float inv_scale_attn, "
        "int grouped_batch_size, bool use_max, int mode, ScalarType? out_dtype=None) -> Tensor",
        _masked_tri_softmax, _masked_tri_softmax_meta)
_define("scaled_masked_softmax(Tensor input, Tensor mask, float scale) -> Tensor", _scaled_masked_softmax,
        _scaled_masked_softmax_meta)


# ---------------------------------------------------------------- KV cache and interleave

def _bits(x):
    """Move rows by their bits: index_select has no fp8 kernel on the CPU, and a copy is a copy."""
    if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return x.view(torch.uint8)
    return x


def _kv_reorder_(x, start, end, beam_idx):
    if x.dim() < 3:
        raise RuntimeError(f"kv_reorder: expected [batch, beams, ..., seq, dim], got {list(x.shape)}")
    beams = x.shape[1]
    if beams > 4:
        raise RuntimeError(f"kv_reorder: beam_idx packs 4 beams of 2 bits into a uint8; got {beams} beams")
    xb = _bits(x)
    packed = beam_idx.reshape(-1).long()
    for b in range(x.shape[0]):
        s, e = int(start[b]), int(end[b])
        if not 0 <= s <= e <= x.shape[-2]:
            raise RuntimeError(f"kv_reorder: rows [{s}, {e}) of batch {b} are outside 0..{x.shape[-2]}")
        src = torch.tensor([(int(packed[b]) >> (2 * (3 - j))) & 3 for j in range(beams)])
        rows = xb[b].narrow(-2, s, e - s)
        rows.copy_(rows.index_select(0, src))
    return x


def _kv_reorder(x, start, end, beam_idx):
    return _kv_reorder_(x.clone(), start, end, beam_idx)


def _interleave_(x):
    if x.shape[0] % 4:
        raise RuntimeError(f"in_place_interleave: dim 0 must be a multiple of 4, got {x.shape[0]}")
    xb = _bits(x)
    xb.copy_(xb[::4].repeat_interleave(4, dim=0))
    return x


def _interleave(x):
    return _interleave_(x.clone())


_define("kv_reorder_(Tensor(a!) self, Tensor start, Tensor end, Tensor beam_idx) -> Tensor(a!)",
        _kv_reorder_, lambda x, *a: x)
_define("kv_reorder(Tensor self, Tensor start, Tensor end, Tensor beam_idx) -> Tensor", _kv_reorder, _same)
_define("in_place_interleave_(Tensor(a!) self) -> Tensor(a!)", _interleave_, lambda x: x)
_define("in_place_interleave(Tensor self) -> Tensor", _interleave, _same)


# ---------------------------------------------------------------- fast-math elementwise

for _name, _fn in (("exp", torch.exp), ("sqrt", torch.sqrt), ("rsqrt", torch.rsqrt)):
    _define(f"{_name}_fast_math(Tensor self) -> Tensor",
            (lambda f: lambda x: f(x.float()).to(x.dtype) if x.dtype in (torch.bfloat16, torch.float16) else f(x))(_fn),
            _same)


# ---------------------------------------------------------------- mixture of experts

_ACT = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}


def _expert_mlp(x, w1, w2, w3, permuted, act):
    def mm(a, w):
        return a @ (w.t() if permuted else w)
    return mm(act(mm(x, w1)) * mm(x, w2), w3)


def _moe_core(x, table, weights, w1, w2, w3, permuted, activation, lo, hi):
    if activation not in _ACT:
        raise RuntimeError(f"mixture_of_experts: activation must be one of {', '.join(_ACT)}, got {activation!r}")
    if not (len(w1) == len(w2) == len(w3) == hi - lo + 1):
        raise RuntimeError(f"mixture_of_experts: experts {lo}..{hi} need {hi - lo + 1} weights each, "
                           f"got w1: {len(w1)}, w2: {len(w2)}, w3: {len(w3)}")
    act = _ACT[activation]
    xf = x.float()
    out = torch.zeros_like(xf)
    amax = torch.zeros(hi - lo + 1, dtype=torch.float32)
    for i, e in enumerate(range(lo, hi + 1)):
        tok, slot = torch.where(table == e)
        ws = [w.float() for w in (w1[i], w2[i], w3[i])]
        if tok.numel():
            y = _expert_mlp(xf[tok], *ws, permuted, act) * weights[tok, slot, None].float()
            out.index_add_(0, tok, y)
        h = act(xf @ (ws[0].t() if permuted else ws[0])) * (xf @ (ws[1].t() if permuted else ws[1]))
        amax[i] = h.amax()
    return out.to(x.dtype), amax


def _split12(w12, permuted):
    dim = 0 if permuted else 1
    return [w.chunk(2, dim=dim)[0] for w in w12], [w.chunk(2, dim=dim)[1] for w in w12]


def _moe(x, table, weights, w1, w2, w3, permuted, activation, lo, hi):
    return _moe_core(x, table, weights, w1, w2, w3, permuted, activation, lo, hi)[0]


def _moe_fused(x, table, weights, w12, w3, permuted, activation, lo, hi):
    w1, w2 = _split12(w12, permuted)
    return _moe_core(x, table, weights, w1, w2, w3, permuted, activation, lo, hi)[0]


def _moe_measure(x, table, weights, w1, w2, w3, permuted, activation, lo, hi, measurement_mode):
    return _moe_core(x, table, weights, w1, w2, w3, permuted, activation, lo, hi)


def _moe_fused_measure(x, table, weights, w12, w3, permuted, activation, lo, hi, measurement_mode):
    w1, w2 = _split12(w12, permuted)
    return _moe_core(x, table, weights, w1, w2, w3, permuted, activation, lo, hi)


def _moe_meta(x, *a):
    return torch.empty_like(x)


def _moe_measure_meta(x, table, weights, w1, *rest):
    lo, hi = rest[-3], rest[-2]
    return torch.empty_like(x), x.new_empty((hi - lo + 1,), dtype=torch.float32)


_MOE = ("Tensor hidden_states, Tensor expert_routing_table, Tensor router_weights, {w}, bool permuted_weights, "
        "str activation, int experts_min, int experts_max")
_W3 = "Tensor[] w1, Tensor[] w2, Tensor[] w3"
_W12 = "Tensor[] w12, Tensor[] w3"
LIB.define(f"mixture_of_experts({_MOE.format(w=_W3)}) -> Tensor")
LIB.define(f"mixture_of_experts.fused_weights({_MOE.format(w=_W12)}) -> Tensor")
LIB.define(f"mixture_of_experts.fp8_measurement({_MOE.format(w=_W3)}, bool measurement_mode) -> (Tensor, Tensor)")
LIB.define(f"mixture_of_experts.fp8_measurement_fused_weights({_MOE.format(w=_W12)}, bool measurement_mode) "
           "-> (Tensor, Tensor)")
for _ov, _cpu, _meta in (("mixture_of_experts", _moe, _moe_meta),
                         ("mixture_of_experts.fused_weights", _moe_fused, _moe_meta),
                         ("mixture_of_experts.fp8_measurement", _moe_measure, _moe_measure_meta),
                         ("mixture_of_experts.fp8_measurement_fused_weights", _moe_fused_measure, _moe_measure_meta)):
    LIB.impl(_ov, device_kernel(_cpu), "CPU")
    LIB.impl(_ov, _meta, "Meta")


# ---------------------------------------------------------------- RMS norm (hpex FusedRMSNorm)
#   y = x * gamma / sqrt(mean(x^2, -1) + eps); kept for backward: 1/rms (float32, [..., 1])

def _rms_norm(x, gamma, eps):
    xf = x.float()
    inv = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (xf * inv * gamma.float()).to(x.dtype), inv


def _rms_norm_meta(x, gamma, eps):
    return torch.empty_like(x), x.new_empty(x.shape[:-1] + (1,), dtype=torch.float32)


def _rms_norm_backward(grad, x, gamma, inv, use_stages, bwd_mode):
    g, xf, inv = grad.float(), x.float(), inv.float()
    gg = g * gamma.float()
    dx = inv * gg - xf * inv.pow(3) * (gg * xf).mean(-1, keepdim=True)
    dgamma = (g * xf * inv).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dgamma.to(gamma.dtype)


def _rms_norm_backward_meta(grad, x, gamma, inv, use_stages, bwd_mode):
    return torch.empty_like(x), torch.empty_like(gamma)


for _suffix in ("", "_fast"):    # the fast-math variants: the same exact computation here
    _define(f"rms_norm{_suffix}(Tensor data_in, Tensor gamma, float epsilon) -> (Tensor, Tensor)",
            _rms_norm, _rms_norm_meta)
    _define(f"rms_norm{_suffix}_backward(Tensor grad_in, Tensor data_in, Tensor gamma, Tensor inverse_rms, "
            "bool use_stages, int bwd_mode) -> (Tensor, Tensor)", _rms_norm_backward, _rms_norm_backward_meta)


# ---------------------------------------------------------------- rotary position embedding
#   mode 0 (BLOCKWISE, GPT-NeoX/LLaMA): out = p*cos + rotate_half(p)*sin, rotate_half(x) = [-x2, x1]
#   mode 1 (PAIRWISE, GPT-J): out = p*cos + rotate_every_two(p)*sin, pairs (x[2i], x[2i+1]) -> (-x[2i+1], x[2i])
#   cos/sin: with position_ids [b, s], rows position_ids of a [..., positions, dim] table (leading dims 1),
#   as [b, 1, s, dim]; without, the last dim from ``offset`` (as many values as p has)

def _rope_tables(p, sin, cos, position_ids, offset):
    if position_ids is not None:
        def pick(t):
            return t.reshape(t.shape[-2], t.shape[-1])[position_ids.long()].unsqueeze(1)
        return pick(sin.float()), pick(cos.float())
    d = p.shape[-1]
    return sin.float()[..., offset:offset + d], cos.float()[..., offset:offset + d]


def _rotate(x, mode, transpose=False):
    if mode == 0:
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((x2, -x1), -1) if transpose else torch.cat((-x2, x1), -1)
    if mode == 1:
        even, odd = x[..., ::2], x[..., 1::2]
        pairs = torch.stack((odd, -even), -1) if transpose else torch.stack((-odd, even), -1)
        return pairs.flatten(-2)
    raise RuntimeError(f"rotary_pos_embedding: mode must be 0 (BLOCKWISE) or 1 (PAIRWISE), got {mode}")


def _rope(p, sin, cos, position_ids, offset, mode):
    s, c = _rope_tables(p, sin, cos, position_ids, offset)
    pf = p.float()
    return (pf * c + _rotate(pf, mode) * s).to(p.dtype)


def _rope_backward(g, sin, cos, position_ids, offset, mode):
    s, c = _rope_tables(g, sin, cos, position_ids, offset)
    gf = g.float()
    return (gf * c + _rotate(gf * s, mode, transpose=True)).to(g.dtype)


_define("rotary_pos_embedding(Tensor input, Tensor sin, Tensor cos, Tensor? position_ids, int offset, int mode) "
        "-> Tensor", _rope, _same)
_define("rotary_pos_embedding_backward(Tensor grad_in, Tensor sin, Tensor cos, Tensor? position_ids, int offset, "
        "int mode) -> Tensor", _rope_backward, _same)


# ---------------------------------------------------------------- hpex CustomSoftmax, FusedEMA

def _custom_softmax(x, flavor):
    if flavor not in (0, 1):
        raise RuntimeError(f"custom_softmax: flavor must be 0 (exp) or 1 (non-LUT approximation), got {flavor}")
    return torch.softmax(x.float(), -1).to(x.dtype)


_define("custom_softmax(Tensor input, int flavor) -> Tensor", _custom_softmax, _same)


def _optimizer_ema(model_inputs, updated_ema, decay):
    # ema = d * ema + (1 - d) * model, for the floating-point entries of a state dict
    d = decay.reshape(()).float()
    for m, e in zip(model_inputs, updated_ema):
        if e.is_floating_point():
            e.copy_((e.float() * d + (1.0 - d) * m.float()).to(e.dtype))


_define("optimizer_ema(Tensor[] model_inputs, Tensor(a!)[] updated_ema, Tensor decay) -> ()",
        _optimizer_ema, lambda *a: None)


# ---------------------------------------------------------------- int4 weights (GPTQ/AWQ dequantization)
#   convert_from_(u)int4(input, scale, zero_point, out_dtype): each int32 of ``input`` packs 8 4-bit
#   values, the first in the lowest bits; out[..., 8*i + j] = (v - zero_point) * scale in out_dtype.
#   zero_point: None (0), packed like the input (int32; the subtraction is exact in 8 bits), or a
#   tensor of the unpacked shape in out_dtype (subtracted in out_dtype, as the kernel does)

def _unpack4(packed, signed):
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    v = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & 0xF                  # [..., n, 8]
    if signed:
        v = torch.where(v > 7, v - 16, v)
    return v.flatten(-2)


def _from_4bit(signed):
    def kernel(x, scale, zero_point, out_dtype):
        if x.dtype != torch.int32:
            raise RuntimeError(f"convert_from_{'' if signed else 'u'}int4: input must be int32 (8 packed values), "
                               f"got {x.dtype}")
        v = _unpack4(x, signed)

        def per_row(t):
            # group-wise parameters (GPTQ: one row per group of ``group_size`` input rows)
            if t.dim() >= 2 and v.dim() >= 2 and t.shape[-2] != v.shape[-2] and t.shape[-2] \
                    and v.shape[-2] % t.shape[-2] == 0:
                return t.repeat_interleave(v.shape[-2] // t.shape[-2], dim=-2)
            return t
        if zero_point is None:
            sub = v.to(out_dtype)
        elif zero_point.dtype == torch.int32:
            sub = (v - per_row(_unpack4(zero_point, signed))).to(out_dtype)
        else:
            sub = v.to(out_dtype) - per_row(zero_point.to(out_dtype))
        return sub * per_row(scale.to(out_dtype))
    return kernel


def _from_4bit_meta(x, scale, zero_point, out_dtype):
    return x.new_empty(x.shape[:-1] + (x.shape[-1] * 8,), dtype=out_dtype)


for _signed, _name in ((True, "convert_from_int4"), (False, "convert_from_uint4")):
    _define(f"{_name}(Tensor input, Tensor scale, Tensor? zero_point, ScalarType out_dtype) -> Tensor",
            _from_4bit(_signed), _from_4bit_meta)


def _plain_index(x, indices):
    return torch.ops.aten.index.Tensor(x, indices)


def _plain_index_meta(x, indices):
    return torch.ops.aten.index.Tensor(x, indices)


_define("plain_index(Tensor self, Tensor[] indices) -> Tensor", _plain_index, _plain_index_meta)


# ---------------------------------------------------------------- fp8 reduction
#   sum_fp8(self, dim=None, keepdim=False, out_dtype=None): Gaudi 2/3 sum fp8 values in float32 and
#   round the sum once to out_dtype (the input's fp8 dtype if None). The CPU has no fp8 sum kernel;
#   float32 holds every fp8 value exactly, so this is the float32 sum rounded as torch's cast rounds.

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _sum_fp8(x, dim=None, keepdim=False, out_dtype=None):
    if x.dtype not in _FP8:
        raise RuntimeError(f"sum_fp8: input must be float8_e4m3fn or float8_e5m2, got {x.dtype}")
    return torch.sum(x.float(), dim, keepdim).to(out_dtype if out_dtype is not None else x.dtype)


def _sum_fp8_meta(x, dim=None, keepdim=False, out_dtype=None):
    shape = torch.sum(torch.empty(x.shape, device="meta"), dim, keepdim).shape
    return x.new_empty(shape, dtype=out_dtype if out_dtype is not None else x.dtype)


_define("sum_fp8(Tensor self, int[1]? dim=None, bool keepdim=False, ScalarType? out_dtype=None) -> Tensor",
        _sum_fp8, _sum_fp8_meta)


# ---------------------------------------------------------------- LAMB (hpex FusedLamb's kernels)
#   optimizer_lamb_fused_norm(grads, max_norm): the global gradient norm ||g|| over all tensors and
#     its clip divisor: [||g|| / max_norm] if ||g|| > max_norm else [1], shape [1], grads' dtype.
#   optimizer_lamb_phase1: per tensor, g / clip -> Adam moments (m = b1 m + b3 g, b3 = 1 - b1 with
#     grad_averaging else 1; v = b2 v + (1 - b2) g^2), the bias-corrected Adam step
#     u = (m / bc1) / (sqrt(v / bc2) + eps) (+ wd w), and the norms ||w||, ||u|| into the out lists.
#   optimizer_lamb_phase2: w += u * neg_step * trust, trust = ||w|| / ||u|| when both are positive
#     and (wd != 0 or use_lamb), else 1.
#   Each runs op for op in the tensors' own dtype (a bf16 model's kernels compute in bf16).

def _lamb_norm(grads, max_norm):
    if not grads:
        raise RuntimeError("optimizer_lamb_fused_norm: expected at least one gradient")
    total = torch.zeros(1, dtype=grads[0].dtype)
    for g in grads:
        total.add_(g.pow(2).sum())
    total = total.sqrt()
    return total / max_norm if bool(total > max_norm) else torch.ones(1, dtype=grads[0].dtype)


def _lamb_phase1(grads, weights, exp_avg, exp_avg_sq, w_norms, u_norms, u_steps, clip, grad_averaging,
                 beta1, beta2, eps, bc1, bc2, weight_decay):
    beta3 = 1.0 - beta1 if grad_averaging else 1.0
    for g, w, m, v, wn, un, u in zip(grads, weights, exp_avg, exp_avg_sq, w_norms, u_norms, u_steps):
        g = g / clip
        m.mul_(beta1).add_(g, alpha=beta3)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        step = (m / bc1) / (v / bc2).sqrt().add_(eps)
        if weight_decay != 0:
            step.add_(w, alpha=weight_decay)
        wn.copy_(w.norm().reshape(wn.shape))
        un.copy_(step.norm().reshape(un.shape))
        u.copy_(step)


def _lamb_phase2(weights, u_norms, w_norms, u_steps, neg_step, weight_decay, use_lamb):
    for w, un, wn, u in zip(weights, u_norms, w_norms, u_steps):
        trust = wn / un if (weight_decay != 0 or use_lamb) and bool(un > 0) and bool(wn > 0) else 1.0
        w.add_(u * neg_step * trust)


_define("optimizer_lamb_fused_norm(Tensor[] grad, float max_norm) -> Tensor", _lamb_norm,
        lambda grads, max_norm: grads[0].new_empty((1,)))
_define("optimizer_lamb_phase1(Tensor[] gradients, Tensor[] weights, Tensor(a!)[] exp_avg, Tensor(b!)[] exp_avg_sq, "
        "Tensor(c!)[] out_weight_norms, Tensor(d!)[] out_adam_norms, Tensor(e!)[] out_adam_steps, "
        "Tensor clip_global_grad_norm, int grad_averaging, float beta1, float beta2, float epsilon, "
        "Tensor bias_correction1, Tensor bias_correction2, float weight_decay) -> ()",
        _lamb_phase1, lambda *a: None)
_define("optimizer_lamb_phase2(Tensor(a!)[] weights, Tensor[] adam_norms, Tensor[] weight_norms, "
        "Tensor[] adam_steps, Tensor neg_step, float wd, bool use_lamb) -> ()", _lamb_phase2, lambda *a: None)
