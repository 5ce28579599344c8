"""Find the user's file:line behind an op: the first frame outside torch and hpu_lab."""
from __future__ import annotations

import os
import sys

import torch

_SKIP = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)),
         "<frozen ", os.path.dirname(os.__file__))
# keyed by file name, not by code object: two code objects compare equal when their code is the
# same, even from different files (IPython compiles each cell's statements apart, so the same line
# in two cells would otherwise report the first cell's file)
_cache: dict = {}   # file name -> True if it belongs to the user


def _is_user(code) -> bool:
    fn = code.co_filename
    r = _cache.get(fn)
    if r is None:
        r = _cache[fn] = not fn.startswith(_SKIP) and "/site-packages/tqdm/" not in fn
    return r


def user_frame(depth: int = 2):
    """(filename, lineno) of the nearest user frame, or None (e.g. inside autograd's thread)."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        f = sys._getframe(1)
    while f is not None:
        if _is_user(f.f_code):
            return f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return None


_fmt: dict = {}


def user_src(depth: int = 2) -> str:
    """'train.py:42' for the nearest user frame ('<backward>' when there is none)."""
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
            r = _is_user(code)
        if r:
            key = (fn, f.f_lineno)
            s = _fmt.get(key)
            if s is None:
                s = _fmt[key] = f"{os.path.basename(code.co_filename)}:{f.f_lineno}"
            return s
        f = f.f_back
    return "<backward>"
