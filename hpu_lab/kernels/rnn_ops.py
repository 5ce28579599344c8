"""The two aten ops of hpu's recurrent layers that the generic lazy path cannot take as they are
(kernels/rnn.py runs CPU's op sequence; these are the route's handlers for two of its ops).

- ``mkldnn_rnn_layer`` (oneDNN's LSTM layer, what CPU's float32 ``nn.LSTM`` runs): its CPU kernel
  returns the backward's workspace only when autograd is on at the call, with a size oneDNN picks.
  The node (``MkldnnLayer``) runs the kernel in the call's autograd mode, and its shapes come from
  CPU's kernel run once on zeros of the same shapes (torch's Meta kernel says 0 bytes).
- ``_pack_padded_sequence`` (``nn.utils.rnn.pack_padded_sequence``): ``lengths`` is a host tensor
  (CUDA and Gaudi read it on the host too), and ``batch_sizes`` comes back on the host, as
  ``PackedSequence`` requires. CPU's own op decides ``batch_sizes`` and every refusal (run on a
  stand-in of the input); the data are CPU's slices of the input, concatenated on the device.
"""
from __future__ import annotations

import torch

from ..dispatch import route
from ..lazy import functional_op
from ..tensor import HPUTensor

aten = torch.ops.aten
META = torch.device("meta")


class MkldnnLayer:
    """``aten::mkldnn_rnn_layer`` run with autograd on (``grad``: workspace returned) or off."""
    __slots__ = ("grad", "op", "variant", "__name__")

    def __init__(self, grad: bool):
        self.grad, self.op, self.variant = grad, aten.mkldnn_rnn_layer.default, ("grad", grad)
        self.__name__ = "mkldnn_rnn_layer"

    def __call__(self, *args, **kwargs):
        if isinstance(args[0], torch.Tensor) and args[0].device.type == "meta":
            return self._shapes(args, kwargs)
        with torch.set_grad_enabled(self.grad):
            return self.op(*args, **kwargs)

    def _shapes(self, args, kwargs):
        """The outputs' metadata as CPU's kernel gives them (the workspace's size is oneDNN's)."""
        def standin(a):
            return torch.zeros(a.shape, dtype=a.dtype) if isinstance(a, torch.Tensor) else a
        with torch.set_grad_enabled(self.grad):
            res = self.op(*[standin(a) for a in args], **{k: standin(v) for k, v in kwargs.items()})
        return tuple(None if r is None else torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device=META)
                     for r in res)

    def __eq__(self, other):
        return type(other) is MkldnnLayer and other.grad == self.grad

    def __hash__(self):
        return hash(("mkldnn_rnn_layer", self.grad))

    def __reduce__(self):
        return (MkldnnLayer, (self.grad,))


_LAYER = {True: MkldnnLayer(True), False: MkldnnLayer(False)}


def mkldnn_rnn_layer(func, args, kwargs):
    return functional_op(func, args, kwargs, node_op=_LAYER[torch.is_grad_enabled()])


_TYPE = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
         torch.bool: "Bool", torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
         torch.bfloat16: "BFloat16"}


def pack_padded_sequence(func, args, kwargs):
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args), **kwargs)
    inp, lengths, batch_first = bound["input"], bound["lengths"], bound["batch_first"]
    if isinstance(lengths, HPUTensor):      # CPU's check, naming the device as CUDA's would
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.dim()}D "
                           f"{lengths.device} {_TYPE.get(lengths.dtype, lengths.dtype)} tensor")
    # CPU's op on a stand-in of the input (no data; the sizes that matter): its checks, its batch_sizes
    shape = tuple(inp.shape)
    standin = torch.empty(shape[:2] + tuple(min(s, 1) for s in shape[2:]))
    _, batch_sizes = func(standin, lengths, batch_first)
    x = inp.transpose(0, 1) if batch_first else inp
    bs = batch_sizes.tolist()
    steps, t = [], 0
    while t < len(bs):       # one block of time steps per batch size, in time order (CPU's loop)
        end = t
        while end < len(bs) and bs[end] == bs[t]:
            end += 1
        steps.append(x.narrow(0, t, end - t).narrow(1, 0, bs[t]).contiguous().view([-1, *shape[2:]]))
        t = end
    return torch.cat(steps), batch_sizes


def install() -> None:
    route.register_special(aten.mkldnn_rnn_layer.default, mkldnn_rnn_layer)
    route.register_special(aten._pack_padded_sequence.default, pack_padded_sequence)
