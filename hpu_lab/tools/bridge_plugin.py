"""pytest plugin for Intel's bridge tests on hpu_lab (``pytest -p hpu_lab.tools.bridge_plugin``).

Two jobs, nothing else:

1. Before Intel's conftests import ``habana_frameworks`` (``lazy/conftest.py`` does when it is loaded,
   before any ``pytest_configure``), set the environment that the root conftest sets (``PT_HPU_LAZY_MODE`` from ``--mode``, ``PT_HPU_PLACE_ON_CPU``),
   then turn on hpu_lab's import mapping (``hpu_lab.compat.enable_habana_imports``), as
   ``python -m hpu_lab run`` does. hpu_lab reads its settings when it is imported, so the order matters.
2. Record each test's outcome, as it happens, to the JSON-lines file named by ``HPU_LAB_BRIDGE_LOG``: a
   ``start`` line before a test runs, a ``report`` line per phase. If the process dies (abort, segfault,
   timeout) the runner still knows which test was running.

The plugin adds no module of its own under ``habana_frameworks``: every name the tests import is
resolved by hpu_lab.compat, or fails there.
"""
from __future__ import annotations

import json
import os

import pytest

_LOG = None


def _write(rec: dict) -> None:
    if _LOG is not None:
        _LOG.write(json.dumps(rec) + "\n")
        _LOG.flush()            # line by line: a crash must not lose what came before


def _cause(report) -> str:
    """The failure's one-line reason: the exception's ``Type: message`` from pytest's crash entry."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip().splitlines()[0][:300] if crash.message.strip() else "(no message)"
    if isinstance(report.longrepr, tuple):            # skip: (file, line, reason)
        return str(report.longrepr[2])[:300]
    text = str(report.longrepr or "").strip().splitlines()
    errors = [ln for ln in text if ln.startswith("E ")]
    return (errors[0][2:].strip() if errors else (text[-1] if text else ""))[:300]


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # Intel's conftests import habana_frameworks when they are loaded, before any pytest_configure:
    # this hook is the last point before that. Their --mode option is not parsed yet; read it here.
    mode = "eager"                                      # Intel's default
    for i, a in enumerate(args):
        if a == "--mode" and i + 1 < len(args):
            mode = args[i + 1]
        elif a.startswith("--mode="):
            mode = a.split("=", 1)[1]
    os.environ["PT_HPU_LAZY_MODE"] = "0" if mode in ("eager", "compile") else "1"
    os.environ["PT_HPU_PLACE_ON_CPU"] = "none"          # Intel's conftest: no CPU fallback in these tests
    from hpu_lab.compat import enable_habana_imports
    enable_habana_imports()


def pytest_configure(config):
    global _LOG
    path = os.environ.get("HPU_LAB_BRIDGE_LOG")
    if path:
        _LOG = open(path, "a", encoding="utf-8")


def pytest_runtest_logstart(nodeid, location):
    _write({"event": "start", "nodeid": nodeid})


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _write({"event": "report", "nodeid": report.nodeid, "when": report.when,
                "outcome": report.outcome, "xfail": hasattr(report, "wasxfail"),
                "cause": "" if report.passed else _cause(report)})


def pytest_collectreport(report):
    if report.failed:
        _write({"event": "collect", "nodeid": report.nodeid, "outcome": "error", "cause": _cause(report)})


def pytest_unconfigure(config):
    global _LOG
    if _LOG is not None:
        _LOG.close()
        _LOG = None
