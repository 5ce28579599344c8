"""Find the user's line behind an op: the first frame outside torch and hpu_lab, and its name.
A reference answer of the lab run as the program (``cards.py``, each card's script under torchrun)
is the user's code too.

A line of a script is named ``train.py:42``. A line of a notebook cell is named ``cell [5], line 18``:
the execution count the learner sees next to the cell, not the file name the kernel compiled the
cell under (ipykernel: ``/tmp/ipykernel_123/2443035080.py``, a hash of the cell's code; IPython:
``<ipython-input-5-...>``). IPython's compiler keeps that map, {file name: execution count}, for its
own tracebacks; it is read only when IPython is already imported, so scripts and installs without
IPython pay nothing.
"""
from __future__ import annotations

import linecache
import os
import sys

import torch

_HPU_LAB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP = (os.path.dirname(torch.__file__), _HPU_LAB, "<frozen ", os.path.dirname(os.__file__))
# the lab's reference answers stand for the learner's code (see _is_learners_script)
_ANSWERS = os.path.join(_HPU_LAB, "lab", "answers") + os.sep
# keyed by file name, not by code object: two code objects compare equal when their code is the
# same, even from different files (IPython compiles each cell's statements apart, so the same line
# in two cells would otherwise report the first cell's file)
_cache: dict = {}   # file name -> True if it belongs to the user
# file name of an IPython cell -> IPython's {file name: execution count}, read on every naming (not
# frozen into a string): a cell re-run unchanged is compiled under the same file name, with a new count
_cells: dict = {}
_code: dict = {}    # file name of an IPython cell -> a key of its code (see call_site)


def _cell_counts():
    """IPython's {compiled file name: execution count}, or None outside IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        shell = ipython.get_ipython()
    except Exception:       # IPython half imported or torn down: name the file, as in a script
        return None
    return getattr(getattr(shell, "compile", None), "_filename_map", None)


def _is_user_file(fn: str) -> bool:
    r = _cache.get(fn)
    if r is None:
        r = _cache[fn] = not fn.startswith(_SKIP) and "/site-packages/tqdm/" not in fn
        if r:   # a cell is compiled (and its name mapped) before it runs: the map knows it now
            counts = _cell_counts()
            if counts is not None and fn in counts:
                _cells[fn] = counts
                # the cell's code, as IPython cached it for tracebacks: what its call sites are
                _code[fn] = hash("".join(linecache.getlines(fn))) or fn
    return r


def _is_learners_script(f) -> bool:
    """A reference answer run as the program (``__main__``): ``hpu_lab/lab/answers/cards.py`` is what
    each card runs under torchrun, where notebook 08 runs the learner's ``multicard.py``. It lies in
    hpu_lab's folder, but its lines are the learner's, not the emulator's: skipped, they left a
    refused op with no user frame at all, named "<backward>" in a no-grad forward."""
    return f.f_code.co_filename.startswith(_ANSWERS) and f.f_globals.get("__name__") == "__main__"


def _is_user(f) -> bool:
    """Whether frame ``f`` is the user's: decided once per file, on the first frame seen of it."""
    fn = f.f_code.co_filename
    r = _cache.get(fn)
    if r is None:
        r = _is_user_file(fn)
        if not r and _is_learners_script(f):
            r = _cache[fn] = True
    return r


def source_name(filename: str, lineno: int) -> str:
    """'cell [5], line 18' for a line of a notebook (IPython) cell, else 'train.py:42'."""
    _is_user_file(filename)
    counts = _cells.get(filename)
    if counts is not None and filename in counts:
        return f"cell [{counts[filename]}], line {lineno}"
    return f"{os.path.basename(filename)}:{lineno}"


def user_frame(depth: int = 2):
    """(filename, lineno) of the nearest user frame, or None (e.g. inside autograd's thread)."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        f = sys._getframe(1)
    while f is not None:
        if _is_user(f):
            return f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return None


_fmt: dict = {}
# 'cell [5], line 18' -> (the cell's code, line) of the line it last named. A cell's name is for
# people; the call site that recompile reasons diff against (compiler/cache.py) must be the code:
# a cell re-run unchanged keeps its call site though its count changes (and, in a terminal
# IPython, its file name), and cells that share a count (run with store_history=False, as nbval
# does: every cell is [1]) stay apart.
_sites: dict = {}


def call_site(src: str):
    """The stable call site behind ``src``, a name user_src just returned (else ``src`` itself)."""
    return _sites.get(src, src)


def user_src(depth: int = 2) -> str:
    """'train.py:42' or 'cell [5], line 18' for the nearest user frame ('<backward>' when there is none)."""
    try:
        f = sys._getframe(depth)
    except ValueError:          # called from a shallow stack: start from the outermost frame
        f = sys._getframe(1)
    cache = _cache
    while f is not None:
        code = f.f_code
        fn = code.co_filename
        r = cache.get(fn)
        if r is None:
            r = _is_user(f)
        if r:
            counts = _cells.get(fn)
            if counts is None:
                key = (fn, f.f_lineno)
                s = _fmt.get(key)
                if s is None:
                    s = _fmt[key] = source_name(fn, f.f_lineno)
                return s
            key = (fn, f.f_lineno, counts.get(fn))
            s = _fmt.get(key)
            if s is None:
                s = _fmt[key] = source_name(fn, f.f_lineno)
            _sites[s] = (_code[fn], key[1])
            return s
        f = f.f_back
    return "<backward>"
