"""pytest plugin for the client libraries' own tests on hpu_lab (``pytest -p hpu_lab.tools.client_plugin``).

Two jobs, as ``bridge_plugin``'s, nothing else: habana imports resolve to hpu_lab before the
library's conftests import anything (``hpu_lab.compat.enable_habana_imports``, as ``python -m hpu_lab
run`` does: the processes the tests start resolve them too), and each test's outcome is written, as
it happens, to the JSON-lines file ``HPU_LAB_BRIDGE_LOG`` names (the same records as bridge_plugin,
read by the same runner code). Unlike Intel's own suite, nothing of the environment is set: the
libraries' tests run with hpu_lab's defaults (lazy mode, CPU fallback allowed).
"""
from __future__ import annotations

import pytest

from .bridge_plugin import (  # noqa: F401  (the outcome log: the same hooks)
    pytest_collectreport, pytest_configure, pytest_runtest_logreport, pytest_runtest_logstart,
    pytest_unconfigure,
)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    from hpu_lab.compat import enable_habana_imports
    enable_habana_imports()
