"""The panel benchmark's method (hpu_lab/lab/bench/panel.py): paired ABBA rounds and a verdict that says
"undecided" rather than a number the noise decided. Facts about the statistics, no timing."""
from hpu_lab.lab.bench import panel


def test_rounds_alternate_which_kind_of_loop_goes_first():
    assert [panel.order(i, ("plain", "section")) for i in range(4)] == [
        ["plain", "section"], ["section", "plain"], ["plain", "section"], ["section", "plain"]]
    # with the bare recording too, the plain and section loops still swap places every round
    assert panel.order(1, ("plain", "section", "recording")) == ["recording", "section", "plain"]


def test_the_verdict_needs_the_whole_interval_of_the_median_on_one_side():
    tight_low = panel.summary([0.05, 0.06, 0.07, 0.06, 0.05, 0.07, 0.06, 0.05])
    tight_high = panel.summary([0.20, 0.22, 0.21, 0.19, 0.20, 0.23, 0.21, 0.22])
    spread = panel.summary([-0.07, 0.64, 0.21, 0.28, 0.57, 0.09, -0.02, 0.15])
    assert panel.verdict(tight_low) == "met" and panel.verdict(tight_high) == "not met"
    assert panel.verdict(spread) == "undecided"
    assert spread["lo"] <= spread["median"] <= spread["hi"] and spread["q1"] <= spread["median"] <= spread["q3"]


def test_overheads_are_paired_within_a_round():
    rows = [{"plain": {"wall": 2.0, "cpu": 4.0, "main_cpu": 1.0},
             "section": {"wall": 2.2, "cpu": 4.4, "main_cpu": 1.5, "cell": 2.6}},
            {"plain": {"wall": 4.0, "cpu": 4.0, "main_cpu": 1.0},
             "section": {"wall": 4.0, "cpu": 5.0, "main_cpu": 1.0, "cell": 5.0}}]
    o = panel.overheads(rows, "section")
    assert [round(x, 6) for x in o["wall"]] == [0.1, 0.0]
    assert [round(x, 6) for x in o["cpu"]] == [0.1, 0.25]
    assert [round(x, 6) for x in o["cell"]] == [0.3, 0.25]


def _run(code, walls, steps=600, kinds=("plain", "section")):
    rows = [{"plain": {"wall": 1.0, "cpu": 1.0, "main_cpu": 1.0},
             "section": {"wall": w, "cpu": w, "main_cpu": w, "cell": w}} for w in walls]
    return {"rows": rows, "first": rows[0], "steps": steps, "kinds": list(kinds), "code": code,
            "load_before": [0.5, 0.5, 0.5], "load": [1.0, 1.0, 1.0]}


def test_runs_of_one_commit_pool_into_one_interval():
    """Two runs of the same commit report as one: the summaries over all their rounds."""
    a, b = _run("abc123", [1.05, 1.09, 1.11]), _run("abc123", [1.07, 1.08, 1.10])
    r = panel.pool([a, b])
    assert len(r["rows"]) == 6 and r["runs"] == 2 and r["code"] == "abc123"
    assert round(r["over"]["section"]["wall"]["median"], 6) == round((0.08 + 0.09) / 2, 6)


def test_runs_of_different_or_uncommitted_code_do_not_pool():
    import pytest
    with pytest.raises(ValueError, match="different code"):
        panel.pool([_run("abc123", [1.1]), _run("def456", [1.1])])
    with pytest.raises(ValueError, match="different steps"):
        panel.pool([_run("abc123", [1.1]), _run("abc123", [1.1], steps=300)])
    with pytest.raises(ValueError, match="uncommitted"):
        panel.pool([_run("abc123+dirty", [1.1]), _run("abc123+dirty", [1.1])])
    with pytest.raises(ValueError, match="no commit recorded"):
        panel.pool([_run("", [1.1])])
    passive, active = _run("abc123", [1.1]), _run("abc123", [1.1])
    passive["omp_wait_policy"], active["omp_wait_policy"] = "PASSIVE", "ACTIVE"
    with pytest.raises(ValueError, match="different omp_wait_policy"):
        panel.pool([passive, active])


def test_the_code_version_names_the_commit_and_a_dirty_tree(tmp_path):
    import subprocess
    assert panel.code_version(str(tmp_path)) == ""                 # not a checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run(git + ["add", "f"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert panel.code_version(str(tmp_path)) == head
    (tmp_path / "f").write_text("2")
    assert panel.code_version(str(tmp_path)) == head + "+dirty"


def test_what_a_loop_adds_is_split_by_thread_when_every_round_has_the_split():
    """The added wall and CPU time per round, and each thread role's added CPU (threads.py): where
    the recording's cost lands. Rounds from before the split (older --json files) give no split."""
    split = {"user": 1.0, "autograd": 0.2, "device": 0.5, "other": 0.3}
    more = {"user": 1.1, "autograd": 0.25, "device": 0.52, "other": 0.3}
    rows = [{"plain": {"wall": 1.5, "cpu": 2.0, "threads": split},
             "section": {"wall": 1.7, "cpu": 2.17, "threads": more}}]
    a = panel.added(rows, "section")
    assert [round(a[m][0], 6) for m in ("wall", "cpu", "user", "autograd", "device", "other")] == [
        0.2, 0.17, 0.1, 0.05, 0.02, 0.0]
    rows.append({"plain": {"wall": 1.5, "cpu": 2.0}, "section": {"wall": 1.6, "cpu": 2.1}})
    assert set(panel.added(rows, "section")) == {"wall", "cpu"}


def test_the_threads_cpu_is_read_by_role_in_this_process():
    import threading
    from hpu_lab.lab.bench import threads
    before = threads.cpu_by_role()
    if not before:
        import pytest
        pytest.skip("no per-thread schedstat in /proc here")
    assert set(before) == set(threads.ROLES)
    x = 0
    for i in range(300_000):             # CPU on this (the main) thread
        x += i
    ran, done = threading.Event(), threading.Event()
    t = threading.Thread(target=lambda: (sum(range(300_000)), ran.set(), done.wait()))
    t.start()
    try:
        ran.wait()                       # read while the thread is alive, after its CPU
        d = threads.since(before, threads.cpu_by_role())
    finally:
        done.set()
        t.join()
    assert d["user"] > 0 and d["other"] > 0 and d["autograd"] >= 0
    assert threads.since({}, before) == {}
