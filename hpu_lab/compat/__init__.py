"""Run Gaudi code unchanged: ``habana_frameworks.torch...`` imports resolve to hpu_lab.

    import hpu_lab.compat
    hpu_lab.compat.enable_habana_imports()
    import habana_frameworks.torch.core as htcore      # hpu_lab.core
    import habana_frameworks.torch as ht               # ht.hpu is torch.hpu, ht.core is htcore

``python -m hpu_lab run script.py`` does this before running the script. A meta-path finder maps
each ``habana_frameworks`` module name to the hpu_lab module that emulates it, importing that module
only when the alias is imported, so a part of hpu_lab that is missing fails only where it is used,
with an ImportError naming both modules. The finder goes first in ``sys.meta_path``: with it
enabled, hpu_lab answers even where a real ``habana_frameworks`` is installed.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

ROOT = "habana_frameworks"

# habana_frameworks module -> the hpu_lab module that stands for it
ALIASES = {
    "habana_frameworks.torch.core": "hpu_lab.core",
    "habana_frameworks.torch.hpu": "hpu_lab.hpu",
    "habana_frameworks.torch.hpu.metrics": "hpu_lab.metrics",
    "habana_frameworks.torch.hpu.graphs": "hpu_lab.graphs",
    "habana_frameworks.torch.hpu.streams": "hpu_lab.graphs.streams",
    "habana_frameworks.torch.hpu.events": "hpu_lab.graphs.streams",
    "habana_frameworks.torch.hpu.memory": "hpu_lab.hpu",
    "habana_frameworks.torch.hpu.random": "hpu_lab.hpu",
    "habana_frameworks.torch.utils.library_loader": "hpu_lab.compat.library_loader",
}
# everything below these maps name for name (hpex.kernels -> hpu_lab.hpex.kernels, ...)
PREFIXES = {
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

# namespace packages with nothing of their own
PACKAGES = ("habana_frameworks", "habana_frameworks.torch", "habana_frameworks.torch.utils")


def target_of(name: str):
    """The hpu_lab module standing for ``name``, or None if hpu_lab does not emulate it."""
    if name in ALIASES:
        return ALIASES[name]
    for prefix, target in PREFIXES.items():
        if name == prefix or name.startswith(prefix + "."):
            return target + name[len(prefix):]
    return None


class _Package(types.ModuleType):
    """``habana_frameworks`` and ``habana_frameworks.torch``: attributes are the aliased submodules
    (``ht.hpu``, ``ht.core``), imported on first access as the real package imports them."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = f"{self.__name__}.{attr}"
        if target_of(name) is None and name not in PACKAGES:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r} "
                                 f"(hpu_lab does not emulate {name})")
        return importlib.import_module(name)


class _Loader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target
        self._saved = None

    def create_module(self, spec):
        if self.target is None:
            m = _Package(spec.name)
            m.__path__ = []
            return m
        try:
            module = importlib.import_module(self.target)
        except ImportError as e:
            raise ImportError(f"{spec.name} is emulated by {self.target}, which is not available: {e}",
                              name=spec.name) from e
        # the import system is about to stamp the alias's spec (and maybe a __path__) on the module
        self._saved = (module.__dict__.get("__spec__"), "__path__" in module.__dict__)
        return module

    def exec_module(self, module):
        if self._saved is not None:                  # keep hpu_lab's modules as they were
            spec, had_path = self._saved
            module.__spec__ = spec
            if not had_path:
                module.__dict__.pop("__path__", None)
            self._saved = None


class HabanaFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != ROOT and not name.startswith(ROOT + "."):
            return None
        if name in PACKAGES:
            return importlib.machinery.ModuleSpec(name, _Loader(None), is_package=True)
        t = target_of(name)
        if t is None:
            raise ModuleNotFoundError(f"hpu_lab does not emulate {name} (known: "
                                      f"{', '.join(sorted(set(ALIASES) | set(PREFIXES)))})", name=name)
        return importlib.machinery.ModuleSpec(name, _Loader(t), is_package=True)


_finder = HabanaFinder()


def enable_habana_imports() -> None:
    """Make ``habana_frameworks`` imports resolve to hpu_lab (idempotent)."""
    import hpu_lab  # noqa: F401  - registers the "hpu" device first
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def disable_habana_imports() -> None:
    """Undo ``enable_habana_imports`` (and forget the aliases already imported)."""
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    for name in [n for n in sys.modules if n == ROOT or n.startswith(ROOT + ".")]:
        del sys.modules[name]


def enabled() -> bool:
    return _finder in sys.meta_path
