"""``habana_frameworks.torch.activity_profiler``: the bridge's replacements in ``torch.profiler``.

Importing ``habana_frameworks.torch`` on a Gaudi replaces ``torch.profiler.ProfilerActivity`` with
the bridge's own enum (``CPU``, ``CUDA``, ``HPU``) and ``torch.profiler.profile`` with a subclass
that takes those values (and ``debug_activities``), hands torch's own CPU/CUDA activities to Kineto
and starts the HPU activity profiler when ``HPU`` is asked for. Libraries test for the replacement:
lightning-habana's ``HPUProfiler`` asserts that no activity is still torch's C++ enum.

hpu_lab does the same when ``habana_frameworks.torch`` is imported (``hpu_lab.compat``), not on
``import hpu_lab``. The device's events are added to the exported trace by ``hpu_lab.observe.torch_profiler``
(a process "HPU 0 (hpu_lab emulated)"); that happens whatever the activities, so ``HPU`` here only
records that it was asked for (``hpu_profiling_active``), as the real class does. Activities given
as torch's own enum values (imported before the replacement) are accepted too.
``unregister_habana_activity_profiler`` puts torch's back (``disable_habana_imports``).
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Callable, Iterable, Optional

import torch
import torch.profiler

_original = {}


class DebugActivity(Enum):
    SYNAPSE_FUNCTION_CALLS = 1
    BRIDGE_FUNCTION_CALLS = 2


class HabanaProfilerActivity(Enum):
    CPU = 1
    CUDA = 2
    HPU = 3


def _name(activity) -> str:
    name = getattr(activity, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"torch.profiler.profile: {activity!r} is not a ProfilerActivity")
    return name


def _torch_activity(activity):
    """The activity Kineto records for ``activity`` (CPU, CUDA), or None for HPU (hpu_lab's events)."""
    name = _name(activity)
    if name == "HPU":
        return None
    return getattr(_original["ProfilerActivity"], name)


def _make_profile(base):
    class habana_profile(base):
        def __init__(self, *, activities: Optional[Iterable] = None,
                     debug_activities: Optional[Iterable[DebugActivity]] = None,
                     schedule: Optional[Callable[[int], Any]] = None, on_trace_ready=None,
                     record_shapes: bool = False, profile_memory: bool = False, with_stack: bool = False,
                     with_flops: bool = False, with_modules: bool = False, experimental_config=None,
                     **kwargs):
            activities = ((HabanaProfilerActivity.CPU, HabanaProfilerActivity.HPU)
                          if activities is None else list(activities))
            self.hpu_profiling_active = any(_name(a) == "HPU" for a in activities)
            self.debug_activities = list(debug_activities or ())
            kineto = [a for a in (_torch_activity(a) for a in activities) if a is not None]
            super().__init__(activities=kineto or [_original["ProfilerActivity"].CPU], schedule=schedule,
                             on_trace_ready=on_trace_ready, record_shapes=record_shapes,
                             profile_memory=profile_memory, with_stack=with_stack, with_flops=with_flops,
                             with_modules=with_modules, experimental_config=experimental_config, **kwargs)

    habana_profile.__module__ = __name__
    return habana_profile


def register_habana_activity_profiler() -> None:
    """Replace torch.profiler.ProfilerActivity / profile with the bridge's (idempotent)."""
    if _original:
        return
    _original["ProfilerActivity"] = torch.profiler.ProfilerActivity
    _original["profile"] = torch.profiler.profile
    torch.profiler.profile = _make_profile(_original["profile"])
    torch.profiler.ProfilerActivity = HabanaProfilerActivity


def unregister_habana_activity_profiler() -> None:
    if not _original:
        return
    torch.profiler.ProfilerActivity = _original.pop("ProfilerActivity")
    torch.profiler.profile = _original.pop("profile")
