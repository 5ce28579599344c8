"""``rrelu_with_noise`` on hpu: the noise is drawn on the host, written into ``noise``, and autograd
sees the same version of ``noise`` as on CPU.

``nn.RReLU`` in training calls ``aten::rrelu_with_noise(self, Tensor(b!) noise, ...)``: it fills the
fresh ``noise`` tensor with the random slopes (1 where ``self >= 0``) and autograd saves ``noise`` for
the backward (``grad * noise``). On CPU that write does not change ``noise``'s version counter: the op
is functional for autograd. The generic host path for ops that write an argument
(``lazy.host_op``) bumps the version of every written argument, so the backward then refused the
saved ``noise`` ("modified by an inplace operation ... is at version 1; expected version 0"). This
handler draws the slopes exactly as the CPU (its kernel, torch's default generator, program order:
the same numbers as on CPU) and writes them without that bump.
"""
from __future__ import annotations

import torch

from . import host_ops, lazy, ops, route
from ._source import user_src

aten = torch.ops.aten


def _rrelu_with_noise(func, args, kwargs):
    names = [a.name for a in func._schema.arguments]
    v = {a.name: a.default_value for a in func._schema.arguments}
    v.update(zip(names, args))
    v.update(kwargs)
    reason = "random op rrelu_with_noise (drawn on the host)"
    if lazy.S.capture is not None:          # as every host draw: not replayable inside an HPU graph
        lazy.S.capture.refuse(ops.op_name(func), user_src(3))
    x, noise = host_ops.concrete(v["self"], reason), host_ops.concrete(v["noise"], reason)
    out = func(x, noise, v["lower"], v["upper"], v["training"], v["generator"])
    lazy.write_concrete(v["noise"], noise)
    return host_ops.to_hpu_result(out)


def install() -> None:
    route.register_special(aten.rrelu_with_noise.default, _rrelu_with_noise)
