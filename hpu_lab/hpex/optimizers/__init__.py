"""FusedAdamW, FusedSGD, FusedAdagrad and FusedLamb (habana_frameworks.torch.hpex.optimizers).

torch.optim's AdamW on an hpu tensor traces some ten small ops per parameter every step; these
optimizers trace ONE op for the whole parameter group (``hpu_lab::optimizer_adamw_``,
``hpu_lab::optimizer_sgd_``, ``hpu_lab::optimizer_sgd_momentum_``): a single node of the lazy graph
instead of hundreds, which is the host-time saving seed 003 describes.

Numbers: the CPU kernels run exactly the per-parameter ops of torch.optim's single-tensor AdamW
and SGD, so results equal ``torch.optim.AdamW(eps=1e-6)`` / ``torch.optim.SGD`` on CPU. (The real
FusedAdamW adds eps before the bias correction of the denominator, a slightly different formula;
hpu_lab follows torch so the two can be compared.) The step-dependent scalars are computed on the
host, as the real optimizers do, and passed as a small device tensor: a new learning rate or step
count does not change the graph, so it does not recompile.

As the real ones, both call mark_step before and after the update in lazy mode.
"""
from __future__ import annotations

import torch
from torch.optim import Optimizer
from torch.optim.optimizer import required

from ...kernels._common import define, mark_step_if_lazy

__all__ = ["FusedAdagrad", "FusedAdamW", "FusedLamb", "FusedSGD"]


# ---------------------------------------------------------------- kernels (run on the device)

def _adamw_cpu(params, exp_avgs, exp_avg_sqs, grads, scalars, beta1, beta2, eps, decay):
    step_size, bc2_sqrt, decay_factor = scalars.tolist()
    for p, m, v, g in zip(params, exp_avgs, exp_avg_sqs, grads):
        # torch.optim.adam._single_tensor_adam with decoupled weight decay, op for op
        if decay:
            p.mul_(decay_factor)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / bc2_sqrt).add_(eps)
        p.addcdiv_(m, denom, value=-step_size)


def _sgd_cpu(params, grads, lr, weight_decay):
    lr = lr.item()
    for p, g in zip(params, grads):
        if weight_decay != 0:
            g = g.add(p, alpha=weight_decay)
        p.add_(g, alpha=-lr)


def _sgd_momentum_cpu(params, bufs, grads, lr, weight_decay, momentum, dampening, nesterov, first):
    lr = lr.item()
    for p, buf, g, new in zip(params, bufs, grads, first):
        # torch.optim.sgd._single_tensor_sgd, op for op; a new buffer starts at grad
        if weight_decay != 0:
            g = g.add(p, alpha=weight_decay)
        if new:
            buf.copy_(g)
        else:
            buf.mul_(momentum).add_(g, alpha=1 - dampening)
        g = g.add(buf, alpha=momentum) if nesterov else buf
        p.add_(g, alpha=-lr)


def _adagrad_cpu(params, state_sums, grads, clr, weight_decay, eps):
    clr = clr.item()
    for p, s, g in zip(params, state_sums, grads):
        # torch.optim.adagrad._single_tensor_adagrad (dense), op for op
        if weight_decay != 0:
            g = g.add(p, alpha=weight_decay)
        s.addcmul_(g, g, value=1)
        p.addcdiv_(g, s.sqrt().add_(eps), value=-clr)


def _no_output(*args, **kwargs):
    return None


define("optimizer_adamw_(Tensor(a!)[] params, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
       "Tensor[] grads, Tensor scalars, float beta1, float beta2, float eps, bool decay) -> ()",
       _adamw_cpu, _no_output)
define("optimizer_sgd_(Tensor(a!)[] params, Tensor[] grads, Tensor lr, float weight_decay) -> ()",
       _sgd_cpu, _no_output)
define("optimizer_sgd_momentum_(Tensor(a!)[] params, Tensor(b!)[] momentum_buffers, Tensor[] grads, "
       "Tensor lr, float weight_decay, float momentum, float dampening, bool nesterov, bool[] first) -> ()",
       _sgd_momentum_cpu, _no_output)

define("optimizer_adagrad_(Tensor(a!)[] params, Tensor(b!)[] state_sums, Tensor[] grads, Tensor clr, "
       "float weight_decay, float eps) -> ()", _adagrad_cpu, _no_output)


def _scalar_tensor(values, like):
    """Host-computed scalars as one float32 device tensor (an input of the graph, not a constant)."""
    return torch.tensor(values, dtype=torch.float32).to(like.device, non_blocking=True)


def _collect(group, name):
    params, grads = [], []
    for p in group["params"]:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            raise RuntimeError(f"{name} does not support sparse gradients")
        params.append(p)
        grads.append(p.grad)
    return params, grads


# ---------------------------------------------------------------- the optimizers

def _adam_moments(state, params):
    """Adam's first and second moments of each parameter, created as zeros on first use."""
    for p in params:
        st = state[p]
        if not st:
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    return [state[p]["exp_avg"] for p in params], [state[p]["exp_avg_sq"] for p in params]


class _FusedOptimizer(Optimizer):
    """The step the fused optimizers share: for each parameter group, a mark_step before (lazy
    mode), its parameters with gradients, ``_update(group, params, grads)`` (one fused op), and a
    mark_step after all groups."""

    def _update(self, group, params, grads) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        touched = []
        for group in self.param_groups:
            mark_step_if_lazy(group["params"])
            params, grads = _collect(group, type(self).__name__)
            if params:
                self._update(group, params, grads)
                touched += params
        mark_step_if_lazy(touched)
        return loss


class FusedAdamW(_FusedOptimizer):
    """AdamW as one fused op per parameter group. Default eps is 1e-6 (torch's AdamW: 1e-8)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, bias_correction: bool = True):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr} - should be >= 0.0")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[0]} - should be in [0.0, 1.0[")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[1]} - should be in [0.0, 1.0[")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps} - should be >= 0.0")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction))

    def _update(self, group, params, grads) -> None:
        exp_avgs, exp_avg_sqs = _adam_moments(self.state, params)
        group["step"] = step = group.get("step", 0) + 1
        beta1, beta2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        # torch's formulas, in the same double-precision host arithmetic
        bc1 = 1 - beta1 ** step if group["bias_correction"] else 1.0
        bc2 = 1 - beta2 ** step if group["bias_correction"] else 1.0
        scalars = _scalar_tensor([lr / bc1, bc2 ** 0.5, 1 - lr * wd], params[0])
        torch.ops.hpu_lab.optimizer_adamw_(params, exp_avgs, exp_avg_sqs, grads, scalars,
                                           float(beta1), float(beta2), float(group["eps"]), wd != 0)


class FusedSGD(_FusedOptimizer):
    """SGD (momentum, dampening, nesterov, weight decay) as one fused op per parameter group."""

    def __init__(self, params, lr=required, momentum: float = 0, weight_decay: float = 0,
                 dampening: float = 0, nesterov: bool = False):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if dampening < 0.0:
            raise ValueError(f"Invalid dampening value: {dampening}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      dampening=dampening, nesterov=nesterov))

    def _update(self, group, params, grads) -> None:
        lr = _scalar_tensor(float(group["lr"]), params[0])
        wd, momentum = float(group["weight_decay"]), float(group["momentum"])
        if momentum == 0:
            torch.ops.hpu_lab.optimizer_sgd_(params, grads, lr, wd)
            return
        bufs, first = [], []
        for p in params:
            state = self.state[p]
            first.append("momentum_buffer" not in state)
            if first[-1]:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            bufs.append(state["momentum_buffer"])
        torch.ops.hpu_lab.optimizer_sgd_momentum_(params, bufs, grads, lr, wd, momentum,
                                                  float(group["dampening"]), bool(group["nesterov"]), first)


class FusedAdagrad(_FusedOptimizer):
    """Adagrad as one fused op per parameter group; the update equals ``torch.optim.Adagrad``'s."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps))

    def _update(self, group, params, grads) -> None:
        sums = []
        for p in params:
            state = self.state[p]
            if not state:
                state["sum"] = torch.full_like(p, group["initial_accumulator_value"],
                                               memory_format=torch.preserve_format)
            sums.append(state["sum"])
        group["step"] = step = group.get("step", 0) + 1
        # the decayed learning rate, on the host in double precision as torch computes it
        clr = _scalar_tensor(group["lr"] / (1 + (step - 1) * group["lr_decay"]), params[0])
        torch.ops.hpu_lab.optimizer_adagrad_(params, sums, grads, clr, float(group["weight_decay"]),
                                             float(group["eps"]))


class FusedLamb(Optimizer):
    """LAMB (NVIDIA's variant, as the bridge's FusedLamb) on the ``torch.ops.hpu.optimizer_lamb_*`` kernels:
    gradients clipped by their global norm (``max_grad_norm``), Adam moments and the bias-corrected
    Adam step u (+ weight decay), then ``w -= lr * trust * u`` with trust = ||w|| / ||u|| when weight
    decay or ``use_lamb`` is on. One step is three graphs in lazy mode (norm, phase 1, phase 2), as the
    real optimizer marks steps between them."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 amsgrad=False, adam_w_mode=True, grad_averaging=True, set_grad_none=True, max_grad_norm=1.0,
                 use_lamb=False, fused=False, dtype=None):
        if amsgrad:
            raise RuntimeError("FusedLamb does not support the AMSGrad variant.")
        super().__init__(params, dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                                      weight_decay=weight_decay, grad_averaging=grad_averaging,
                                      max_grad_norm=max_grad_norm))
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.use_lamb = use_lamb
        self.fused = fused
        self.dtype = dtype
        self.device = self.param_groups[0]["params"][0].device

    def zero_grad(self, set_to_none: bool = True):
        if self.set_grad_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            super().zero_grad(set_to_none=False)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        for gr in grads:
            if gr.is_sparse:
                raise RuntimeError("Lamb does not support sparse gradients, consider SparseAdam instead.")
        if not grads:
            return loss
        max_norm = self.defaults["max_grad_norm"]
        if max_norm is not None:
            clip = torch.ops.hpu.optimizer_lamb_fused_norm(
                grads if self.dtype is None else [g.to(self.dtype) for g in grads], float(max_norm))
        else:
            clip = torch.ones(1, dtype=torch.float32, device=self.device)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            beta1, beta2 = group["betas"]
            group["step"] = step = group.get("step", 0) + 1
            bc = [1.0 - beta1 ** step, 1.0 - beta2 ** step] if group["bias_correction"] else [1.0, 1.0]
            bc1, bc2 = (torch.tensor(b, device=self.device) for b in bc)
            mark_step_if_lazy(params)
            m, v = _adam_moments(self.state, params)
            wn = [p.new_empty((1,)) for p in params]
            un = [p.new_empty((1,)) for p in params]
            u = [torch.empty_like(p) for p in params]
            mark_step_if_lazy(params)
            torch.ops.hpu.optimizer_lamb_phase1([p.grad for p in params], params, m, v, wn, un, u, clip,
                                                1 if group["grad_averaging"] else 0, float(beta1), float(beta2),
                                                float(group["eps"]), bc1, bc2, float(group["weight_decay"]))
            mark_step_if_lazy(params)
            torch.ops.hpu.optimizer_lamb_phase2(params, un, wn, u, torch.tensor(-group["lr"], device=self.device),
                                                float(group["weight_decay"]), bool(self.use_lamb))
            mark_step_if_lazy(params)
        return loss
