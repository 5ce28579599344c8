"""Find the user's file:line behind an op: the first frame outside torch and hpu_lab."""
from __future__ import annotations

import os
import sys

import torch

_SKIP = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)),
         "<frozen ", os.path.dirname(os.__file__))
_cache: dict = {}   # code object -> True if it belongs to the user


def _is_user(code) -> bool:
    r = _cache.get(code)
    if r is None:
        fn = code.co_filename
        r = not fn.startswith(_SKIP) and "/site-packages/tqdm/" not in fn
        _cache[code] = r
    return r


def user_frame(depth: int = 2):
    """(filename, lineno) of the nearest user frame, or None (e.g. inside autograd's thread)."""
    f = sys._getframe(depth)
    while f is not None:
        if _is_user(f.f_code):
            return f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return None


def user_src(depth: int = 2) -> str:
    """'train.py:42' for the nearest user frame ('<backward>' when there is none)."""
    fr = user_frame(depth + 1)
    if fr is None:
        return "<backward>"
    return f"{os.path.basename(fr[0])}:{fr[1]}"
