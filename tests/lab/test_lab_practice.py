"""hpu_lab.lab.check: every exercise says right for its reference answer, not yet for the section's
untouched code, and never fails a notebook's Run All (docs/lab.md)."""
import json
import pathlib
import re

import pytest

import hpu_lab  # noqa: F401
from hpu_lab import lab
from hpu_lab.lab import answers
from hpu_lab.lab import practice
from hpu_lab.lab.checking import EXERCISES, judge

IDS = sorted(answers.START)
NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"


# drifts found and not yet fixed (their notebook has another owner): reported, never silently passed
KNOWN_DRIFT: dict = {}


def _same_process_free(text: str) -> str:
    """Drop the facts that depend on what else the process holds (the peak of device memory counts
    the notebook's other live tensors), not on the exercise's code."""
    return re.sub(r",? ?peak_mib=[0-9.]+", "", text)


def stored_check_output(ex: str):
    """What the notebook's own check cell for ``ex`` printed when it was stored (its starting code,
    no answer), or None if no stored notebook has that cell. The .ipynb is JSON, read, never run."""
    for path in sorted(NOTEBOOKS.glob(ex[:2] + "_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code" and f'lab.check("{ex}"' in "".join(cell["source"]):
                texts = []
                for out in cell.get("outputs", []):
                    texts.append("".join(out.get("text", "")) or "".join(out.get("data", {}).get("text/plain", "")))
                text = "".join(texts)
                # the learner's code may print first (a loss per step): the check's result starts at its mark
                start = min((i for i in (text.find("[not yet]"), text.find("[right]"), text.find("[wrong]")) if i >= 0),
                            default=0)
                return text[start:].strip()
    return None


def test_every_registered_exercise_has_a_reference_and_a_start():
    lab.check("00.1")                                   # registers the exercises
    assert set(EXERCISES) == set(answers.START) == set(answers.REFERENCE) == set(answers.ANSWERS)


@pytest.mark.parametrize("ex", IDS)
def test_reference_right_start_not_yet_wrong_answer_wrong(ex):
    # one run of each program judged with every answer: lab.check(ex, run, answer) is exactly
    # judge(ex, practice.record(run), answer) (test_check_is_a_recorded_run_judged), and a run of
    # notebook 08's is a torchrun launch of two or three cards
    right = answers.ANSWERS[ex]
    ref = practice.record(answers.REFERENCE[ex])
    r = judge(ex, ref, right)
    assert r.status == "right", str(r)
    assert r.ok and str(r).startswith("[right]") and r.why
    wrong = "something else" if isinstance(right, str) else (not right if isinstance(right, bool) else right + 1000)
    r = judge(ex, ref, wrong)
    assert r.status == "wrong" and "not what the events say" in r.why, str(r)
    r = judge(ex, ref, None)
    assert r.status == "not yet" and "write your answer" in r.why, str(r)
    # the section's code as the notebook gives it, even with the reference answer written in
    start = practice.record(answers.START[ex])
    for answer in (None, right):
        r = judge(ex, start, answer)
        assert r.status == "not yet", str(r)
    # START is the notebook's starting code: its facts are what the notebook's check cell printed
    # (nbval keeps that output true to the notebook's code), so the two cannot drift apart
    stored = stored_check_output(ex)
    if stored is not None and ex in KNOWN_DRIFT:
        if _same_process_free(str(judge(ex, start, None))) != _same_process_free(stored):
            pytest.xfail(KNOWN_DRIFT[ex])
        raise AssertionError(f"{ex} no longer drifts: remove it from KNOWN_DRIFT")
    if stored is not None:
        assert _same_process_free(str(judge(ex, start, None))) == _same_process_free(stored), \
            f"answers.START[{ex!r}] and the notebook's check cell differ"


def test_check_is_a_recorded_run_judged(monkeypatch):
    """What the test above relies on to judge one recorded run with several answers: check judges,
    with the answer given, the run practice.record made of the function given."""
    from hpu_lab.lab import checking
    runs = []

    def record(run):
        runs.append((run, practice.record(run)))
        return runs[-1][1]
    monkeypatch.setattr(checking, "record", record)
    for run in (answers.REFERENCE["00.2"], answers.START["00.2"]):
        for answer in (answers.ANSWERS["00.2"], None, -1):
            checked = lab.check("00.2", run, answer)
            assert len(runs) == 1 and runs[0][0] is run
            judged = judge("00.2", runs.pop()[1], answer)
            assert (checked.status, checked.why, checked.observed) == (judged.status, judged.why, judged.observed)


def test_nothing_done_and_errors_do_not_raise():
    assert lab.check("00.1").status == "not yet"                       # no run at all
    assert lab.check("00.1", 42).status == "not yet"                   # not a function
    r = lab.check("99.9", lambda: None)
    assert r.status == "not yet" and "there is no exercise" in r.why

    def broken():
        import torch
        torch.ones(3, device="hpu") @ torch.ones(4, device="hpu")      # the learner's own error
    r = lab.check("00.1", broken, 1)
    assert r.status == "not yet" and "your code raised RuntimeError" in r.why, str(r)
    # the runtime is usable afterwards
    import torch
    assert torch.ones(2, device="hpu").sum().item() == 2.0


def _leave_pending_graph():
    """An earlier cell's work, never ended by a mark_step: a graph larger than a training step's."""
    import torch
    h = torch.randn(200, 784, device="hpu")
    for _ in range(40):
        h = torch.tanh(h) * 0.5
    return h


def test_record_does_not_count_work_left_pending_before_it():
    from hpu_lab import core as htcore
    from hpu_lab import events as ev
    _leave_pending_graph()
    got = practice.record(lambda: htcore.mark_step())
    assert got.of(ev.Launch) == [] and got.of(ev.GraphBuilt) == [], "the leftover graph was recorded"


def test_check_04_1_not_misjudged_by_a_pending_graph():
    # notebook 04's check ran after cells that left a graph pending: its largest launched graph was
    # that leftover, not the forward+backward, and the reference was judged "not yet"
    _leave_pending_graph()
    r = lab.check("04.1", answers.REFERENCE["04.1"], answers.ANSWERS["04.1"])
    assert r.status == "right", str(r)


def test_the_boundary_adds_no_sync_when_nothing_is_pending():
    # a notebook's own counts (its global host_sync metric) must not move because a check ran
    import torch
    from hpu_lab import core as htcore
    from hpu_lab.observe.metrics import metric_global
    torch.ones(2, device="hpu").sum()
    htcore.mark_step()
    torch.hpu.synchronize()
    before = metric_global("host_sync")["TotalNumber"]
    practice.flush_pending()
    assert metric_global("host_sync")["TotalNumber"] == before
