"""``habana_frameworks.torch.utils.internal``: ``is_lazy``, ``lazy_only`` and ``Timer``, as the bridge's.

DeepSpeed's HPU FusedAdam and the bridge's own ``core.step_closure`` read the mode here. The bridge
reads ``PT_HPU_LAZY_MODE`` once and caches it; hpu_lab's mode is ``hpu_lab.config.lazy_mode()`` (the
same variable, read once, also settable before first use), so both always agree.
"""
from __future__ import annotations

import logging
from time import perf_counter

from .. import config

logger = logging.getLogger(__name__)


def is_lazy() -> bool:
    return config.lazy_mode()


def lazy_only(func):
    """A function that does something in lazy mode only: elsewhere it does nothing, and says so once
    (decided when the function is defined, as in the bridge)."""
    def lazy_wrapper(*args, **kwargs):
        func(*args, **kwargs)

    def non_lazy_wrapper(*args, **kwargs):
        pass

    if is_lazy():
        return lazy_wrapper
    logger.warning(f"Calling {func.__name__} function does not have any effect. It's lazy mode only "
                   f"functionality. (warning logged once)")
    return non_lazy_wrapper


class Timer:
    """``with Timer() as t: ...; t.elapsed`` (seconds, host wall clock)."""

    def __init__(self):
        self.start_t = None
        self.end_t = None

    def __enter__(self):
        self.start_t = perf_counter()
        return self

    def __exit__(self, type, value, traceback):  # noqa: A002 - the bridge's signature
        self.end_t = perf_counter()

    @property
    def elapsed(self):
        return self.end_t - self.start_t
