"""``habana_frameworks.torch.internal.bridge_config``: ``get_<flag>()`` / ``set_<flag>(v)`` per bridge
environment flag, and ``env_setting(flag, value)`` to change one for a ``with`` block.

The bridge generates one getter/setter pair for each of its ~200 ``PT_*`` flags. hpu_lab answers for:

- the flags hpu_lab reads itself (``hpu_lab.config``: ``PT_HPU_LAZY_MODE``, ``PT_HPU_PLACE_ON_CPU``,
  ...): the getter is ``hpu_lab.config.get``, the setter ``hpu_lab.config.set``, so a change acts;
- the flags below that describe what the emulated device does, whatever is set, with the reason;
- nothing else: any other flag raises AttributeError naming it, rather than inventing a value.
"""
from __future__ import annotations

import contextlib

from .. import config as _config


def _bool(raw: str) -> bool:
    low = str(raw).strip().lower()
    if low in ("1", "true", "on", "yes", "y", "t"):
        return True
    if low in ("0", "false", "off", "no", "n", "f"):
        return False
    raise ValueError(f"expected a boolean, got {raw!r}")


# flag -> (parse, the value hpu_lab reports, why). These are facts of the emulator, not defaults of
# a knob: the getter reports them; setting one to another value is refused.
_FACTS = {
    # the bridge's default is false (int64 computed as int32 in lazy mode); hpu_lab's kernels are the
    # CPU's and keep int64 exact, so it behaves as the bridge with the flag on
    "PT_ENABLE_INT64_SUPPORT": (_bool, True, "hpu_lab computes int64 natively (CPU kernels); the "
                                             "bridge's int64->int32 narrowing is not emulated"),
    "PT_HPU_GPU_MIGRATION": (_bool, False, "the GPU Migration Toolkit (torch.cuda -> hpu) is not emulated"),
    # one group object per distinct rank set, as the bridge with its default (true)
    "PT_ENABLE_COMM_GROUP_CACHE": (_bool, True, "process groups over the same ranks share one communicator"),
}


def _flag_of(attr: str, prefix: str) -> str:
    return attr[len(prefix):].upper()


def _get(flag: str):
    if flag in _config.SETTINGS:
        return _config.get(flag)
    if flag in _FACTS:
        return _FACTS[flag][1]
    raise AttributeError(f"bridge_config: hpu_lab does not emulate the bridge flag {flag} "
                         f"(it knows {', '.join(sorted(set(_config.SETTINGS) | set(_FACTS)))})")


def _set(flag: str, value) -> None:
    if flag in _config.SETTINGS:
        _config.set(**{flag: value})
        return
    if flag in _FACTS:
        parse, fact, why = _FACTS[flag]
        if parse(value) != fact:
            raise RuntimeError(f"bridge_config: {flag} cannot be changed on hpu_lab: {why}")
        return
    _get(flag)                       # raises the AttributeError naming the flag


def __getattr__(attr: str):
    if attr.startswith("get_"):
        flag = _flag_of(attr, "get_")
        _get(flag)                   # unknown flag: AttributeError now, at attribute access
        return lambda: _get(flag)
    if attr.startswith("set_"):
        flag = _flag_of(attr, "set_")
        _get(flag)
        return lambda value: _set(flag, value)
    raise AttributeError(f"module 'bridge_config' has no attribute {attr!r}")


@contextlib.contextmanager
def env_setting(var: str, val):
    """``with env_setting("PT_HPU_LAZY_MODE", "0"): ...``: the flag set for the block, then restored."""
    flag = var.upper()
    _get(flag)
    saved = _config._overrides.get(flag) if flag in _config.SETTINGS else None
    _set(flag, val)
    try:
        yield
    finally:
        if flag in _config.SETTINGS:
            if saved is not None:
                _config.set(**{flag: saved})
            else:                    # no override before: back to what the environment says
                _config._overrides.pop(flag, None)
                _config._cache.pop(flag, None)
                _config._notify()
