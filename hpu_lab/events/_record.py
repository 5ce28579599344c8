"""Machinery of the event kinds (you need not read this to use the event stream): the decorator
that makes an event class a frozen dataclass with a fast ``__init__``, and ``untrack``.

A recording keeps every event it sees (~75 a training step, 45,000 for a 600-step loop), so both
matter: building an event is on the loop's path, and each kept object counts towards CPython's
next full garbage collection, which walks every object of the process (0.3-0.7 s in a Jupyter
kernel).
"""
from __future__ import annotations

import dataclasses
import inspect
import sys
from dataclasses import dataclass


def record(cls):
    """``@dataclass(frozen=True)`` with a faster ``__init__``: the generated one assigns each field
    with its own ``object.__setattr__`` call (1.3-1.9 us an event); this one fills the instance's
    ``__dict__`` in one call (~0.8 us). Same signature, defaults and result (fields, repr, eq, hash,
    frozen, replace, asdict); a call the generated ``__init__`` would refuse (a missing, unknown or
    repeated argument) goes to it, for its error."""
    cls = dataclass(frozen=True)(cls)
    fs = dataclasses.fields(cls)
    for f in fs:
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: events take plain defaults, not a default_factory")
    generated = cls.__init__
    pos = tuple(f.name for f in fs if not f.kw_only)
    if pos[:4] != ("t_start", "t_end", "lane", "step"):
        raise TypeError(f"{cls.__name__}: an event's fields start with t_start, t_end, lane, step")
    rest, n_fields = pos[4:], len(fs)
    required = tuple(f.name for f in fs[4:] if f.default is dataclasses.MISSING)
    # in field order; the four fields every call sets hold None (not MISSING, an object), so that
    # each event's copy of the template is a dict the garbage collector does not track while its
    # values are numbers and strings
    template = {f.name: (None if i < 4 else f.default) for i, f in enumerate(fs)}
    setter = object.__setattr__

    def __init__(self, t_start, t_end, lane, step, *args, **kw):
        d = template.copy()
        d["t_start"], d["t_end"], d["lane"], d["step"] = t_start, t_end, lane, step
        if args:
            if len(args) > len(rest) or (kw and not kw.keys().isdisjoint(rest[:len(args)])):
                return generated(self, t_start, t_end, lane, step, *args, **kw)
            d.update(zip(rest, args))
        if kw:
            d.update(kw)
            if len(d) != n_fields:                   # an unknown keyword
                return generated(self, t_start, t_end, lane, step, *args, **kw)
        if required and any(d[r] is dataclasses.MISSING for r in required):
            return generated(self, t_start, t_end, lane, step, *args, **kw)
        setter(self, "__dict__", d)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__signature__ = inspect.signature(generated)
    __init__.__doc__ = generated.__doc__
    cls.__init__ = __init__
    return cls


def _untracker():
    """CPython's ``PyObject_GC_UnTrack`` (a no-op elsewhere). An event cannot be part of a reference
    cycle (it is immutable and holds numbers, strings, tuples of them and frozen graph summaries),
    so the cyclic collector has nothing to find in it; CPython untracks tuples and dicts of such
    values itself. Reference counting still frees events."""
    if sys.implementation.name != "cpython":
        return lambda obj: None
    try:
        import ctypes
        fn = ctypes.pythonapi.PyObject_GC_UnTrack     # pythonapi: calls keep the GIL
        fn.argtypes, fn.restype = (ctypes.py_object,), None
        return fn
    except (ImportError, AttributeError):
        return lambda obj: None


#: ``untrack(obj)``: take an event (or a list of them) out of the cyclic collector's lists.
untrack = _untracker()
