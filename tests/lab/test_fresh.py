"""hpu_lab.lab.fresh.run_fresh, the notebooks' way to show a setting read at import (a new process)."""
import pytest

from hpu_lab.lab.fresh import FreshRunError, run_fresh


def test_the_setting_reaches_the_new_process_before_its_imports():
    script = ("import json, sys, hpu_lab\n"
              "print('a warning', file=sys.stderr)\n"
              "print(json.dumps({'lazy_mode': hpu_lab.config.lazy_mode()}))\n")
    eager, lazy = run_fresh(script, PT_HPU_LAZY_MODE="0"), run_fresh(script, PT_HPU_LAZY_MODE="1")
    assert eager == {"lazy_mode": False} and lazy == {"lazy_mode": True}
    assert "a warning" in eager.stderr and repr(eager) == "{'lazy_mode': False}"


def test_a_failing_script_raises_with_its_traceback():
    with pytest.raises(FreshRunError, match="status 1(.|\n)*ZeroDivisionError"):
        run_fresh("1 / 0")
    with pytest.raises(FreshRunError, match="not a JSON object: 'done'"):
        run_fresh("print('done')")
    with pytest.raises(FreshRunError, match="not a JSON object: it printed nothing"):
        run_fresh("pass")
    with pytest.raises(TypeError, match="PT_HPU_LAZY_MODE=0"):
        run_fresh("pass", PT_HPU_LAZY_MODE=0)


def test_a_script_file_runs_and_imports_the_modules_beside_it(tmp_path):
    from pathlib import Path
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    (tmp_path / "main.py").write_text("import json, hpu_lab\nfrom helper import VALUE\n"
                                      "print(json.dumps({'value': VALUE + 1, 'lazy': hpu_lab.config.lazy_mode()}))\n")
    assert run_fresh(tmp_path / "main.py", PT_HPU_LAZY_MODE="0") == {"value": 42, "lazy": False}
    with pytest.raises(FileNotFoundError, match="no script file"):
        run_fresh(Path(tmp_path / "missing.py"))
    with pytest.raises(TypeError, match="got a bytes"):
        run_fresh(b"print(1)")
