"""A command whose reader leaves early: ``hl-smi | head -3`` ends quietly, as coreutils' tools do.

Python ignores SIGPIPE, so a write into a pipe nobody reads raises BrokenPipeError, and at exit the
interpreter's last flush of ``sys.stdout`` raises it again ("Exception ignored ... BrokenPipeError").
A coreutils tool in the same place (``seq 1000000 | head -1``) is ended by SIGPIPE without a word and
the shell sees 141 (128 + SIGPIPE). The commands here follow Python's documented idiom (library
docs, "Note on SIGPIPE"): flush inside the guard, point stdout at /dev/null so the exit flush has
nowhere to fail, and exit 141 so ``set -o pipefail`` scripts see what they see with ``seq``.
"""
from __future__ import annotations

import functools
import os
import sys

EXIT_READER_GONE = 128 + 13      # 128 + SIGPIPE: what the shell reports for `seq ... | head -1`


def _to_devnull(stream) -> None:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):     # not a real file (a test's capture): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def quiet_when_reader_leaves(main):
    """``main`` returning its exit code; a closed pipe on its output makes that code 141, with no traceback."""
    @functools.wraps(main)
    def run(*args, **kwargs):
        try:
            rc = main(*args, **kwargs)
            sys.stdout.flush()                        # the last bytes go out here, inside the guard, not at exit
            return rc
        except BrokenPipeError:
            _to_devnull(sys.stdout)
            try:                                      # the closed pipe may be stderr (`2>&1 | head`)
                sys.stderr.flush()
            except BrokenPipeError:
                _to_devnull(sys.stderr)
            return EXIT_READER_GONE
    return run
