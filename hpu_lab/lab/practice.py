"""Exercises a learner can check: right, wrong or not yet, and why, read from the event stream.

A notebook's check cell runs the learner's code and the answer they wrote:

    def my_run():                      # the section's code, as the exercise asks to change it
        ...
    answer = None                      # the learner's answer to the question (a number, a string)
    lab.check("00.1", my_run, answer)  # prints: right / wrong / not yet, and why

``check`` (checking.py) records ``run()`` (``events.Collector``) and hands the exercise its events, what
``run()`` returned and the error it raised, if any; the exercise reads facts from them (a count, a
reason string, a verdict of the Gaudi clock; never wall time) and judges the change and the answer.
It never raises: the learner's own error is reported in the result, so Run All goes on, and a
learner who has done nothing (no run, no answer, or the section's code unchanged) gets "not yet".
Each exercise's reference answer and the section's starting code are in ``hpu_lab.lab.answers``;
tests/lab/test_lab_practice.py checks every exercise against both.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

RIGHT, WRONG, NOT_YET = "right", "wrong", "not yet"
_MARK = {RIGHT: "[right]", WRONG: "[wrong]", NOT_YET: "[not yet]"}


@dataclass(frozen=True)
class Run:
    """What ``check`` saw of the learner's code."""
    events: list
    value: Any = None                  # what run() returned
    error: Optional[str] = None        # "ExceptionType: message" if run() raised

    def of(self, kind) -> list:
        return [e for e in self.events if isinstance(e, kind)]


@dataclass(frozen=True)
class Result:
    exercise: str
    status: str                        # "right", "wrong" or "not yet"
    why: str
    observed: Dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == RIGHT

    def __str__(self) -> str:
        facts = ", ".join(f"{k}={v!r}" for k, v in self.observed.items())
        return f"{_MARK[self.status]} exercise {self.exercise}: {self.why}" + (f"\n  observed: {facts}" if facts else "")

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


@dataclass(frozen=True)
class Exercise:
    id: str                            # "03.2": notebook 03, exercise 2
    question: str
    observe: Callable[[Run], Dict[str, Any]]                              # facts from the run
    judge: Callable[[Dict[str, Any], Any], Tuple[str, str]]               # (status, why)
    answer_hint: str = "a number"     # what ``answer`` should be
    expects_error: bool = False        # the exercise is about an error the changed code raises


EXERCISES: Dict[str, Exercise] = {}


def exercise(id: str, question: str, answer_hint: str = "a number"):
    """Register an exercise: ``@exercise("00.1", "...")`` on a class with ``observe`` and ``judge``."""
    def register(cls):
        EXERCISES[id] = Exercise(id, question, cls.observe, cls.judge, answer_hint,
                                 getattr(cls, "expects_error", False))
        return cls
    return register


def judge_exercise(ex: Exercise, got: Run, answer: Any = None) -> Result:
    """Judge a recorded run and ``answer`` for the Exercise ``ex``."""
    if got.error and not ex.expects_error:
        return Result(ex.id, NOT_YET, f"your code raised {got.error}: fix it, then run the check again")
    raised = f"; your code raised {got.error}" if got.error and not ex.expects_error else ""
    try:
        facts = ex.observe(got)
    except Exception as e:                 # the run did not do what the section does at all
        return Result(ex.id, WRONG, f"your code did not produce what the exercise reads ({type(e).__name__}: {e})"
                      + raised)
    status, why = ex.judge(facts, answer)
    if status == RIGHT and answer is None and ex.answer_hint:
        status, why = NOT_YET, f"{why} -- now write your answer ({ex.answer_hint}) in `answer`"
    return Result(ex.id, status, why + raised, facts)


def record(run: Callable[[], Any]) -> Run:
    """``run()`` under a recording, its device work finished; an error it raises is kept, not raised.
    Work left pending before it (ops of earlier cells not yet ended by a ``mark_step``) is launched
    first, outside the recording: otherwise the run's first ``mark_step`` would launch it too, and a
    check would count a graph the learner's code did not build."""
    from .. import events as ev
    value = error = None
    flush_pending()
    with ev.Collector() as c:
        try:
            value = run()
        except Exception as e:             # the learner's error is a result, not a failed notebook
            error = f"{type(e).__name__}: {e}"
    events = c.events
    _settle()                              # finish the run's work outside the recording
    return Run(events, value, error)


def flush_pending() -> None:
    """Mark the boundary of a recording: if ops are pending (left by earlier code, never ended by a
    ``mark_step``), launch them and wait for them, so what is recorded next is only the recorded
    code's work. With nothing pending it does nothing: no event, no sync in the metrics. Failures of
    that leftover work were the earlier code's: they are not raised here (see ``_settle``)."""
    from .. import lazy
    if lazy.S.pg.nodes:
        _settle()


def _settle() -> None:
    """Launch what is pending and wait for the device; after an error, drop what the failed code
    left pending, so the runtime stays usable."""
    try:
        import torch

        from .. import core as htcore
        htcore.mark_step()
        torch.hpu.synchronize()
    except Exception:                      # the runtime's own message was reported already
        pass


# judging helpers shared by the exercises -----------------------------------------------------

def not_changed(what: str) -> Tuple[str, str]:
    return NOT_YET, f"your run still does what the section's code does ({what}): make the change the exercise asks"


def compare_answer(answer: Any, expected: Any, what: str, why_right: str) -> Tuple[str, str]:
    """Right if ``answer`` equals ``expected`` (numbers: exactly; strings: case-insensitive containment)."""
    if answer is None:
        return RIGHT, why_right            # check() turns this into "not yet: write your answer"
    if isinstance(expected, str):
        ok = isinstance(answer, str) and answer.strip().lower() in expected.lower() and answer.strip() != ""
    elif isinstance(expected, bool):
        ok = answer is expected or answer == expected
    else:
        try:
            ok = float(answer) == float(expected)
        except (TypeError, ValueError):
            ok = False
    if ok:
        return RIGHT, why_right
    return WRONG, f"your answer {answer!r} is not what the events say: {what} is {expected!r}. {why_right}"
