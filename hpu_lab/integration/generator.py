"""``torch.Generator(device="hpu")``: a seeded generator of the hpu device.

torch makes a device's generator through its C++ hooks (``getNewGenerator``), which a Python
backend cannot provide (torch's ``PrivateUse1Hooks`` binding has no such method): it raised "You
should register `PrivateUse1HooksInterface` ... and implement `getNewGenerator`". timm's
``ModelEmaV3`` and any seeded per-device sampling make one.

hpu_lab draws the random numbers of hpu tensors on the host with CPU's kernels, from torch's default
generator (hpu/random.py): hpu's default generator *is* torch's. So an hpu generator is a CPU
generator (CPU's Philox/MT state, ``manual_seed``, ``get_state``, ``set_state``) that reports device
"hpu": seeded with s it draws what hpu's default generator draws after ``torch.manual_seed(s)``,
and what CPU draws with ``torch.Generator().manual_seed(s)``.

``torch.Generator`` becomes this module's subclass of ``torch._C.Generator``: for any device but
hpu it returns torch's own generator, unchanged (``type(torch.Generator())`` is still
``torch._C.Generator``), and ``isinstance(g, torch.Generator)`` holds for every generator.
"""
from __future__ import annotations

import torch

from ..tensor import HPU

_Base = torch._C.Generator


class _GeneratorType(type(_Base)):
    """Every torch generator is an instance of ``torch.Generator``, as before the subclass."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, _Base)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _Base)


class Generator(_Base, metaclass=_GeneratorType):
    """``torch.Generator(device="cpu")``: torch's generator; with an hpu device, hpu's (see module)."""

    def __new__(cls, device=None):
        dev = torch.device(device) if device is not None else None
        if dev is None or dev.type != "hpu":
            return _Base() if device is None else _Base(device)
        if dev.index not in (None, 0):
            raise RuntimeError(f"hpu_lab emulates one device (hpu:0); cannot make a generator on {dev}")
        return _Base.__new__(cls)

    @property
    def device(self):
        return HPU

    def __reduce__(self):
        # torch's (type, (device,), state) names the class: ours, with hpu, so it comes back hpu
        return (Generator, ("hpu:0",), _Base.__reduce__(self)[2])

    def __repr__(self):
        return f"<torch.Generator object on {self.device} at {hex(id(self))}>"


def install() -> None:
    torch.Generator = Generator
