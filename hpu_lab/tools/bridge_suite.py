"""Run Intel's own bridge test suite (gaudi-pytorch-bridge ``tests/pytest_working``) on hpu_lab.

    python -m hpu_lab.tools.bridge_suite /path/to/gaudi-pytorch-bridge [-j 2] [-k PATTERN] [--files GLOB ...]
    make bridge-suite BRIDGE=/path/to/gaudi-pytorch-bridge

As Intel runs it: ``lazy/`` and ``any_mode/`` (what the root conftest collects with ``--mode lazy``),
``--dut gaudi2``, with rootdir ``tests/`` so that the node ids match ``skip_tests_list.json``, which
Intel's own conftest applies. One pytest process per file, at most 2 at a time, each with a time limit:
a file whose process dies (abort, segfault, timeout) costs only itself, and the test that was running
is named. ``habana_frameworks`` imports resolve to hpu_lab (``hpu_lab.tools.bridge_plugin``), nothing
is stubbed. Prints ``passed / failed / errors / skipped`` and the failures grouped by cause, and writes
every test's outcome to a JSON file (default under /work/scratch/bridge_suite, outside the project).
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITES = ("lazy", "any_mode")


def test_root(bridge: Path) -> Path:
    """``tests/`` of a checkout (the folder holding ``pytest_working``); accepts either folder too."""
    for cand in (bridge / "tests", bridge, bridge.parent):
        if (cand / "pytest_working" / "conftest.py").exists():
            return cand
    raise SystemExit(f"bridge_suite: no tests/pytest_working/conftest.py under {bridge} "
                     "(give the path of a gaudi-pytorch-bridge checkout)")


def test_files(root: Path, patterns=()) -> list[str]:
    files = []
    for suite in SUITES:
        for p in sorted((root / "pytest_working" / suite).rglob("test_*.py")):
            rel = p.relative_to(root).as_posix()
            if not patterns or any(fnmatch.fnmatch(rel, f"*{pat}*") for pat in patterns):
                files.append(rel)
    return files


def run_file(root: Path, rel: str, args, logdir: Path) -> dict:
    """One pytest process for one file; returns its per-test outcomes from the plugin's log."""
    log = logdir / (rel.replace("/", "__") + ".jsonl")
    log.unlink(missing_ok=True)
    project = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, HPU_LAB_BRIDGE_LOG=str(log),
               PYTHONPATH=os.pathsep.join([project] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    cmd = [sys.executable, "-m", "pytest", rel, "--mode", args.mode, "--dut", args.dut, "--rootdir", str(root),
           "-p", "hpu_lab.tools.bridge_plugin", "-p", "no:cacheprovider", "-q", "--no-header"] + (["-x"] if args.x else [])
    if args.k:
        cmd += ["-k", args.k]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.timeout)
        status = "ok" if proc.returncode in (0, 1, 2, 5) else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)             # the whole session: pytest and anything it started
        out, _ = proc.communicate()
        status = f"timeout after {args.timeout}s"
    if proc.returncode is not None and proc.returncode < 0:
        status = f"killed by {signal.Signals(-proc.returncode).name}"
    tail = out.decode(errors="replace").strip().splitlines()[-15:]
    tests = outcomes(log, status if proc.returncode not in (3, 4) else "ok")
    if proc.returncode in (3, 4) and not tests:
        # pytest itself stopped (exit 3: internal error, 4: a conftest failed to import): an error
        # of the file's set-up, reported by pytest, not a crash of the process
        errs = [ln[1:].strip() for ln in tail if ln.startswith("E ")]
        tests = {rel: ("error", "conftest: " + (errs[-1] if errs else tail[-1] if tail else status))}
        status = "ok"
    return {"file": rel, "status": status, "seconds": round(time.monotonic() - t0, 1),
            "tests": tests, "tail": tail if status != "ok" else []}


def outcomes(log: Path, status: str) -> dict:
    """nodeid -> (outcome, cause). A test that started and never reported was running when the
    process died: it is a ``crash``."""
    res: dict = {}
    running = None
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue                                # a line cut by the crash
            nid = r["nodeid"]
            if r["event"] == "start":
                running = nid
                continue
            if r["event"] == "collect":
                res[nid] = ("error", "collection: " + r["cause"])
                continue
            if r["when"] == "teardown":
                running = None
            prev = res.get(nid)
            if r["outcome"] == "passed":
                res.setdefault(nid, ("xpassed" if r["xfail"] else "passed", ""))
            elif r["outcome"] == "skipped":
                res[nid] = ("xfailed" if r["xfail"] else "skipped", r["cause"])
            elif r["when"] == "call":
                res[nid] = ("failed", r["cause"])
            elif prev is None or prev[0] in ("passed", "skipped"):
                res[nid] = ("error", f"{r['when']}: " + r["cause"])
    if running is not None and status != "ok":
        res[running] = ("crash", status)
    elif status != "ok" and not res:
        res["(file)"] = ("crash", status)
    return res


_NUM = re.compile(r"(?<![A-Za-z_])-?\d+(\.\d+)?(e-?\d+)?")


def cause_key(cause: str) -> str:
    """Group similar messages: numbers and tensor reprs blanked, cut at 140 characters."""
    c = re.sub(r"tensor\(.*", "tensor(...)", cause)
    c = _NUM.sub("N", c)
    c = re.sub(r"\[[N, ]+\]", "[..]", c)
    c = re.sub(r"'[^']{40,}'", "'...'", c)
    return c[:140]


def summarize(results: list[dict]) -> dict:
    counts = collections.Counter()
    causes = collections.defaultdict(list)
    for f in results:
        for nid, (outcome, cause) in f["tests"].items():
            counts[outcome] += 1
            if outcome in ("failed", "error", "crash"):
                causes[cause_key(cause)].append(nid)
    return {"counts": dict(counts), "causes": causes}


def summary_line(counts: dict) -> str:
    p, f, e, s = (counts.get(k, 0) for k in ("passed", "failed", "error", "skipped"))
    c = counts.get("crash", 0)
    ran = p + f + e + c
    pct = f"{100.0 * p / ran:.1f}% of what ran" if ran else "nothing ran"
    extra = "".join(f", {counts[k]} {k}" for k in ("xfailed", "xpassed") if counts.get(k))
    return f"{p} passed / {f} failed / {e} errors / {s} skipped, {c} crashed{extra}: {pct}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bridge", type=Path, help="a gaudi-pytorch-bridge checkout (or its tests/ folder)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="files run at once (default 2)")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per file (default 1200)")
    ap.add_argument("--files", nargs="*", default=(), help="run only files whose path contains one of these")
    ap.add_argument("-k", default=None, help="pytest -k expression, passed to every file")
    ap.add_argument("-x", action="store_true", help="stop each file at its first failure")
    ap.add_argument("--mode", default="lazy")
    ap.add_argument("--dut", default="gaudi2")
    ap.add_argument("--out", type=Path, default=Path("/work/scratch/bridge_suite/result.json"),
                    help="JSON with every test's outcome (a .csv of the causes is written next to it)")
    ap.add_argument("--top", type=int, default=40, help="causes to print")
    args = ap.parse_args(argv)

    root = test_root(args.bridge.resolve())
    files = test_files(root, args.files)
    if not files:
        raise SystemExit("bridge_suite: no test file matches")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    logdir = Path(tempfile.mkdtemp(prefix="bridge_logs_", dir=args.out.parent))
    print(f"bridge_suite: {len(files)} files from {root}/pytest_working, --mode {args.mode} --dut {args.dut}, "
          f"{args.jobs} at a time", flush=True)
    results = []
    with cf.ThreadPoolExecutor(max_workers=max(1, min(args.jobs, 2))) as pool:
        futs = {pool.submit(run_file, root, rel, args, logdir): rel for rel in files}
        for n, fut in enumerate(cf.as_completed(futs), 1):
            r = fut.result()
            results.append(r)
            c = collections.Counter(o for o, _ in r["tests"].values())
            flag = "" if r["status"] == "ok" else f"  !! {r['status']}"
            print(f"[{n}/{len(files)}] {r['file']}: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
                  f"{c.get('error', 0)} errors, {c.get('skipped', 0)} skipped ({r['seconds']}s){flag}", flush=True)
    results.sort(key=lambda r: r["file"])
    s = summarize(results)
    line = summary_line(s["counts"])
    print("\nfailures by cause (tests, cause, example):")
    ranked = sorted(s["causes"].items(), key=lambda kv: -len(kv[1]))
    for key, nids in ranked[:args.top]:
        print(f"{len(nids):6d}  {key}\n        e.g. {nids[0]}")
    crashed = [r for r in results if r["status"] != "ok"]
    for r in crashed:
        print(f"\n!! {r['file']}: {r['status']}\n   " + "\n   ".join(r["tail"][-6:]))
    print("\n" + line)
    args.out.write_text(json.dumps({"summary": line, "counts": s["counts"], "args": {
        "bridge": str(root), "mode": args.mode, "dut": args.dut, "files": len(files), "k": args.k},
        "files": results}, indent=1))
    with open(args.out.with_suffix(".csv"), "w", encoding="utf-8") as f:
        f.write("tests,cause,example\n")
        for key, nids in ranked:
            f.write(f"{len(nids)},\"{key.replace(chr(34), chr(39))}\",{nids[0]}\n")
    print(f"(every outcome: {args.out}; causes: {args.out.with_suffix('.csv')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
