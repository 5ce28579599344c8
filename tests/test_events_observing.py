"""What observing the event stream costs the observed program (issue 14, point 5): counts and
facts, never time."""
import _thread
import functools
import gc
import sys
import threading
import time
import weakref

import pytest
import torch

import hpu_lab  # noqa: F401
from hpu_lab import events as ev
from hpu_lab.examples import Net, train_step

from helpers import no_cyclic_gc


@pytest.fixture(scope="module")
def step():
    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    s = functools.partial(train_step, model, opt, x, y)
    s()
    torch.hpu.synchronize()
    return s


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's cyclic garbage collector")
def test_kept_events_give_the_garbage_collector_nothing_to_walk(step):
    """A recording keeps tens of thousands of events; tracked, they would bring on full collections
    of the whole process that the unobserved program never has. Untracked, they are still freed."""
    with ev.Collector() as c:
        for _ in range(2):
            step()
        torch.hpu.synchronize()
    kinds = {type(e) for e in c.events}
    assert {ev.OpAccumulated, ev.MarkStep, ev.Launch, ev.DeviceExecution} <= kinds
    assert not [e for e in c.events if gc.is_tracked(e) or gc.is_tracked(vars(e))]
    ref = weakref.ref(c.events[0])
    del c
    assert ref() is None                     # reference counting frees them as before
    # an event nobody observes is left as it was made; its fields, numbers and strings only, are a
    # dict the collector never tracked (so emit has one object to untrack, not two)
    e = ev.MarkStep(0, 0, "host", 0)
    assert gc.is_tracked(e) and not gc.is_tracked(vars(e))
    assert gc.is_tracked(vars(ev.Launch(0, 0, "host", 0, graph=ev.GraphSummary())))


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's cyclic garbage collector")
def test_kept_op_runs_give_the_garbage_collector_nothing_to_walk(step):
    """A log keeps every op run as it came (one a hand-over: at most every 20 ms in a loop, each
    holding the stamps of the ops and events since the last); tracked, the collector walked them in
    every young collection they went through (20 ms a 3 s loop in a kernel, when there were ~2,400
    runs of ~360 stamps). Untracked with their lists, they are still read, and freed."""
    with ev.Collector() as c:
        for _ in range(3):
            step()
        torch.hpu.synchronize()
        ev.flush()
        runs = [x for x in list.__iter__(c.log.items) if type(x) is ev.OpRun]
        assert runs and not [r for r in runs if gc.is_tracked(r)]
        unbuilt = [r for r in runs if r._segments is not None]
        parts = [(s, s[2]) for r in unbuilt for s in r._segments]
        assert parts and not [p for seg in parts for p in seg if gc.is_tracked(p)]
        assert not [r for r in unbuilt if gc.is_tracked(r._segments)]
    ops = c.of(ev.OpAccumulated)                 # read (at stop): built from the untracked stamps
    assert len(ops) > 60 and not [r for r in runs if gc.is_tracked(r.events())]
    ref = weakref.ref(ops[0])                    # held by its run and the log only
    del runs, unbuilt, parts, c, ops
    assert ref() is None                         # reference counting frees them


def _spin(n):
    for _ in range(n):
        pass


@functools.lru_cache(maxsize=None)
def _spins_per_us():
    """Loop iterations per microsecond of this thread's CPU, measured over ~20 ms of CPU time."""
    n, t = 0, time.thread_time_ns()
    while time.thread_time_ns() - t < 20_000_000:
        _spin(1000)
        n += 1000
    return n * 1000 / (time.thread_time_ns() - t)


def _busy(ns):
    """Burn about ``ns`` of this thread's CPU time by a fixed amount of work: neither a wall-time loop
    (preempted on a loaded machine, it burns less CPU) nor a thread-clock loop (each reading is a
    system call, 2-70 us of wall time here: the "just now" window of an emit would be overrun)."""
    _spin(int(ns / 1000 * _spins_per_us()))


def _host_cpu_where_the_work_is(n, work_ns=8_000):
    """Host CPU the stamps give ``n`` events preceded by ``work_ns`` of the user's busy work (before
    the event ends) and, interleaved with them, ``n`` events followed by as much of the recording's
    (after the event's end, building it): each event's share is its stamp minus the previous one.
    Interleaved, both kinds see the same load and the same per-event cost of the recorder. Also
    the CPU time of ``n - 1`` such pieces of work measured just before, with nothing recording
    (the calibration of ``_busy`` is off by up to a quarter between runs on this VM)."""
    _spins_per_us()                          # calibrated before, not inside, the measurement
    with no_cyclic_gc():
        t = time.thread_time_ns()
        for _ in range(n - 1):
            _busy(work_ns)
        work = time.thread_time_ns() - t
    with no_cyclic_gc(), ev.Collector() as c:
        for k in range(2 * n):
            building = k % 2 == 1
            if not building:
                _busy(work_ns)
            t = ev.now()
            if building:
                _busy(work_ns)
            ev.emit(ev.OpAccumulated(t, t, "host", ev.recorder.step, op="aten::mul" if building else "aten::add"))
    cpu = {"aten::add": 0, "aten::mul": 0}
    for a, b in zip(c.events, c.events[1:]):
        cpu[b.op] += b.cpu_ns - a.cpu_ns
    return cpu["aten::add"], cpu["aten::mul"], work


def test_building_an_event_is_not_the_users_host_time():
    """What happens between an event's end and its emission is the recording's bookkeeping (on a
    live panel one event per op is built): like an observer's time it stays off the host lane."""
    # 3000 of each: the stamps take the wall time since the last one as CPU when it is under 1 ms
    # (a thread-clock reading costs a system call), so a preemption shorter than that (0.75 ms, a
    # slice of this 6.18 kernel's scheduler) is counted on one event and taken back from the next
    # ones, whatever their kind. With 300 of each, pinned to a core beside two busy processes, that
    # moved 0.4-0.7 ms of the 2.4 ms of work between the kinds (2 runs of 4 failed: user 1.74 ms);
    # ten times the events, ten times the work, the same few such preemptions.
    # the work measured, not 2999 x 8 us nominal: the recorder's own cost per event (~2.5 us in
    # session 8, counted on both kinds) no longer pads the user's kind (0.5 us now, the observers'),
    # and runs whose calibration was off left user at 14.6 ms against a nominal 0.6 x 24 ms
    user, bookkeeping, work = _host_cpu_where_the_work_is(n=3000)
    assert user >= 0.6 * work, user
    # Both kinds also carry the recording's own per-event cost (now(), emit, and a thread-clock and
    # run-queue reading at an emit 1 ms of wall time after the last): 1.1-1.5 us an event here (load
    # 1-10), ~9 us once at load ~12, where a ratio of two runs made one after the other,
    # `bookkeeping < 0.4 * user`, failed (2686430 < 0.4 * 5166932: 300 x 9 us against 300 x (8 + 9)
    # us). That cost cancels in the difference, which is the busy work the stamps left out; counted
    # as the user's, the difference would be ~0.
    assert user - bookkeeping >= 0.6 * work, (bookkeeping, user)


def test_events_are_the_dataclasses_they_declare():
    """The faster __init__ (events._record) takes the dataclass's own signature and gives the
    same fields, equality, hash, repr and immutability."""
    import dataclasses
    import inspect
    for cls in [ev.Event, *ev.Event.__subclasses__()]:
        params = inspect.signature(cls).parameters
        fields = dataclasses.fields(cls)
        assert [p for p in params] == [f.name for f in fields if not f.kw_only] + [f.name for f in fields if f.kw_only]
        for f in fields:
            p = params[f.name]
            assert (p.kind is inspect.Parameter.KEYWORD_ONLY) == f.kw_only, (cls, f.name)
            assert p.default is (inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
    a = ev.HostToDevice(1, 2, "host", 3, 64, src="x.py:1", pinned=True)
    b = ev.HostToDevice(1, 2, "host", 3, nbytes=64, src="x.py:1", pinned=True, cpu_ns=5)
    assert a == b and hash(a) == hash(b) and a.cpu_ns == -1 and b.cpu_ns == 5 and a.stream == -1
    assert repr(a).startswith("HostToDevice(t_start=1, t_end=2, lane='host', step=3, nbytes=64,")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.nbytes = 1
    with pytest.raises(TypeError):
        ev.MarkStep(1, 2, "host")                      # step is required
    # what the dataclass's own __init__ refuses is refused, with its message
    for call in (lambda: ev.MarkStep(1, 2, "host", 0, colour="red"),
                 lambda: ev.MarkStep(1, 2, "host", 0, "x.py:1", src="y.py:2"),
                 lambda: ev.MarkStep(1, 2, "host", 0, "x.py:1", 3, 4),
                 lambda: ev.MarkStep(1, 2, "host", 0, 7, cpu_ns=1, blocked_ns=2, t_end=3)):
        with pytest.raises(TypeError, match="argument"):
            call()
    assert ev.MarkStep(1, 2, "host", 0, "x.py:1", 3) == ev.MarkStep(1, 2, "host", 0, src="x.py:1", pending_nodes=3)
    assert list(vars(ev.MarkStep(1, 2, "host", 0, pending_nodes=3))) == [f.name for f in dataclasses.fields(ev.MarkStep)]
    assert dataclasses.replace(a, nbytes=8).nbytes == 8 and dataclasses.asdict(a)["pinned"] is True


def _run(step, n):
    for _ in range(n):
        step()                       # the source line of every op of the step
    torch.hpu.synchronize()


def _facts(events):
    return [(type(e).__name__, getattr(e, "op", ""), e.src)
            for e in events if type(e) in (ev.OpAccumulated, ev.GraphBuilt, ev.MarkStep)]


def test_op_events_come_in_runs_with_the_same_facts_and_order(step, monkeypatch):
    """Op events are stamped as tuples and handed over in runs (events.op_accumulated): an
    observer taking runs and one taking single events see the same events in the same order, one
    per op the pending graph really took, before the events that follow them."""
    singles, runs = [], []
    with ev.subscribe(singles.append), ev.Collector() as c:
        h = ev.subscribe(runs.append, many=lambda es: runs.append(list(es)))
        _run(step, 3)
        h.remove()
    assert singles == c.events and all(a is b for a, b in zip(singles, c.events))
    flat = [e for r in runs for e in (r if isinstance(r, list) else [r])]
    assert len(flat) == len(singles) and all(a is b for a, b in zip(flat, singles))
    # most op events came in runs (one call for many ops), not one call each
    in_runs = sum(len(r) for r in runs if isinstance(r, list))
    ops = [e for e in singles if type(e) is ev.OpAccumulated]
    assert in_runs >= len(ops) // 2 and max(len(r) for r in runs if isinstance(r, list)) > 5
    # the same events as one emit per op (the path taken when the thread clock is due): kinds,
    # ops and source lines in the same order, step by step
    assert len([e for e in singles if type(e) is ev.MarkStep]) == 6   # two mark_steps a step
    facts = _facts(singles)
    each = facts[:len(facts) // 3]
    assert facts == each * 3 and sum(f[0] == "OpAccumulated" for f in each) > 40
    monkeypatch.setattr(ev, "CPU_READ_NS", 0)
    with ev.Collector() as one_by_one:
        _run(step, 1)
    assert _facts(one_by_one.events) == each
    # every op names its op and the user's line; host stamps never go back in list order
    assert all(e.op.startswith("aten::") and e.src and e.cpu_ns >= 0 and e.blocked_ns >= 0 for e in ops)
    host = [e for e in singles if e.lane == "host"]
    assert all(a.cpu_ns <= b.cpu_ns and a.blocked_ns <= b.blocked_ns for a, b in zip(host, host[1:]))
    assert all(a.t_end <= b.t_end for a, b in zip(host, host[1:]))


def test_op_events_are_there_when_read_and_muted_ops_reach_nobody():
    """A Collector read before any other event has the ops so far; ops traced under muted() (what
    perfmodel.estimate does) are never handed over, not even later."""
    x = torch.randn(4, 4).to("hpu")
    torch.hpu.synchronize()
    with ev.Collector() as c:
        y = (x + 1) * 2
        assert [e.op for e in c.events] == ["aten::add", "aten::mul"]
        with ev.recorder.muted():
            z = y.relu()
        w = y - 1
        assert [e.op for e in c.of(ev.OpAccumulated)] == ["aten::add", "aten::mul", "aten::sub"]
        torch.hpu.synchronize()
    del z, w
    assert [type(e) for e in c.events[:3]] == [ev.OpAccumulated] * 3 and type(c.events[3]) is not ev.OpAccumulated
    late = ev.Collector().start()
    ev.flush()
    late.stop()
    assert not late.events                     # nothing stamped before it subscribed


def test_an_event_from_another_thread_waits_for_the_run_being_handed_over(monkeypatch):
    """The thread that hands a run of op events over may not be the one that stamped them (any
    emit hands them over first: the device thread's too). An event another thread emits meanwhile
    reaches observers after the run, never inside or before it."""
    import threading
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**15)       # no thread-clock reading due: ops go in runs
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**15)
    seen, others = [], []

    def take_run(es):
        other = threading.Thread(target=lambda: ev.emit(ev.DeviceExecution(0, 0, "hpu:0", 0, launch_id=-7)))
        other.start()
        others.append(other)
        other.join(0.2)                        # it waits for this run to be handed over
        seen.append([e.op for e in es])

    h = ev.subscribe(seen.append, many=take_run)
    try:
        for i in range(5):
            ev.op_accumulated(f"aten::op{i}", "x.py:1")
        ev.flush()
        for t in others:
            t.join(5)
    finally:
        h.remove()
    ops = [o for x in seen for o in (x if isinstance(x, list) else [getattr(x, "op", None)]) if o]
    assert ops == [f"aten::op{i}" for i in range(5)]
    run = max(i for i, x in enumerate(seen) if isinstance(x, list))
    late = [i for i, x in enumerate(seen) if isinstance(x, ev.DeviceExecution) and x.launch_id == -7]
    assert len(late) == len(others) >= 1 and late[0] > run


def test_handing_over_a_run_of_op_events_is_the_observers_time():
    """Op events are handed to observers in runs, at the next event; an observer's work on the run
    (here 200 us an op, a live view) must be charged to the observers, like its work on any event,
    not to the user's host time stamped on the event that brought the run."""
    def heavy(e):
        t = time.thread_time_ns()
        while time.thread_time_ns() - t < 200_000:
            pass
    _spins_per_us()                          # calibrated before, not inside, the recording

    def work():             # the user's work, its CPU time measured (the calibration may be off
        t = time.thread_time_ns()           # under load: 0.6 of the nominal 51 x 8 us failed on CI)
        _busy(8_000)
        busy[0] += time.thread_time_ns() - t
    for _ in range(5):      # a gap (the thread descheduled under load) emits an op alone: try again
        busy = [0]
        with ev.Collector() as c, ev.recorder.subscribe(heavy, kinds=[ev.OpAccumulated]):
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
            for _ in range(50):
                work()
                ev.op_accumulated("aten::add", "")
            # kept in the run: the plain stamps, and the ops a thread-clock reading fell due on
            kept = len(ev.recorder._ops) // ev.OP_FIELDS + len(ev.recorder._ready) // ev.READY_FIELDS
            work()
            t = ev.now()
            ev.emit(ev.MarkStep(t, t, "host", ev.recorder.step))
        if kept == 50:
            break
    assert kept == 50                        # the run path was taken (else this test tests nothing)
    marks = [e for e in c.events if isinstance(e, ev.MarkStep)]
    assert sum(isinstance(e, ev.OpAccumulated) for e in c.events) == 50
    user = marks[-1].cpu_ns - marks[0].cpu_ns
    assert 0.6 * busy[0] <= user < 50 * 200_000 / 5, (user, busy[0])   # the observers' 10 ms stay out


def test_a_log_builds_no_op_event_until_read(step):
    """A Collector (an EventLog) keeps each run of op events as the run itself: no OpAccumulated is
    built while the loop runs, and reading the list builds them in place, the same facts in the
    same order as an observer that takes every event one by one."""
    with ev.Collector() as c:
        _run(step, 2)
        ev.flush()
        kept = list(c.log.items)
        runs = [x for x in kept if type(x) is ev.OpRun]
        assert sum(len(r) for r in runs) > 80 and all(r._made is None for r in runs)
        # the few ops emitted one by one (the first on autograd's thread after a pause) are events
        assert sum(type(x) is ev.OpAccumulated for x in kept) < sum(len(r) for r in runs) // 4
        events = c.events
    assert not [x for x in events if type(x) is ev.OpRun] and events is c.log.items
    assert len(events) == len(kept) - len(runs) + sum(len(r) for r in runs)
    with ev.subscribe(lambda e: None):           # a one-by-one observer: the runs are built at once
        with ev.Collector() as again:
            _run(step, 2)
    assert _facts(events) == _facts(again.events)
    host = [e for e in events if e.lane == "host"]
    assert all(a.cpu_ns <= b.cpu_ns and a.t_end <= b.t_end for a, b in zip(host, host[1:]))


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's cyclic garbage collector")
def test_an_op_stamp_is_no_object_until_read(monkeypatch):
    """op_accumulated's common case keeps an op as six list items: no object the garbage collector
    counts (which would bring on collections the unobserved loop never has), constant work an op."""
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**15)       # no thread-clock reading due: ops go in runs
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**15)
    with ev.Collector() as c:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))   # this thread stamped last
        gc.disable()
        try:
            before = len(gc.get_objects())
            for i in range(3000):
                ev.op_accumulated("aten::add", f"x.py:{i % 7}")
            after = len(gc.get_objects())
        finally:
            gc.enable()
        assert len(ev.recorder._ops) == 3000 * ev.OP_FIELDS and after - before < 10
    ops = c.of(ev.OpAccumulated)
    assert [e.src for e in ops] == [f"x.py:{i % 7}" for i in range(3000)]
    assert all(a.cpu_ns <= b.cpu_ns and a.t_end < b.t_end for a, b in zip(ops, ops[1:]))


def test_a_log_cleared_after_a_read_builds_the_runs_that_come_after(monkeypatch):
    """``c.events.clear()`` (what tests do between phases) empties the list the log reads in place;
    the runs added afterwards are still built when read (the log remembered how far it had read)."""
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**15)       # ops (and the MarkSteps) go in runs
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**15)
    with ev.Collector() as c:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        for _ in range(30):
            ev.op_accumulated("aten::add", "x.py:1")
        assert len(c.of(ev.OpAccumulated)) == 30
        c.events.clear()
        for _ in range(3):
            ev.op_accumulated("aten::mul", "x.py:2")
        assert [e.op for e in c.of(ev.OpAccumulated)] == ["aten::mul"] * 3
        del c.events[:]
        for _ in range(40):
            ev.op_accumulated("aten::sub", "x.py:3")
        assert [e.op for e in c.events] == ["aten::sub"] * 40


def test_an_op_due_for_a_thread_clock_reading_stays_in_the_run(monkeypatch):
    """When the thread clock falls due on an op (every CPU_READ_NS, 2 ms: ~3 a training step), the op is stamped
    with an exact reading and kept in the run, not built and handed over alone."""
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**15)
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**15)
    singles, runs = [], []
    h = ev.subscribe(singles.append, runs=runs.append)
    try:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        clock = ev.recorder._tls.clock
        reads = []
        monkeypatch.setattr(ev, "thread_cpu", lambda: reads.append(1) or time.thread_time_ns())
        for i in range(20):
            clock.read_at = -10**15                    # due on every op
            ev.recorder._run_until = ev.recorder._run_due = 1
            ev.op_accumulated("aten::mul", "x.py:1")
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
    finally:
        h.remove()
    assert len(reads) >= 20                            # each op read the thread clock ...
    assert singles == []                               # ... and none came alone (nor did the
    ops = [e for r in runs for e in r.events()]         # MarkSteps: they went into the run, emit)
    first, ops, last = ops[0], ops[1:21], ops[21:]
    assert [type(e) for e in (first, *last)] == [ev.MarkStep, ev.MarkStep]
    assert [e.op for e in ops] == ["aten::mul"] * 20
    assert first.cpu_ns <= ops[0].cpu_ns and all(a.cpu_ns <= b.cpu_ns for a, b in zip(ops, ops[1:]))
    assert ops[-1].cpu_ns <= last[0].cpu_ns


def test_an_op_due_in_its_own_run_takes_its_reading_without_settling_the_run(monkeypatch):
    """A due on an op of the thread whose run is open (~3 a 6 ms training step) reads the clock
    and keeps the op in the run with the reading beside it: no settle, lock-and-segment work or
    reopening on the loop's path (~55 us a due before, in place). The reading is applied when the
    run is settled, in order: ops slept between were credited their wall time, and the reading
    finds that the credit ran ahead (the sleeps), owed from then on, as when the due settled."""
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**15)
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**15)      # the sleeps are no gap: credited by wall
    settles = []
    settle = ev.Recorder._settle
    monkeypatch.setattr(ev.Recorder, "_settle", lambda self: settles.append(1) or settle(self))
    runs = []
    h = ev.subscribe(lambda e: None, runs=runs.append)
    try:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        rec, clock = ev.recorder, ev.recorder._tls.clock
        for _ in range(5):
            time.sleep(0.002)
            ev.op_accumulated("aten::add", "x.py:1")
        clock.read_at = -10**15                          # the clock due on the next op
        rec._run_until = rec._run_due = 1
        before = len(settles)
        ev.op_accumulated("aten::mul", "x.py:2")
        assert len(settles) == before and len(rec._reads) == 5     # (one reading, flat): no settle on the loop's path
        assert clock.read_at > 0 and rec._run_until > rec._run_due - ev.CPU_READ_NS
        ev.op_accumulated("aten::add", "x.py:3")         # still in the run
        ev.flush()
        assert rec._reads == []
        debt = clock.debt
    finally:
        h.remove()
    ops = [e for r in runs for e in r.events() if type(e) is ev.OpAccumulated]
    assert [e.src for e in ops] == ["x.py:1"] * 5 + ["x.py:2", "x.py:3"]
    assert all(a.cpu_ns <= b.cpu_ns for a, b in zip(ops, ops[1:]))
    # the reading took back what the wall-time credit ran ahead: ~10 ms slept
    assert ops[5].cpu_ns == ops[4].cpu_ns and debt >= 8_000_000, debt


def test_an_event_past_the_runs_gap_bound_but_close_to_the_latest_stamp_goes_into_the_run(monkeypatch):
    """The run's gap bound (_run_until) is set from the stamp that opened it; an op past it but
    less than a gap after the latest stamp stays in the run (op_accumulated), and so does a host
    event (a GraphBuilt ~1 ms of tracing after the run opened: ~0.6 a training step went emit's
    whole way, a settle and a segment, ~40 us each)."""
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**15)
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**15)
    calls = []
    for name in ("_emit_short", "_settle"):
        f = getattr(ev.Recorder, name)
        monkeypatch.setattr(ev.Recorder, name, lambda self, *a, _f=f, _n=name, **k: calls.append(_n) or _f(self, *a, **k))
    runs = []
    h = ev.subscribe(lambda e: None, runs=runs.append)
    try:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        ev.op_accumulated("aten::add", "x.py:1")
        rec = ev.recorder
        rec._run_until = 1                               # the gap bound passed; the clock is not due
        del calls[:]
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", rec.step))
        assert calls == []                               # into the run: no settle, no short path
        ev.op_accumulated("aten::mul", "x.py:2")
        ev.flush()
    finally:
        h.remove()
    got = [e for r in runs for e in r.events()]
    assert [type(e).__name__ for e in got] == ["MarkStep", "OpAccumulated", "MarkStep", "OpAccumulated"]
    assert all(a.cpu_ns <= b.cpu_ns for a, b in zip(got, got[1:]))


def test_an_exact_reading_after_a_long_observer_is_the_next_stamps_reading(monkeypatch):
    """An emit whose bookkeeping took long (>= OBSERVER_EXACT_NS) reads the thread clock to charge
    it to the observers; the clock is then exact, and the next stamp does not read it again. It
    used to: on a VM where a due's own bookkeeping takes 20-130 us, every due then made the next
    stamp due too (16 dues in a 6 ms training step, now ~8). Every emit here is long."""
    monkeypatch.setattr(ev, "OBSERVER_EXACT_NS", 0)
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**12)        # no reading due by time (1000 s) ...
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**12)     # ... no baseline due, no gap
    seen = []
    h = ev.subscribe(seen.append)                        # one by one: every emit reaches the observers
    try:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        reads = []
        monkeypatch.setattr(ev, "thread_cpu", lambda: reads.append(1) or time.thread_time_ns())
        for _ in range(50):
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
    finally:
        h.remove()
    assert len(seen) == 51
    assert len(reads) <= 52, len(reads)                 # one reading an emit (was: two)
    assert all(a.cpu_ns <= b.cpu_ns for a, b in zip(seen, seen[1:]))


def test_a_stamp_reads_the_thread_clock_when_the_run_queue_baseline_is_due():
    """The run-queue baseline and the thread clock fall due together: a stamp that finds the
    baseline due while the clock is not (the clock read just before: a long emit) takes one
    reading for both, so that the op run is closed once a reading period for both."""
    with ev.Collector():
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        clock = ev.recorder._tls.clock
        for _ in range(3):
            clock.runq_at -= 2 * ev.CPU_READ_NS          # the baseline is due, the clock is not
            ev.recorder._run_until = 0                   # (the run would have closed then)
            before = clock.read_at = ev.now()
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
            assert clock.read_at >= clock.runq_at > before     # (later: a long emit read again)
            ev.op_accumulated("aten::mul", "x.py:1")
            clock.runq_at -= 2 * ev.CPU_READ_NS
            ev.recorder._run_until = 0
            before = clock.read_at = ev.now()
            ev.op_accumulated("aten::mul", "x.py:1")     # an op finding it due (_op_due)
            assert clock.read_at >= clock.runq_at > before


def test_the_op_run_goes_on_while_its_ops_are_less_than_a_gap_apart(monkeypatch):
    """The op run is bounded one gap (BLOCKED_MIN_NS) after its latest stamp, not after the stamp
    that opened it: ops closer together than that stay in the run until the thread clock is due
    (every CPU_READ_NS), with no due of their own; an op after a longer pause is no part of it (the
    pause is measured: a sleep is blocked time)."""
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**12)        # no reading due by time
    dues = []
    op_due = ev.recorder._op_due
    monkeypatch.setattr(ev.recorder, "_op_due", lambda *a: dues.append(1) or op_due(*a))
    with ev.Collector() as c:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        for i in range(40):                             # 40 ops ~150 us apart: 6 ms, six gap bounds
            _busy(150_000)
            ev.op_accumulated("aten::mul", "x.py:1")
        assert len(dues) <= 2, len(dues)                # (was: one a millisecond; under load a
        time.sleep(0.005)                               # preemption may make a gap)
        ev.op_accumulated("aten::add", "x.py:2")
    ops = c.of(ev.OpAccumulated)
    assert [e.op for e in ops] == ["aten::mul"] * 40 + ["aten::add"]
    assert ops[-1].blocked_ns - ops[-2].blocked_ns > 2_000_000     # the sleep, blocked
    assert all(a.cpu_ns <= b.cpu_ns for a, b in zip(ops, ops[1:]))


def test_a_thread_without_user_code_brings_no_cpu_from_before_the_recording():
    """A thread Python did not start (autograd's, which runs backward) stamps only while its events
    are observed; the CPU it spent between two recordings is not the new recording's host time
    (its first stamp there used to take it all: 3.5-13 ms of unrecorded backward work)."""
    done = threading.Event()
    go = [threading.Event() for _ in range(3)]

    def engine():                            # started by _thread: a _DummyThread, like autograd's
        try:
            go[0].wait()
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))   # its clock starts
            go[1].set()
            go[2].wait()
            t = time.thread_time_ns()
            while not done.is_set() and time.thread_time_ns() - t < 40_000_000:
                pass                          # 40 ms of CPU nobody records
            go[0].clear()
            done.set()
            go[0].wait()
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        finally:
            go[1].set()
    _thread.start_new_thread(engine, ())
    with ev.Collector():
        go[0].set()
        go[1].wait(10)
    go[1].clear()
    go[2].set()
    assert done.wait(10)                      # between the recordings
    with ev.Collector() as c:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        go[0].set()
        assert go[1].wait(10)
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
    marks = c.of(ev.MarkStep)
    assert len(marks) == 3
    assert marks[-1].cpu_ns - marks[0].cpu_ns < 10_000_000, marks   # not the engine's 40 ms


def test_an_observer_joining_a_recording_keeps_the_cpu_of_a_thread_without_user_code():
    """While a recording takes op events, a thread Python did not start (autograd's) stamps its ops,
    so its clock is up to date: an observer subscribing then (a live panel waking up to redraw, in
    the middle of a backward pass) does not restart it, and the CPU it spent since its last stamp
    stays host time (a restart dropped it)."""
    go = [threading.Event() for _ in range(4)]

    def engine():                            # started by _thread: a _DummyThread, like autograd's
        try:
            go[0].wait()
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
            t = time.thread_time_ns()
            while time.thread_time_ns() - t < 20_000_000:
                pass                          # 20 ms of backward work, not yet stamped
            go[1].set()
            go[2].wait()
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        finally:
            go[1].set()
            go[3].set()
    _thread.start_new_thread(engine, ())
    with ev.Collector() as c:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
        go[0].set()
        assert go[1].wait(10)
        ev.subscribe(lambda e: None, [ev.Compile]).remove()    # an observer joins, and goes
        go[2].set()
        assert go[3].wait(10)
    marks = c.of(ev.MarkStep)
    assert len(marks) == 3
    assert marks[2].cpu_ns - marks[1].cpu_ns >= 15_000_000, marks   # the engine's 20 ms


def _count_clock_readings(monkeypatch):
    """Counts the recorder's thread-clock and run-queue readings (its system calls), per kind."""
    calls = {"thread_cpu": 0, "runq": 0}
    thread_cpu, pread = ev.thread_cpu, ev._pread_holding_gil

    def counted_cpu():
        calls["thread_cpu"] += 1
        return thread_cpu()

    def counted_pread(fd):
        calls["runq"] += 1
        return pread(fd)
    monkeypatch.setattr(ev, "thread_cpu", counted_cpu)
    monkeypatch.setattr(ev, "_pread_holding_gil", counted_pread)
    return calls


def test_counters_alone_keep_no_host_clock(step, monkeypatch):
    """The global metrics count MarkStep, Launch, CacheLookup... in every program: observers that
    read no stamps (subscribe(stamps=False)). With only them listening the recorder reads no
    clock (it read the thread clock ~8 times and the run-queue delay ~5 times a step: ~3% of the
    plain seed loop); with a recording they get the same stamped objects as the recording."""
    from hpu_lab import metrics
    assert not ev.recorder._listening, "a recording left subscribed by an earlier test"
    calls = _count_clock_readings(monkeypatch)
    seen = []
    h = ev.subscribe(seen.append, (ev.MarkStep, ev.Launch), stamps=False)
    try:
        marks = metrics.metric_global("mark_step").stats()[0][1]
        _run(step, 3)
        assert metrics.metric_global("mark_step").stats()[0][1] == marks + 6
        assert calls == {"thread_cpu": 0, "runq": 0}
        assert len(seen) == 12 and all(e.cpu_ns == -1 and e.blocked_ns == -1 for e in seen)
        seen.clear()
        with ev.Collector() as c:
            _run(step, 2)
        assert calls["thread_cpu"] > 0
    finally:
        h.remove()
    recorded = [e for e in c.events if type(e) in (ev.MarkStep, ev.Launch)]
    assert len(seen) == 8 and all(a is b for a, b in zip(seen, recorded)) and seen[0].cpu_ns >= 0


def test_a_recording_after_an_unrecorded_stretch_starts_its_host_clock_there():
    """Nothing is stamped between two recordings (counters only): the next recording's host clock
    starts when it subscribes, not at the thread's last stamp of the previous one (its first stamp
    would take the CPU burnt and the time slept in between)."""
    with ev.Collector():
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
    cpu, blocked = ev.recorder._host.cpu, ev.recorder._host.blocked
    _busy(30_000_000)
    time.sleep(0.03)
    with ev.Collector() as c:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
    first = c.events[0]
    assert first.cpu_ns - cpu < 10_000_000 and first.blocked_ns == blocked, (first, cpu, blocked)


@pytest.mark.parametrize("off_cpu_per_ms", [0, 300_000])
def test_the_run_queue_baseline_is_read_again_only_after_time_off_the_cpu(monkeypatch, off_cpu_per_ms):
    """The run-queue delay (a /proc read, ~5 us) is the baseline a gap of >= 1 ms subtracts from its
    off-CPU time; it is kept within CPU_READ_NS (2 ms) of every stamp. A thread that was not off the CPU since
    the last read (its thread clock kept up with the wall clock) cannot have waited for a core:
    the baseline still holds, and is not read again. The thread clock is faked (a thread on the
    CPU all the time, or off it 30% of the time) so that the counts do not depend on the load."""
    _spins_per_us()                               # calibrated before the clock is faked
    t0 = time.perf_counter_ns()
    monkeypatch.setattr(ev, "thread_cpu", lambda: (time.perf_counter_ns() - t0) * (1_000_000 - off_cpu_per_ms) // 1_000_000)
    reads = []
    pread = ev._pread_holding_gil

    def counted(fd):                              # the baseline's reads (a gap's end reads its own:
        if sys._getframe(2).f_code.co_name == "renew_runq":   # a loaded machine makes gaps)
            reads.append(1)
        return pread(fd)
    monkeypatch.setattr(ev, "_pread_holding_gil", counted)
    with ev.Collector() as c:
        for _ in range(200):                      # >= 20 ms of host events ~100 us apart, no gap
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
            _busy(100_000)
    assert len(c.events) == 200
    if off_cpu_per_ms:
        assert len(reads) >= 5                    # due every CPU_READ_NS (2 ms): ~10 in ~20 ms
    else:
        assert len(reads) <= 3, len(reads)        # the first baseline, then none (was: ~20)


def test_a_thread_often_off_the_cpu_reads_the_baseline_about_every_other_reading(monkeypatch):
    """A training step's user thread is off the CPU ~350 us of every 2 ms (waiting for the
    interpreter lock the device thread holds). It then waited for a core at most that long, so the
    baseline holds until RUNQ_SLACK_NS (500 us) of such time has piled up: with 100 us of it a
    millisecond (faked clock), about one baseline read every three readings, not one at each
    (at a 100 us slack, as before session 13, every reading read it: 2.8 reads a step, ~21 us
    each)."""
    _spins_per_us()
    t0 = time.perf_counter_ns()
    monkeypatch.setattr(ev, "thread_cpu", lambda: (time.perf_counter_ns() - t0) * 9 // 10)
    reads = []
    pread = ev._pread_holding_gil

    def counted(fd):
        if sys._getframe(2).f_code.co_name == "renew_runq":
            reads.append(1)
        return pread(fd)
    monkeypatch.setattr(ev, "_pread_holding_gil", counted)
    with ev.Collector() as c:
        w0 = time.perf_counter_ns()
        for _ in range(300):                      # >= 30 ms of host events ~100 us apart, no gap
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
            _busy(100_000)
    due = (time.perf_counter_ns() - w0) // ev.CPU_READ_NS      # readings due over the loop
    assert len(c.events) == 300 and due >= 10
    assert len(reads) <= due // 2 + 1, (len(reads), due)


def test_time_spent_waiting_for_a_helper_thread_does_not_spend_the_baselines_slack():
    """The user's thread blocked in backward() while autograd's thread ran it was off the CPU, but in
    no run queue: that wait (``waited``: from its last stamp to the helper's last) is not counted
    against RUNQ_SLACK_NS. Before, the thread switch back read the baseline at every step (~10 us
    in place). Time off the CPU beyond it still is."""
    clock = ev._ThreadClock(0)
    assert clock.runs_user_code
    ms = 1_000_000
    clock.runq_mark = (0, 0)
    assert not clock.renew_runq((3 * ms, 2 * ms // 10), waited=2_600_000)   # 2.8 ms off, 2.6 waited
    clock.runq_mark = (0, 0)
    assert clock.renew_runq((3 * ms, 2 * ms // 10), waited=2 * ms)           # 0.8 ms off beside it
    clock.runq_mark = (0, 0)
    assert clock.renew_runq((3 * ms, 2 * ms // 10))                          # nothing waited
    clock.runq_mark = (0, 0)
    assert clock.renew_runq((3 * ms, 4 * ms), waited=2 * ms)                 # more CPU than wall: read


def test_a_thread_without_user_code_reads_its_baseline_at_most_every_helper_period(step, monkeypatch):
    """Autograd's thread is idle between backward passes, so the slack was always spent at the first
    op of a pass and its baseline read at every pass (~10 us a training step in place). Its
    baseline only serves a gap of the user's thread that ends while it stamped last: it is read at
    most every RUNQ_HELPER_NS instead. Counted over a loop of ~10 backward passes a period."""
    reads = []
    real = ev._ThreadClock._runq

    def counted(self):
        if not self.runs_user_code and sys._getframe(1).f_code.co_name == "renew_runq":
            reads.append(time.perf_counter_ns())
        return real(self)
    monkeypatch.setattr(ev._ThreadClock, "_runq", counted)
    monkeypatch.setattr(ev, "RUNQ_HELPER_NS", 10**15)       # (a loaded machine stretches the loop)
    with ev.Collector() as c:
        _run(step, 12)
    passes = sum(1 for e in c.events if type(e) is ev.OpAccumulated and e.src == "<backward>"
                 and e.op.startswith("aten::"))
    assert passes >= 12 and len(reads) <= 1, (passes, len(reads))


def test_both_ends_of_a_backward_pass_stay_in_the_run(step, monkeypatch):
    """The first op of each backward pass (autograd's thread, while the user's waits), and the
    user's first event back from it (no gap), are kept in the run with a thread-clock reading
    beside them, as a due's: the stamps before them are settled later, with them, in order. They
    took _op_due's and emit's whole ways before (35-60 and ~30 us in place: a settle, locked
    sections, a segment, the run reopened). The host lane is unchanged: test_perfmodel_host_time
    compares it with the two threads' CPU."""
    main = threading.main_thread()
    settles, switches = [], []
    real_settle, real_switch = ev.Recorder._settle, ev.Recorder._switch_in_run

    def settle(self):
        settles.append(threading.current_thread())
        real_settle(self)

    def switch(self, *a):
        switches.append(threading.current_thread())
        real_switch(self, *a)
    monkeypatch.setattr(ev.Recorder, "_settle", settle)
    monkeypatch.setattr(ev.Recorder, "_switch_in_run", switch)
    # no gap, as on an idle machine: under load a thread descheduled for over BLOCKED_MIN_NS at
    # either end of a pass has its gap measured instead (emit's whole way), which is right there,
    # and the switches counted fewer (a CPU burner beside the test: 4 of 6, in 6-9 of 15 runs)
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**12)
    with ev.Collector() as c:
        _run(step, 6)
    into, back = [t for t in switches if t is not main], [t for t in switches if t is main]
    assert len(into) >= 5 and len(back) >= 5, switches
    assert len([t for t in settles if t is not main]) <= 1, settles      # was: one a pass
    backward = [e for e in c.events if type(e) is ev.OpAccumulated and e.src == "<backward>"]
    assert backward and all(e.cpu_ns >= 0 for e in backward)
    cpu = [e.cpu_ns for e in c.events if e.lane == "host"]
    assert cpu == sorted(cpu)                    # the host clock only grows, in the stream's order


def test_a_stamp_that_read_the_clock_is_not_read_again_after_short_observers(monkeypatch):
    """A due (a stamp that reads the thread clock) knows the user's CPU there; the observers' work
    after it (here ~50 us: past OBSERVER_EXACT_NS) is charged its wall time, as after a stamp that
    read none, without a second reading (before session 13: two readings a due, ~4 a step). The
    user's CPU between the stamps still leaves the observers' time out."""
    _spins_per_us()
    t0, cpu0 = time.perf_counter_ns(), time.thread_time_ns()
    calls = []

    def clock():                                  # a thread on the CPU all the time (from its CPU
        calls.append(sys._getframe(1).f_code.co_name)   # now: a recording starts from the real one)
        return cpu0 + time.perf_counter_ns() - t0
    monkeypatch.setattr(ev, "thread_cpu", clock)
    monkeypatch.setattr(ev, "CPU_READ_NS", 0)     # every stamp reads the clock
    cpu, user = [], []
    h = ev.subscribe(lambda e: (cpu.append(e.cpu_ns), _busy(50_000)), kinds=[ev.MarkStep])
    try:
        for _ in range(20):
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", ev.recorder.step))
            w = time.perf_counter_ns()
            _busy(200_000)
            user.append(time.perf_counter_ns() - w)
    finally:
        h.remove()
    in_emit = [f for f in calls if f in ("_stamp_user", "_after_observers")]    # the stamp's, the observers'
    assert in_emit.count("_stamp_user") >= 20 and in_emit.count("_after_observers") <= 1, in_emit
    # the user's ~200 us a step (the faked clock is wall time: a busy machine stretches it, and
    # the user's busy loop is timed), the observer's ~50 us left out
    credited, worked = cpu[-1] - cpu[1], sum(user[1:-1])
    assert 0.9 * worked <= credited <= worked + 18 * 30_000, (credited, worked)


def test_the_first_op_of_a_backward_pass_stays_in_the_run(step):
    """Autograd's thread runs backward; its first op of each pass (another thread stamped last,
    its clock a step old) used to be built and handed to every observer alone, through emit's full
    path, on the loop's wall time while the user's thread waits for it. Its gaps are never
    measured, so it is stamped with an exact reading and kept in the run like the others."""
    with ev.Collector():
        _run(step, 1)                        # autograd's thread has a clock (made at its first stamp)
    main = threading.get_ident()
    singles, runs = [], []
    h = ev.subscribe(lambda e: singles.append((threading.get_ident(), e)), runs=runs.append)
    try:
        _run(step, 3)
    finally:
        h.remove()
    alone = [e for tid, e in singles if tid != main and type(e) is ev.OpAccumulated]
    assert not alone, [e.op for e in alone]
    ops = [e for r in runs for e in r.events() if e.lane == "host"]     # (device events go into runs too)
    assert len(ops) >= 3 * 40 and all(a.cpu_ns <= b.cpu_ns for a, b in zip(ops, ops[1:]))


def test_a_settle_sums_a_run_in_c_and_moves_no_stamp():
    """Settling one thread's stamps sums the run's t - prev in two C calls (sum over two slices), not
    stamp by stamp (touching each cost ~20 us a settle in a training step), and leaves the stamps
    where they are until the hand-over takes them. A device event added mid-run (t == prev, emit)
    changes no sum. The host clock and the thread's counters come out as a stamp-by-stamp sum gives
    them. (Until session 19 each stamp carried a running sum, read at the range's ends: an int an op
    on the loop's path, where this sum costs the settle ~1 us.)"""
    r = ev.Recorder()
    seen = []
    r.subscribe(lambda e: None, runs=seen.append)
    clock = ev._ThreadClock(time.thread_time_ns())
    clock.open_t, base = 100, clock.last_user
    ops, stamps, prev = [], [], 150
    for i in range(50):
        t = prev + 7 + i % 5                      # the user's time since the previous stamp's end
        stamp = (t, "aten::add", "x.py:1", 0, prev, clock)
        ops.append(stamp)
        stamps += stamp
        if i == 20:                               # as emit puts a DeviceExecution in
            stamps += (t, ev.DeviceExecution(0, 1, "hpu:0", 0), "", 0, t, clock)
        prev = t + 3                              # its own bookkeeping: the observers'
    assert len(stamps) == 51 * ev.OP_FIELDS
    r._ops += stamps
    with r._host.lock:
        r._settle()
    user = sum(t - p for t, _o, _s, _st, p, _c in ops)
    observers = (ops[0][4] - 100) + sum(b[4] - a[0] for a, b in zip(ops, ops[1:]))
    assert r._host.cpu == user and clock.last_user - base == user
    assert clock.observers == observers and clock.open_t == ops[-1][0]
    assert r._ops == stamps and r._settled == len(stamps)          # where they were
    r.flush()                                                      # the hand-over takes them
    assert r._ops == [] and r._settled == 0
    events = seen[0].events()
    assert len(events) == 51 and [e.cpu_ns for e in events if e.lane == "host"][-1] == user


def test_a_device_event_after_a_settled_stamp_charges_the_observers_nothing_again():
    """A device event continues the chain of the op stamped last only while that op is not settled:
    after a settle and a catch-up (which charged the op's bookkeeping to the observers, up to the
    thread's last stamp), continuing it would reopen the chain and charge that span again."""
    r = ev.Recorder()
    r.subscribe(lambda e: None, runs=[].append)
    clock = ev._ThreadClock(time.thread_time_ns())
    clock.open_t = 100
    r._ops += (200, "aten::add", "x.py:1", 0, 150, clock, 50)
    r._host.last_clock, clock.last_end = None, 260
    with r._host.lock:
        r._catch_up(clock)                  # settles the op, then charges 200..260 to the observers
    charged = clock.observers
    assert charged == (150 - 100) + (260 - 200) and clock.open_t is None
    r._defer_device(ev.DeviceExecution(0, 1, "hpu:0", 0, launch_id=1))
    with r._host.lock:
        r._catch_up(clock)
    assert clock.observers == charged and clock.open_t is None and r._host.cpu == 50


def test_threads_stamping_at_once_lose_and_repeat_no_event():
    """Two user threads stamping ops and host events while a third emits device events, all into
    the run (a Collector): every event arrives once, each thread's in its order, and the host
    stamps never go back."""
    n = 1500
    go = threading.Barrier(3)

    def user(name):
        go.wait()
        for i in range(n):
            ev.op_accumulated(f"{name}{i}", "x.py:1")
            if i % 50 == 0:
                ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", 0))

    def device():
        go.wait()
        for i in range(n // 10):
            ev.emit(ev.DeviceExecution(0, 1, "hpu:0", 0, launch_id=-(i + 1)))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)                  # the interpreter lock changes hands all the time
    try:
        with ev.Collector() as c:
            threads = [threading.Thread(target=user, args=(k,)) for k in "ab"] + [threading.Thread(target=device)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(switch)
    events = c.events
    for k in "ab":
        assert [e.op for e in events if type(e) is ev.OpAccumulated and e.op[0] == k] == [f"{k}{i}" for i in range(n)]
    assert sorted(-e.launch_id for e in events if type(e) is ev.DeviceExecution) == list(range(1, n // 10 + 1))
    assert sum(type(e) is ev.MarkStep for e in events) == 2 * (n // 50)
    host = [e for e in events if e.lane == "host"]
    assert all(e.cpu_ns >= 0 for e in host) and all(a.cpu_ns <= b.cpu_ns for a, b in zip(host, host[1:]))


def _built_on(monkeypatch) -> list:
    """The threads on which DeviceExecution events are built, one entry an event."""
    built, real = [], ev.DeviceExecution.__init__

    def counted(self, *a, **kw):
        built.append(threading.current_thread())
        real(self, *a, **kw)
    monkeypatch.setattr(ev.DeviceExecution, "__init__", counted)
    return built


def test_the_device_thread_only_queues_what_goes_into_the_run(step, monkeypatch):
    """While every observer keeps op runs, a device stream's worker builds no DeviceExecution: it
    queues the fields (emit_device: one tuple, one append; building and emitting it there took
    10.8 us of cold code a launch), and the host puts each into the run before the next thing it
    adds, so every execution still arrives, once, after its Launch."""
    built = _built_on(monkeypatch)
    with ev.Collector() as c:
        _run(step, 3)
    events = c.events
    assert built and not [t for t in built if t.name.startswith("hpu_lab-")], built
    launched = {e.launch_id: i for i, e in enumerate(events) if type(e) is ev.Launch}
    ran = [e.launch_id for e in events if type(e) is ev.DeviceExecution]
    assert len(launched) >= 6 and sorted(ran) == sorted(set(ran)) and launched.keys() <= set(ran)
    assert all(launched[k] < i for i, e in enumerate(events) if type(e) is ev.DeviceExecution
               for k in [e.launch_id] if k in launched)


def test_device_events_in_the_run_are_built_when_the_run_is_read_once(step, monkeypatch):
    """Nor does the host build them while the loop runs (between two ops, cold: ~6 us each in
    place, ~12 us a training step): the queued fields go into the run as they are, and each event
    is built when the log is read, once. A section's end that looks for the executions in the run
    (OpRun.host_events) builds them in their place: the full read later gives the same objects."""
    built = _built_on(monkeypatch)
    log = ev.EventLog()
    with ev.subscribe(log.add, runs=log.add):
        _run(step, 3)
        ev.flush()
    assert built == []                           # none built during the loop or the hand-over
    runs = [x for x in log.items if type(x) is ev.OpRun]
    early = [e for r in runs for e in r.host_events() if type(e) is ev.DeviceExecution]
    assert len(early) >= 6 and len(built) == len(early)
    events = log.read()
    executions = [e for e in events if type(e) is ev.DeviceExecution]
    assert [id(e) for e in executions] == [id(e) for e in early] and len(built) == len(early)
    assert log.read() == events and len(built) == len(early)


_LAZY_HOST_KINDS = (ev.GraphBuilt, ev.HostToDevice, ev.MemorySample)


def _fields(e):
    return {k: v for k, v in vars(e).items() if k not in ("t_start", "t_end", "cpu_ns", "blocked_ns")}


def test_host_events_in_the_run_are_built_when_read_and_equal_those_built_at_once(step, monkeypatch):
    """GraphBuilt, HostToDevice and MemorySample (emit_host) go into the thread's open op run as
    their fields while a recording keeps runs: built when the log is read (in the loop, between two
    ops, each took ~2-4 us of cold code in place), stamped then. Read, they hold what an observer
    that takes them at once gets (the same fields, one each, in the same order)."""
    built = []
    for cls in _LAZY_HOST_KINDS:
        real = cls.__init__

        def counted(self, *a, _real=real, **kw):
            built.append(type(self))
            _real(self, *a, **kw)
        monkeypatch.setattr(cls, "__init__", counted)
    # no reading due within the loop, no gap: the runs stay open as on an idle machine (a due or a
    # gap closes the thread's run, and the event after it takes emit's way: under load, a few
    # more). 1000 s, not more: a recording's first stamp still reads (its clock's read_at is 0)
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**12)
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**12)
    log = ev.EventLog()
    with ev.subscribe(log.add, runs=log.add):
        _run(step, 3)
        ev.flush()
    in_loop = len(built)
    lazy = [e for e in log.read() if type(e) in _LAZY_HOST_KINDS]
    # built in the loop: only the first after the recording starts (its run not open yet); the
    # user's first event back from each backward pass takes the run back as its fields too
    # (_switch_back); 18 in all
    assert len(lazy) >= 18 and in_loop <= 1, (in_loop, len(lazy))
    assert {type(e) for e in lazy} == set(_LAZY_HOST_KINDS) and len(built) == len(lazy)
    assert all(e.cpu_ns >= 0 and e.blocked_ns >= 0 for e in lazy), [(type(e).__name__, e.cpu_ns, e.blocked_ns) for e in lazy]
    at_once = []
    with ev.Collector() as c, ev.subscribe(at_once.append, list(_LAZY_HOST_KINDS)):
        _run(step, 3)
    kept = [e for e in c.events if type(e) in _LAZY_HOST_KINDS]
    assert [_fields(e) for e in at_once] == [_fields(e) for e in kept]
    assert [type(e) for e in kept] == [type(e) for e in lazy]
    norm = lambda es: [{k: v for k, v in _fields(e).items() if k not in ("step", "graph_id")} for e in es]
    assert norm(kept) == norm(lazy)              # the same loop: the same fields but its steps'


def test_a_device_event_an_observer_takes_at_once_is_delivered_by_the_device_thread(step, monkeypatch):
    """An observer of DeviceExecution that does not keep runs (a section's end waiting for its
    launches) gets each from the worker, as it runs, not at the host's next event."""
    built = _built_on(monkeypatch)
    got = []
    with ev.Collector():
        with ev.subscribe(lambda e: got.append(threading.current_thread()), [ev.DeviceExecution], stamps=False):
            _run(step, 2)
    assert len(got) >= 4 and all(t.name.startswith("hpu_lab-") for t in got), got
    assert len(built) == len(got)


def test_device_events_keep_their_place_among_the_hosts(monkeypatch):
    """A device event queued before the host adds an op or an event to the run reaches observers
    before them: in the order they came, whichever thread emitted them."""
    monkeypatch.setattr(ev, "CPU_READ_NS", 10**15)       # the ops go into the open run
    monkeypatch.setattr(ev, "BLOCKED_MIN_NS", 10**15)
    with ev.Collector() as c:
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", 0))
        ev.op_accumulated("aten::a", "x.py:1")
        ev.emit_device(ev.DeviceExecution, (0, 1, "hpu:0", 0, -1, 0, "", 0, True))
        ev.op_accumulated("aten::b", "x.py:2")
        ev.emit(ev.DeviceExecution(1, 2, "hpu:0", 0, launch_id=-2))
        ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", 0))
        ev.emit_device(ev.DeviceExecution, (2, 3, "hpu:0", 0, -3, 0, "", 0, True))
    got = [getattr(e, "op", None) or getattr(e, "launch_id", None) or e.kind for e in c.events]
    assert got == ["MarkStep", "aten::a", -1, "aten::b", -2, "MarkStep", -3]


def _counting_hand_overs(monkeypatch) -> list:
    """The threads that hand a run over, one entry a hand-over."""
    handed, real = [], ev.Recorder._hand_over

    def counted(self):
        handed.append(threading.current_thread())
        real(self)
    monkeypatch.setattr(ev.Recorder, "_hand_over", counted)
    return handed


def test_device_events_go_into_the_run_and_the_device_thread_hands_nothing_over(step, monkeypatch):
    """While every observer keeps op runs, a DeviceExecution goes into the run (emit) instead of
    handing the run over on the device's worker thread (~60 us a launch in a training step, holding
    the interpreter lock the user's thread waits for): each after its Launch, unstamped."""
    handed = _counting_hand_overs(monkeypatch)
    singles, runs = [], []
    with ev.subscribe(singles.append, runs=runs.append):
        _run(step, 3)
    # (the user's thread hands over; so may autograd's, when HAND_OVER_NS passed during backward:
    # a slow run of the suite did. Never a device stream's worker.)
    assert handed and not [t for t in handed if t.name.startswith("hpu_lab-")], handed
    assert threading.main_thread() in handed
    assert not [e for e in singles if type(e) is ev.DeviceExecution]
    events = [e for r in runs for e in r.events()]
    launched = {e.launch_id: i for i, e in enumerate(events) if type(e) is ev.Launch}
    ran = {e.launch_id: i for i, e in enumerate(events) if type(e) is ev.DeviceExecution}
    assert len(launched) >= 6 and launched.keys() <= ran.keys()
    assert all(launched[k] < ran[k] for k in launched)
    assert all(e.cpu_ns == -1 for e in events if e.lane != "host")
    stamped = [e for e in events if e.lane == "host"]
    assert all(a.cpu_ns <= b.cpu_ns for a, b in zip(stamped, stamped[1:]))


def test_late_observers_get_their_events_while_a_loop_runs(step, monkeypatch):
    """With every event going into the run, the run is handed over at most every HAND_OVER_NS
    (20 ms) when nothing asks sooner (it was ~4 times a training step): a late observer (the
    panel's live check, the metrics) still gets its events while a loop runs, not at its end."""
    handed = _counting_hand_overs(monkeypatch)
    seen = []
    with ev.Collector():
        with ev.subscribe(lambda e: seen.append(e), [ev.MarkStep], stamps=False, late=True):
            del handed[:]
            t0 = time.perf_counter_ns()
            steps = 0
            while time.perf_counter_ns() - t0 < 10 * ev.HAND_OVER_NS:
                step()
                steps += 1
            during = len(seen)
            took = time.perf_counter_ns() - t0
            n = len(handed)
    assert steps >= 5 and 0 < during < 2 * steps
    assert n <= took // ev.HAND_OVER_NS + 2, (n, steps)


def test_a_late_observer_gets_the_device_events_queued_for_the_run(monkeypatch):
    """A device event queued for the run (the metrics' collective count takes Collective late)
    reaches a late observer at its next turn (HAND_OVER_NS), before the run is handed over."""
    monkeypatch.setattr(ev, "HAND_OVER_NS", 0)            # every emit gives the late observers their turn
    handed = _counting_hand_overs(monkeypatch)
    seen = []
    with ev.Collector():
        with ev.subscribe(seen.append, [ev.Collective], stamps=False, late=True):
            worker = threading.Thread(target=lambda: ev.emit(ev.Collective(0, 1, "hpu:0", 0, op="all_reduce")))
            worker.start()
            worker.join()
            del handed[:]
            ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", 0))
            got, hand_overs = [e.op for e in seen], len(handed)
    assert got == ["all_reduce"] and hand_overs == 0


def test_the_late_observers_turn_reads_only_the_segments_they_have_not_seen():
    """Settled segments pile up in the run until it is handed over (once a loop, since session 12);
    each turn of the late observers (every HAND_OVER_NS) takes the new ones only. It skipped the
    seen ones one by one (islice): 140 us a turn at the end of a 600-step loop, 0.9% of its time."""
    class Walked(list):
        count = 0                        # items read, one by one or walked

        def __iter__(self):
            for x in list.__iter__(self):
                Walked.count += 1
                yield x

        def __getitem__(self, i):
            Walked.count += 1
            return list.__getitem__(self, i)

    rec = ev.Recorder()

    def segment():                       # one settled event, as _add_ready keeps it (flat)
        k = len(rec._own)
        rec._own += [1, ev.MarkStep(1, 1, "host", 0), "", 0, 1, None]
        return [0, 0, rec._own, k, k + ev.OP_FIELDS, 0]
    rec._ready = Walked(x for _ in range(10_000) for x in segment())
    rec._late_ready = len(rec._ready)    # seen at the previous turn
    rec._ready += segment()
    parts = rec._late_pending()
    assert [type(x) for p in parts for x in p] == [ev.MarkStep]
    # the new segment's stamps, its lo and its hi: not the 10,000 seen before it
    assert Walked.count <= 3 and rec._late_ready == 10_001 * ev.READY_FIELDS


def test_late_observers_get_each_event_once_in_order_while_the_run_stays_unhanded(step, monkeypatch):
    """Every HAND_OVER_NS the late observers get the events they have not seen, without handing
    the run over (a hand-over copies each stamp out and is proportional to the loop): during the
    loop nothing is handed over, and the late observer sees each of its events once, in the
    recording's order, the ones given while stamps were unsettled included."""
    handed = _counting_hand_overs(monkeypatch)
    seen = []
    with ev.Collector() as c:
        with ev.subscribe(seen.append, [ev.MarkStep, ev.Launch], stamps=False, late=True):
            del handed[:]
            t0 = time.perf_counter_ns()
            while time.perf_counter_ns() - t0 < 5 * ev.HAND_OVER_NS:
                step()
            during, n = len(seen), len(handed)
    assert n == 0 and during > 0
    logged = [e for e in c.events if type(e) in (ev.MarkStep, ev.Launch)]
    assert len({id(e) for e in seen}) == len(seen)
    i = next(k for k, e in enumerate(logged) if e is seen[0])
    assert all(a is b for a, b in zip(seen, logged[i:i + len(seen)])) and len(logged) - i >= len(seen)


def test_a_long_recording_is_handed_over_when_its_stamps_pile_up(step, monkeypatch):
    """Past KEPT_STAMPS_MAX kept stamp items, the late observers' turn hands the run over too; the
    events and their order are the same as when it is handed over once at the end."""
    def facts():
        with ev.Collector() as c:
            _run(step, 3)
        return _facts(c.events)
    once = facts()
    handed = _counting_hand_overs(monkeypatch)
    monkeypatch.setattr(ev, "HAND_OVER_NS", 0)
    monkeypatch.setattr(ev, "KEPT_STAMPS_MAX", 0)
    assert facts() == once and len(handed) > 3


def _mixed_workload(step):
    """Lazy steps, host reads, a copy, a capture and its replays, a metric read mid-way."""
    from hpu_lab.graphs import HPUGraph
    from hpu_lab.metrics import metric_global
    step()
    x = torch.randn(16, 16).to("hpu")
    y = (x @ x).relu().sum()
    assert y.item() == pytest.approx(((x.cpu() @ x.cpu()).relu().sum()).item(), rel=1e-5)
    marks = dict(metric_global("mark_step").stats())["TotalNumber"]
    step()
    assert dict(metric_global("mark_step").stats())["TotalNumber"] == marks + 2   # read right after
    g = HPUGraph()
    g.capture_begin()
    z = x * 2 + 1
    g.capture_end()
    for _ in range(3):
        g.replay()
    assert torch.equal(z.cpu(), x.cpu() * 2 + 1)
    step()
    torch.hpu.synchronize()


def test_host_events_in_the_op_run_reach_a_log_as_if_delivered_one_by_one(step):
    """While only runs-keeping (a Collector) and late observers (the metrics) listen, host events go
    into the op run (emit); with a one-by-one observer besides, each is delivered at once. The log
    holds the same host events, in the same order, with stamps that never go back, either way."""
    from hpu_lab.metrics import metric_global

    def host(events):
        return [(type(e).__name__, getattr(e, "op", ""), getattr(e, "reason", ""), e.src if hasattr(e, "src") else "")
                for e in events if e.lane == "host"]

    def counts():
        return {n: dict(metric_global(n).stats()) for n in ("mark_step", "graph_launch", "host_sync", "hpu_graph")}

    _mixed_workload(step)                        # every recipe compiled: both recordings hit the cache
    before = counts()
    with ev.Collector() as deferred:
        _mixed_workload(step)
        runs = [x for x in deferred.log.items if type(x) is ev.OpRun and x.host_events()]
    after = counts()
    with ev.subscribe(lambda e: None), ev.Collector() as each:
        _mixed_workload(step)
    assert runs, "no host event went into an op run (the path under test was not taken)"
    assert host(deferred.events) == host(each.events)
    for events in (deferred.events, each.events):
        stamped = [e for e in events if e.lane == "host"]
        assert all(e.cpu_ns >= 0 and e.blocked_ns >= 0 for e in stamped)
        assert all(a.cpu_ns <= b.cpu_ns and a.blocked_ns <= b.blocked_ns for a, b in zip(stamped, stamped[1:]))
        launched = {e.launch_id for e in events if isinstance(e, ev.Launch)}
        assert launched <= {e.launch_id for e in events if isinstance(e, ev.DeviceExecution)}
    # the late metrics counted every event of the deferred recording
    assert after["mark_step"]["TotalNumber"] - before["mark_step"]["TotalNumber"] == \
        sum(isinstance(e, ev.MarkStep) for e in deferred.events)
    assert after["graph_launch"]["TotalNumber"] - before["graph_launch"]["TotalNumber"] == \
        sum(isinstance(e, ev.Launch) for e in deferred.events)
    assert after["hpu_graph"]["Replays"] - before["hpu_graph"]["Replays"] == 3
