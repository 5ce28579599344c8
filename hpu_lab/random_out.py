"""Random ops with an ``out=`` tensor on hpu (``torch.normal(mean, std, out=o)``, ``bernoulli(p, out=o)``,
``randn(..., out=o)``, ...): the draw lands in ``o``.

Random ops are drawn on the host from torch's default generator (the same numbers as on CPU). The
generic host path writes back the *positional* arguments an op mutates, not the keyword-only ``out``:
torch then returned the untouched ``o`` (whatever its memory held: a silent wrong answer). This
handler draws into a host copy of each ``out`` tensor with the CPU kernel and writes it into the hpu
tensor (resized first if the op resized it, as on CPU).
"""
from __future__ import annotations

import torch

from . import host_ops, lazy, ops, route
from . import widen as _widen
from ._source import user_src

aten = torch.ops.aten

# every aten overload tagged nondeterministic_seeded that has a keyword-only out (CUDA/MPS-only ones left out)
NAMES = ("exponential.out", "randint_like.Tensor_out", "random.to_out", "rand.out", "bernoulli.out",
         "native_dropout.out", "bernoulli.float_out", "normal.out", "randperm.generator_out", "randint.low_out",
         "randint_like.generator_out", "rand_like.out", "randint_like.out", "log_normal.out",
         "rrelu_with_noise.out", "cauchy.out", "randperm.out", "random.out", "normal.Tensor_Tensor_out",
         "rand_like.generator_out", "randint.out", "randint_like.low_generator_dtype_out", "_fused_dropout.out",
         "poisson.out", "_standard_gamma.out", "normal.float_Tensor_out", "randn.generator_out",
         "normal.Tensor_float_out", "random.from_out", "randint_like.low_dtype_out", "bernoulli.Tensor_out",
         "randint.generator_out", "randn_like.generator_out", "normal.float_float_out", "uniform.out",
         "multinomial.out", "geometric.out", "randn.out", "randn_like.out", "binomial.out", "rand.generator_out",
         "_sample_dirichlet.out", "randint.low_generator_out", "randint_like.Tensor_generator_out")


def _ops():
    for n in NAMES:
        name, ov = n.split(".")
        op = getattr(getattr(aten, name, None), ov, None)
        if op is not None:
            yield op


def _host(a, reason):
    if isinstance(a, torch.Tensor) and a.device.type == "hpu":
        return host_ops.concrete(a, reason)
    if isinstance(a, (list, tuple)):
        return type(a)(_host(x, reason) for x in a)
    if isinstance(a, torch.device) and a.type == "hpu":
        return torch.device("cpu")
    return a


def _random_out(func, args, kwargs):
    reason = f"random op {ops.op_name(func)} (drawn on the host)"
    if lazy.S.capture is not None:          # as every host draw: not replayable inside an HPU graph
        lazy.S.capture.refuse(ops.op_name(func), user_src(3))
    names = [a.name for a in func._schema.arguments if a.kwarg_only and a.alias_info is not None
             and a.alias_info.is_write]
    outs = [kwargs[n] for n in names if n in kwargs]
    cargs = [_host(a, reason) for a in args]
    ckw = {k: (torch.empty_strided(v.shape, v.stride(), dtype=v.dtype) if k in names else _host(v, reason))
           for k, v in kwargs.items()}
    try:
        func(*cargs, **ckw)
    except (NotImplementedError, RuntimeError) as e:
        if not _widen.missing_kernel(e):
            raise
        _widen.widened(func)(*cargs, **ckw)
    for n, t in zip(names, outs):
        new = ckw[n]
        if tuple(new.shape) != tuple(t.shape):
            route.dispatch(aten.resize_.default, (t, list(new.shape)), {})
        lazy.write_concrete(t, new)
    return outs[0] if len(outs) == 1 else tuple(outs)


def install() -> None:
    for op in _ops():
        route.register_special(op, _random_out)
