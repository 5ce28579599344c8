"""Your own code on the host, measured on this CPU: the one part of the Gaudi clock's host lane
that is not modeled.

The rule (docs/gaudi_clock.md, "The host lane"): a ``UserCode`` event is emitted, on the main
thread while a recording listens, for
  - a DataLoader fetch (``next()`` on a DataLoader's iterator: the dataset, the workers' wait,
    collation, pinning), ``what="data loading"``;
  - ``time.sleep``, ``what="sleep"``;
  - ``print``, ``what="print"``;
  - a block you mark: ``with hpu_lab.events.user_code("augmentation"): ...``.
Its ``own_ns`` is the block's wall time less hpu_lab's own work inside it (``emulator_enter`` /
``emulator_exit`` around the emulator's entry points: an op on an hpu tensor, a read of one): that
work is on the clock already, modeled by the events it emits. Blocks nest: only the outermost one
is emitted (a sleep inside a DataLoader fetch is part of the fetch). Everything else the host does
between torch ops (the Python of a training loop, of nn.Module calls, of an optimizer) is the
framework's, which the Gaudi clock models per event, so a loop of torch ops has the same host time
on any machine, busy or idle.
"""
from __future__ import annotations

import contextlib
import threading
import time

_perf_ns = time.perf_counter_ns
_main = threading.main_thread().ident
_get_ident = threading.get_ident

# read by the emulator's entry points (route.dispatch, lazy's host reads): while a user block is
# open and no entry point is under way, an entry point runs through ``as_emulator``
open_blocks = 0      # user blocks open on the main thread (only the outermost is emitted)
emulating = 0        # emulator entry points under way inside it (nested: the outermost counts)
_inside = 0          # hpu_lab's own wall time inside the open block
_emu_t0 = 0
_sink = None         # (what, t0, t1, own_ns, src) -> None: set by the events package
_wanted = None       # () -> bool: whether a recording takes UserCode now
_installed = False


def set_sink(emit_user, wanted) -> None:
    """Where user blocks go (the events package: the current recorder)."""
    global _sink, _wanted
    _sink, _wanted = emit_user, wanted


def emulator_enter() -> None:
    """An emulator entry point begins (the router's dispatch of an op, a host read): while a user
    block is open on this thread, its wall time until ``emulator_exit`` is not the user's."""
    global emulating, _emu_t0
    if open_blocks and _get_ident() == _main:
        if not emulating:
            _emu_t0 = _perf_ns()
        emulating += 1


def emulator_exit() -> None:
    global emulating, _inside
    if emulating and _get_ident() == _main:
        emulating -= 1
        if not emulating:
            _inside += _perf_ns() - _emu_t0


def as_emulator(fn, *args):
    """``fn(*args)`` as hpu_lab's own work inside a user block."""
    emulator_enter()
    try:
        return fn(*args)
    finally:
        emulator_exit()


def _run(what: str, fn, args, kwargs):
    """``fn(*args, **kwargs)`` as a user block ``what``."""
    global open_blocks, _inside
    if open_blocks or _get_ident() != _main or _wanted is None or not _wanted():
        return fn(*args, **kwargs)
    open_blocks, _inside = 1, 0
    t0 = _perf_ns()
    try:
        return fn(*args, **kwargs)
    finally:
        _close(what, t0)


@contextlib.contextmanager
def user_code(what: str = "your code"):
    """Mark a block as your own host work (preprocessing, logging...): on the Gaudi clock it takes
    the time it took on this CPU, drawn as "your code (measured on this CPU)"."""
    global open_blocks, _inside
    if open_blocks or _get_ident() != _main or _wanted is None or not _wanted():
        yield
        return
    open_blocks, _inside = 1, 0
    t0 = _perf_ns()
    try:
        yield
    finally:
        _close(what, t0)


def _close(what: str, t0: int) -> None:
    global open_blocks
    t1 = _perf_ns()
    from ..util._source import user_src
    try:                             # (still open: an observer's own print is not a user block)
        _sink(what, t0, t1, max(t1 - t0 - _inside, 0), user_src(1))
    finally:
        open_blocks = 0


def install() -> None:
    """Hook the explicit kinds (once; each hook asks whether a recording takes UserCode at each call,
    and is a plain call-through otherwise)."""
    global _installed
    if _installed:
        return
    _installed = True
    import builtins

    from torch.utils.data import dataloader

    it = dataloader._BaseDataLoaderIter
    fetch = it.__next__

    def __next__(self):
        return _run("data loading", fetch, (self,), {})
    __next__.__wrapped__ = fetch
    it.__next__ = __next__

    sleep = time.sleep

    def _sleep(secs):
        return _run("sleep", sleep, (secs,), {})
    _sleep.__wrapped__ = sleep
    _sleep.__doc__ = sleep.__doc__
    time.sleep = _sleep

    builtin_print = builtins.print

    def _print(*args, **kwargs):
        return _run("print", builtin_print, args, kwargs)
    _print.__wrapped__ = builtin_print
    _print.__doc__ = builtin_print.__doc__
    builtins.print = _print
