"""Run the HPU tests of the libraries Gaudi users train with, unchanged, on hpu_lab.

    python -m hpu_lab.tools.client_suites --lightning-habana PATH --deepspeed PATH --optimum-habana PATH
                                          [--accelerate PATH] [--suites NAME ...] [--doc docs/client_suites.md]
    make client-suites LIGHTNING_HABANA=PATH DEEPSPEED=PATH OPTIMUM_HABANA=PATH [ACCELERATE=PATH]

Each PATH is a checkout of the library (or, for accelerate, its installed package: the default), kept
outside this project; the library itself is the one installed in the venv (``pip install -e
'.[clients]'``). The suites:

- lightning-habana ``tests/test_pytorch`` and ``tests/test_fabric`` (checkout root as the working
  folder, as its CI runs them), and ``test_compile.py`` again in eager mode (it skips in lazy mode);
- DeepSpeed ``tests/unit/accelerator`` with ``DS_ACCELERATOR=hpu``;
- accelerate ``test_utils/scripts/test_script.py`` (what ``accelerate test`` runs), one script: it
  passes when it exits 0;
- optimum-habana ``tests/test_trainer.py``.

As ``make bridge-suite``: one pytest process per test file, 2 at a time, each with a time limit; a
process that dies costs its file only, and the test that was running is named. ``habana_frameworks``,
``habana_dataloader`` and ``hl-smi`` resolve to hpu_lab in the test processes and in every process they
start (``hpu_lab.tools.client_plugin``); nothing is stubbed or edited. Prints per suite ``passed /
failed / errors / skipped`` with the failures grouped by cause and the skips by reason, writes every
outcome to ``--out`` (JSON, outside the project), and with ``--doc`` rewrites the results block of
that markdown file.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import datetime
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .bridge_suite import cause_key, outcomes, summary_line

BEGIN, END = "<!-- client-suites:begin -->", "<!-- client-suites:end -->"


@dataclass
class Suite:
    name: str
    lib: str                       # the option that gives its checkout (--lightning-habana ...)
    package: str                   # its distribution name, for the version
    target: str                    # a folder of test files, or a script
    env: dict = field(default_factory=dict)
    script: bool = False
    pytest_args: tuple = ()


# lightning-habana's pytest turns every FutureWarning into an error. Lightning 2.3 (the last release
# lightning-habana 1.6 imports with) calls two torch APIs that torch 2.13 deprecates with a
# FutureWarning, and that the torch of lightning-habana 1.6's Gaudi releases (2.2, 2.3) did not: it
# builds pytree LeafSpecs, and its FSDP state-dict contexts call ``FSDP.state_dict_type()``. Those two
# deprecations are let through (as warnings); every other FutureWarning stays an error.
_LIGHTNING_ON_TORCH_2_13 = (
    "-W", "default:`isinstance(treespec, LeafSpec)` is deprecated:FutureWarning",
    "-W", "default:FSDP.state_dict_type() and FSDP.set_state_dict_type() are being deprecated:FutureWarning",
)


SUITES = [
    Suite("lightning-habana tests/test_pytorch", "lightning_habana", "lightning-habana", "tests/test_pytorch",
          pytest_args=_LIGHTNING_ON_TORCH_2_13),
    # its torch.compile tests skip in lazy mode ("Test requires lazy mode to be disabled"): run them in
    # eager mode too, as its CI does
    Suite("lightning-habana tests/test_pytorch/test_compile.py (eager)", "lightning_habana", "lightning-habana",
          "tests/test_pytorch/test_compile.py", {"PT_HPU_LAZY_MODE": "0"}, pytest_args=_LIGHTNING_ON_TORCH_2_13),
    Suite("lightning-habana tests/test_fabric", "lightning_habana", "lightning-habana", "tests/test_fabric",
          pytest_args=_LIGHTNING_ON_TORCH_2_13),
    Suite("DeepSpeed tests/unit/accelerator", "deepspeed", "deepspeed", "tests/unit/accelerator",
          {"DS_ACCELERATOR": "hpu"}),
    Suite("accelerate test_script.py", "accelerate", "accelerate", "test_utils/scripts/test_script.py", script=True),
    Suite("optimum-habana tests/test_trainer.py", "optimum_habana", "optimum-habana", "tests/test_trainer.py"),
]


def _project() -> str:
    return str(Path(__file__).resolve().parents[2])


def _env(extra: dict, log: Path | None = None) -> dict:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([_project()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if log is not None:
        env["HPU_LAB_BRIDGE_LOG"] = str(log)
    return env


def _run(cmd, cwd, env, timeout):
    """(returncode or None, status, output) of one process group, killed whole at the time limit."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        status = "ok"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)             # pytest and anything it started
        out, _ = proc.communicate()
        status = f"timeout after {timeout}s"
    if proc.returncode is not None and proc.returncode < 0 and status == "ok":
        status = f"killed by {signal.Signals(-proc.returncode).name}"
    return proc.returncode, status, out.decode(errors="replace")


def resolve_target(suite: Suite, path: Path) -> Path:
    """The suite's folder or script under the given checkout (or installed package)."""
    cands = [path / suite.target]
    if suite.script:       # accelerate: repo checkout (src/accelerate/...) or the package folder itself
        cands += [path / "src" / "accelerate" / suite.target, path / "accelerate" / suite.target]
    for c in cands:
        if c.exists():
            return c
    raise SystemExit(f"client_suites: {suite.name}: no {suite.target} under {path}")


def run_file(suite: Suite, root: Path, rel: str, timeout: int, logdir: Path) -> dict:
    log = logdir / (suite.lib + "__" + rel.replace("/", "__") + ".jsonl")
    log.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", rel, "-p", "hpu_lab.tools.client_plugin", "-p", "no:cacheprovider",
           "-q", "--no-header", "--tb=line", *suite.pytest_args]
    t0 = time.monotonic()
    rc, status, out = _run(cmd, root, _env(suite.env, log), timeout)
    if status == "ok" and rc not in (0, 1, 2, 3, 4, 5):
        status = f"exit {rc}"
    tail = out.strip().splitlines()[-15:]
    tests = outcomes(log, status)
    if rc in (3, 4) and not tests:
        errs = [ln[1:].strip() for ln in tail if ln.startswith("E ")]
        tests = {rel: ("error", "pytest: " + (errs[-1] if errs else tail[-1] if tail else status))}
    return {"file": rel, "status": status, "seconds": round(time.monotonic() - t0, 1), "tests": tests,
            "tail": tail if status != "ok" else []}


def run_script(suite: Suite, script: Path, timeout: int) -> dict:
    cmd = [sys.executable, "-m", "hpu_lab", "run", str(script)]
    t0 = time.monotonic()
    rc, status, out = _run(cmd, script.parent, _env(suite.env), timeout)
    lines = out.strip().splitlines()
    if status == "ok" and rc == 0:
        tests = {script.name: ("passed", "")}
    else:
        errs = [ln for ln in lines if "Error" in ln or "assert" in ln.lower()]
        tests = {script.name: ("failed" if status == "ok" else "crash",
                               (errs[-1] if errs else lines[-1] if lines else status)[:300])}
    return {"file": script.name, "status": status, "seconds": round(time.monotonic() - t0, 1), "tests": tests,
            "tail": lines[-15:] if rc != 0 else []}


def run_suite(suite: Suite, path: Path, jobs: int, timeout: int, logdir: Path, files=()) -> list:
    target = resolve_target(suite, path)
    if suite.script:
        return [run_script(suite, target, timeout)]
    root = path
    rels = [target.relative_to(root).as_posix()] if target.is_file() else \
        [p.relative_to(root).as_posix() for p in sorted(target.rglob("test_*.py"))]
    rels = [r for r in rels if not files or any(f in r for f in files)]
    results = []
    with cf.ThreadPoolExecutor(max_workers=max(1, min(jobs, 2))) as pool:
        futs = [pool.submit(run_file, suite, root, rel, timeout, logdir) for rel in rels]
        for fut in cf.as_completed(futs):
            r = fut.result()
            c = collections.Counter(o for o, _ in r["tests"].values())
            flag = "" if r["status"] == "ok" else f"  !! {r['status']}"
            print(f"  {r['file']}: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, {c.get('error', 0)} "
                  f"errors, {c.get('skipped', 0)} skipped ({r['seconds']}s){flag}", flush=True)
            results.append(r)
    return sorted(results, key=lambda r: r["file"])


def tally(results: list) -> dict:
    counts, causes, skips = collections.Counter(), collections.defaultdict(list), collections.Counter()
    for f in results:
        for nid, (outcome, cause) in f["tests"].items():
            counts[outcome] += 1
            if outcome in ("failed", "error", "crash"):
                causes[cause_key(cause)].append(nid)
            elif outcome == "skipped":
                skips[cause.replace("Skipped: ", "")[:140]] += 1
    return {"counts": dict(counts), "causes": {k: v for k, v in sorted(causes.items(), key=lambda kv: -len(kv[1]))},
            "skips": dict(skips.most_common())}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _checkout(path: Path) -> str:
    """The checkout's commit when ``path`` is the top of a git work tree, else the path itself (an
    archive, or an installed package: not the commit of some repository around it)."""
    if sys.prefix != sys.base_prefix and path.resolve().is_relative_to(Path(sys.prefix).resolve()):
        return "the installed package"           # the venv's copy: its path says nothing to a reader
    top = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != path.resolve():
        return str(path)
    r = subprocess.run(["git", "-C", str(path), "log", "-1", "--format=%h %cs"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else str(path)


def markdown(report: dict) -> str:
    lines = [f"Last run: {report['date']}, torch {_version('torch')}, "
             f"{'lazy' if os.environ.get('PT_HPU_LAZY_MODE', '1') != '0' else 'eager'} mode.", "",
             "| suite | library | tests from | passed | failed | errors | skipped | xfailed | passed of what ran |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in report["suites"]:
        c = s["counts"]
        p, f, e, k = (c.get(x, 0) for x in ("passed", "failed", "error", "skipped"))
        ran = p + f + e + c.get("crash", 0)
        pct = f"{100.0 * p / ran:.1f}%" if ran else "-"
        lines.append(f"| {s['name']} | {s['package']} {s['version']} | {s['checkout']} | {p} | {f} | "
                     f"{e + c.get('crash', 0)} | {k} | {c.get('xfailed', 0)} | {pct} |")
    for s in report["suites"]:
        if s["causes"] or s["skips"]:
            lines += ["", f"**{s['name']}**", ""]
        if s["causes"]:
            lines += ["Failures by cause:", ""] + [f"- {len(v)} x `{k}` (e.g. `{v[0]}`)" for k, v in s["causes"].items()]
        if s["skips"]:
            lines += ["", "Skips by reason:", ""] + [f"- {n} x {k}" for k, n in s["skips"].items()]
    return "\n".join(lines)


def write_doc(doc: Path, report: dict) -> None:
    text = doc.read_text(encoding="utf-8") if doc.exists() else f"{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        raise SystemExit(f"client_suites: {doc} has no {BEGIN} ... {END} block to rewrite")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{markdown(report)}\n{END}{tail}", encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for opt in ("lightning-habana", "deepspeed", "optimum-habana", "accelerate"):
        ap.add_argument(f"--{opt}", type=Path, default=None, help=f"a {opt} checkout, outside this project")
    ap.add_argument("--suites", nargs="*", default=(), help="run only suites whose name contains one of these")
    ap.add_argument("--files", nargs="*", default=(), help="run only test files whose path contains one of these")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="test files run at once (default 2)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per test file (default 1800)")
    ap.add_argument("--out", type=Path, default=Path("/work/scratch/client_suites/result.json"))
    ap.add_argument("--doc", type=Path, default=None, help="markdown file whose results block is rewritten")
    args = ap.parse_args(argv)
    paths = {"lightning_habana": args.lightning_habana, "deepspeed": args.deepspeed,
             "optimum_habana": args.optimum_habana, "accelerate": args.accelerate}
    if paths["accelerate"] is None:               # its test script ships inside the installed package
        try:
            import accelerate
            paths["accelerate"] = Path(accelerate.__file__).parent
        except ImportError:
            pass
    args.out.parent.mkdir(parents=True, exist_ok=True)
    logdir = Path(tempfile.mkdtemp(prefix="client_logs_", dir=args.out.parent))
    report = {"date": datetime.date.today().isoformat(), "suites": []}
    for suite in SUITES:
        if args.suites and not any(s in suite.name for s in args.suites):
            continue
        path = paths[suite.lib]
        if path is None:
            print(f"== {suite.name}: no checkout given (--{suite.lib.replace('_', '-')}), not run")
            continue
        print(f"== {suite.name} ({suite.package} {_version(suite.package)}, tests from {path})", flush=True)
        results = run_suite(suite, path.resolve(), args.jobs, args.timeout, logdir, args.files)
        t = tally(results)
        print(f"   {summary_line(t['counts'])}")
        for k, v in list(t["causes"].items())[:15]:
            print(f"   {len(v):5d}  {k}\n          e.g. {v[0]}")
        for k, n in list(t["skips"].items())[:10]:
            print(f"   skip {n:4d}  {k}")
        for r in results:
            if r["status"] != "ok":
                print(f"   !! {r['file']}: {r['status']}\n      " + "\n      ".join(r["tail"][-6:]))
        report["suites"].append({"name": suite.name, "package": suite.package, "version": _version(suite.package),
                                 "checkout": _checkout(path), **t, "files": results})
    args.out.write_text(json.dumps(report, indent=1))
    print(f"(every outcome: {args.out})")
    if args.doc is not None:
        write_doc(args.doc, report)
        print(f"(results written to {args.doc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
