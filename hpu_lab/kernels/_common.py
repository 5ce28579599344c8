"""What the hpex kernels share: the ``hpu_lab`` op library, the device-kernel guard, mark_step.

Each fused kernel is a torch custom op ``hpu_lab::<name>`` with a Meta kernel (shapes only) and a
CPU kernel. In lazy mode the op becomes ONE node of the pending graph (its Meta kernel gives the
output shapes); the recipe runs the CPU kernel on the device's backing tensors. Ops that update
their arguments declare it in the schema (``Tensor(a!)[]``), so hpu_lab's functionalisation rebinds
the written tensors to the node's outputs, as it does for ``add_``.
"""
from __future__ import annotations

import functools
import threading

import torch

from .. import config
from ..tensor import HPUTensor

LIB = torch.library.Library("hpu_lab", "FRAGMENT")

_tls = threading.local()


class NotTraceable(RuntimeError):
    """A fused kernel was called under torch.jit.trace (see device_kernel)."""


def in_device_kernel() -> bool:
    """True while a fused kernel's CPU implementation runs (HMP must not cast inside it)."""
    return getattr(_tls, "depth", 0) > 0


def device_kernel(fn):
    """Mark ``fn`` as the body of a device kernel: no autocast, no HMP casts inside it.

    On the emulated device the kernel runs on the executor's thread, where neither is active; the
    guard matters when a fused op is called directly on CPU tensors.
    """
    @functools.wraps(fn)
    def run(*args, **kwargs):
        _tls.depth = getattr(_tls, "depth", 0) + 1
        try:
            with torch._C._DisableAutocast():
                return fn(*args, **kwargs)
        finally:
            _tls.depth -= 1
    return run


def define(schema: str, cpu, meta) -> None:
    """Define ``hpu_lab::<schema>`` with its CPU and Meta kernels."""
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, device_kernel(cpu), "CPU")
    LIB.impl(name, meta, "Meta")
    LIB.impl(name, _refuse_tracing(name), "Tracer")


def _refuse_tracing(name):
    """torch.jit.trace (recipe lowering) would drop an op that returns nothing and bake the
    scalars a kernel reads with .item() as constants: refuse, so the recipe keeps its fx code."""
    def kernel(*args, **kwargs):
        raise NotTraceable(f"hpu_lab::{name} cannot be traced by torch.jit.trace")
    return kernel


def on_hpu(tensors) -> bool:
    return any(isinstance(t, HPUTensor) for t in tensors)


def mark_step_if_lazy(tensors) -> None:
    """The real hpex optimizers call mark_step around their step in lazy mode: the optimizer
    update becomes a graph of its own."""
    if config.lazy_mode() and on_hpu(tensors):
        from .. import core
        core.mark_step()
