"""Host state a capture cannot replay: CPU tensors updated in place, then read, during a capture.

A replay repeats device work only. torch.optim's Adam keeps its step count in a CPU tensor by
default: each ``step()`` adds 1 to it on the host and reads it back (``.item()``) to compute the
bias correction, which then enters the graph as a constant. Captured, every replay would reuse the
capture's step count: silently wrong updates. (torch refuses this for CUDA graphs unless
``capturable=True``.) While a capture runs, this dispatch mode watches the program's own top-level
ops (hpu_lab's internals run beneath it, unseen): an in-place op on a CPU tensor marks it, and a
host read of a marked tensor's value is refused with the documented message.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import ops
from ..util._source import user_src

_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.equal.default,
          torch.ops.aten.is_nonzero.default}


def _cpu_tensors(a):
    if isinstance(a, torch.Tensor):
        if a.device.type == "cpu":
            yield a
    elif isinstance(a, (list, tuple)):
        for x in a:
            yield from _cpu_tensors(x)


class HostStateMode(TorchDispatchMode):
    def __init__(self, capture):
        super().__init__()
        self.capture = capture
        self.active = True                               # False once the capture is over
        self.updated = weakref.WeakValueDictionary()     # id -> CPU tensor updated in place
        self.where = {}                                  # id -> (op, user line) of that update

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.active:
            return func(*args, **kwargs)
        if func in _READS:
            for t in _cpu_tensors(args):
                if self.updated.get(id(t)) is t:
                    op, line = self.where[id(t)]
                    self.capture.refuse(
                        f"{ops.op_name(func)} (a host read of a CPU tensor that {op} updated in place at "
                        f"{line}; a replay would not repeat that update and would reuse the captured "
                        "value -- for torch.optim optimizers pass capturable=True)", user_src(2))
        info = ops.inplace_info(func)
        if info is not None and info[0]:
            for i in info[0]:
                if i < len(args):
                    for t in _cpu_tensors(args[i]):
                        self.updated[id(t)] = t
                        self.where[id(t)] = (ops.op_name(func), user_src(2))
        return func(*args, **kwargs)


def start(capture) -> HostStateMode:
    mode = HostStateMode(capture)
    mode.__enter__()
    return mode


def stop(mode) -> None:
    """The capture is over. The mode leaves the stack now if it is on top (else at the next
    ``drop_finished()``: a refusal is raised from inside one of its own handlers)."""
    mode.active = False
    drop_finished()


def drop_finished() -> None:
    while True:
        top = _current_mode()
        if not isinstance(top, HostStateMode) or top.active:
            return
        top.__exit__(None, None, None)


def _current_mode():
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    return _get_current_dispatch_mode()
