"""habana_frameworks imports resolve to hpu_lab; ``python -m hpu_lab run script.py`` runs Gaudi code."""
import importlib
import importlib.abc
import importlib.machinery
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import hpu_lab
from hpu_lab import compat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_core_and_hpu_modules(habana):
    import habana_frameworks.torch as ht
    import habana_frameworks.torch.core as htcore
    import habana_frameworks.torch.hpu as hthpu
    import habana_frameworks.torch.hpu.metrics as met
    from habana_frameworks.torch.utils.library_loader import load_habana_module

    assert htcore is hpu_lab.core and ht.core is htcore
    assert ht.hpu is torch.hpu is hthpu is htcore.hpu
    assert met is hpu_lab.observe.metrics
    assert ht.hpu.HPUGraph is hpu_lab.graphs.HPUGraph and ht.hpu.wrap_in_hpu_graph is hpu_lab.graphs.wrap_in_hpu_graph
    load_habana_module()
    # aliasing leaves hpu_lab's own modules as they were
    assert hpu_lab.core.__spec__.name == "hpu_lab.core" and hpu_lab.core.__path__ == hpu_lab.core.__spec__.submodule_search_locations
    assert hpu_lab.observe.metrics.__spec__.name == "hpu_lab.observe.metrics" and not hasattr(hpu_lab.observe.metrics, "__path__")


def _fresh(code, tmp_path, env=None):
    """Run ``code`` in a new interpreter with habana imports enabled (nothing imported yet)."""
    script = tmp_path / "fresh.py"
    script.write_text(textwrap.dedent(code))
    e = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-m", "hpu_lab", "run", str(script)], cwd=tmp_path, env=e,
                          capture_output=True, text=True, timeout=300)


def test_every_alias_imports_both_ways_in_a_fresh_process(tmp_path):
    # `from a.b import c` goes through getattr(a.b, "c") and then a.b.__name__ + ".c": the alias must
    # answer both, in a process where nothing was imported before (issue 11, point 3)
    names = sorted(set(compat.ALIASES) | set(compat.PREFIXES) | {
        "habana_frameworks.torch.hpu.random", "habana_frameworks.torch.hpu.memory",
        "habana_frameworks.torch.hpu.graphs", "habana_frameworks.torch.hpu.streams",
        "habana_frameworks.torch.hpu.events", "habana_frameworks.torch.core.weight_sharing",
        "habana_frameworks.torch.hpex.kernels", "habana_frameworks.torch.hpex.optimizers"})
    # one process: a from-import only ever follows imports of *other* names, never of its own
    lines = []
    for i, name in enumerate(names):
        parent, leaf = name.rsplit(".", 1)
        lines.append(f"from {parent} import {leaf} as m{i}")
        lines.append(f"assert m{i} is importlib.import_module({name!r}), {name!r}")
    r = _fresh("import importlib\n" + "\n".join(lines) + "\nprint('ok')\n", tmp_path)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_hpu_submodules_are_the_real_packages_layout(habana):
    from habana_frameworks.torch.hpu import random, memory, graphs, streams, events, metrics
    import habana_frameworks.torch.core.weight_sharing as ws
    assert random.manual_seed_all is torch.hpu.manual_seed_all and memory.memory_stats is torch.hpu.memory_stats
    assert graphs.HPUGraph is torch.hpu.HPUGraph and streams.Stream is torch.hpu.Stream
    assert events.Event is torch.hpu.Event and metrics is hpu_lab.observe.metrics and callable(ws.enable_weight_sharing)


@pytest.mark.parametrize("name", ["kernels", "optimizers", "normalization", "hmp"])
def test_hpex_modules_alias_lazily(habana, name):
    alias = f"habana_frameworks.torch.hpex.{name}"
    try:
        real = importlib.import_module(f"hpu_lab.hpex.{name}")
    except ImportError:
        with pytest.raises(ImportError, match=f"emulated by hpu_lab.hpex.{name}"):
            importlib.import_module(alias)
    else:
        assert importlib.import_module(alias) is real


def test_unmapped_names_let_other_importers_try(habana, tmp_path, monkeypatch):
    # issue 11, point 4: a name hpu_lab does not map is left to the other finders (here a stub file
    # of the user's under habana_frameworks/torch/ on sys.path, and a finder of the user's own)
    stub = tmp_path / "habana_frameworks" / "torch" / "my_stub.py"
    stub.parent.mkdir(parents=True)
    stub.write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    compat.disable_habana_imports()
    compat.enable_habana_imports()
    import habana_frameworks.torch.my_stub as m
    assert m.VALUE == 7

    class UserFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "habana_frameworks.torch.user_thing":
                return importlib.machinery.ModuleSpec(name, UserLoader())
            return None

    class UserLoader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            module.answer = 42

    finder = UserFinder()
    sys.meta_path.append(finder)            # after hpu_lab's last-resort finder, on purpose
    try:
        import habana_frameworks.torch.user_thing as u
        assert u.answer == 42
    finally:
        sys.meta_path.remove(finder)
    assert compat.target_of("habana_frameworks.torch.user_thing") is None


def test_missing_or_unknown_modules_fail_clearly(habana):
    try:
        importlib.import_module("hpu_lab.distributed.hccl")
        have = True
    except ImportError:
        have = False
    if not have:
        with pytest.raises(ImportError, match=r"habana_frameworks.torch.distributed(.hccl)? is emulated by "
                                              r"hpu_lab.distributed(.hccl)?, which is not available"):
            import habana_frameworks.torch.distributed.hccl  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="hpu_lab does not emulate habana_frameworks.torch.gpu_migration"):
        import habana_frameworks.torch.gpu_migration  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="hpu_lab does not emulate habana_frameworks.torch.hpu.nothing"):
        import habana_frameworks.torch.hpu.nothing  # noqa: F401      (under a prefix, absent in hpu_lab)
    import habana_frameworks.torch as ht
    with pytest.raises(AttributeError, match="does not emulate"):
        ht.nothing_here


def test_disable_removes_the_aliases():
    compat.enable_habana_imports()
    import habana_frameworks.torch.core  # noqa: F401
    compat.disable_habana_imports()
    assert not compat.enabled() and "habana_frameworks.torch.core" not in sys.modules
    if importlib.util.find_spec("habana_frameworks") is None:
        with pytest.raises(ImportError):
            import habana_frameworks.torch.core  # noqa: F401,F811


def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "hpu_lab", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_python_m_hpu_lab_run_script(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        import habana_frameworks.torch.core as htcore
        import habana_frameworks.torch as ht
        from helper import VALUE                      # the script's folder is on sys.path
        x = torch.ones(3, device="hpu") * 2
        htcore.mark_step()
        print("result", x.sum().item(), VALUE, sys.argv[1:], __name__, ht.hpu.is_available())
    """))
    r = _run(["run", str(script), "--steps", "3"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "result 6.0 42 ['--steps', '3'] __main__ True" in r.stdout


def test_python_m_hpu_lab_errors_and_config(tmp_path):
    r = _run(["run", "missing.py"], tmp_path)
    assert r.returncode == 2 and "no such file" in r.stderr
    r = _run(["frobnicate"], tmp_path)
    assert r.returncode == 2 and "unknown command" in r.stderr
    r = _run([], tmp_path)
    assert r.returncode == 0 and "usage" in r.stdout
    r = _run(["config"], tmp_path)
    assert r.returncode == 0 and "PT_HPU_LAZY_MODE" in r.stdout
    bad = tmp_path / "bad.py"
    bad.write_text("raise SystemExit(3)\n")
    assert _run(["run", str(bad)], tmp_path).returncode == 3


def test_readme_spelling_works_without_importing_compat_first():
    """``import hpu_lab; hpu_lab.compat.enable_habana_imports()`` (the README's in-process spelling)
    raised AttributeError unless ``hpu_lab.compat`` had been imported (issue 38 item 6)."""
    import subprocess
    import sys
    code = ("import hpu_lab, sys\n"
            "assert 'hpu_lab.compat' not in sys.modules\n"
            "hpu_lab.compat.enable_habana_imports()\n"
            "import habana_frameworks.torch.core as htcore\n"
            "assert htcore.mark_step is hpu_lab.core.mark_step\n"
            "try:\n"
            "    hpu_lab.no_such_thing\n"
            "except AttributeError as e:\n"
            "    assert 'no_such_thing' in str(e)\n"
            "else:\n"
            "    raise SystemExit('no AttributeError')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
