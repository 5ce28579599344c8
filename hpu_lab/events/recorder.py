"""Machinery of the event stream (you need not read this to use it): the process-wide recorder.

Emitting is cheap when nobody listens: ``emit`` returns at once for a kind no observer takes, and
the emitters of per-op events ask ``ops_wanted`` first. While someone listens to op events, an op
(``op_accumulated``, ~60 a training step) is kept as four flat list items, not an object; the ops
kept so far are handed to the observers as one ``OpRun`` before the next event of any kind (from
any thread) is delivered, and on ``flush``. So observers see every event, in the order emitted;
an ``EventLog`` (a Collector, a panel) keeps a run as one item and builds its ``OpAccumulated``
events only when its list is read. ``reference.py`` is the same contract in ~100 lines, one event
at a time; ``tests/events/test_events_contract.py`` checks that both give the same events.
"""
from __future__ import annotations

import gc
import threading
import time

from .user_time import install as install_user_hooks
from ._record import untrack
from .kinds import Event, OpAccumulated, UserCode

_perf_ns = time.perf_counter_ns
_is_tracked = gc.is_tracked
OP_FIELDS = 4       # an op kept in the run: t, op, src, step


class Handle:
    """Returned by subscribe(); ``remove()`` detaches the observer (torch hook style)."""

    def __init__(self, recorder, fn, kinds):
        self._recorder, self._fn, self._kinds = recorder, fn, kinds

    def remove(self) -> None:
        self._recorder._remove(self._fn, self._kinds)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _op_name(op) -> str:
    from ..ops import op_name        # not at import: ops imports torch
    return op_name(op)


class OpRun:
    """Op events handed to the observers at once, kept as the flat items they were recorded as:
    ``events()`` builds their ``OpAccumulated`` events on the first call, once, for everyone."""
    __slots__ = ("_items", "_made")
    _build_lock = threading.Lock()

    def __init__(self, items: list):
        self._items = items
        self._made = None

    def __len__(self) -> int:
        return len(self._items) // OP_FIELDS if self._made is None else len(self._made)

    def events(self) -> list:
        """The run's OpAccumulated events, in order (the same objects on every call)."""
        made = self._made
        if made is not None:
            return made
        with self._build_lock:
            if self._made is None:
                self._made = _build(self._items)
                self._items = None
            return self._made

    def __repr__(self) -> str:
        return f"<OpRun of {len(self)} ops>"


def _build(items: list) -> list:
    new, setter = object.__new__, object.__setattr__
    names: dict = {}                 # by id: an OpOverload's __hash__ is Python; the ops stay alive meanwhile
    made = []
    it = iter(items)
    for t, op, src, step in zip(it, it, it, it):
        if type(op) is not str:
            name = names.get(id(op))
            if name is None:
                name = names[id(op)] = _op_name(op)
            op = name
        e = new(OpAccumulated)
        setter(e, "__dict__", {"t_start": t, "t_end": t, "lane": "host", "step": step,
                               "op": op, "shapes": (), "dtype": "", "src": src})
        untrack(e)
        made.append(e)
    untrack(made)
    return made


class Recorder:
    """Process-wide, thread-safe fan-out of events to observers, in the order they were emitted."""

    def __init__(self):
        self._lock = threading.RLock()     # subscribing, and handing events over (observers may emit)
        self._ops_lock = threading.Lock()  # the kept ops alone (the op path takes only this one)
        self._all: tuple = ()              # observers of every kind
        self._by_kind: dict = {}           # kind class -> tuple of observers
        self._many: dict = {}              # observer -> its function taking a list of op events
        self._runs: dict = {}              # observer -> its function taking an OpRun
        self._muted = 0                    # > 0: host events reach no observer (perfmodel.estimate)
        self._ops: list = []               # ops kept since the last hand-over, OP_FIELDS items each
        self.ops_wanted = False            # someone observes OpAccumulated (lazy/ asks per op)
        self.user_wanted = False           # someone observes UserCode (user_code.py asks)
        self.step = 0                      # mark_steps so far (lazy.mark_step counts them)

    # ---- observers

    def subscribe(self, fn, kinds=None, many=None, runs=None) -> Handle:
        """Call ``fn(event)`` for each event (of ``kinds`` only, if given). ``many``: a function
        taking a list of op events, called instead of ``fn`` for a run of them; ``runs``: a
        function taking the ``OpRun`` itself (its events built when first asked for)."""
        with self._lock:
            self.flush()                   # ops kept before it subscribed are not its
            if many is not None:
                self._many[fn] = many
            if runs is not None:
                self._runs[fn] = runs
            if kinds is None:
                self._all = self._all + (fn,)
            else:
                for k in kinds:
                    self._by_kind[k] = self._by_kind.get(k, ()) + (fn,)
            self._update()
        return Handle(self, fn, None if kinds is None else tuple(kinds))

    def _remove(self, fn, kinds) -> None:
        with self._lock:
            self.flush()                   # the ops kept while it listened are its
            self._many.pop(fn, None)
            self._runs.pop(fn, None)
            if kinds is None:
                self._all = tuple(f for f in self._all if f is not fn)
            else:
                for k in kinds:
                    self._by_kind[k] = tuple(f for f in self._by_kind.get(k, ()) if f is not fn)
            self._update()

    def _update(self) -> None:
        self.ops_wanted = bool(self._all) or bool(self._by_kind.get(OpAccumulated))
        self.user_wanted = bool(self._all) or bool(self._by_kind.get(UserCode))
        if self.user_wanted:
            install_user_hooks()           # the hooks stay; they ask user_wanted at each call

    def wants(self, kind) -> bool:
        return bool(self._all) or bool(self._by_kind.get(kind))

    # ---- emitting

    def emit(self, event: Event) -> None:
        everyone, some = self._all, self._by_kind.get(type(event), ())
        if not everyone and not some:
            return
        if self._muted and event.lane == "host":
            return
        untrack(event)                     # observers may keep it (see _record.untrack)
        d = event.__dict__
        if _is_tracked(d):                 # its fields, when they hold a container (a graph summary)
            untrack(d)
        with self._lock:
            if self._ops:
                self._hand_over()
            for fn in everyone:
                fn(event)
            for fn in some:
                fn(event)

    def emit_host(self, cls, fields: tuple) -> None:
        """An event of class ``cls`` from its positional ``fields``, built only if someone takes it."""
        if self._all or self._by_kind.get(cls):
            self.emit(cls(*fields))

    emit_device = emit_host

    def op_accumulated(self, op, src: str) -> None:
        """One ``OpAccumulated`` now, for a caller that checked ``ops_wanted``. ``op``: its name
        ("aten::add") or the op itself (an OpOverload, named when its event is built)."""
        if self._muted:
            return
        t = _perf_ns()
        with self._ops_lock:
            self._ops += (t, op, src, self.step)

    def flush(self) -> None:
        """Hand the ops kept so far to the observers listening now."""
        if self._ops:
            with self._lock:
                if self._ops:
                    self._hand_over()

    def _hand_over(self) -> None:
        with self._ops_lock:
            items, self._ops = self._ops, []
        untrack(items)
        run = OpRun(items)
        untrack(run)
        runs, many = self._runs, self._many
        for fn in self._all + self._by_kind.get(OpAccumulated, ()):
            r = runs.get(fn)
            if r is not None:
                r(run)
                continue
            m = many.get(fn)
            if m is not None:
                m(run.events())
            else:
                for e in run.events():
                    fn(e)

    def muted(self):
        """``with recorder.muted():`` host events (from any thread: backward runs on autograd's)
        reach no observer; device events still do. perfmodel.estimate traces a function this way,
        so its ops are not shown as work that ran."""
        return _Muted(self)


class _Muted:
    def __init__(self, recorder):
        self._r = recorder

    def __enter__(self):
        with self._r._lock:
            self._r.flush()
            self._r._muted += 1
        return self

    def __exit__(self, *exc):
        with self._r._lock:
            self._r._muted -= 1
