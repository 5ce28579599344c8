"""``torch.ops.hpu.optimizer_adamw``: the bridge's fused AdamW kernel, which DeepSpeed's HPU FusedAdam
(deepspeed/ops/op_builder/hpu/fused_adam.py, DeepSpeed's default optimizer on hpu) calls directly.

Two schemas, as the bridge has them, and DeepSpeed calls both:

- eager / torch.compile (``eager_custom_op_register.cpp``): ``optimizer_adamw(gradient_vec, weight_vec,
  exp_avg_vec, exp_avg_sq_vec, Tensor neg_step_t, float beta1, float beta2, float epsilon,
  Tensor weight_decay, bool has_weight_decay, exp_avg_scales=None, exp_avg_sq_scales=None)``;
- lazy (``kernels_register.cpp``): the same with ``float weight_decay`` and no ``has_weight_decay``
  (here the overload ``optimizer_adamw.lazy``; ``torch.ops.hpu.optimizer_adamw(...)`` picks it by
  its arguments). The weight is decayed when ``weight_decay != 1.0``.

Per tensor, in the order of the kernel's nodes (hpu_ops/backend/optimizer_adamw_gen.cpp)::

    m = m * beta1 + g * (1 - beta1)
    v = v * beta2 + (g * g) * (1 - beta2)
    w = (w * weight_decay if decayed else w) + (m / (sqrt(v) + epsilon)) * neg_step

``weight_decay`` is the caller's decoupled factor ``1 - lr * wd`` and ``neg_step`` the negative
bias-corrected step size (the caller folds the bias corrections into it). The fp8 moments
(``exp_avg_scales``) are not emulated: passing them fails, saying so.

One node of the lazy graph for the whole parameter list (the schema declares the written lists);
the CPU kernel runs those ops on the device's tensors, so hpu equals the same kernel on CPU.
"""
from __future__ import annotations

import torch

from ._common import device_kernel

LIB = torch.library.Library("hpu", "FRAGMENT")


def _check(grads, weights, exp_avgs, exp_avg_sqs, exp_avg_scales, exp_avg_sq_scales):
    """The bridge's TORCH_CHECKs, at the call (the Meta kernel runs them while the op is traced)."""
    if not weights:
        raise RuntimeError("optimizer_adamw : can not process empty weight vector")
    if (exp_avg_scales is None) != (exp_avg_sq_scales is None):
        raise RuntimeError("optimizer_adamw : expects both or neighter scales to be set")
    if exp_avg_scales is not None:
        raise RuntimeError("optimizer_adamw: fp8 moments (exp_avg_scales / exp_avg_sq_scales) are not "
                           "emulated by hpu_lab; keep the moments in float32 or bfloat16")
    if not (len(grads) == len(weights) == len(exp_avgs) == len(exp_avg_sqs)):
        raise RuntimeError(f"All 4 vector inputs must have the same number of elements but they respectively "
                           f"have: {len(grads)}, {len(weights)}, {len(exp_avgs)}, {len(exp_avg_sqs)}")


def _adamw(grads, weights, exp_avgs, exp_avg_sqs, neg_step_t, beta1, beta2, epsilon, weight_decay,
           has_weight_decay, exp_avg_scales=None, exp_avg_sq_scales=None):
    _check(grads, weights, exp_avgs, exp_avg_sqs, exp_avg_scales, exp_avg_sq_scales)
    for g, w, m, v in zip(grads, weights, exp_avgs, exp_avg_sqs):
        dt = w.dtype
        step = neg_step_t.to(dt)
        m.copy_(m * beta1 + g * (1 - beta1))
        v.copy_(v * beta2 + (g * g) * (1 - beta2))
        ratio = m / (v.sqrt() + epsilon)
        base = w * (weight_decay.to(dt) if isinstance(weight_decay, torch.Tensor) else weight_decay) \
            if has_weight_decay else w
        w.copy_(base + ratio * step)


def _adamw_eager(grads, weights, exp_avgs, exp_avg_sqs, neg_step_t, beta1, beta2, epsilon, weight_decay,
                 has_weight_decay, exp_avg_scales=None, exp_avg_sq_scales=None):
    _adamw(grads, weights, exp_avgs, exp_avg_sqs, neg_step_t, beta1, beta2, epsilon, weight_decay,
           has_weight_decay, exp_avg_scales, exp_avg_sq_scales)


def _adamw_lazy(grads, weights, exp_avgs, exp_avg_sqs, neg_step_t, beta1, beta2, epsilon, weight_decay,
                exp_avg_scales=None, exp_avg_sq_scales=None):
    _adamw(grads, weights, exp_avgs, exp_avg_sqs, neg_step_t, beta1, beta2, epsilon, weight_decay,
           weight_decay != 1.0, exp_avg_scales, exp_avg_sq_scales)


def _meta(grads, weights, exp_avgs, exp_avg_sqs, *rest):
    scales = [a for a in rest if isinstance(a, (list, tuple))] + [None, None]
    _check(grads, weights, exp_avgs, exp_avg_sqs, scales[0], scales[1])


_LISTS = ("Tensor[] gradient_vec, Tensor(a!)[] weight_vec, Tensor(b!)[] exp_avg_vec, Tensor(c!)[] exp_avg_sq_vec, "
          "Tensor neg_step_t, float beta1, float beta2, float epsilon, ")
# the fp8 moments are refused (not emulated), so they are not declared written here
_SCALES = "Tensor[]? exp_avg_scales=None, Tensor[]? exp_avg_sq_scales=None) -> ()"

for _schema, _kernel in ((f"optimizer_adamw({_LISTS}Tensor weight_decay, bool has_weight_decay, {_SCALES}",
                          _adamw_eager),
                         (f"optimizer_adamw.lazy({_LISTS}float weight_decay, {_SCALES}", _adamw_lazy)):
    LIB.define(_schema)
    _name = _schema.split("(", 1)[0]
    LIB.impl(_name, device_kernel(_kernel), "CPU")
    LIB.impl(_name, _meta, "Meta")
