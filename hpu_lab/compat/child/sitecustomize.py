"""Child processes of a script run under hpu_lab (``python -m hpu_lab run``): habana imports resolve.

``hpu_lab.compat.enable_habana_imports()`` puts this folder first on ``PYTHONPATH``, so every Python
process the script starts (``python script.py``, ``pytest``, a launcher's workers) runs this file at
start-up. It costs nothing until a Gaudi name is imported: a finder waits for the first import of
``habana_frameworks``, ``habana_dataloader`` or ``optimum.habana.utils.misc``, then calls
``enable_habana_imports()`` (which imports hpu_lab and torch) and answers that import as the parent
process would. The ``sitecustomize`` this one shadows, if any, runs after it.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_ROOTS = ("habana_frameworks", "habana_dataloader")
_OPTIMUM = "optimum.habana.utils.misc"


class _FirstGaudiImport(importlib.abc.MetaPathFinder):
    done = False

    def find_spec(self, name, path=None, target=None):
        if self.done or not (name.split(".", 1)[0] in _ROOTS or name == _OPTIMUM):
            return None
        self.done = True          # stays in sys.meta_path, inert: removing it would skip a finder
        from hpu_lab import compat
        compat.enable_habana_imports()
        if name == _OPTIMUM:
            from hpu_lab.compat import optimum
            return optimum.finder.find_spec(name, path, target)
        return compat._finder.find_spec(name, path, target)


sys.meta_path.insert(0, _FirstGaudiImport())

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here])
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
