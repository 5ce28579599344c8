"""Settings that kernels read when they run: a change leaves what was already traced as it was.

``torch.set_default_dtype`` (and the deprecated ``torch.set_default_tensor_type``),
``torch.set_float32_matmul_precision``, ``torch.use_deterministic_algorithms`` and torch.backends'
oneDNN knobs (``mkldnn.enabled``, ``fp32_precision``) set process-wide state, and
``torch.set_flush_denormal`` the calling thread's (the device's worker is told of it:
runtime/executor.py's DeviceMode). torch's kernels read that state when they run: a factory's
dtype, an integer tensor's true division, whether a float32 matmul may go through bf16
(``"medium"`` does on this CPU), which algorithm a conv takes, whether a denormal result is
flushed to zero. On the CPU an op runs when it is
called, under the settings of that moment; a Gaudi's lazy graph holds the dtypes resolved when each
op was traced. Here the device runs a graph's kernels later, on its own thread, under whatever the
settings are then: a graph traced under float32 and run after ``torch.set_default_dtype(torch.float64)``
returned float64 and failed at the next sync, and a matmul traced under ``"highest"`` and run after
``set_float32_matmul_precision("medium")`` gave other numbers than CPU's, silently, or not,
depending on how far behind the device was.

So before such a setting changes, the ops traced under the old one are launched (a graph whose
GraphBuilt has the setter's name as its trigger: the one graph boundary the emulator adds to the
user's) and the device runs everything launched. An HPU Graph replayed after the change is the
limit left: a replay under another default dtype is refused, naming both (graphs/recording.py); one
under another matmul precision or determinism runs under the new setting.
"""
from __future__ import annotations

import torch

from .. import lazy
from ..util._source import user_src
from ..runtime import executor


def _dtype_changes(d) -> bool:
    # torch refuses anything else with its own message, untouched (nothing launched for it)
    return isinstance(d, torch.dtype) and d.is_floating_point and d is not torch.get_default_dtype()


def _tensor_type_changes(t) -> bool:
    # the deprecated way to set the default dtype (torch.DoubleTensor, or "torch.DoubleTensor")
    if isinstance(t, str):
        t = getattr(torch, t[len("torch."):], None) if t.startswith("torch.") else None
    return _dtype_changes(getattr(t, "dtype", None))


def _precision_changes(precision) -> bool:
    return precision in ("highest", "high", "medium") and precision != torch.get_float32_matmul_precision()


def _determinism_changes(mode, *, warn_only=False) -> bool:
    return isinstance(mode, bool) and isinstance(warn_only, bool) and \
        (mode, warn_only) != (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())


def _flush_changes(mode) -> bool:
    return isinstance(mode, bool) and mode is not executor.DeviceMode.flush_denormal


def _flush_set(supported: bool, mode) -> None:
    # torch sets the mode for the calling thread only: the device's worker follows it (executor.Launch)
    if supported:
        executor.set_flush_denormal(mode)


def flushes_denormals() -> bool:
    """Whether this thread's CPU kernels flush denormals (torch has no getter for it): a denormal
    halved comes out as zero."""
    return torch.full((1,), 1e-39, dtype=torch.float32).mul_(0.5).item() == 0.0


# torch's setter -> whether a call would change what the kernels read (and, for a mode the device's
# worker is told of, what to note once it is set)
_SETTERS = {"set_default_dtype": _dtype_changes,
            "set_default_tensor_type": _tensor_type_changes,
            "set_float32_matmul_precision": _precision_changes,
            "use_deterministic_algorithms": _determinism_changes,
            "set_flush_denormal": _flush_changes}
_AFTER = {"set_flush_denormal": _flush_set}


def _mkldnn_changes(on) -> bool:
    return isinstance(on, bool) and on is not torch._C._get_mkldnn_enabled()


def _fp32_precision_changes(backend, op, precision) -> bool:
    return isinstance(precision, str) and precision != torch._C._get_fp32_precision_getter(backend, op)


# torch._C's setters behind torch.backends' knobs, which torch's Python calls by that name when they
# are set (``torch.backends.mkldnn.flags(enabled=False)``, ``torch.backends.mkldnn.matmul.fp32_precision
# = "bf16"``): the knob's name for the trigger, and whether a call would change it. (With oneDNN off,
# a CPU conv2d takes another algorithm: other numbers in the last bits.)
_C_SETTERS = {"_set_mkldnn_enabled": ("torch.backends.mkldnn.enabled", _mkldnn_changes),
              "_set_fp32_precision_setter": ("torch.backends fp32_precision", _fp32_precision_changes)}
_originals: dict = {}


def settle(trigger: str) -> None:
    """Launch what is pending and wait until the device has run everything launched (before a
    setting the kernels read changes: ``trigger`` names it, the flush's trigger)."""
    lazy.flush(trigger, user_src(3))
    executor.wait_all_quietly()


def _wrap(name, orig, changes, after=None, trigger=None):
    trigger = trigger or f"torch.{name}"

    def setter(*args, **kwargs):
        try:
            changing = changes(*args, **kwargs)
        except Exception:            # noqa: BLE001 - a call torch refuses: its own message
            changing = False
        if changing:
            settle(trigger)
        result = orig(*args, **kwargs)
        if changing and after is not None:
            after(result, *args, **kwargs)
        return result
    setter.__name__ = setter.__qualname__ = name
    setter.__doc__ = orig.__doc__
    setter.__wrapped__ = orig
    return setter


def install() -> None:
    """Idempotent: wrap torch's setters once."""
    if _originals:
        return
    executor.set_flush_denormal(flushes_denormals())     # set before hpu_lab was imported, maybe
    for name, changes in _SETTERS.items():
        orig = _originals[name] = getattr(torch, name)
        setattr(torch, name, _wrap(name, orig, changes, _AFTER.get(name)))
    for name, (trigger, changes) in _C_SETTERS.items():
        orig = getattr(torch._C, name, None)
        if orig is None:             # another torch: nothing to wrap
            continue
        _originals["_C." + name] = orig
        wrapped = _wrap(name, orig, changes, trigger=trigger)
        setattr(torch._C, name, wrapped)
        _rebind_knobs(orig, wrapped)


def _rebind_knobs(orig, wrapped) -> None:
    """torch.backends' knobs that hold torch._C's setter itself (``ContextProp``: the assignment
    ``torch.backends.mkldnn.enabled = False``) call the wrapped one instead."""
    import torch.backends.mkldnn as mkldnn
    for value in vars(type(mkldnn)).values():
        if getattr(value, "setter", None) is orig:
            value.setter = wrapped
