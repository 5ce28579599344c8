"""The op path's modules import one another in one direction only, and each module's state has one
writer (issue 12, point 2): built from the package's source with ``ast``, no import executed."""
import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hpu_lab")

# the modules an op goes through, from the router down (docs/ARCHITECTURE.md, "The op path"):
# among these, every import counts, even one inside a function (a deferred import is still a cycle)
OP_PATH = {"hpu_lab.dispatch.route", "hpu_lab.lazy", "hpu_lab.lazy.state", "hpu_lab.lazy.storage",
           "hpu_lab.lazy.trace", "hpu_lab.lazy.flushing", "hpu_lab.dispatch.eager", "hpu_lab.dispatch.fallback", "hpu_lab.dispatch.special_ops",
           "hpu_lab.dispatch.view_ops", "hpu_lab.dispatch.host_ops", "hpu_lab.lazy.capture", "hpu_lab.compiler.find",
           "hpu_lab.integration.compile_backend", "hpu_lab.graphs._common", "hpu_lab.graphs.callables",
           "hpu_lab.graphs.host_state", "hpu_lab.graphs.hpugraph", "hpu_lab.graphs.module_cacher",
           "hpu_lab.graphs.recording", "hpu_lab.graphs.streams", "hpu_lab.graphs.wrap"}


def _modules():
    mods = {}
    for d, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                name = rel[:-len(".__init__")] if rel.endswith(".__init__") else rel
                mods[name] = (path, f == "__init__.py")
    return mods


MODULES = _modules()


def _imports(name):
    """(imported module, line, top level?) for each import in the module ``name``."""
    path, is_pkg = MODULES[name]
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    package = name if is_pkg else name.rpartition(".")[0]
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        at_top = id(node) in top
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("hpu_lab"):
                    out.append((a.name, node.lineno, at_top))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("hpu_lab"):
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((sub if sub in MODULES else mod, node.lineno, at_top))
    return [(m, line, t) for m, line, t in out if m in MODULES and m != name]


def _graph(keep):
    return {m: {i for i, _, top in _imports(m) if keep(m, i, top)} for m in MODULES}


def _cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def test_the_op_path_modules_exist():
    assert OP_PATH <= set(MODULES), sorted(OP_PATH - set(MODULES))


def test_no_import_cycle_at_module_level():
    assert _cycles(_graph(lambda m, i, top: top)) == []


def test_no_import_cycle_on_the_op_path_even_through_deferred_imports():
    assert _cycles(_graph(lambda m, i, top: m in OP_PATH and i in OP_PATH)) == []


def test_no_import_cycle_anywhere_even_through_deferred_imports():
    # (the compiler once reached the op path back through the profiler's and the layout comparison's
    # deferred imports of the Gaudi clock: compiler.find -> profiler -> perfmodel -> lazy -> compiler.find)
    assert _cycles(_graph(lambda m, i, top: True)) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ------------------------------------------------------------------ one writer per global

def _foreign_writes(name):
    """Assignments in ``name`` to an attribute of another hpu_lab module's global state: to
    ``lazy.S.<attr>`` (or ``S.<attr>`` with S taken from lazy), to any module's global or what it
    holds (``lazy.flush = ...``, ``tensor._dispatch = ...``, ``ev.recorder.step += 1``), or into the
    special-op table (``SPECIAL[...] = ...``). The owner offers a named setter instead."""
    path, _ = MODULES[name]
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = _foreign_writes_of(name, tree)
    own = {line for _, line, _ in found}
    for line, what in _module_attribute_writes(name, tree):
        if line not in own:
            found.append((name, line, what))
    return found


def _module_attribute_writes(name, tree):
    """(line, target) of each assignment to an attribute reached from another hpu_lab module."""
    is_pkg = MODULES[name][1]
    package = name if is_pkg else name.rpartition(".")[0]
    mods = set()            # local names bound to hpu_lab modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES and a.name != name:
                    mods.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                if f"{base}.{a.name}" in MODULES and f"{base}.{a.name}" != name:
                    mods.add(a.asname or a.name)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for t in targets:
            root = t
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(t, ast.Attribute) and isinstance(root, ast.Name) and root.id in mods:
                out.append((node.lineno, ast.unparse(t)))
    return out


def _foreign_writes_of(name, tree):
    modules = {}            # local name -> hpu_lab module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level or \
                isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpu_lab"):
            for a in node.names:
                modules[a.asname or a.name] = a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("hpu_lab"):
                    modules[a.asname or a.name.split(".")[-1]] = a.name
    state_names = {"S"} | {k for k, v in modules.items() if v == "S"}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            v = node.func.value             # lazy.S.step_closures.append(...), lazy.SPECIAL.pop(...)
            if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Attribute) and v.value.attr == "S" \
                    and isinstance(v.value.value, ast.Name) and modules.get(v.value.value.id, "").endswith("lazy") \
                    or isinstance(v, ast.Attribute) and v.attr in ("SPECIAL", "_special", "_compile_hooks",
                                                                   "_lookup_hooks") and isinstance(v.value, ast.Name) \
                    and v.value.id in modules:
                bad.append((name, node.lineno, ast.unparse(node.func)))
            continue
        if isinstance(node, ast.Assign):
            targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, (ast.Name, ast.Attribute)):
                table = t.value.attr if isinstance(t.value, ast.Attribute) else t.value.id
                if table in ("SPECIAL", "_special") and name != "hpu_lab.dispatch.route":
                    bad.append((name, node.lineno, ast.unparse(t)))
            if not isinstance(t, ast.Attribute):
                continue
            v = t.value
            if isinstance(v, ast.Attribute) and v.attr == "S" and isinstance(v.value, ast.Name) \
                    and modules.get(v.value.id, "").endswith("lazy"):
                bad.append((name, node.lineno, ast.unparse(t)))          # lazy.S.x = ...
            elif isinstance(v, ast.Name) and v.id in state_names and name not in LAZY_WRITERS \
                    and _names_lazy_state(tree, v.id, modules):
                bad.append((name, node.lineno, ast.unparse(t)))          # S = lazy.S; S.x = ...
            elif isinstance(v, ast.Name) and v.id in modules and modules[v.id] in ("lazy", "hpu_lab.lazy",
                                                                                   "route", "hpu_lab.dispatch.route"):
                bad.append((name, node.lineno, ast.unparse(t)))          # lazy.flush = ...
    return bad


# the modules that write lazy's state S: its named writers, and the flush (a new pending graph after
# a launch, a sync's reason taken). The rest of lazy/ only reads it, like every other module.
LAZY_WRITERS = {"hpu_lab.lazy.state", "hpu_lab.lazy.flushing"}

_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "__setitem__"}


def _names_lazy_state(tree, local, modules):
    """``local`` is bound to lazy's S in this module (``from .lazy import S`` or ``S = lazy.S``)."""
    if modules.get(local) == "S":
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == local for t in node.targets):
            v = node.value
            if isinstance(v, ast.Attribute) and v.attr == "S":
                return True
    return False


def test_only_lazy_writes_its_state_and_only_the_router_its_table():
    bad = [w for m in sorted(MODULES) for w in _foreign_writes(m)]
    assert bad == [], "\n".join(f"{m}:{line}: {what} = ..." for m, line, what in bad)


@pytest.mark.parametrize("src", ["from hpu_lab import lazy\nlazy.S.capture = None\n",
                                 "from .. import lazy\nS = lazy.S\nS.eager = False\n",
                                 "from .lazy import S\nS.pg = None\n",
                                 "from . import lazy\nlazy.flush = print\n",
                                 "from . import route\nroute._special[1] = 2\n",
                                 "from . import lazy as _lazy\n_lazy.S.step_closures.append(1)\n",
                                 "from . import lazy as _lazy\n_lazy._compile_hooks.append(1)\n",
                                 "from . import tensor\ntensor._dispatch = print\n",
                                 "from . import events as ev\nev.recorder.step += 1\n",
                                 "from .runtime import executor\nexecutor.DeviceMode.flush_denormal = True\n"])
def test_the_writer_check_finds_a_foreign_write(src, tmp_path, monkeypatch):
    p = tmp_path / "m.py"
    p.write_text(src)
    monkeypatch.setitem(MODULES, "hpu_lab.someone", (str(p), False))
    assert len(_foreign_writes("hpu_lab.someone")) == 1
