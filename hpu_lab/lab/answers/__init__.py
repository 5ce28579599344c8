"""Reference answers of the exercises (practice.py, exercises.py), and the sections' starting code.

``START[id]`` is the section's code as the notebook gives it (a learner who changed nothing);
``REFERENCE[id]`` the code changed as the exercise asks; ``ANSWERS[id]`` the answer to its question.
tests/lab/test_lab_practice.py checks that every exercise says "right" for the reference and "not yet"
for the starting code. Small versions of the sections (random data of the same shapes, fewer
steps), so that each runs in a fraction of a second.
"""
from __future__ import annotations

from . import first, late, more

_IDS = ("00.1", "00.2", "00.3", "01.1", "01.2", "01.3", "01.4", "02.1", "02.2", "02.3", "02.4", "03.1", "03.2",
        "03.3", "03.4", "04.1", "04.3", "05.1", "05.2", "05.4", "06.4", "04.2", "06.3", "07.1", "07.2", "07.3", "07.4", "06.1", "06.2", "08.1", "08.2", "08.3")


def _find(name: str):
    for mod in (first, more, late):
        if hasattr(mod, name):
            return getattr(mod, name)
    raise AttributeError(name)


START = {i: _find("start_" + i.replace(".", "_")) for i in _IDS}
REFERENCE = {i: _find("reference_" + i.replace(".", "_")) for i in _IDS}
ANSWERS = {"00.1": 1, "00.2": 7, "00.3": 1, "01.1": "print", "01.2": "non-persistent", "01.3": True, "01.4": 8,
           "02.1": 3, "03.1": 2.0, "03.2": 60, "03.3": 2, "04.1": 3, "04.3": 0, "05.2": 1, "06.4": 10,
           "07.1": "aten::lgamma", "07.3": 2, "07.4": 6, "02.2": "host-bound", "02.3": 8, "02.4": 1, "03.4": 1024,
           "05.1": 1, "05.4": 1, "07.2": "HPUOutOfMemoryError",
           "04.2": 2, "06.3": False, "06.1": 1, "06.2": "float32", "08.1": 3, "08.2": False, "08.3": True}
