"""``check(id, run, answer)``: the exercises' entry point (practice.py is the framework, exercises.py
and exercises_more.py the notebooks' exercises, registered on import)."""
from __future__ import annotations

from typing import Any, Callable, Optional

from . import exercises, exercises_more  # noqa: F401  (registers the exercises)
from .practice import EXERCISES, NOT_YET, Result, Run, judge_exercise, record


def check(exercise_id: str, run: Optional[Callable[[], Any]] = None, answer: Any = None) -> Result:
    """Run ``run()`` under a recording and judge it and ``answer`` for exercise ``exercise_id``.
    Returns a Result (printable); never raises for the learner's mistakes."""
    ex = EXERCISES.get(str(exercise_id))
    if ex is None:
        return Result(str(exercise_id), NOT_YET, f"there is no exercise {exercise_id!r}; "
                      f"exercises: {', '.join(sorted(EXERCISES))}")
    if run is None:
        return Result(ex.id, NOT_YET, "write your version of the section's code as a function and pass it: "
                      f"check({ex.id!r}, my_run, answer)")
    if not callable(run):
        return Result(ex.id, NOT_YET, f"run must be a function to call (got a {type(run).__name__})")
    return judge_exercise(ex, record(run), answer)


def judge(exercise_id: str, got: Run, answer: Any = None) -> Result:
    """Judge a run already recorded (``practice.record(run)``) and ``answer`` for ``exercise_id``."""
    return judge_exercise(EXERCISES[str(exercise_id)], got, answer)
