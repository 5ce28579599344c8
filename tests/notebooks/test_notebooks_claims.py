"""The lab's contract with ../shared/CLAIMS.md and STYLE.md, checked on the committed notebooks.

- every claim id of CLAIMS.md is demonstrated: some notebook code cell carries ``# claim <id>`` and
  asserts on a value the notebook computed (see ``strong_asserts``: not a literal, not a config read,
  not the identity of two references); no tagged cell is a TODO. A claim the lab cannot show is in
  ``PENDING`` with its reason, never half-demonstrated;
- no notebook cites an id that CLAIMS.md does not have;
- every notebook opens with "What you'll do / learn / need" and ends with a Summary and Exercises;
- the committed notebooks carry their outputs (they were run) and no stored error.

These read the .ipynb files only; running them is nbval's job (``make test``).
"""
from __future__ import annotations

import ast
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
# next to the repository; CLAIMS_MD=<path> for a checkout elsewhere (a git worktree, say)
CLAIMS_MD = os.environ.get("CLAIMS_MD") or os.path.normpath(os.path.join(ROOT, "..", "shared", "CLAIMS.md"))

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
    """{claim id: [(notebook, cell source, names computed by then), ...]} over every code cell of every
    notebook; the names are those the notebook computed in this cell and the cells before it."""
    found: dict = {}
    for path in _notebook_paths():
        computed: set = set()
        for cell in _load(path)["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = _source(cell)
            computed |= computed_names(src)
            for group in CLAIM_TAG.findall(src):
                for cid in re.split(r"[\s,]+", group.strip()):
                    found.setdefault(cid, []).append((os.path.basename(path), src, frozenset(computed)))
    return found


# ------------------------------------------------------------------ what counts as a demonstration
# An assert demonstrates a claim when it checks something the notebook ran and measured: a count of
# events, a tensor's values, an error's message. It does not when it compares literals, reads back a
# setting (hpu_lab.config, os.environ: the value the notebook itself put there), or checks that two
# references are the same object (``out is gt.b`` holds whatever the device did).

MAGIC_AS = re.compile(r"^%%hpu_section\b.*?--as\s+([A-Za-z_]\w*)", re.MULTILINE)
CONFIG_ROOTS = {"config", "os", "environ", "getenv"}      # where settings, not results, are read


def _python(src: str) -> str:
    """The cell without IPython magics (``%%hpu_section``, ``%load_ext``), which ast cannot parse."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())


def _parse(src: str):
    try:
        return ast.parse(_python(src))
    except SyntaxError:
        return None


def _dotted(node) -> str:
    """'hpu_lab.config.lazy_mode' for an attribute chain on a name ('' for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id] + parts[::-1]) if isinstance(node, ast.Name) else ""


def _is_setting_or_literal(expr, computed) -> bool:
    """True for a literal, or an expression that only reads settings (no name the notebook computed)."""
    try:
        ast.literal_eval(expr)
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    if names & computed:
        return False
    chains = {_dotted(n) for n in ast.walk(expr) if isinstance(n, ast.Attribute)}
    return not names or any(set(c.split(".")) & CONFIG_ROOTS for c in chains) or names <= CONFIG_ROOTS


def computed_names(src: str) -> set:
    """Names a cell binds to something it computed: assignments (not of a literal or a setting), loop and
    with targets, caught exceptions, functions and classes, and the sections ``%%hpu_section --as NAME``
    records. Imports are not computed: ``assert torch.hpu.is_available()`` checks nothing the notebook did."""
    names = set(MAGIC_AS.findall(src))
    tree = _parse(src)
    if tree is None:
        return names
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            value = node.value
            if value is not None and _is_setting_or_literal(value, names):
                continue
            targets += node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, (ast.For, ast.comprehension)):
            targets.append(node.target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets.append(node.optional_vars)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    for t in targets:
        names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _conjuncts(expr):
    if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And):
        return [c for v in expr.values for c in _conjuncts(v)]
    return [expr]


def _weak_reason(conjunct, computed) -> str:
    """Why this part of an assert demonstrates nothing ('' if it does)."""
    if isinstance(conjunct, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in conjunct.ops) \
            and not any(isinstance(e, ast.Constant) for e in [conjunct.left, *conjunct.comparators]):
        return "only the identity of two references"
    if _is_setting_or_literal(conjunct, computed):
        return "a literal or a setting, not a value the notebook computed"
    names = {n.id for n in ast.walk(conjunct) if isinstance(n, ast.Name)}
    if not names & computed:
        return "no name the notebook computed"
    return ""


def strong_asserts(src: str, computed) -> list:
    """The asserts of a cell with a part that checks a value the notebook computed (as source text)."""
    tree = _parse(src)
    if tree is None:
        return []
    return [ast.unparse(node.test) for node in ast.walk(tree) if isinstance(node, ast.Assert)
            and any(not _weak_reason(c, computed) for c in _conjuncts(node.test))]


# Claims the lab cannot show yet, each waiting for a runtime feature. strict: the day a notebook
# demonstrates one, its test fails until it leaves this list.
PENDING: dict = {
    # claim id: why no notebook can demonstrate it yet
}


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
    where = sorted({nb for nb, _, _ in cells})
    todo = [nb for nb, src, _ in cells if re.search(r"\bTODO\b", src)]
    assert not todo, (f"claim {claim} is half-demonstrated: a tagged cell in {todo} is a TODO; finish it, or list "
                      f"the claim in PENDING with its reason")
    assert any(re.search(r"^\s*assert\b", src, re.MULTILINE) for _, src, _ in cells), (
        f"claim {claim}: cells tagged in {where} never assert the observable")
    assert any(strong_asserts(src, computed) for _, src, computed in cells), (
        f"claim {claim}: the asserts of the cells tagged in {where} check no value the notebook computed "
        f"(a literal, a setting read back, or the identity of two references); assert on the measured observable")


def test_no_unknown_claim_ids():
    ids = set(_claim_ids())
    unknown = {cid: sorted({nb for nb, _, _ in cells}) for cid, cells in _tagged_cells().items() if cid not in ids}
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
    # issue 34: the exercises (with their check cells) come last, then, if any, the further-reading links
    headings = [h for c in cells if c["cell_type"] == "markdown"
                for h in re.findall(r"^#+\s*(.+?)\s*$", _source(c), re.MULTILINE)]
    tail = headings[headings.index("Exercises"):] if "Exercises" in headings else []
    assert tail and all(h in ("Exercises", "Check your answers") or h.startswith("Further reading")
                        for h in tail), \
        f"Exercises come last, followed only by their checks and Further reading (last headings: {headings[-3:]})"
    if tail[-1].startswith("Further reading"):
        assert "https://" in _source(cells[-1]), "Further reading ends the notebook with its links"


@pytest.mark.parametrize("path", _notebook_paths(), ids=os.path.basename)
def test_notebook_was_run_and_stored(path):
    nb = _load(path)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    not_run = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not not_run, f"code cells {not_run} have no stored outputs: run them with `make notebooks`"
    errors = [(i, o.get("ename")) for i, c in enumerate(code) for o in c.get("outputs", [])
              if o.get("output_type") == "error" and "NBVAL_RAISES_EXCEPTION" not in _source(c)]
    assert not errors, f"stored error outputs: {errors}"


# The checker itself, on cells written to pass and to fail it: a test that cannot fail proves nothing.
@pytest.mark.parametrize("src, before, strong", [
    ("out = run()\nassert out is gt.b", "", False),                        # identity of two references
    ("kept = y\nassert kept is y", "", False),
    ("assert 96.0 == 96.0", "", False),                                    # literals
    ("assert hpu_lab.config.lazy_mode()", "", False),                      # a setting read back
    ("limit = os.environ['X']\nassert limit == '1'", "", False),
    ("assert torch.hpu.device_count() == 1", "", False),                   # imports only: nothing computed
    ("assert len(lazy.of(ev.Launch)) == 16", "%%hpu_section 'x' --as lazy\npass", True),
    ("n = len(c.events)\nassert n > 0 and x is y", "", True),              # one strong part is enough
    ("assert eager['lazy_mode'] is False", "eager = run_fresh(S)", True),  # 'is' a constant: a value check
    ("try:\n    f()\nexcept RuntimeError as e:\n    assert 'lazy' in str(e)", "", True),
])
def test_strong_asserts_checker(src, before, strong):
    computed = computed_names(before) | computed_names(src)
    assert bool(strong_asserts(src, computed)) is strong
