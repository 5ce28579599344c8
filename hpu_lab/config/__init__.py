"""Every environment variable hpu_lab reads, in one place.

The real bridge reads its ``PT_HPU_*`` variables once, at initialisation; so does hpu_lab, on
first use of a setting. From Python, ``hpu_lab.config.set(PT_HPU_LAZY_MODE="0")`` overrides a
variable (tests and notebooks use it; call ``reload()`` to re-read the environment). A malformed
value raises ``ConfigError`` naming the variable and the form it expects.

Lab-only settings start with ``HPU_LAB_``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional


class ConfigError(ValueError):
    """A malformed environment variable: the message names it and the expected form."""


def _bool(name: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{name}={raw!r}: expected true/false or 1/0")


def _int_at_least(lo: int):
    def parse(name: str, raw: str) -> int:
        try:
            v = int(raw.strip(), 0)
        except ValueError:
            raise ConfigError(f"{name}={raw!r}: expected an integer >= {lo}") from None
        if v < lo:
            raise ConfigError(f"{name}={raw!r}: expected an integer >= {lo}")
        return v
    return parse


def _lazy_mode(name: str, raw: str) -> bool:
    v = raw.strip()
    if v in ("0", "1"):
        return v == "1"
    raise ConfigError(f"{name}={raw!r}: expected 1 (lazy mode) or 0 (eager / torch.compile)")


def _compound_op_size(name: str, raw: str) -> Optional[int]:
    v = _int_at_least(-1)(name, raw)
    return None if v <= 0 else v


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "KIB": 1 << 10, "M": 1000**2, "MB": 1000**2,
          "MIB": 1 << 20, "G": 1000**3, "GB": 1000**3, "GIB": 1 << 30, "T": 1000**4,
          "TB": 1000**4, "TIB": 1 << 40}


def parse_size(name: str, raw: str) -> int:
    """'64MiB', '2GiB', '1.5GB' or a plain byte count -> bytes."""
    m = _SIZE.match(str(raw))
    unit = m.group(2).upper() if m else None
    if not m or unit not in _UNITS:
        raise ConfigError(f"{name}={raw!r}: expected a size such as 64MiB, 2GiB or a byte count")
    return int(float(m.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class RecipeCacheConfig:
    path: str
    delete: bool
    max_mb: Optional[float]


def _recipe_cache(name: str, raw: str) -> Optional[RecipeCacheConfig]:
    form = "expected <path>,<delete true/false>,<max size in MB>, e.g. /tmp/recipes,true,1024"
    parts = [p.strip() for p in raw.split(",")]
    if not raw.strip() or not parts[0]:
        return None                      # empty path disables the disk cache
    if len(parts) > 3:
        raise ConfigError(f"{name}={raw!r}: {form}")
    delete = False
    if len(parts) >= 2 and parts[1] != "":
        if parts[1].lower() not in ("true", "false"):
            raise ConfigError(f"{name}={raw!r}: {form}")
        delete = parts[1].lower() == "true"
    max_mb = None
    if len(parts) == 3 and parts[2] != "":
        try:
            max_mb = float(parts[2])
        except ValueError:
            raise ConfigError(f"{name}={raw!r}: {form}") from None
        if max_mb <= 0:
            raise ConfigError(f"{name}={raw!r}: {form} (max size must be > 0)")
    return RecipeCacheConfig(_cache_folder(name, raw, parts[0], form), delete, max_mb)


def _cache_folder(name: str, raw: str, path: str, form: str) -> str:
    """The folder of the disk cache, refused when it can never be one: a bare word (``garbage``
    is a typo far more often than a folder meant to appear in the working directory), or a path
    that is, or lies under, a regular file."""
    if not (os.path.isabs(path) or path.startswith(("./", "../", "~"))) or path in (".", ".."):
        raise ConfigError(f"{name}={raw!r}: {form}; the path must be absolute or start with ./, ../ "
                          f"or ~ (got {path!r})")
    full = os.path.abspath(os.path.expanduser(path))
    p = full
    while True:
        if os.path.lexists(p):
            if not os.path.isdir(p):
                where = "is" if p == full else f"lies under {p}, which is"
                raise ConfigError(f"{name}={raw!r}: the cache folder {full} {where} not a directory")
            break
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return os.path.expanduser(path)


def _str(name: str, raw: str) -> str:
    return raw


def _choice(*choices):
    def parse(name: str, raw: str) -> str:
        v = raw.strip().lower()
        if v not in choices:
            raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
        return v
    return parse


def _place_on_cpu(name: str, raw: str):
    """'' -> None (any unsupported op may fall back); 'none' -> empty set; else the listed ops."""
    v = raw.strip()
    if v == "":
        return None
    if v.lower() == "none":
        return frozenset()
    ops = [o.strip() for o in v.split(",") if o.strip()]
    return frozenset(o if "::" in o else f"aten::{o}" for o in ops)


def _triggers(name: str, raw: str):
    allowed = {"process_exit", "mark_step", "metric_change"}
    vals = [v.strip() for v in raw.split(",") if v.strip()]
    bad = [v for v in vals if v not in allowed]
    if bad:
        raise ConfigError(f"{name}={raw!r}: expected a comma-separated list of {', '.join(sorted(allowed))}")
    return frozenset(vals)


@dataclass(frozen=True)
class Setting:
    env: str
    parse: Callable[[str, str], Any]
    default: str
    doc: str


SETTINGS: Dict[str, Setting] = {s.env: s for s in [
    Setting("PT_HPU_LAZY_MODE", _lazy_mode, "1", "1 = lazy mode (the bridge's default), 0 = eager / torch.compile"),
    Setting("PT_HPU_MAX_COMPOUND_OP_SIZE", _compound_op_size, "-1", "cap on ops per lazy graph; 1 emulates op-by-op (seed 004)"),
    Setting("PT_HPU_RECIPE_CACHE_CONFIG", _recipe_cache, "", "<path>,<delete>,<max MB>: disk recipe cache (seed 003)"),
    Setting("PT_HPU_ENABLE_LAZY_COLLECTIVES", _bool, "false", "collectives recorded into the lazy graph (seed 001)"),
    Setting("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST", _str, "", "file: ops autocast runs in bf16/fp16 (replaces the default list)"),
    Setting("PT_HPU_AUTOCAST_FP32_OPS_LIST", _str, "", "file: ops autocast runs in fp32 (replaces the default list)"),
    Setting("ENABLE_CONSOLE", _bool, "false", "print bridge logs to the console"),
    Setting("LOG_LEVEL_PT_FALLBACK", _int_at_least(0), "5", "1 prints each CPU fallback and the frequency table at exit"),
    Setting("LOG_LEVEL_PT_HABHELPER", _int_at_least(0), "5", "2 prints disk-cache eviction messages"),
    Setting("PT_HPU_PLACE_ON_CPU", _place_on_cpu, "", "'' any unsupported op may fall back; none: none may; else the listed ops only"),
    Setting("GRAPH_VISUALIZATION", _bool, "false", "dump every compiled graph to ./.graph_dumps"),
    Setting("PT_HPU_GRAPH_DUMP_FORMAT", _choice("pbtxt", "svg", "graphml", "dot"), "graphml", "format of the graph dumps"),
    Setting("PT_HPU_GRAPH_DUMP_PREFIX", _str, "", "file-name prefix of the graph dumps"),
    Setting("PT_HPU_WEIGHT_SHARING", _bool, "true", "weight sharing (on by default in lazy mode, seed 003)"),
    Setting("PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING", _bool, "true",
            "the graph compiler places the permutes of channels-last convolutions (false: a pair around each)"),
    Setting("PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES", _bool, "false", "dynamic-shape refinement"),
    Setting("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", _bool, "false", "overrides disable_tensor_cache of the HPU Graph wrappers"),
    Setting("PT_HPUGRAPH_ENABLE_DRY_RUN", _bool, "false", "ModuleCacher captures with dry_run"),
    Setting("PT_HPU_ENABLE_CACHE_METRICS", _bool, "false", "the recipe_cache metric (the lab always keeps it)"),
    Setting("PT_HPU_METRICS_FILE", _str, "", "where metrics_dump writes at the triggers"),
    Setting("PT_HPU_METRICS_FILE_FORMAT", _choice("json", "text"), "json", "json or text"),
    Setting("PT_HPU_METRICS_DUMP_TRIGGERS", _triggers, "process_exit", "process_exit, mark_step, metric_change"),
    Setting("HPU_LAB_MEMORY_LIMIT", parse_size, "96GiB", "device memory Limit (Gaudi 2: 96 GiB of HBM); e.g. 64MiB for lessons"),
    Setting("HPU_LAB_SOURCE_LINES", _bool, "true", "record the user's file:line of each op (costs ~1 us per op)"),
    Setting("HPU_LAB_DEVICE", _choice("gaudi", "gaudi2", "gaudi3"), "gaudi2",
            "the card the Gaudi clock models (timelines, verdicts, get_device_name)"),
    Setting("HPU_LAB_HOST_CARDS", _int_at_least(1), "8",
            "cards hl-smi lists on the emulated host (an HLS-2/HLS-3 server has 8); each process uses hpu:0"),
    Setting("HPU_LAB_RECIPE_EXECUTOR", _choice("torchscript", "fx"), "torchscript",
            "how the device runs a recipe: its TorchScript lowering, or the fx code"),
]}

_overrides: Dict[str, str] = {}
_cache: Dict[str, Any] = {}


def get(env: str) -> Any:
    """The parsed value of a setting (read once, then cached)."""
    try:
        return _cache[env]
    except KeyError:
        pass
    s = SETTINGS[env]
    raw = _overrides.get(env, os.environ.get(env, s.default))
    value = s.parse(env, raw)
    _cache[env] = value
    return value


def set(**values: Any) -> None:  # noqa: A001 - mirrors os.environ-style setting
    """Override settings from Python, e.g. ``set(PT_HPU_LAZY_MODE="0")``. Validated at once."""
    for env, raw in values.items():
        if env not in SETTINGS:
            raise ConfigError(f"unknown setting {env!r}; known: {', '.join(sorted(SETTINGS))}")
        raw = str(raw).lower() if isinstance(raw, bool) else str(raw)
        value = SETTINGS[env].parse(env, raw)  # validate before storing; this is the read
        _overrides[env] = raw
        _cache[env] = value
    _notify()


def reload() -> None:
    """Forget overrides and re-read the environment now: a malformed variable raises ConfigError
    here, naming it (as at ``import hpu_lab``), not later where its feature first runs."""
    _overrides.clear()
    _cache.clear()
    _notify()
    validate_all()


def _notify() -> None:
    # every listener runs even if one meets a malformed variable; the first error is raised after
    first = None
    for fn in _listeners:
        try:
            fn()
        except ConfigError as e:
            first = first or e
    if first is not None:
        raise first


def validate_all() -> None:
    """Parse every setting now (raises ConfigError on the first malformed one)."""
    for env in SETTINGS:
        get(env)


_listeners: list = []


def on_change(fn: Callable[[], None]) -> None:
    """Modules that cache a setting register here to drop their cache when settings change."""
    _listeners.append(fn)


def lazy_mode() -> bool:
    return get("PT_HPU_LAZY_MODE")


def describe() -> str:
    """A table of every setting, its current value and its meaning."""
    rows = []
    for env, s in SETTINGS.items():
        try:
            val = repr(get(env))
        except ConfigError as e:
            val = f"<error: {e}>"
        rows.append(f"{env:42s} {val:24s} {s.doc}")
    return "\n".join(rows)
