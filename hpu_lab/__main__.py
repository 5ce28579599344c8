"""``python -m hpu_lab run script.py [args...]``: run an unmodified Gaudi script on hpu_lab.

The script runs as ``__main__`` (``runpy``) with ``habana_frameworks`` imports resolving to hpu_lab
(``hpu_lab.compat``), ``sys.argv`` set to the script and its arguments, and the script's folder first
on ``sys.path``, as ``python script.py`` would. The Python processes the script starts resolve them
too, and find ``hl-smi`` (``hpu_lab.compat.CHILD_SITE``). ``python -m hpu_lab run -m package.module`` runs a
module instead. ``python -m hpu_lab config`` prints every setting hpu_lab reads; ``python -m hpu_lab hl-smi`` answers
as hl-smi (hpu_lab/tools/hl_smi.py). The commands printing hpu_lab's own answers end quietly, exit
code 141, when their reader leaves early (``| head``: hpu_lab/tools/closed_pipe.py).
"""
from __future__ import annotations

import os
import runpy
import sys

from hpu_lab.tools.closed_pipe import quiet_when_reader_leaves

USAGE = """usage: python -m hpu_lab run script.py [args...]
       python -m hpu_lab run -m module [args...]
       python -m hpu_lab config
       python -m hpu_lab hl-smi [options]

run     run a Gaudi PyTorch script on hpu_lab (habana_frameworks imports resolve to hpu_lab)
config  print every environment variable hpu_lab reads, its value and meaning
hl-smi  what hl-smi answers on a Gaudi host, for the emulated cards (also the venv's hl-smi command)"""


@quiet_when_reader_leaves
def answer(cmd, rest) -> int:
    """The commands that print hpu_lab's own answers (usage, config, hl-smi)."""
    if cmd in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if cmd == "config":
        from hpu_lab import config
        print(config.describe())
        return 0
    if cmd == "hl-smi":
        from hpu_lab.tools import hl_smi
        return hl_smi.main(rest)
    print(f"python -m hpu_lab: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd, rest = (argv[0], argv[1:]) if argv else ("help", [])
    if cmd != "run":
        return answer(cmd, rest)
    # `run` is the script's own output: a script cut short by `| head` behaves as under `python script.py`
    if not rest or (rest[0] == "-m" and len(rest) < 2):
        print(f"python -m hpu_lab run: what should I run?\n\n{USAGE}", file=sys.stderr)
        return 2
    from hpu_lab.compat import enable_habana_imports
    enable_habana_imports()
    if rest[0] == "-m":
        sys.argv = [rest[1]] + rest[2:]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
        return 0
    script = rest[0]
    if not os.path.exists(script):
        print(f"python -m hpu_lab run: no such file: {script}", file=sys.stderr)
        return 2
    sys.argv = [script] + rest[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
