"""The instruction-count benchmark (hpu_lab/bench/instructions.py): what it asks valgrind for, how
it reads callgrind's file, and that it says so when valgrind is missing. Running it takes minutes
under valgrind (``python -m hpu_lab.bench instructions``), so the suite does not."""
import pytest

from hpu_lab import bench
from hpu_lab.bench import instructions


def test_only_the_measured_steps_on_the_users_thread_are_counted():
    cmd = instructions.command("panel", 20, 0.005, "/tmp/out")
    assert cmd[:2] == ["valgrind", "--tool=callgrind"]
    assert "--collect-atstart=no" in cmd and "--toggle-collect=functools_reduce" in cmd
    assert "--callgrind-out-file=/tmp/out" in cmd and cmd[-3:] == ["panel", "20", "0.005"]
    assert "functools.reduce(" in instructions.CHILD          # the measured steps, and only they


def test_the_total_is_callgrinds_summary_line():
    text = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 186633382\nfn=(1) x\n1 5\ntotals: 186633382\n"
    assert instructions.total(text) == 186633382
    with pytest.raises(ValueError, match="summary"):
        instructions.total("events: Ir\n")


def test_without_valgrind_it_says_so_and_measures_nothing(monkeypatch, capsys):
    monkeypatch.setattr(instructions.shutil, "which", lambda name: None)
    assert instructions.main([]) == {}
    assert "not available (valgrind is not installed)" in capsys.readouterr().out


def test_make_bench_runs_it_only_when_named():
    assert "instructions" in bench.SECTIONS and "instructions" in bench.ONLY_WHEN_NAMED
