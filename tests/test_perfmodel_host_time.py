"""The host lane counts only the user's host time (issue 14, point 5; docs/gaudi_clock.md section 3).

Time the user's thread spends off the CPU because the *emulator* made it wait is not "blocked outside
hpu_lab": the interpreter lock held by a device stream's worker (its Python around each recipe, the
observers of its events), autograd's device thread handing work back and forth inside backward(),
waiting for a core. A real Gaudi host has none of these. Each test compares the model's blocked time
with the time the emulator's own threads burnt: counts and the model, never wall time.
"""
import subprocess
import sys
import time

import torch

from hpu_lab import events as ev
from hpu_lab import perfmodel as pm

from helpers import no_cyclic_gc, recorded, run_queue_ns, seed_setup, steal_ns

HPU = torch.device("hpu")


def test_the_device_threads_python_is_not_the_users_blocked_time():
    """An observer of device executions (a panel's per-event work) runs on the stream's worker and
    holds the interpreter lock 3 ms each time; the user's thread waits for it. That wait is the
    emulator's, not the user's: it must not appear as host time blocked outside hpu_lab."""
    step = seed_setup(64)[2]
    burnt = []

    def heavy(e):
        t = time.thread_time_ns()
        while time.thread_time_ns() - t < 3_000_000:
            pass
        burnt.append(time.thread_time_ns() - t)
    with no_cyclic_gc(), ev.recorder.subscribe(heavy, kinds=[ev.DeviceExecution]):
        events = recorded(step)
    r = pm.retime(events, "gaudi2")
    held = sum(burnt[-24:])                      # the 12 recorded steps launch 24 recipes
    assert len(burnt) >= 24 and held >= 24 * 3_000_000
    # counted, the waits would be a good part of `held` (measured: 40-60% before the fix)
    assert r.blocked_ns < 0.1 * held, (r.blocked_ns, held)


def _recorded_beside(step, burners: int):
    """30 recorded seed steps retimed for Gaudi 2, beside ``burners`` CPU-burning processes; with
    this thread's wait for a core and the machine's stolen time over the recording."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        q0, s0 = run_queue_ns(), steal_ns()
        with no_cyclic_gc():
            r = pm.retime(recorded(step, n=30), "gaudi2")
        return r, run_queue_ns() - q0, steal_ns() - s0
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _blocked_bound(r, waited_for_core: int, stolen: int) -> float:
    # measured before the fix: 15% of host_ns beside a burning process, up to 13% quiet. What
    # may remain (rarely) is one wait of about the switch interval: the worker descheduled in
    # the few microseconds of Python it runs unreported (in Recipe.run, before TorchScript).
    # A starved process (nice 19 beside two burners: 8-48 ms counted) keeps some: measured with
    # the process pinned to one core beside a burner at nice 10 (the user thread waiting for a
    # core 10-16 s a recording of 10 steps), 4 recordings of 5 counted none, one 321 ms, in gaps
    # of 500-611 ms that end while the worker runs a recipe in TorchScript (the interpreter lock
    # released; its reported Python in the gap 0.12-0.55 ms, no unreported Python stretch of its
    # own there). Cause not proven (docs/gaudi_clock.md section 3: a lead, the address space's
    # lock taken by the worker's large allocations and frees); it appears only when the
    # process is starved, so the bound allows 5% of this thread's wait for a core (2% measured
    # at worst): ~0 on a quiet machine; the 15% of host_ns above is still caught while the
    # thread waits for a core less than 3x its CPU time. Time the hypervisor stole from the
    # machine is off this thread's clock and out of its run-queue delay: nothing in the guest
    # can tell it from a wait, so what was stolen (summed over the CPUs) is allowed too
    switch = sys.getswitchinterval() * 1e9
    return max(0.03 * r.host_ns, 1.2 * switch) + 0.05 * waited_for_core + stolen


def test_a_loop_without_waits_has_no_blocked_time_quiet_or_beside_a_burning_process():
    """The seed loop waits for nothing outside hpu_lab: beside CPU-burning processes (the device
    thread descheduled while it holds the interpreter lock, autograd's thread waiting for a core)
    its modeled blocked time stays ~0, so host_ns is CPU time only; device spans and verdict match.

    Two recordings of three must keep within the bound, quiet and beside two burners. Once in CI
    (session 13's submission, where 30 steps took 207 ms of host CPU against 115-180 here) one
    recording counted 18 ms, where ~60 here, quiet or beside one to three burners, counted 0-5
    ms: such waits come rarely and alone. A model that leaves out a wait it can see is over in
    most recordings: without the run-queue delay, 6 of 8 beside two burners (4-69 ms), 3 of 8
    beside one, so this catches it ~85% of the time, one recording beside one burner ~40%; the
    fault of before the fix (15% of host_ns) was in every recording."""
    step = seed_setup()[2]
    last = {}
    for burners in (0, 2):
        tries, within = [], 0
        while within < 2:
            tries.append(_recorded_beside(step, burners))
            within += tries[-1][0].blocked_ns <= _blocked_bound(*tries[-1])
            assert len(tries) - within < 2, f"beside {burners} burners, blocked over the bound twice: {tries}"
        last[burners] = tries[-1][0]
    quiet, loaded = last[0], last[2]
    dev = lambda r: [(s.label, s.duration_ns) for lane, ss in sorted(r.spans.items()) if lane != "host" for s in ss]
    assert dev(quiet) == dev(loaded) and quiet.verdict == loaded.verdict == "host-bound"


def test_a_real_wait_is_still_counted_while_the_device_runs():
    """A sleep in the user's loop (a data loader waiting for its workers) while the device stream
    runs the previous step's recipes is the user's wait: counted in full, but for what the model
    takes out of any gap by its definition: the thread's wait for a core when the sleep ends, and
    the device worker's reported Python overlapping it (the model cannot tell a sleep from a wait for
    the interpreter lock the worker holds). Both are measured here; under load they grow (28.8 ms of
    a 30 ms sleep was counted once at load ~8, failing a fixed 29 ms bound), so the bound follows
    them. The recipes the worker runs meanwhile (TorchScript, without the lock) are not taken out:
    reported whole, they hid the sleep entirely. Both are measured from the gap's start (busy_device's
    last event), not the sleep's: once, with load, a sleep counted 28.50 ms where the sleep's own
    window held only 0.30 ms of both."""
    step = seed_setup(64)[2]
    a = torch.randn(512, 512).to(HPU)

    def busy_device():                         # ~10 matmuls queued: the worker runs while we sleep
        b = a
        for _ in range(10):
            b = b @ a
        import hpu_lab.core as htcore
        htcore.mark_step()
    busy_device()
    step()
    torch.hpu.synchronize()
    sleeps = []
    with ev.Collector() as c:
        for _ in range(4):
            # the gap around the sleep starts at busy_device's last event: measured from its start
            q0, t0 = run_queue_ns(), time.perf_counter_ns()
            busy_device()
            time.sleep(0.03)
            q1, t1 = run_queue_ns(), time.perf_counter_ns()
            sleeps.append((t0, t1, q1 - q0, ev._emulator_python_in(t0, t1)))
            step()
        torch.hpu.synchronize()
    r = pm.retime(c.events, "gaudi2")
    waits = sorted(e.duration_ns for e in r.events if isinstance(e, ev.HostWait))[-4:]
    assert len(waits) == 4, waits
    device = [sum(max(min(e.t_end, t1) - max(e.t_start, t0), 0) for e in c.of(ev.DeviceExecution))
              for t0, t1, _, _ in sleeps]
    for (t0, t1, runq, python), ran in zip(sleeps, device):
        assert python < 0.25 * ran, (python, ran)      # the recipes' runs are not the worker's Python
    allowed = max(runq + python for _, _, runq, python in sleeps)
    assert all(w >= 29_000_000 - allowed for w in waits), (waits, sleeps)


def _host_cpu(events) -> int:
    """The host lane's CPU time over a recording: the last stamped host event's less the first's."""
    stamped = [e for e in events if e.lane == "host" and e.cpu_ns >= 0]
    return stamped[-1].cpu_ns - stamped[0].cpu_ns


def test_short_sleeps_between_ops_are_not_host_cpu():
    """Between two thread-clock readings (every CPU_READ_NS) a stamp credits the user the wall time
    since the previous one; off the CPU meanwhile (a sleep shorter than a gap, a wait for the
    interpreter lock), the credit runs ahead of the thread's clock, and the next reading must take
    it back. It did not: a loop sleeping 0.3 ms between ops had 352 ms of host CPU for 104 ms of its
    thread's. The host lane can never hold more CPU than the thread burnt."""
    x = torch.ones(4, device=HPU)
    for _ in range(5):
        x = x + 1
    with ev.Collector() as c:
        c0 = time.thread_time_ns()
        for _ in range(600):
            x = x + 1
            time.sleep(0.0003)
        x = x + 1
        burnt = time.thread_time_ns() - c0
    host = _host_cpu(c.events)
    assert len(c.of(ev.OpAccumulated)) >= 600
    assert host <= 1.05 * burnt, (host, burnt)
    assert host >= 0.3 * burnt, (host, burnt)    # (the rest: the recorder's own work, charged to it)


def test_the_host_lane_of_a_training_loop_is_its_threads_cpu():
    """The seed loop's host CPU comes from two threads: the user's and autograd's (backward). Each
    hand-off between them must keep the end of the other's last stamp: kept only as the host
    clock's latest stamp, it was lost, the other thread's next catch-up charged its observers a
    negative time, and the next reading credited that to the user (the host lane ran 24-35% over
    the two threads' CPU). Compared here: the host lane with the CPU the threads burnt meanwhile."""
    step = seed_setup(64)[2]
    for _ in range(3):
        step()
    torch.hpu.synchronize()
    with no_cyclic_gc(), ev.Collector() as c:
        step()                                   # autograd's thread gets its clock
        torch.hpu.synchronize()
        clocks = [k for k in list(ev.recorder._clocks) if k.cpu_clock is not None]
        before = {k: time.clock_gettime_ns(k.cpu_clock) for k in clocks}
        n0 = len(c.events)
        for _ in range(20):
            step()
        torch.hpu.synchronize()
        burnt = sum(time.clock_gettime_ns(k.cpu_clock) - t for k, t in before.items())
    assert sum(not k.runs_user_code for k in clocks) >= 1           # autograd's thread stamped
    host = _host_cpu(c.events[n0 - 1:])
    assert host <= burnt + ev.CPU_READ_NS, (host, burnt)    # (the last stamps may run ahead of a reading)
    assert host >= 0.6 * burnt, (host, burnt)    # the recorder's own work is charged to it, not the user
