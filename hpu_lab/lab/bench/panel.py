"""Panel overhead (issue 14, point 5): a 600-step seed-style MLP loop in a Jupyter kernel, plain and
inside ``widgets.section(...)`` with its live panel, in the same kernel. Target: the loop's wall
time <= 10% over plain.

The method (so that it can decide, on a VM whose rounds spread over tens of points even idle):

- Paired rounds, ABBA: each round runs the kinds of loop back to back, in turns first (round 0
  plain then section, round 1 section then plain, ...), so that a change of load cancels over two
  rounds; a first round is run and reported apart (the kernel's first panel pays matplotlib's
  start-up, ~1 s, that no later section pays).
- Each loop starts right after ``gc.collect()`` (outside the timing): a loop pays only the
  collections its own allocations bring on, not one an earlier cell made due.
- The figure is the median of the rounds' paired ratios (section / plain - 1) with a 95%
  bootstrap interval of that median (the rounds resampled, a fixed seed) and the quartiles. The
  verdict: "met" when the interval's upper end is <= 10%, "not met" when its lower end is above,
  else "undecided" (more rounds narrow the interval).
- Wall time is what a learner waits for; the kernel process's CPU time (every thread: the user's,
  the emulator's device thread, autograd's, the kernel's own) and the main thread's CPU time are
  reported beside it, with the same statistics: they are steadier on a loaded machine.
- Runs of the same committed code can be pooled (``--pool``: each run's ``--json`` file records
  the commit it measured): more rounds narrow the interval where one run's cannot.
- An optional third kind, ``recording`` (a bare ``events.Collector``: every event kept, no
  panel), splits the section's overhead into what recording at all costs and what the panel adds.

Also reported: what each kind of loop added to its round's plain loop in ms (medians): its wall
and CPU time, and the CPU time of each thread (threads.py: the user's, autograd's, the device's,
the rest), which says where a recording's cost lands; the garbage collector's time and full
collections per kind of loop (totals over all rounds: a full collection walks every object of the
kernel, 0.3-0.7 s here), the time to enter the section (the panel built and shown), the live
redraws inside the loops, the whole cell (the loop plus the final redraw) and the load average
before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess

from . import threads
from ...util import omp

TARGET = 0.10
KINDS = ("plain", "section", "recording")

SETUP = """
import functools, gc, json, time, torch, hpu_lab, widgets
from hpu_lab import events as _ev
from hpu_lab.lab.bench import threads as _threads
from hpu_lab.lab.examples import Net, train_step
torch.manual_seed(0)
_model = Net().to("hpu")
_opt = torch.optim.Adadelta(_model.parameters(), lr=0.1)
_x, _y = torch.randn({batch}, 1, 28, 28), torch.randint(0, 10, ({batch},))
_step = functools.partial(train_step, _model, _opt, _x, _y)
for _ in range(5):
    _step()
torch.hpu.synchronize()

# the garbage collector's time (a full collection walks every object of the kernel)
_gc = [0.0, 0, 0.0]     # seconds in collections, full collections, start of the current one

def _gc_hook(phase, info):
    if phase == "start":
        _gc[2] = time.perf_counter()
    else:
        _gc[0] += time.perf_counter() - _gc[2]
        _gc[1] += info["generation"] == 2

gc.callbacks.append(_gc_hook)

def _start():
    gc.collect()            # each loop starts with nothing pending: it pays only the collections it brings on
    _gc[:2] = [0.0, 0]
    return time.perf_counter(), time.process_time(), time.thread_time(), _threads.cpu_by_role()

def _loop(n):
    for _ in range(n):
        _step()
    torch.hpu.synchronize()

def _stop(t):
    return {{"wall": time.perf_counter() - t[0], "cpu": time.process_time() - t[1],
             "main_cpu": time.thread_time() - t[2], "gc_s": _gc[0], "full_gcs": _gc[1],
             "threads": _threads.since(t[3], _threads.cpu_by_role())}}

def _plain(n):
    t = _start()
    _loop(n)
    return _stop(t)

def _recording(n):
    t = _start()
    with _ev.Collector() as c:
        _loop(n)
        r = _stop(t)
    r["events"] = len(c.events)
    return r

def _section(n):
    t = _start()
    with widgets.section("bench: panel overhead") as s:
        entered = time.perf_counter() - t[0]
        _loop(n)
        r = _stop(t)
    r.update(cell=time.perf_counter() - t[0], entry=entered, live_redraws=s._panel.stats["live_refreshes"],
             live_s=s._panel.stats["live_s"], events=len(s.events))
    return r

def _round(n, kinds):
    return {{k: globals()["_" + k](n) for k in kinds}}
"""


def order(i: int, kinds) -> list:
    """The kinds of loop of round ``i``: in the given order on even rounds, reversed on odd ones
    (ABBA over two rounds)."""
    return list(kinds) if i % 2 == 0 else list(reversed(kinds))


def summary(xs, boots: int = 2000, seed: int = 0) -> dict:
    """Median, quartiles and a 95% bootstrap interval of the median of ``xs``."""
    xs = sorted(xs)
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(boots))
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2],
            "lo": meds[int(0.025 * boots)], "hi": meds[int(0.975 * boots) - 1], "n": len(xs)}


def verdict(s: dict, target: float = TARGET) -> str:
    """"met" when the whole interval is within the target, "not met" when it is all above it."""
    if s["hi"] <= target:
        return "met"
    if s["lo"] > target:
        return "not met"
    return "undecided"


def overheads(rows, kind: str) -> dict:
    """Paired ratios of ``kind`` over the plain loop of the same round, per measure."""
    out = {"wall": [r[kind]["wall"] / r["plain"]["wall"] - 1 for r in rows],
           "cpu": [r[kind]["cpu"] / r["plain"]["cpu"] - 1 for r in rows],
           "main_cpu": [r[kind]["main_cpu"] / r["plain"]["main_cpu"] - 1 for r in rows]}
    if kind == "section":
        out["cell"] = [r[kind]["cell"] / r["plain"]["wall"] - 1 for r in rows]
    return out


def added(rows, kind: str) -> dict:
    """What ``kind``'s loop added to the plain loop of the same round, in seconds, per round: wall
    and process CPU time, and the CPU time of each thread role (threads.ROLES) when every round
    has it. The wall time a recording adds follows its added CPU time, whichever thread spends it
    (threads.py); this says which one does."""
    out = {"wall": [r[kind]["wall"] - r["plain"]["wall"] for r in rows],
           "cpu": [r[kind]["cpu"] - r["plain"]["cpu"] for r in rows]}
    if rows and all(r[kind].get("threads") and r["plain"].get("threads") for r in rows):
        for role in threads.ROLES:
            out[role] = [r[kind]["threads"][role] - r["plain"]["threads"][role] for r in rows]
    return out


def summaries(rows, kinds) -> dict:
    """The summaries of each kind's paired overheads over the plain loop, per measure."""
    return {k: {m: summary(v) for m, v in overheads(rows, k).items()} for k in kinds if k != "plain"}


def code_version(root: str) -> str:
    """The commit the working tree at ``root`` is, with ``+dirty`` if tracked files differ from it;
    "" outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head.stdout.strip() + ("+dirty" if dirty else "")


def pool(results: list) -> dict:
    """The rounds of several runs (``measure`` results, or their ``--json`` files) as one result,
    its summaries recomputed over all of them. Only runs of the same committed code, loop length
    and kinds of loop pool: a ValueError names what differs."""
    if not results:
        raise ValueError("nothing to pool")
    first = results[0]
    for r in results[1:]:
        for key in ("code", "steps", "kinds", "omp_wait_policy"):
            if r.get(key) != first.get(key):
                raise ValueError(f"cannot pool runs with different {key}: {first.get(key)!r} and {r.get(key)!r}")
    code = first.get("code") or ""
    if not code or code.endswith("+dirty"):
        raise ValueError(f"cannot pool runs of unknown or uncommitted code ({code or 'no commit recorded'}): "
                         "the rounds must all measure one commit")
    rows = [row for r in results for row in r["rows"]]
    return {"rows": rows, "first": first["first"], "over": summaries(rows, first["kinds"]), "steps": first["steps"], "kinds": first["kinds"],
            "load_before": first["load_before"], "load": results[-1]["load"], "code": code, "runs": len(results),
            "omp_wait_policy": first.get("omp_wait_policy")}


def measure(steps: int = 600, rounds: int = 12, batch: int = 64, kinds=("plain", "section"),
            timeout: float = 600) -> dict:
    """``rounds`` paired rounds (after a first one, reported apart) of the ``kinds`` of loop in a
    fresh kernel; returns the rows, the first round, the summaries of the paired overheads and the
    load average before and after."""
    from jupyter_client.manager import start_new_kernel
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # the kernel that `make lab` starts: OpenMP's idle workers sleep (util/omp.py; torch is imported
    # before hpu_lab in SETUP, so only the environment can say it). A value the user set is kept.
    env.setdefault("OMP_WAIT_POLICY", omp.WAIT_POLICY)
    load_before = os.getloadavg()
    code = code_version(root)
    km, kc = start_new_kernel(kernel_name="python3", env=env)
    out = []

    def run(code):
        def hook(msg):
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
        reply = kc.execute_interactive(code, output_hook=hook, timeout=timeout)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"benchmark cell failed in the kernel: {reply['content'].get('evalue')}")
    try:
        run(SETUP.format(batch=batch))
        rows = []
        for i in range(rounds + 1):
            out.clear()
            run(f"print(json.dumps(_round({steps}, {order(i, kinds)!r})))")
            rows.append(json.loads("".join(out).strip().splitlines()[-1]))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    first, rows = rows[0], rows[1:]
    return {"rows": rows, "first": first, "over": summaries(rows, kinds), "steps": steps, "kinds": list(kinds),
            "load_before": load_before, "load": os.getloadavg(), "code": code,
            "omp_wait_policy": env["OMP_WAIT_POLICY"]}


def _pct(s: dict) -> str:
    return (f"{100 * s['median']:+5.1f}%  (95% interval of the median {100 * s['lo']:+.1f}..{100 * s['hi']:+.1f}%, "
            f"quartiles {100 * s['q1']:+.1f}..{100 * s['q3']:+.1f}%)")


def report(r: dict) -> None:
    rows, n = r["rows"], len(r["rows"])
    runs = f" of {r['runs']} runs pooled" if r.get("runs", 1) > 1 else ""
    print(f"\n== Panel overhead: {r['steps']} seed-style MLP steps in a Jupyter kernel, {n} paired rounds (ABBA){runs} ==")
    if r.get("code"):
        print(f"code: {r['code']}" + (f", kernel with OMP_WAIT_POLICY={r['omp_wait_policy']}"
                                      if r.get("omp_wait_policy") else ""))
    med = {k: {m: statistics.median(x[k][m] for x in rows) for m in ("wall", "cpu", "main_cpu")} for k in r["kinds"]}
    for k in r["kinds"]:
        print(f"{k:9s} loop: median wall {med[k]['wall']:5.2f} s, process CPU {med[k]['cpu']:5.2f} s, "
              f"main thread CPU {med[k]['main_cpu']:5.2f} s")
    s = r["over"]["section"]
    print(f"section over plain, loop wall   {_pct(s['wall'])}\n"
          f"  target <= {100 * TARGET:.0f}%: {verdict(s['wall'])}")
    print(f"  whole cell (final redraw)     {_pct(s['cell'])}")
    print(f"  process CPU                   {_pct(s['cpu'])}")
    print(f"  main thread CPU               {_pct(s['main_cpu'])}")
    if "recording" in r["over"]:
        g = r["over"]["recording"]
        print(f"recording (a bare Collector) over plain: wall {_pct(g['wall'])}\n"
              f"  process CPU {_pct(g['cpu'])}\n  main thread CPU {_pct(g['main_cpu'])}")
    for k in r["kinds"][1:]:
        a = {m: statistics.median(v) for m, v in added(rows, k).items()}
        split = "".join(f", {role} {1000 * a[role]:+.0f}" for role in threads.ROLES if role in a)
        print(f"{k} added per loop (median of the rounds' differences, ms): wall {1000 * a['wall']:+.0f}, "
              f"process CPU {1000 * a['cpu']:+.0f}" + (f"; by thread:{split[1:]}" if split else ""))
    sec = [x["section"] for x in rows]
    print(f"entering the section (the panel built and shown): median {1000 * statistics.median(x['entry'] for x in sec):.0f} ms; "
          f"live redraws over all rounds: {sum(x['live_redraws'] for x in sec)}, {sum(x['live_s'] for x in sec):.2f} s")
    print("garbage collector over all rounds: " + ", ".join(
        f"{k} {sum(x[k]['gc_s'] for x in rows):.2f} s ({sum(x[k]['full_gcs'] for x in rows)} full)" for k in r["kinds"]))
    print("per round, section over plain (loop wall / process CPU): " + ", ".join(
        f"{100 * (x['section']['wall'] / x['plain']['wall'] - 1):+.0f}/{100 * (x['section']['cpu'] / x['plain']['cpu'] - 1):+.0f}"
        for x in rows))
    f = r["first"]
    print(f"first round, with the kernel's one-time imports: plain {f['plain']['wall']:.2f} s, "
          f"section loop {f['section']['wall']:.2f} s, cell {f['section']['cell']:.2f} s")
    print("load average before: " + " ".join(f"{x:.1f}" for x in r["load_before"]) +
          "; after: " + " ".join(f"{x:.1f}" for x in r["load"]))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m hpu_lab.lab.bench.panel", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--rounds", type=int, default=12, help="paired rounds after the first (default 12)")
    p.add_argument("--recording", action="store_true", help="also a loop inside a bare events.Collector")
    p.add_argument("--json", help="write the rows and summaries to this file")
    p.add_argument("--pool", nargs="+", metavar="JSON",
                   help="measure nothing: report the rounds of these --json files (runs of one commit) as one")
    args = p.parse_args(argv if argv is not None else [])
    if args.pool:
        results = []
        for path in args.pool:
            with open(path) as f:
                results.append(json.load(f))
        try:
            r = pool(results)
        except ValueError as e:
            p.error(str(e))                  # exits 2 with the reason
        report(r)
        return r
    kinds = ("plain", "section", "recording") if args.recording else ("plain", "section")
    try:
        r = measure(args.steps, args.rounds, kinds=kinds)
    except ImportError as e:
        print(f"\n== Panel overhead: not available ({e}) ==")
        return {}
    report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    return r


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
