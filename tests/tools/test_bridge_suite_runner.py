"""The runner of Intel's bridge tests (hpu_lab.tools.bridge_suite): how it reads a file's outcome log."""
import json

from hpu_lab.tools import bridge_suite as bs


def _log(tmp_path, recs):
    p = tmp_path / "f.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"event": "rep')   # a line cut by a crash
    return p


def _rep(nid, when, outcome, cause="", xfail=False):
    return {"event": "report", "nodeid": nid, "when": when, "outcome": outcome, "xfail": xfail, "cause": cause}


def test_outcomes_per_test(tmp_path):
    log = _log(tmp_path, [
        {"event": "start", "nodeid": "a"}, _rep("a", "call", "passed"), _rep("a", "teardown", "passed"),
        {"event": "start", "nodeid": "b"}, _rep("b", "call", "failed", "AssertionError: x"),
        _rep("b", "teardown", "passed"),
        {"event": "start", "nodeid": "c"}, _rep("c", "setup", "failed", "KeyError: k"),
        _rep("c", "teardown", "passed"),
        {"event": "start", "nodeid": "d"}, _rep("d", "setup", "skipped", "Test present in skip_tests_list.txt"),
        _rep("d", "teardown", "passed"),
        {"event": "start", "nodeid": "e"}, _rep("e", "call", "passed"), _rep("e", "teardown", "failed", "boom"),
        {"event": "start", "nodeid": "f"},
    ])
    res = bs.outcomes(log, "killed by SIGABRT")
    assert res["a"] == ("passed", "")
    assert res["b"] == ("failed", "AssertionError: x")
    assert res["c"] == ("error", "setup: KeyError: k")
    assert res["d"][0] == "skipped"
    assert res["e"] == ("error", "teardown: boom")
    assert res["f"] == ("crash", "killed by SIGABRT")          # started, never reported, process died
    counts = bs.summarize([{"tests": res}])["counts"]
    assert bs.summary_line(counts).startswith("1 passed / 1 failed / 2 errors / 1 skipped, 1 crashed")


def test_cause_key_groups_messages_that_differ_in_numbers():
    a = bs.cause_key("RuntimeError: shape '[2, 3]' is invalid for input of size 7")
    b = bs.cause_key("RuntimeError: shape '[4, 5]' is invalid for input of size 21")
    assert a == b


def test_files_are_those_intels_conftest_collects_in_lazy_mode(tmp_path):
    root = tmp_path / "tests"
    for rel in ("pytest_working/conftest.py", "pytest_working/lazy/test_a.py", "pytest_working/any_mode/x/test_b.py",
                "pytest_working/eager/test_c.py", "pytest_working/compile/test_d.py", "pytest_working/lazy/helper.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    assert bs.test_root(tmp_path) == root
    assert bs.test_files(root) == ["pytest_working/lazy/test_a.py", "pytest_working/any_mode/x/test_b.py"]
    assert bs.test_files(root, ["test_b"]) == ["pytest_working/any_mode/x/test_b.py"]
