"""Run a script in a new Python process: how the notebooks show a setting that is read at import.

Some of hpu_lab's settings (``PT_HPU_LAZY_MODE``, ``PT_HPU_MAX_COMPOUND_OP_SIZE``, ...) are read
once, when ``hpu_lab`` is imported, as on a real Gaudi. A notebook's kernel has imported it
already, so to show what another value does, the notebooks run a small script in a fresh process
with the variable set before its imports::

    from hpu_lab.lab.fresh import run_fresh
    eager = run_fresh('''
    import json, hpu_lab
    print(json.dumps({"lazy_mode": hpu_lab.config.lazy_mode()}))
    ''', PT_HPU_LAZY_MODE="0")
    eager["lazy_mode"]            # False
    eager.stderr                  # what the process wrote to stderr (its warnings)

A notebook keeps such a script in a real file, shown and editable, and passes its path (a
``pathlib.Path``); the file runs as ``python file``, so it imports the modules beside it::

    eager = run_fresh(Path("scripts/theory_eager_forward.py"), PT_HPU_LAZY_MODE="0")

The script reports by printing one JSON object as its last line of output; ``run_fresh`` returns
it (a ``dict``). A script that fails raises ``FreshRunError`` with the end of its stderr, so the
notebook cell fails at the line that ran it, showing the child's traceback.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Union

# a safety net against a hung child, far above what any notebook script takes (seconds): the
# notebooks never assert on how long a run took
TIMEOUT_S = 900


class FreshRunError(RuntimeError):
    """The script run by ``run_fresh`` failed, or did not print a JSON object last."""


class Report(dict):
    """The JSON object the script printed last; ``stderr`` holds everything it wrote there."""
    stderr: str = ""


def run_fresh(script: Union[str, os.PathLike], **env: str) -> Report:
    """Run ``script`` (Python source, or the path of a Python file) in a new interpreter, with the
    environment variables ``env`` set on top of this process's (so it imports the same hpu_lab);
    return the JSON object it printed as its last line of standard output."""
    bad = [k for k, v in env.items() if not isinstance(v, str)]
    if bad:
        raise TypeError(f"run_fresh: environment values are strings, got {', '.join(f'{k}={env[k]!r}' for k in bad)}")
    if isinstance(script, os.PathLike):
        if not os.path.isfile(script):
            raise FileNotFoundError(f"run_fresh: no script file {os.fspath(script)!r} (relative to {os.getcwd()})")
        command = [sys.executable, os.fspath(script)]
    elif isinstance(script, str):
        command = [sys.executable, "-c", script]
    else:
        raise TypeError(f"run_fresh: script is Python source (a str) or a file's path (a pathlib.Path), "
                        f"got a {type(script).__name__}")
    p = subprocess.run(command, env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    if p.returncode != 0:
        raise FreshRunError(f"the script exited with status {p.returncode}; its stderr ends with:\n{p.stderr[-3000:]}")
    lines = p.stdout.strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        last = repr(lines[-1][:300]) if lines else "it printed nothing"
        raise FreshRunError(f"the script's last line of output is not a JSON object: {last}")
    out = Report(value)
    out.stderr = p.stderr
    return out
