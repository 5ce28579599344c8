"""How hpu_lab names the user's line behind an op or a host sync: ``train.py:42`` in a script,
``cell [5], line 18`` in a notebook (the execution count shown next to the cell), never the file
name the kernel compiled the cell under (``/tmp/ipykernel_1234/2443035080.py``)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import hpu_lab  # noqa: F401  (the hpu device)
from hpu_lab import events as ev

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SYNC_ON_LINE_3 = "x = torch.ones(3, device='hpu')\ny = (x * 2).sum()\nv = y.item()\n"


def _sync_srcs(events):
    return [e.src for e in events if isinstance(e, ev.HostSync)]


def test_a_script_line_is_file_and_line():
    code = compile(SYNC_ON_LINE_3, os.path.join(ROOT, "some_dir", "train_script.py"), "exec")
    with ev.Collector() as c:
        exec(code, {"torch": torch})
    assert _sync_srcs(c.events) == ["train_script.py:3"]


def test_without_ipython():
    script = ("import sys; sys.modules['IPython'] = None   # as if not installed\n"
              "import torch, hpu_lab\nfrom hpu_lab import events as ev\n"
              "with ev.Collector() as c:\n"
              "    exec(compile(" + repr(SYNC_ON_LINE_3) + ", 'job.py', 'exec'), {'torch': torch})\n"
              "print([e.src for e in c.events if isinstance(e, ev.HostSync)])\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['job.py:3']"


def test_an_ipython_cell_is_named_by_its_execution_count():
    from IPython.testing.globalipapp import get_ipython
    import widgets
    ip = get_ipython()
    widgets.load_ipython_extension(ip)
    ip.user_ns["torch"] = torch
    named = []
    for _ in range(2):                   # the same code again: same compiled file name, new count
        count = ip.execution_count
        with ev.Collector() as c:
            assert ip.run_cell(SYNC_ON_LINE_3, store_history=True).success
        named.append((count, _sync_srcs(c.events)))
    assert [srcs for _, srcs in named] == [[f"cell [{n}], line 3"] for n, _ in named]
    assert named[0][0] != named[1][0]
    # inside %%hpu_section: the same cell's count, and its line as shown (the magic is line 1)
    count = ip.execution_count
    with ev.Collector() as c:
        assert ip.run_cell('%%hpu_section "names" --as s\n' + SYNC_ON_LINE_3, store_history=True).success
    assert _sync_srcs(c.events) == [f"cell [{count}], line 4"]
    assert ip.execution_count == count + 1


@pytest.mark.slow
def test_in_a_jupyter_kernel():
    """ipykernel compiles cells under hashed temp file names; a real kernel, run by nbclient."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import torch, hpu_lab, widgets\nfrom hpu_lab import events as ev\n"
                                  "%load_ext widgets"),
        nbformat.v4.new_code_cell("with ev.Collector() as c:\n" + textwrap.indent(SYNC_ON_LINE_3, "    ") +
                                  "print([e.src for e in c.events if isinstance(e, ev.HostSync)])"),
        nbformat.v4.new_code_cell('%%hpu_section "in a kernel" --as s\n' + SYNC_ON_LINE_3),
        nbformat.v4.new_code_cell("print([e.src for e in s.of(ev.HostSync)], "
                                  "sorted({e.src for e in s.of(ev.OpAccumulated)}))"),
    ]
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = ROOT + os.pathsep + env_path      # the kernel imports this checkout
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=False).execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    text = [o["text"].strip() for c in nb.cells for o in c.outputs if o.get("name") == "stdout"]
    assert text == ["['cell [2], line 4']",
                    "['cell [3], line 4'] ['cell [3], line 2', 'cell [3], line 3']"]
    # the section's panel left its static picture in the same output (widgets/static.py)
    (out,) = nb.cells[2].outputs
    assert "image/png" in out["data"] and out["data"]["text/plain"] == "<section panel: in a kernel>"


def test_call_sites_follow_the_code_not_the_count():
    """Recompile reasons diff against the last recipe compiled at the same call site: a cell re-run
    unchanged is the same site under a new count; two cells sharing a count (store_history=False,
    as nbval runs them) are two sites."""
    from IPython.testing.globalipapp import get_ipython
    import hpu_lab.core as htcore
    ip = get_ipython()
    ip.user_ns.update(torch=torch, htcore=htcore)
    step = "x = torch.ones({n}, 7, device='hpu')\nhtcore.mark_step(); y = (x.exp() * 3).sum(0)\nhtcore.mark_step()\n"

    def compiles(code, store_history):
        with ev.Collector() as c:
            assert ip.run_cell(code, store_history=store_history).success
        return [(e.reason, e.src) for e in c.events if isinstance(e, ev.Compile)]

    ip.user_ns["n"] = 3
    cell = step.replace("{n}", "n")
    count = ip.execution_count
    assert compiles(cell, True)[-1] == ("first compile", f"cell [{count}], line 3")
    ip.user_ns["n"] = 5                   # the same cell again, other data: a recompile at that site
    assert compiles(cell, True)[-1] == ("input 0 shape changed (3, 7) -> (5, 7)", f"cell [{count + 1}], line 3")
    # two other cells, run without history: both named with one count, yet two call sites
    a = step.format(n=11).replace("exp()", "sin()")
    b = step.format(n=13).replace("exp()", "cos()")
    (reason_a, src_a), (reason_b, src_b) = compiles(a, False)[-1], compiles(b, False)[-1]
    assert src_a == src_b and reason_a == reason_b == "first compile"
