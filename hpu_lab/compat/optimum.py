"""optimum-habana on hpu_lab (issue 11, point 9).

``import optimum.habana`` checks the SynapseAI version by running ``pip list | grep
habana-torch-plugin`` in a shell and parsing the last word of the first line: with no Intel plugin
installed the line is empty and the import fails with an IndexError. With habana imports enabled
(``python -m hpu_lab run``, or ``hpu_lab.compat.enable_habana_imports()``), a post-import hook
replaces ``optimum.habana.utils.misc.get_habana_frameworks_version`` right after that module is
executed (before ``optimum.habana`` calls it) with one returning the SynapseAI version hpu_lab
follows, ``SYNAPSE_VERSION`` (the Gaudi documentation it was written from). optimum-habana then
logs its usual warnings when that version is not the one it was validated for, and that ``hl-smi``
could not be run (there is no driver). Nothing else of optimum-habana is changed.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

SYNAPSE_VERSION = "1.23.0"
MODULE = "optimum.habana.utils.misc"


def habana_frameworks_version():
    from packaging import version
    return version.parse(SYNAPSE_VERSION)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        module.get_habana_frameworks_version = habana_frameworks_version


class OptimumFinder(importlib.abc.MetaPathFinder):
    """Finds ``optimum.habana.utils.misc`` as the path finder would, and wraps its loader."""

    def find_spec(self, name, path=None, target=None):
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


finder = OptimumFinder()


def enable() -> None:
    if finder not in sys.meta_path:
        sys.meta_path.insert(0, finder)


def disable() -> None:
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
