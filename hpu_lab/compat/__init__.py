"""Run Gaudi code unchanged: ``habana_frameworks.torch...`` imports resolve to hpu_lab.

    import hpu_lab.compat
    hpu_lab.compat.enable_habana_imports()
    import habana_frameworks.torch.core as htcore      # hpu_lab.core
    import habana_frameworks.torch as ht               # ht.hpu is torch.hpu, ht.core is htcore

``python -m hpu_lab run script.py`` does this before running the script.

Two meta-path finders do the mapping:

- ``HabanaFinder`` (first in ``sys.meta_path``) maps each ``habana_frameworks`` name hpu_lab emulates
  to the hpu_lab module standing for it (``ALIASES``: one name; ``PREFIXES``: a whole subtree, name
  for name), importing that module only when the alias is imported, so a missing part of hpu_lab
  fails only where it is used. With it enabled, hpu_lab answers even where a real
  ``habana_frameworks`` is installed. For any other name it returns None: other importers (a user's
  own finder, a stub file under a ``habana_frameworks/`` folder on ``sys.path``) get their turn.
- ``NotEmulatedFinder`` (last) is reached only when nothing else found the name: it raises
  "hpu_lab does not emulate <name>" with the list of what is emulated.

To emulate one more module, add a line to ``ALIASES`` (or ``PREFIXES`` for a package whose hpu_lab
counterpart mirrors its layout); ``tests/compat/test_compat.py`` imports every entry both ways
(``import a.b.c`` and ``from a.b import c``) in a fresh process.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

ROOT = "habana_frameworks"
# other top-level packages of a Gaudi install that hpu_lab answers for (the same finders map them)
OTHER_ROOTS = ("habana_dataloader",)   # (their modules: TOP_LEVEL and ALIASES below)

# habana_frameworks module -> the hpu_lab module that stands for it (checked before PREFIXES)
ALIASES = {
    "habana_frameworks.torch.hpu.metrics": "hpu_lab.observe.metrics",
    "habana_frameworks.torch.utils.library_loader": "hpu_lab.compat.library_loader",
    "habana_frameworks.torch.utils.debug": "hpu_lab.compat.debug",
    "habana_frameworks.torch.utils.experimental": "hpu_lab.compat.experimental",
}
# everything below these maps name for name (hpex.kernels -> hpu_lab.hpex.kernels, ...): the hpu_lab
# package mirrors the real one's layout, so ``from <prefix> import <submodule>`` works as well
PREFIXES = {
    "habana_frameworks.torch.core": "hpu_lab.core",
    "habana_frameworks.torch.hpu": "hpu_lab.hpu",
    "habana_frameworks.torch.hpex": "hpu_lab.hpex",
    "habana_frameworks.torch.distributed": "hpu_lab.distributed",
}
# ---- issue 16 (helper "bridge"): the modules Intel's own bridge tests import --------------------
ALIASES.update({
    "habana_frameworks.torch._hpex_C": "hpu_lab.bridge_api.hpex_c",
})
PREFIXES.update({
    "habana_frameworks.torch.dynamo": "hpu_lab.dynamo",
    "habana_frameworks.torch.internal": "hpu_lab.internal",
})
# ---- end of issue 16's block ---------------------------------------------------------------------
# ---- issue 35 (helper "clients"): what lightning-habana, DeepSpeed and optimum-habana import -----
ALIASES.update({
    "habana_frameworks.torch.utils.internal": "hpu_lab.compat.internal",
    "habana_frameworks.torch.activity_profiler": "hpu_lab.compat.activity_profiler",
    "habana_dataloader.habana_dataset": "hpu_lab.compat.habana_dataloader.habana_dataset",
})
# top-level packages of the install other than habana_frameworks
TOP_LEVEL = {"habana_dataloader": "hpu_lab.compat.habana_dataloader"}
# every module under this name is made by hpu_lab.compat.mediapipe (importable, fails when used)
MEDIAPIPE = "habana_frameworks.mediapipe"
# ---- end of issue 35's block ---------------------------------------------------------------------

# packages with nothing of their own: their attributes are the aliased submodules
PACKAGES = ("habana_frameworks", "habana_frameworks.torch", "habana_frameworks.torch.utils")


def target_of(name: str):
    """The hpu_lab module standing for ``name``, or None if hpu_lab does not emulate it."""
    if name in ALIASES:
        return ALIASES[name]
    if name in TOP_LEVEL:
        return TOP_LEVEL[name]
    for prefix, target in PREFIXES.items():
        if name == prefix or name.startswith(prefix + "."):
            return target + name[len(prefix):]
    return None


def emulated() -> list:
    """Every emulated module name (a prefix stands for its whole subtree)."""
    return sorted(set(ALIASES) | set(TOP_LEVEL) | set(PREFIXES) | set(PACKAGES) | {MEDIAPIPE})


def _ours(name: str) -> bool:
    """Whether ``name`` is under a root hpu_lab answers for (habana_frameworks, habana_dataloader)."""
    return any(name == r or name.startswith(r + ".") for r in (ROOT,) + OTHER_ROOTS)


def _search_path(name: str) -> list:
    """Folders a ``name`` package has on ``sys.path`` (a user's stubs, or a real install): submodules
    hpu_lab does not emulate are looked for there, by the ordinary path finder."""
    parts = name.split(".")
    return [p for p in (os.path.join(d or os.getcwd(), *parts) for d in sys.path if isinstance(d, str))
            if os.path.isdir(p)]


class _Package(types.ModuleType):
    """``habana_frameworks``, ``habana_frameworks.torch``, ``...utils``: attributes are the submodules
    (``ht.hpu``, ``ht.core``), imported on first access as the real package imports them."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = f"{self.__name__}.{attr}"
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r} "
                                 f"(hpu_lab does not emulate {name})") from None


_MEDIAPIPE = object()        # the _Loader target of the habana_frameworks.mediapipe subtree


class _Loader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target
        self._saved = None

    def create_module(self, spec):
        if self.target is None:
            m = _Package(spec.name)
            m.__path__ = _search_path(spec.name)
            if spec.name == "habana_frameworks.torch":
                # as the bridge's habana_frameworks/torch/__init__.py, which imports activity_profiler:
                # torch.profiler's ProfilerActivity and profile become the bridge's
                from . import activity_profiler
                activity_profiler.register_habana_activity_profiler()
            return m
        if self.target is _MEDIAPIPE:
            from . import mediapipe
            return mediapipe.module(spec.name)
        try:
            module = importlib.import_module(self.target)
        except ImportError as e:
            raise ImportError(f"{spec.name} is emulated by {self.target}, which is not available: {e}",
                              name=spec.name) from e
        # the import system is about to stamp the alias's spec (and maybe a __path__) on the module
        self._saved = (module.__dict__.get("__spec__"), "__path__" in module.__dict__,
                       module.__dict__.get("__path__"))
        return module

    def exec_module(self, module):
        if self._saved is not None and self.target is not _MEDIAPIPE:   # keep hpu_lab's modules as they were
            spec, had_path, path = self._saved
            module.__spec__ = spec
            if had_path:
                module.__path__ = path
            else:
                module.__dict__.pop("__path__", None)
            self._saved = None


class HabanaFinder(importlib.abc.MetaPathFinder):
    """Maps the emulated ``habana_frameworks`` names to hpu_lab; None for every other name."""

    def find_spec(self, name, path=None, target=None):
        if not _ours(name):
            return None
        if name in PACKAGES:
            return importlib.machinery.ModuleSpec(name, _Loader(None), is_package=True)
        if name == MEDIAPIPE or name.startswith(MEDIAPIPE + "."):
            return importlib.machinery.ModuleSpec(name, _Loader(_MEDIAPIPE), is_package=True)
        t = target_of(name)
        if t is None or (name not in ALIASES and name not in TOP_LEVEL and not _exists(t)):
            return None
        return importlib.machinery.ModuleSpec(name, _Loader(t), is_package=True)


def _exists(module: str) -> bool:
    """Whether hpu_lab has ``module`` (for names under a prefix: hpu_lab.hpu.foo may not exist)."""
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:        # its parent package failed to import: let the loader report it
        return True


class NotEmulatedFinder(importlib.abc.MetaPathFinder):
    """Last resort for ``habana_frameworks`` names: asks the finders placed after it (so it need not
    stay last), then fails with a message that says what hpu_lab does emulate."""

    def find_spec(self, name, path=None, target=None):
        if not _ours(name):
            return None
        finders = sys.meta_path
        later = finders[finders.index(self) + 1:] if self in finders else []
        for f in later:
            spec = f.find_spec(name, path, target) if hasattr(f, "find_spec") else None
            if spec is not None:
                return spec
        raise ModuleNotFoundError(f"No module named {name!r}: hpu_lab does not emulate {name} (emulated: "
                                  f"{', '.join(emulated())}; see hpu_lab.compat.ALIASES)", name=name)


_finder = HabanaFinder()
_last = NotEmulatedFinder()


CHILD_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child")
_saved_env = {}


def _child_environment() -> None:
    """Python processes started from here resolve habana imports too (child/sitecustomize.py), and
    find ``hl-smi`` and this interpreter first on PATH (the venv's bin folder)."""
    if _saved_env:
        return
    for var in ("PYTHONPATH", "PATH"):
        _saved_env[var] = os.environ.get(var)
    py = os.environ.get("PYTHONPATH")
    if CHILD_SITE not in (py or "").split(os.pathsep):
        os.environ["PYTHONPATH"] = CHILD_SITE + (os.pathsep + py if py else "")
    bindir = os.path.dirname(os.path.abspath(sys.executable))
    path = os.environ.get("PATH", "")
    if bindir not in path.split(os.pathsep):
        os.environ["PATH"] = bindir + (os.pathsep + path if path else "")


def _restore_environment() -> None:
    for var, value in _saved_env.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    _saved_env.clear()


def enable_habana_imports() -> None:
    """Make ``habana_frameworks`` imports resolve to hpu_lab (idempotent), here and in the Python
    processes started from here."""
    import hpu_lab  # noqa: F401  - registers the "hpu" device first
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    if _last not in sys.meta_path:
        sys.meta_path.append(_last)
    from . import optimum
    optimum.enable()          # optimum-habana's SynapseAI version probe (compat/optimum.py)
    _child_environment()


def disable_habana_imports() -> None:
    """Undo ``enable_habana_imports`` (and forget the aliases already imported)."""
    for f in (_finder, _last):
        if f in sys.meta_path:
            sys.meta_path.remove(f)
    from . import optimum
    optimum.disable()
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    from . import activity_profiler
    activity_profiler.unregister_habana_activity_profiler()
    _restore_environment()


def enabled() -> bool:
    return _finder in sys.meta_path
