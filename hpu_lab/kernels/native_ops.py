"""The aten ops a device backend implements itself, which the CPU does not have: the bridge's tests
call them directly, and autograd reaches their backward.

- ``convolution_overrideable`` / ``convolution_backward_overrideable``: the convolution a non-CPU
  backend provides (the CPU raises "convolution_overrideable not implemented"). On hpu they are
  ``aten.convolution`` / ``aten.convolution_backward``: the same arguments, the same results.
"""
from __future__ import annotations

import torch

from ..dispatch import route

aten = torch.ops.aten


def _convolution(func, args, kwargs):
    return route.dispatch(aten.convolution.default, args, kwargs)


def _convolution_backward(func, args, kwargs):
    a = func._schema.arguments
    v = {x.name: (args[i] if i < len(args) else kwargs.get(x.name, x.default_value)) for i, x in enumerate(a)}
    w, transposed, groups = v["weight"], v["transposed"], v["groups"]
    # the bias gradient's size: output channels (a transposed convolution's weight is [in, out/groups, ...])
    bias_sizes = [w.shape[1] * groups] if transposed else [w.shape[0]]
    return route.dispatch(aten.convolution_backward.default,
                          (v["grad_output"], v["input"], w, bias_sizes, v["stride"], v["padding"], v["dilation"],
                          transposed, v["output_padding"], groups, v["output_mask"]), {})


def install() -> None:
    route.register_special(aten.convolution_overrideable.default, _convolution)
    route.register_special(aten.convolution_backward_overrideable.default, _convolution_backward)
