"""The lab's contract with ../shared/CLAIMS.md and STYLE.md, checked on the committed notebooks.

- every claim id of CLAIMS.md is demonstrated: some notebook code cell carries ``# claim <id>``
  and asserts something (a TODO cell, written while a runtime feature is missing, does not count);
- no notebook cites an id that CLAIMS.md does not have;
- every notebook opens with "What you'll do / learn / need" and ends with a Summary and Exercises;
- the committed notebooks carry their outputs (they were run) and no stored error.

These read the .ipynb files only; running them is nbval's job (``make test``).
"""
from __future__ import annotations

import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
CLAIMS_MD = os.path.normpath(os.path.join(ROOT, "..", "shared", "CLAIMS.md"))

CLAIM_ROW = re.compile(r"^\|\s*([A-Z]+\d+)\s*\|", re.MULTILINE)
CLAIM_TAG = re.compile(r"^\s*#\s*claim\s+([A-Z]+\d+(?:[\s,]+[A-Z]+\d+)*)\s*$", re.MULTILINE)


def _notebook_paths():
    if not os.path.isdir(NOTEBOOKS):
        return []
    return sorted(os.path.join(NOTEBOOKS, f) for f in os.listdir(NOTEBOOKS) if f.endswith(".ipynb"))


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _claim_ids() -> list:
    if not os.path.exists(CLAIMS_MD):
        pytest.skip(f"{CLAIMS_MD} not found: the claims list lives next to the repository (../shared/CLAIMS.md); "
                    "without it there is nothing to check the notebooks against")
    with open(CLAIMS_MD, encoding="utf-8") as f:
        ids = CLAIM_ROW.findall(f.read())
    assert ids, f"no claim rows ('| T1 | ...') found in {CLAIMS_MD}"
    return ids


def _tagged_cells():
    """{claim id: [(notebook, cell source), ...]} over every code cell of every notebook."""
    found: dict = {}
    for path in _notebook_paths():
        for cell in _load(path)["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = _source(cell)
            for group in CLAIM_TAG.findall(src):
                for cid in re.split(r"[\s,]+", group.strip()):
                    found.setdefault(cid, []).append((os.path.basename(path), src))
    return found


# Claims the lab cannot show yet, each waiting for a runtime feature. strict: the day a notebook
# demonstrates one, its test fails until it leaves this list.
PENDING: dict = {}     # {claim id: the runtime feature it waits for}; none today


def _all_claims():
    try:
        ids = _claim_ids()
    except pytest.skip.Exception:
        return ["(CLAIMS.md missing)"]
    return [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=PENDING[c])) if c in PENDING else c
            for c in ids]


@pytest.mark.parametrize("claim", _all_claims())
def test_claim_is_demonstrated(claim):
    ids = _claim_ids()          # skips with the reason when CLAIMS.md is absent
    assert claim in ids
    cells = _tagged_cells().get(claim, [])
    assert cells, (f"claim {claim} of CLAIMS.md is not demonstrated: no notebook code cell has '# claim {claim}' "
                   f"(the notebook sources are notebooks/NN_*.py)")
    assert any(re.search(r"^\s*assert\b", src, re.MULTILINE) for _, src in cells), (
        f"claim {claim}: cells tagged in {sorted({nb for nb, _ in cells})} never assert the observable")


def test_no_unknown_claim_ids():
    ids = set(_claim_ids())
    unknown = {cid: sorted({nb for nb, _ in cells}) for cid, cells in _tagged_cells().items() if cid not in ids}
    assert not unknown, f"notebooks cite claim ids that CLAIMS.md does not have: {unknown}"


def _markdown(nb) -> str:
    return "\n".join(_source(c) for c in nb["cells"] if c["cell_type"] == "markdown")


@pytest.mark.parametrize("path", _notebook_paths(), ids=os.path.basename)
def test_notebook_shape(path):
    nb = _load(path)
    cells = nb["cells"]
    assert cells and cells[0]["cell_type"] == "markdown", "a notebook opens with a markdown lead-in"
    first = _source(cells[0])
    assert first.lstrip().startswith("# "), "the first cell has the notebook's title"
    for part in ("What you'll do", "What you'll learn", "What you'll need"):
        assert part in first, f"the lead-in must say {part!r}"
    text = _markdown(nb)
    assert re.search(r"^#+\s*Summary\b", text, re.MULTILINE), "a notebook ends with a Summary"
    assert re.search(r"^#+\s*Exercises\b", text, re.MULTILINE), "a notebook ends with Exercises"
    last_headings = re.findall(r"^#+\s*(\w+)", _source(cells[-1]), re.MULTILINE)
    assert "Exercises" in last_headings, "Exercises come last"


@pytest.mark.parametrize("path", _notebook_paths(), ids=os.path.basename)
def test_notebook_was_run_and_stored(path):
    nb = _load(path)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    not_run = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not not_run, f"code cells {not_run} have no stored outputs: run them with `make notebooks`"
    errors = [(i, o.get("ename")) for i, c in enumerate(code) for o in c.get("outputs", [])
              if o.get("output_type") == "error" and "NBVAL_RAISES_EXCEPTION" not in _source(c)]
    assert not errors, f"stored error outputs: {errors}"
