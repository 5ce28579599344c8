"""hpu_lab's folders are stages in import order: a folder imports only folders of its own stage or
an earlier one (docs/ARCHITECTURE.md, "The folders"). Built on test_import_graph's view of the
package's source (``ast``, no import executed). Also: no module over 600 lines."""
import ast
import os

import pytest

from test_import_graph import MODULES, ROOT, _imports

# stage by stage, in import order; folders in one stage may import one another (their modules
# still never form a cycle: test_import_graph)
STAGES = [
    ("util",),          # helpers importing nothing of hpu_lab
    ("config",),        # every environment variable
    ("ops",),           # what kind of op is this; meta kernels; dtype widening
    ("events",),        # the event stream: the contract every view reads
    ("runtime",),       # the device: executor, streams, memory, transfers
    ("tensor",),        # HPUTensor and its storages
    ("compiler",),      # the pending graph, its compilation into recipes, the recipe caches
    ("lazy",),          # lazy mode: pending ops, flush, launch
    ("dispatch", "graphs", "perfmodel"),    # the op path; HPU Graphs; the Gaudi clock
    ("kernels", "observe"),                 # ops with handlers of their own; metrics and exports
    ("integration",),   # the device's registration with torch; torch.compile's backend
    ("core", "hpu", "hpex", "dynamo", "internal", "bridge_api", "distributed"),  # habana_frameworks.torch, name for name
    ("compat",),        # habana_frameworks imports resolving to hpu_lab
    ("lab", "tools"),                       # the lab's helpers and benchmark, command-line tools
]
ORDER = {folder: i for i, stage in enumerate(STAGES) for folder in stage}

# modules at the top of hpu_lab/: the package itself (imports every plug-in) and ``python -m hpu_lab``
TOP_LEVEL = {"hpu_lab", "hpu_lab.__main__"}

# deferred imports (inside a function) of a later stage, each with the reason it is there
LATE_IMPORTS = {
    ("hpu_lab.compiler.disk_cache", "hpu_lab.lab.examples"):
        "--measure times seed 000's training step, written once in lab/examples.py",
    ("hpu_lab.perfmodel.seed000", "hpu_lab.lab.examples"):
        "the clock is validated on seed 000's own model and loops (lab/examples.py)",
    ("hpu_lab.perfmodel.models", "hpu_lab.core"):
        "the validation models are written as a Gaudi user writes them: htcore.mark_step",
    ("hpu_lab.perfmodel.models", "hpu_lab.hpex.normalization"):
        "the validation models use hpex's FusedClipNorm, as the published runs do",
    ("hpu_lab.perfmodel.models", "hpu_lab.hpex.optimizers"):
        "the validation models use hpex's FusedAdamW, as the published runs do",
    ("hpu_lab.perfmodel.validation", "hpu_lab.core"):
        "the validation steps are user code: htcore.mark_step",
    ("hpu_lab.kernels._common", "hpu_lab.core"):
        "hpex ops mark a step around their update in lazy mode, as the real ones call htcore.mark_step",
    ("hpu_lab.integration.device", "hpu_lab.hpu"):
        "torch.hpu is hpu_lab.hpu, registered with the device; hpu imports the op path, so not before",
    ("hpu_lab.integration.compile_backend", "hpu_lab.dynamo.compile_backend.config"):
        "force_static_compile is read, at each compile, from the module where the bridge keeps it",
}


def _folder(mod):
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and mod not in TOP_LEVEL else None


def _stage(mod):
    f = _folder(mod)
    return None if f is None else ORDER.get(f)


def _late(graph_edges):
    """[(importer, imported, line, top level?)] where a folder imports a later stage's folder."""
    out = []
    for m, i, line, top in graph_edges:
        a, b = _stage(m), _stage(i)
        if a is not None and b is not None and b > a:
            out.append((m, i, line, top))
    return out


def _edges():
    return [(m, i, line, top) for m in sorted(MODULES) for i, line, top in _imports(m)]


def test_every_folder_has_a_stage_and_the_top_level_is_the_package():
    folders = {_folder(m) for m in MODULES} - {None}
    assert folders <= set(ORDER), f"folders with no stage in STAGES: {sorted(folders - set(ORDER))}"
    top = {m for m in MODULES if m.count(".") == 1 and not os.path.isdir(os.path.join(ROOT, m.split(".")[1]))}
    assert top <= TOP_LEVEL, f"modules at the top of hpu_lab/ (put each in its folder): {sorted(top - TOP_LEVEL)}"


def test_no_folder_imports_a_later_one_at_module_level():
    bad = [e for e in _late(_edges()) if e[3]]
    assert bad == [], "\n".join(f"{m}:{line} imports {i}, a later stage" for m, i, line, _ in bad)


def test_a_deferred_import_of_a_later_folder_says_why():
    late = {(m, i) for m, i, _, top in _late(_edges()) if not top}
    assert late - set(LATE_IMPORTS) == set(), \
        f"deferred imports of a later stage, not in LATE_IMPORTS with a reason: {sorted(late - set(LATE_IMPORTS))}"
    assert set(LATE_IMPORTS) - late == set(), \
        f"LATE_IMPORTS lists imports that are gone (remove them): {sorted(set(LATE_IMPORTS) - late)}"


@pytest.mark.parametrize("edge, late", [
    (("hpu_lab.runtime.executor", "hpu_lab.lazy", 3, True), True),
    (("hpu_lab.lazy", "hpu_lab.runtime.executor", 3, True), False),
    (("hpu_lab.dispatch.route", "hpu_lab.graphs.recording", 3, False), False),   # same stage
    (("hpu_lab", "hpu_lab.lab.examples", 3, True), False),                     # the package: any
])
def test_the_order_check_finds_a_late_import(edge, late):
    assert bool(_late([edge])) is late


def test_no_module_is_over_600_lines():
    sizes = {m: sum(1 for _ in open(path, encoding="utf-8")) for m, (path, _) in MODULES.items()}
    big = {m: n for m, n in sizes.items() if n > 600}
    assert big == {}, f"modules over 600 lines (split each by idea): {big}"


def _plugins():
    """``hpu_lab/__init__.py``'s _PLUGINS table, read from its source."""
    path, _ = MODULES["hpu_lab"]
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_PLUGINS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("hpu_lab/__init__.py has no _PLUGINS table")


def test_every_plugin_is_in_the_table_and_every_entry_exists():
    table = {f"hpu_lab.{m}": fn for m, fn in _plugins()}
    missing = set(table) - set(MODULES)
    assert missing == set(), f"_PLUGINS names modules that do not exist: {sorted(missing)}"
    for m, fn in table.items():
        if fn is not None:
            path, _ = MODULES[m]
            defs = {n.name for n in ast.parse(open(path, encoding="utf-8").read()).body
                    if isinstance(n, ast.FunctionDef)}
            assert fn in defs, f"{m} has no {fn}() for _PLUGINS to call"
    # a kernel is a plug-in: its module is in the table, or a plug-in imports it
    imported = {i for m in table for i, _, _ in _imports(m)}
    kernels = {m for m in MODULES if m.startswith("hpu_lab.kernels.")}
    assert kernels - set(table) - imported == set(), \
        f"kernels/ modules nothing registers (add them to _PLUGINS): {sorted(kernels - set(table) - imported)}"


# tests/ folders that are not hpu_lab folders: the repo's other parts, and scripts tests run
TEST_FOLDERS_BEYOND_PACKAGE = {"widgets", "notebooks", "clients", "browser", "__pycache__"}
# checks of the package as a whole, at the top of tests/
PACKAGE_WIDE_TESTS = {"test_import_graph.py", "test_import_light.py", "test_layout.py", "test_packaging.py"}


def test_tests_mirror_the_package_folders():
    tests = os.path.dirname(os.path.abspath(__file__))
    folders = {d for d in os.listdir(tests) if os.path.isdir(os.path.join(tests, d))}
    strays = folders - set(ORDER) - TEST_FOLDERS_BEYOND_PACKAGE
    assert not strays, f"tests/ folders that are not hpu_lab folders: {sorted(strays)}"
    top = {f for f in os.listdir(tests) if f.startswith("test_") and f.endswith(".py")}
    assert top == PACKAGE_WIDE_TESTS, (
        f"tests at the top of tests/ that belong in the folder of what they test: {sorted(top - PACKAGE_WIDE_TESTS)}")
