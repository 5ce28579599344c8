"""The reference recorder: the event stream's contract in its plainest form, for tests.

Every event is built when it is emitted and delivered at once, to every observer of its kind, in
the order emitted; nothing is kept back. The fast recorder (recorder.py) keeps op events as flat
runs and builds them late; on the same program it must give the same events, in the same order,
with the same fields (tests/events/test_events_contract.py runs programs under both, ``events.use``).
"""
from __future__ import annotations

import threading
import time

from .user_time import install as install_user_hooks
from .kinds import OpAccumulated, UserCode
from .recorder import Handle, _op_name


class ReferenceRecorder:
    def __init__(self):
        self._lock = threading.RLock()
        self._observers: list = []         # (fn, kinds or None)
        self._muted = 0
        self.ops_wanted = False
        self.user_wanted = False
        self.step = 0

    def subscribe(self, fn, kinds=None, many=None, runs=None) -> Handle:
        # many= and runs= only change how a run of ops is handed over; here there are no runs
        with self._lock:
            self._observers.append((fn, None if kinds is None else tuple(kinds)))
            self._update()
        return Handle(self, fn, None if kinds is None else tuple(kinds))

    def _remove(self, fn, kinds) -> None:
        with self._lock:
            self._observers = [(f, k) for f, k in self._observers if not (f is fn and k == kinds)]
            self._update()

    def _update(self) -> None:
        self.ops_wanted = self.wants(OpAccumulated)
        self.user_wanted = self.wants(UserCode)
        if self.user_wanted:
            install_user_hooks()

    def wants(self, kind) -> bool:
        return any(k is None or kind in k for _, k in self._observers)

    def emit(self, event) -> None:
        if self._muted and event.lane == "host":
            return
        with self._lock:
            for fn, kinds in list(self._observers):
                if kinds is None or type(event) in kinds:
                    fn(event)

    def emit_host(self, cls, fields: tuple) -> None:
        if self.wants(cls):
            self.emit(cls(*fields))

    emit_device = emit_host

    def op_accumulated(self, op, src: str) -> None:
        t = time.perf_counter_ns()
        name = op if type(op) is str else _op_name(op)
        self.emit(OpAccumulated(t, t, "host", self.step, op=name, src=src))

    def flush(self) -> None:
        pass

    def muted(self):
        rec = self

        class _Muted:
            def __enter__(self):
                rec._muted += 1

            def __exit__(self, *exc):
                rec._muted -= 1
        return _Muted()
