"""The notebooks' sources: each NN_*.ipynb is paired with a percent-format script NN_*.py holding the
same cells (jupytext.toml), and the committed notebooks stay small (no stored widget state).

A failure here means a .py was edited without re-running its notebook (``make notebooks``), or a
notebook was edited without jupytext pairing it (``jupytext --sync notebooks/NN_name.ipynb``).
"""
from __future__ import annotations

import glob
import os

import jupytext
import nbformat
import pytest
from jupytext.config import load_jupytext_configuration_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
MAX_TOTAL_BYTES = 2_000_000


def _stems(ext: str) -> set:
    return {os.path.basename(p)[:-len(ext)] for p in glob.glob(os.path.join(NOTEBOOKS, f"[0-9][0-9]_*{ext}"))}


def _cells(nb) -> list:
    return [(c.cell_type, c.source) for c in nb.cells]


def test_every_notebook_has_its_script_and_back():
    ipynb, py = _stems(".ipynb"), _stems(".py")
    assert ipynb, "no notebooks found"
    assert sorted(ipynb - py) == [], "notebooks without their .py source"
    assert sorted(py - ipynb) == [], "sources never run into a notebook (make notebooks)"


@pytest.mark.parametrize("stem", sorted(_stems(".py")))
def test_pair_in_sync(stem):
    config = load_jupytext_configuration_file(os.path.join(NOTEBOOKS, "jupytext.toml"))
    script = jupytext.read(os.path.join(NOTEBOOKS, stem + ".py"), fmt="py:percent", config=config)
    notebook = nbformat.read(os.path.join(NOTEBOOKS, stem + ".ipynb"), as_version=4)
    want, have = _cells(script), _cells(notebook)
    for i, (a, b) in enumerate(zip(want, have)):
        assert a == b, (f"{stem}: cell {i} differs between the .py and the .ipynb:\n--- .py ({a[0]})\n{a[1]}\n"
                        f"--- .ipynb ({b[0]})\n{b[1]}\nrun `make notebooks` (or jupytext --sync)")
    assert len(want) == len(have), f"{stem}: {len(want)} cells in the .py, {len(have)} in the .ipynb"


def test_pairing_config_is_what_jupyterlab_reads():
    config = load_jupytext_configuration_file(os.path.join(NOTEBOOKS, "jupytext.toml"))
    assert config.formats == ["ipynb,py:percent"]


def test_no_widget_state_and_small():
    paths = sorted(glob.glob(os.path.join(NOTEBOOKS, "*.ipynb")))
    stored = [os.path.basename(p) for p in paths if "widgets" in nbformat.read(p, as_version=4).metadata]
    assert not stored, f"notebooks storing widget state (run them with make notebooks): {stored}"
    total = sum(os.path.getsize(p) for p in paths)
    assert total < MAX_TOTAL_BYTES, f"the notebooks weigh {total:,} bytes together, over {MAX_TOTAL_BYTES:,}"


def test_no_todo_cells():
    """A cell waiting for a runtime feature is a markdown 'Pending experiment', never a TODO cell."""
    todo = [(stem, i) for stem in sorted(_stems(".py"))
            for i, c in enumerate(nbformat.read(os.path.join(NOTEBOOKS, stem + ".ipynb"), as_version=4).cells)
            if "TODO" in c.source]
    assert not todo, f"TODO cells: {todo}"
