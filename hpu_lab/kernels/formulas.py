"""Backward formulas CPU uses, for ops whose autograd picks another one for a tensor subclass.

torch's ``prod`` backward takes the cumprod-based "safe zeros" formula for any tensor subclass
(composite compliance), while on a CPU tensor without zeros it takes ``grad * result / input``: the
two differ in the last bits, so hpu gradients differed from CPU's. Here the hpu device's autograd
kernel for ``prod`` computes both and selects as CPU does, on the device (no host sync):
``prod(dim)`` uses the quotient unless the input holds a zero anywhere; the full ``prod`` uses the
quotient unless it holds a zero (one zero: the safe formula; more: it gives zeros, as CPU's).

``silu_backward`` and ``mish_backward``: see ``_CPU_KERNEL_NOT_DECOMPOSED`` below.

``ormqr``'s backward, for a subclass, builds the input's gradient out of place (``cat`` of
columns): contiguous, where CPU's in-place formula leaves it in the input's own layout (a
column-major Householder matrix from ``geqrf`` gets a column-major gradient). The values are equal
bit for bit; the layout is what later views and in-place ops see. The hpu autograd kernel runs
torch's own autograd kernel for ormqr (the C++ formula, the same node type) and a hook on that
node lays the input's gradient out as the input is.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
_lib = None


def _safe_zeros(grad, inp, dim):
    """torch's prod_safe_zeros_backward: products of everything before and after each element."""
    n = inp.size(dim)
    if inp.numel() == 0:                 # as torch's: an empty input has an empty gradient
        return grad.expand_as(inp)
    if n == 1:
        return grad * torch.ones_like(inp)
    ones = torch.ones_like(inp.narrow(dim, 0, 1))
    before = torch.cat([ones, inp.narrow(dim, 0, n - 1)], dim).cumprod(dim)
    after = torch.cat([ones, inp.narrow(dim, 1, n - 1).flip(dim)], dim).cumprod(dim).flip(dim)
    return grad * (before * after).conj()


def _backward(grad, inp, result, dim, keepdim):
    if inp.dim() == 0:
        return grad
    inp = inp.to(result.dtype)
    if dim is None:                      # the full product, as CPU: over the flattened input
        flat = inp.contiguous().view(-1)
        safe = _safe_zeros(grad, flat, 0).view_as(inp)
    else:
        if not keepdim:
            grad, result = grad.unsqueeze(dim), result.unsqueeze(dim)
        safe = _safe_zeros(grad, inp, dim)
    quotient = grad * (result / inp).conj()
    return torch.where((inp == 0).any(), safe, quotient)


class _Prod(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim, dtype):
        with torch._C._AutoDispatchBelowAutograd():
            out = aten.prod.default(x, dtype=dtype) if dim is None else \
                aten.prod.dim_int(x, dim, keepdim, dtype=dtype)
        ctx.dim, ctx.keepdim, ctx.in_dtype = dim, keepdim, x.dtype
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        dim = ctx.dim if ctx.dim is None else ctx.dim % max(x.dim(), 1)
        g = _backward(grad, x, out, dim, ctx.keepdim)
        return g.to(ctx.in_dtype), None, None, None


def prod(x, *, dtype=None):
    return _Prod.apply(x, None, False, dtype)


def prod_dim(x, dim, keepdim=False, *, dtype=None):
    return _Prod.apply(x, dim, keepdim, dtype)


def install() -> None:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("prod", prod, "AutogradPrivateUse1")
        _lib.impl("prod.dim_int", prod_dim, "AutogradPrivateUse1")
        _lib.impl("ormqr", ormqr, "AutogradPrivateUse1")
        for name in _CPU_KERNEL_NOT_DECOMPOSED:
            _lib.impl(name, _never_called(name), "PrivateUse1")


# Ops that are CompositeImplicitAutograd *and* have a CPU kernel (all of aten: these two, and
# native_channel_shuffle, whose decomposition only moves data). CPU runs the kernel; for a device
# with no kernel of its own the dispatcher decomposes them (silu_backward into sigmoid, sub, mul...),
# so hpu gradients of SiLU and Mish differed from CPU's in the last bits (issue 38). A PrivateUse1
# registration stops the decomposition at the autograd key (the dispatcher uses the composite only
# when the backend has no kernel): the op then reaches hpu_lab's dispatch whole (the Python key comes
# first, so this kernel itself never runs) and is one node running CPU's kernel.
_CPU_KERNEL_NOT_DECOMPOSED = ("silu_backward", "mish_backward")


def _never_called(name):
    def kernel(*args, **kwargs):
        raise RuntimeError(f"aten::{name}: hpu_lab's dispatch takes this op before its PrivateUse1 kernel")
    return kernel


# torch's C++ autograd kernel of an op, reached from the hpu autograd kernel: the dispatcher
# selects it by the AutogradCPU key (the same kernel serves every device), and the redispatch after
# it reaches the Python key, i.e. hpu_lab's dispatch
_AUTOGRAD_THEN_PYTHON = torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU).add(torch._C.DispatchKey.Python)


def ormqr(self, input2, input3, left=True, transpose=False):
    out = aten.ormqr.default.redispatch(_AUTOGRAD_THEN_PYTHON, self, input2, input3, left, transpose)
    node = out.grad_fn
    if node is not None and self.requires_grad:
        size, stride = tuple(self.shape), tuple(self.stride())

        def input_layout(grad_inputs, grad_outputs):
            g = grad_inputs[0]
            if g is None or tuple(g.stride()) == stride or g.shape != size:
                return None
            return (g.new_empty_strided(size, stride).copy_(g), *grad_inputs[1:])
        node.register_hook(input_layout)
    return out
