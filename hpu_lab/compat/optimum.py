"""optimum-habana on hpu_lab (issue 11, point 9).

``import optimum.habana`` checks the SynapseAI version by running ``pip list | grep
habana-torch-plugin`` in a shell and parsing the last word of the first line: with no Intel plugin
installed the line is empty and the import fails with an IndexError. With habana imports enabled
(``python -m hpu_lab run``, or ``hpu_lab.compat.enable_habana_imports()``), a post-import hook
replaces ``optimum.habana.utils.misc.get_habana_frameworks_version`` right after that module is
executed (before ``optimum.habana`` calls it) with one returning the SynapseAI version hpu_lab
follows, ``SYNAPSE_VERSION`` (the Gaudi documentation it was written from). optimum-habana then
logs its usual warning when that version is not the one it was validated for.

It reads the driver version by running ``hl-smi`` in a shell whose environment is only
``ENABLE_CONSOLE=true``: no PATH, so the shell searches its default one (``/usr/bin``, where a
Gaudi host's driver package puts ``hl-smi``). hpu_lab's ``hl-smi`` is a console script of the
Python environment (``<venv>/bin``), outside that default, so optimum-habana warned "Could not run
`hl-smi`" on every import. The same hook runs its ``get_driver_version`` with that one command's
shell given this process's PATH (which ``python -m hpu_lab run`` starts with the environment's bin
folder): it finds the emulated ``hl-smi`` as a Gaudi host's shell finds the real one, and parses
its driver version. Nothing else of optimum-habana is changed.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

SYNAPSE_VERSION = "1.23.0"
MODULE = "optimum.habana.utils.misc"


def habana_frameworks_version():
    from packaging import version
    return version.parse(SYNAPSE_VERSION)


class _ShellWithPath:
    """The ``subprocess`` module as optimum-habana's misc module sees it during ``get_driver_version``:
    a command given an environment without PATH gets this process's PATH."""

    def __init__(self, subprocess):
        self._subprocess = subprocess

    def __getattr__(self, name):
        return getattr(self._subprocess, name)

    def run(self, *args, env=None, **kwargs):
        if env is not None and "PATH" not in env:
            env = dict(env, PATH=os.environ.get("PATH", os.defpath))
        return self._subprocess.run(*args, env=env, **kwargs)


def _finding_hl_smi(module, get_driver_version):
    def driver_version():
        real = module.subprocess
        module.subprocess = _ShellWithPath(real)
        try:
            return get_driver_version()
        finally:
            module.subprocess = real
    driver_version.__wrapped__ = get_driver_version
    return driver_version


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        module.get_habana_frameworks_version = habana_frameworks_version
        module.get_driver_version = _finding_hl_smi(module, module.get_driver_version)


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
