"""``transformer_engine.fp8``: whether this card has fp8, and the ``fp8_autocast`` state.

``is_fp8_available()`` answers per card as the real one: Gaudi 2 and Gaudi 3 have fp8, first-gen
Gaudi does not (HPU_LAB_DEVICE chooses the card). ``fp8_autocast(enabled, fp8_recipe)`` makes the
Transformer Engine modules (``te.Linear``) compute their GEMMs in fp8 inside the block; nesting
restores the outer state on exit.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Optional, Tuple

from .recipe import DelayedScaling

_state = threading.local()
_DEFAULT = DelayedScaling()      # fp8_autocast(fp8_recipe=None) uses this one, every time


def is_fp8_available() -> Tuple[bool, str]:
    from .... import config
    from ....perfmodel.cards import DEVICES
    if not DEVICES[config.get("HPU_LAB_DEVICE")].fp8:
        return False, "FP8 not supported on Gaudi, Gaudi2 or higher required."
    return True, ""


def is_fp8_enabled() -> bool:
    return getattr(_state, "enabled", False)


def get_fp8_recipe() -> DelayedScaling:
    return getattr(_state, "recipe", None) or _DEFAULT


@contextlib.contextmanager
def fp8_autocast(enabled: bool = False, fp8_recipe: Optional[DelayedScaling] = None, **kwargs):
    if enabled:
        ok, why = is_fp8_available()
        if not ok:
            raise RuntimeError(why)
    if fp8_recipe is not None and not isinstance(fp8_recipe, DelayedScaling):
        raise TypeError(f"fp8_autocast: fp8_recipe must be a recipe.DelayedScaling, not {type(fp8_recipe).__name__}")
    prev = (is_fp8_enabled(), getattr(_state, "recipe", None))
    _state.enabled, _state.recipe = bool(enabled), fp8_recipe or _DEFAULT
    try:
        yield
    finally:
        _state.enabled, _state.recipe = prev
