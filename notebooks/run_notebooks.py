"""Run the lab's notebooks from their sources and store their outputs.

    make notebooks                                   # every notebook, in order
    python notebooks/run_notebooks.py 02 05          # only these (by number prefix)

Each notebook's source is ``NN_name.py``, a jupytext percent-format script (jupytext.toml pairs it with
``NN_name.ipynb``). This reads the script, executes it in a fresh kernel with nbclient, and writes the
``.ipynb`` with its outputs, so the committed notebooks read well without running. Widget state is
not stored (it was 98% of the bytes): each section panel leaves a static picture of itself instead
(see widgets/static.py). The script is then rewritten from the notebook, so it is the newer file of
the pair, as jupytext in JupyterLab expects.

The kernel imports hpu_lab and widgets from this checkout (PYTHONPATH), whatever else is installed.
"""
from __future__ import annotations

import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def sources(wanted=()) -> list:
    """The notebook scripts NN_*.py, in order; ``wanted``: number prefixes such as '02'."""
    paths = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.py")))
    if wanted:
        paths = [p for p in paths if any(os.path.basename(p).startswith(w) for w in wanted)]
    return paths


def config():
    """notebooks/jupytext.toml, the settings JupyterLab uses for these notebooks too."""
    from jupytext.config import load_jupytext_configuration_file
    return load_jupytext_configuration_file(os.path.join(HERE, "jupytext.toml"))


def read_source(path: str):
    """The notebook held by the script at ``path`` (cells only, no outputs)."""
    import jupytext
    nb = jupytext.read(path, fmt="py:percent", config=config())
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    return nb


def keep_ids(nb, previous) -> None:
    """Give each cell the id it had in the previous .ipynb (same type and source), else one derived
    from its source: fresh random ids would make every run a diff of every cell."""
    import hashlib
    old: dict = {}
    for c in previous.cells if previous is not None else []:
        old.setdefault((c.cell_type, c.source), []).append(c.get("id"))
    used = set()
    for c in nb.cells:
        ids = old.get((c.cell_type, c.source)) or []
        cid = ids.pop(0) if ids else None
        if not cid or cid in used:
            digest = hashlib.sha1(c.source.encode()).hexdigest()
            cid = next(digest[i:i + 8] for i in range(0, 32) if digest[i:i + 8] not in used)
        c["id"] = cid
        used.add(cid)


def static_outputs(nb) -> None:
    """Drop widget views that carry a static picture: without stored widget state no viewer can
    draw the view (JupyterLab would say 'model not found'), the picture it can."""
    view = "application/vnd.jupyter.widget-view+json"
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if view in data and ("image/png" in data or "text/html" in data):
                del data[view]


def execute(nb) -> bool:
    """Run ``nb`` in a fresh kernel in notebooks/; False if a cell failed (its error is stored)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    env_bin = os.path.dirname(sys.executable)
    os.environ["PATH"] = env_bin + os.pathsep + os.environ.get("PATH", "")
    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": HERE}},
                            store_widget_state=False, record_timing=False)
    try:
        client.execute()
    except CellExecutionError as e:
        print(f"FAILED:\n{str(e)[-3000:]}")
        return False
    return True


def run(path: str) -> bool:
    import jupytext
    import nbformat
    nb = read_source(path)
    target = path[:-3] + ".ipynb"
    keep_ids(nb, nbformat.read(target, as_version=4) if os.path.exists(target) else None)
    ok = execute(nb)
    static_outputs(nb)
    nbformat.write(nb, target)
    jupytext.write(nb, path, fmt="py:percent", config=config())
    return ok


def main(argv) -> None:
    paths = sources([a for a in argv if not a.startswith("-")])
    if not paths:
        sys.exit(f"no notebook source matches {argv} in {HERE}")
    failed = []
    for path in paths:
        print("running", os.path.relpath(path, ROOT), flush=True)
        if not run(path):
            failed.append(os.path.basename(path))
        print("wrote", os.path.relpath(path[:-3] + ".ipynb", ROOT), flush=True)
    if failed:
        sys.exit(f"notebooks with a failing cell: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
