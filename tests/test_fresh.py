"""hpu_lab.fresh.run_fresh, the notebooks' way to show a setting read at import (a new process)."""
import pytest

from hpu_lab.fresh import FreshRunError, run_fresh


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
