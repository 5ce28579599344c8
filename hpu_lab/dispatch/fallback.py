"""CPU fallback (seed 003, "Placement of Ops on HPU").

An op falls back to the CPU when it is not registered for HPU, or when it is registered but the
requested dtype is not supported on HPU. hpu_lab's version of "not registered" is an op its graph
compiler cannot take: one with no meta kernel (no shape inference, so no graph node). The dtype
table below lists what the bridge documents; everything else "runs on HPU".

A fallback flushes what the op needs (a host sync), runs it on the CPU, copies the result back to
the device, records a ``CPUFallback`` event (the ``cpu_fallback`` metric counts it) and, with
``ENABLE_CONSOLE=true LOG_LEVEL_PT_FALLBACK=1``, prints the bridge's log lines:

    CPU fallback digamma : self=HPUBFloat16Type
    Frequency of op and op name that were executed on CPU:      (at process exit)
    1	aten::digamma

``PT_HPU_PLACE_ON_CPU`` follows the bridge's ``fallback_helper``: unset/empty = any unsupported op
may fall back; ``none`` = no fallback at all (the op raises "<op> is not yet supported on HPU.");
a list = those ops are placed on the CPU and only they may fall back.
"""
from __future__ import annotations

import atexit
import warnings
from collections import Counter

import torch

from .. import config, lazy, ops
from .. import events as ev
from ..util._source import user_src
from .host_ops import host_op
from ..tensor import HPUTensor

aten = torch.ops.aten

# op -> dtypes the HPU kernels do not take. Seed 003 shows digamma in bfloat16; the gamma family
# shares its TPC kernels' limits.
UNSUPPORTED_DTYPES = {
    "aten::digamma": {torch.bfloat16},
    "aten::digamma_": {torch.bfloat16},
    "aten::lgamma": {torch.bfloat16},
    "aten::lgamma_": {torch.bfloat16},
    "aten::polygamma": {torch.bfloat16},
    "aten::polygamma_": {torch.bfloat16},
    "aten::mvlgamma": {torch.bfloat16},
    "aten::mvlgamma_": {torch.bfloat16},
}

counts: Counter = Counter()          # aten name -> fallbacks in this process (the exit table)

_TYPE = {torch.float32: "Float", torch.bfloat16: "BFloat16", torch.float16: "Half",
         torch.float64: "Double", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
         torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
         torch.complex128: "ComplexDouble"}


class FallbackNotAllowed(RuntimeError):
    """An op needs the CPU but PT_HPU_PLACE_ON_CPU forbids it."""


def _type_name(t) -> str:
    dev = "HPU" if isinstance(t, HPUTensor) else t.device.type.upper()
    return f"{dev}{_TYPE.get(t.dtype, str(t.dtype).replace('torch.', ''))}Type"


def describe(func, args, kwargs) -> str:
    """'self=HPUBFloat16Type', the argument part of the bridge's log line."""
    parts = []
    for i, a in enumerate(func._schema.arguments):
        v = args[i] if i < len(args) else kwargs.get(a.name)
        if isinstance(v, torch.Tensor):
            parts.append(f"{a.name}={_type_name(v)}")
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v):
            parts.append(f"{a.name}=[{', '.join(_type_name(x) for x in v)}]")
    return ", ".join(parts)


def _dtypes(args, kwargs):
    out = []
    for a in list(args) + list(kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(x, torch.Tensor):
                out.append(str(x.dtype).replace("torch.", ""))
    return tuple(out)


def run_on_cpu(func, args, kwargs, why: str):
    """The fallback itself: the op runs on the CPU, its result goes back to the device."""
    name = ops.op_name(func)
    allowed = config.get("PT_HPU_PLACE_ON_CPU")
    if allowed is not None and name not in allowed:
        raise FallbackNotAllowed(
            f"{name} is not yet supported on HPU. ({why}; the CPU fallback is disabled by "
            f"PT_HPU_PLACE_ON_CPU={','.join(sorted(allowed)) or 'none'})")
    src = user_src(3)
    if lazy.S.capture is not None:       # "cpu fallback is not supported during hpu graph capturing"
        lazy.S.capture.refuse(name, src, fallback=True)
    counts[name] += 1
    if config.get("ENABLE_CONSOLE") and config.get("LOG_LEVEL_PT_FALLBACK") <= 1:
        print(f"CPU fallback {name.split('::')[-1]} : {describe(func, args, kwargs)}", flush=True)
    t0 = ev.now()
    res = host_op(func, args, kwargs, f"cpu fallback {name}")
    ev.emit(ev.CPUFallback(t0, ev.now(), "host", ev.recorder.step, op=name,
                           dtypes=_dtypes(args, kwargs), src=src))
    return res


def _unsupported(name, args):
    bad = UNSUPPORTED_DTYPES.get(name)
    if bad:
        for a in args:
            if isinstance(a, HPUTensor) and a.dtype in bad:
                return f"{a.dtype} is not supported on HPU for {name}"
    return None


def checked(orig):
    """A handler that runs the op on the CPU when it is placed there or its dtype is unsupported,
    else as ``orig`` would (dispatch/route.py installs it for ``checked_ops()``)."""
    def handler(func, args, kwargs):
        name = ops.op_name(func)
        placed = config.get("PT_HPU_PLACE_ON_CPU")
        if placed and name in placed:
            return run_on_cpu(func, args, kwargs, "placed on CPU by PT_HPU_PLACE_ON_CPU")
        why = _unsupported(name, args)
        if why is not None:
            return run_on_cpu(func, args, kwargs, why)
        return orig(func, args, kwargs)
    return handler


def _overloads(name):
    if name.count("::") != 1:
        return []                         # not a namespace::op name: no op
    ns, op = name.split("::")
    packet = getattr(getattr(torch.ops, ns), op, None)
    if packet is None:
        return []
    return [getattr(packet, o) for o in packet.overloads()]


class PlaceOnCpuWarning(UserWarning):
    """PT_HPU_PLACE_ON_CPU names an op that does not exist (a typo places nothing on the CPU)."""


_unknown_warned: set = set()


def checked_ops() -> list:
    """The ops that must pass the check first: the dtype table's and PT_HPU_PLACE_ON_CPU's. A name
    in PT_HPU_PLACE_ON_CPU that is no op is said once: the bridge takes the list as it is, so a
    typo ("digama") silently placed nothing, and with a list set no other op may fall back."""
    names = set(UNSUPPORTED_DTYPES)
    try:
        placed = config.get("PT_HPU_PLACE_ON_CPU") or ()
    except config.ConfigError:
        placed = ()                       # reported where the setting is used
    unknown = sorted(n for n in placed if not _overloads(n))
    if unknown and frozenset(unknown) not in _unknown_warned:
        _unknown_warned.add(frozenset(unknown))
        warnings.warn(f"PT_HPU_PLACE_ON_CPU: no op named {', '.join(unknown)}: it places nothing on the "
                      "CPU (names are aten ops, e.g. aten::digamma or digamma)", PlaceOnCpuWarning, stacklevel=2)
    names |= set(placed)
    return [func for name in sorted(names) for func in _overloads(name)]


def frequency_table() -> str:
    """The bridge's exit report, most frequent first."""
    lines = ["Frequency of op and op name that were executed on CPU:"]
    lines += [f"{n}\t{name}" for name, n in counts.most_common()]
    return "\n".join(lines)


@atexit.register
def _report_at_exit() -> None:
    try:
        if counts and config.get("ENABLE_CONSOLE") and config.get("LOG_LEVEL_PT_FALLBACK") <= 3:
            print(frequency_table(), flush=True)
    except Exception:  # noqa: BLE001 - a malformed setting must not turn exit into a traceback
        pass

