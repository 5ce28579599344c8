"""The router: where each op reaching the device goes.

``dispatch`` receives every aten op on an HPUTensor (``HPUTensor.__torch_dispatch__``) and every
factory op for device "hpu" (the PrivateUse1 kernels of ``integration/device.py``). It picks the op's handler
once per op (the decision order is in docs/ARCHITECTURE.md, "The op path"), then runs it in the
current mode: eager launches it at once (dispatch/eager.py), lazy leaves it pending (lazy/); during an
HPU Graph capture the pending graph's flush hands its recipe to the capture instead of launching.

This module owns the special-op table: other modules add to it only through ``register_special``,
which returns a handle whose ``remove()`` puts back what was there.
"""
from __future__ import annotations

import torch

from .. import config, ops
from . import eager, fallback, view_ops
from ..events import user_time as _user_time
from .. import lazy
from . import special_ops
from .host_ops import host_op
from ..lazy import S, _same_device_error, functional_op, lazy_op
from ..tensor import HPUTensor

_special: dict = dict(special_ops.HANDLERS)        # OpOverload -> handler(func, args, kwargs)
for _f in ops.RANDOM_INPLACE:
    _special[_f] = special_ops.random_inplace      # drawn on the host, as CPU draws them

_handler: dict = {}        # id(func) -> handler: the decision, made once per op
_handler_keep: list = []   # keeps the ops (and so their ids) alive


class SpecialHandle:
    """What ``register_special`` returns: ``remove()`` puts back the handler it replaced."""

    def __init__(self, func, handler, prev):
        self.func, self.handler, self.prev = func, handler, prev

    def remove(self) -> None:
        if _special.get(self.func) is self.handler:
            if self.prev is None:
                del _special[self.func]
            else:
                _special[self.func] = self.prev
        _handler.pop(id(self.func), None)


def register_special(func, handler) -> SpecialHandle:
    """Route ``func`` to ``handler(func, args, kwargs)`` (native_ops, the CPU fallback checks)."""
    prev = _special.get(func)
    _special[func] = handler
    _handler.pop(id(func), None)
    return SpecialHandle(func, handler, prev)


def _data_dependent(func, args, kwargs):
    return host_op(func, args, kwargs, f"data-dependent op {ops.op_name(func)}")


def _random_on_host(func, args, kwargs):
    # drawn on the host from torch's default generator, in program order: same numbers as CPU
    return host_op(func, args, kwargs, f"random op {ops.op_name(func)} (drawn on the host)")


_DATA_DEPENDENT_NAMES = {f._schema.name for f in ops.DATA_DEPENDENT}

# aten::_unsafe_view is a view autograd does not track: its result shares the input's memory (torch's
# composite kernels call it on a fresh result, then write through it: kron(out=o) views o and
# mul_(out=)s into the view). As a graph node it copied, and the write never reached o: kron(out=)
# left o's memory as it was, silently. So it is routed as the view it is.
_UNSAFE_VIEW = torch.ops.aten._unsafe_view.default


def resolve(func):
    """The handler of an op, in the order of docs/ARCHITECTURE.md (dispatch caches it)."""
    h = _special.get(func)
    if h is not None:
        return h
    if func in ops.INPLACE_VIEW:
        return view_ops.inplace_view
    if func in ops.DATA_DEPENDENT:
        return _data_dependent
    if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
        return _random_on_host
    if ops.is_composite_view(func):
        return special_ops.composite     # torch's own decomposition: a copy where it copies
    info = ops.inplace_info(func)
    if ops.is_composite(func) and not (info is not None and info[1]):
        # whole under inference_mode: its parts, as a C++ backend's. Not an out= overload: torch's
        # composite rebinds its result for a tensor subclass instead of writing the out (matrix_rank)
        return special_ops.composite
    if func is _UNSAFE_VIEW:
        return view_ops.view_op
    if ops.is_view(func):
        return view_ops.inplace_view if info is not None and info[0] else view_ops.view_op
    if info is not None and info[2] is not None and ops.is_view(info[2]):
        return view_ops.inplace_view     # squeeze_, t_, transpose_: the functional twin is a view
    if info is None:
        return functional_op
    if info[1]:
        if func._schema.name in _DATA_DEPENDENT_NAMES:
            return _data_dependent       # nonzero(x, out=o): CPU's kernel lays o out (column-major)
        return special_ops.out_variant   # op(..., out=t)
    return lazy_op


def dispatch(func, args, kwargs):
    if _user_time.open_blocks and not _user_time.emulating:     # inside your own timed code
        return _user_time.as_emulator(dispatch, func, args, kwargs)   # (events.user_code): not yours
    h = _handler.get(id(func))
    if h is None:
        h = resolve(func)
        info = ops.inplace_info(func)
        if info is not None and info[1]:
            h = _out_on_device(h, info[1])
        _handler[id(func)] = h
        _handler_keep.append(func)
    if S.eager:
        return eager.run(h, func, args, kwargs)    # launched as soon as it returns
    return h(func, args, kwargs)


def _out_on_device(h, out_kw):
    """``op(hpu_input, out=cpu_tensor)``: CPU's kernels would happily write the CPU tensor (the
    host path computes there), but every torch device refuses an ``out=`` on another device."""
    def handler(func, args, kwargs):
        for k in out_kw:
            for o in (kwargs[k] if isinstance(kwargs.get(k), (list, tuple)) else (kwargs.get(k),)):
                if isinstance(o, torch.Tensor) and not isinstance(o, HPUTensor):
                    raise _same_device_error(o.device)
        return h(func, args, kwargs)
    return handler


def _no_meta(func, args, kwargs, err):
    """The meta kernel could not infer the op's outputs: a data-dependent op runs on the host (it
    is an HPU op, its output shape just needs the values); an op with no meta kernel is not one we
    can put in a graph, i.e. not registered for HPU: it falls back to the CPU."""
    msg = str(err)
    if "Meta" in msg and ("Could not run" in msg or "not implemented" in msg.lower()) \
            or "no fake impl or Meta kernel" in msg:
        return fallback.run_on_cpu(func, args, kwargs, "no HPU kernel")
    return host_op(func, args, kwargs, f"data-dependent op {ops.op_name(func)}")


_fallback_handles: list = []


def install_fallback() -> None:
    """Route the ops that may need the CPU (dispatch/fallback.py's dtype table, PT_HPU_PLACE_ON_CPU's list)
    through the fallback check first; again whenever the configuration changes."""
    while _fallback_handles:
        _fallback_handles.pop().remove()
    for func in fallback.checked_ops():
        _fallback_handles.append(register_special(func, fallback.checked(resolve(func))))
    _handler.clear()


def _on_config_change():
    install_fallback()      # (clears the decisions too: PT_HPU_PLACE_ON_CPU may have changed)


lazy.set_meta_failure_handler(_no_meta)
config.on_change(_on_config_change)


def _install():
    from .. import tensor
    tensor.set_dispatch(dispatch)


_install()
