"""The event stream's contract (hpu_lab/events): the kinds, the fast recorder against the reference
recorder on the same programs, what a kept recording costs the garbage collector, and threads.
Counts and facts, never time."""
import contextlib
import dataclasses
import gc
import inspect
import sys
import threading
import weakref

import pytest
import torch
import torch.nn.functional as F

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab.lab.examples import Net, capture_train_step, train_step

# ------------------------------------------------------------------ the kinds


def test_events_are_the_dataclasses_they_declare():
    """The faster __init__ (events/_record.py) takes the dataclass's own signature and gives the
    same fields, equality, hash, repr and immutability."""
    for cls in [ev.Event, *ev.Event.__subclasses__()]:
        params = inspect.signature(cls).parameters
        fields = dataclasses.fields(cls)
        assert [p for p in params] == [f.name for f in fields]
        for f in fields:
            p = params[f.name]
            assert p.default is (inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
    assert set(ev.KINDS) == set(ev.Event.__subclasses__())
    a = ev.HostToDevice(1, 2, "host", 3, 64, src="x.py:1", pinned=True)
    b = ev.HostToDevice(1, 2, "host", 3, nbytes=64, src="x.py:1", pinned=True)
    assert a == b and hash(a) == hash(b) and a.stream == -1
    assert repr(a).startswith("HostToDevice(t_start=1, t_end=2, lane='host', step=3, nbytes=64,")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.nbytes = 1
    with pytest.raises(TypeError):
        ev.MarkStep(1, 2, "host")                      # step is required
    for call in (lambda: ev.MarkStep(1, 2, "host", 0, colour="red"),
                 lambda: ev.MarkStep(1, 2, "host", 0, "x.py:1", src="y.py:2"),
                 lambda: ev.MarkStep(1, 2, "host", 0, "x.py:1", 3, 4)):
        with pytest.raises(TypeError, match="argument"):
            call()
    assert ev.MarkStep(1, 2, "host", 0, "x.py:1", 3) == ev.MarkStep(1, 2, "host", 0, src="x.py:1", pending_nodes=3)
    assert dataclasses.replace(a, nbytes=8).nbytes == 8 and dataclasses.asdict(a)["pinned"] is True


# ------------------------------------------------------------------ fast recorder == reference recorder

def _lazy_steps():
    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
    for _ in range(2):
        train_step(model, opt, x, y)
    return train_step(model, opt, x, y).item()       # a host sync and a read-back too


def _replays():
    torch.manual_seed(0)
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    sx, st = torch.randn(16, 1, 28, 28, device="hpu"), torch.randint(0, 10, (16,), device="hpu")
    step, _, loss = capture_train_step(model, opt, sx, st)
    for _ in range(3):
        step(torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,)))
    return loss.item()


def _host_ops_and_prints():
    x = torch.randn(64, 64).to("hpu")
    n = torch.nonzero(x > 0)                           # a data-dependent op: a host sync
    print("mean", (x * 2).mean())                      # a print that reads a tensor
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 4)), batch_size=8)
    total = torch.zeros(4).to("hpu")
    for (b,) in loader:
        total = total + b.to("hpu").sum(0)
    htcore.mark_step()
    return n.shape[0], total.cpu()


def _streams():
    side = torch.hpu.Stream()
    a = torch.randn(128, 128).to("hpu")
    with torch.hpu.stream(side):
        b = a @ a
        done = side.record_event()
    torch.hpu.current_stream().wait_event(done)
    c = (b + 1).sum()
    torch.hpu.synchronize()
    return c.item()


_IDS = ("graph_id", "launch_id", "recipe_id", "marker")     # counters that go on from run to run


def _facts(events):
    """Each event as (kind, fields): times (and your code's measured time) left out, the step and
    the ids counted from the recording's start."""
    step0 = events[0].step
    ids: dict = {}
    num = lambda v: v if v in (0, -1) else ids.setdefault(v, len(ids) + 1)     # noqa: E731
    streams: dict = {}                                 # a new Stream each run: numbered as they come
    sid = lambda v: v if v in (0, -1) else streams.setdefault(v, len(streams) + 1)    # noqa: E731
    out = []
    # numbered in the host lane's order first (a launch's id is its Launch's), then the devices'
    for e in sorted(events, key=lambda e: e.lane != "host"):
        d = dict(vars(e))
        for k in ("t_start", "t_end", "own_ns", "in_use", "max_in_use"):    # (memory: what else is alive)
            d.pop(k, None)
        d["step"] -= step0
        if e.lane != "host":
            del d["step"]          # the host's step count when the device ran it: a race by nature
        for k in _IDS:
            if k in d:
                d[k] = num(d[k])
        if "waits_for" in d:
            d["waits_for"] = tuple(num(v) for v in d["waits_for"])
        if "stream" in d:
            d["stream"] = sid(d["stream"])
        lane = d["lane"] = e.lane if e.lane == "host" else f"hpu:{sid(int(e.lane[4:]))}"
        out.append((lane, type(e).__name__, tuple(sorted(d.items(), key=lambda kv: kv[0]))))
    return out


def _record(program, rec=None):
    torch.manual_seed(0)
    with ev.use(rec) if rec is not None else contextlib.nullcontext():
        with ev.Collector() as c:
            result = program()
            torch.hpu.synchronize()
    return result, c.events


@pytest.mark.parametrize("program", [_lazy_steps, _replays, _host_ops_and_prints, _streams])
def test_the_fast_recorder_gives_the_reference_recorder_s_events(program, capsys):
    """Same program, same events: the host lane in the same order with the same fields, each
    device lane in the same order (the device threads' events interleave with the host's as the
    threads happen to run)."""
    program()                                          # compiled and warm for both
    torch.hpu.synchronize()
    fast_result, fast = _record(program)
    ref_result, ref = _record(program, ev.ReferenceRecorder())
    assert str(fast_result) == str(ref_result)
    host = lambda es: [f for f in _facts(es) if f[0] == "host"]                         # noqa: E731
    lanes = lambda es: {lane: [f for f in _facts(es) if f[0] == lane]                   # noqa: E731
                        for lane in sorted({f[0] for f in _facts(es)} - {"host"})}
    assert host(fast) == host(ref) and len(host(fast)) > 5
    assert lanes(fast) == lanes(ref)
    assert not [e for e in fast if type(e) is ev.OpRun]


def test_use_swaps_the_recorder_and_keeps_the_step_count():
    before = ev.recorder
    step = before.step
    with ev.use(ev.ReferenceRecorder()) as ref:
        assert ev.recorder is ref and ev.emit == ref.emit and ref.step == step
        htcore.mark_step()
    assert ev.recorder is before and before.step == step + 1


# ------------------------------------------------------------------ keeping events

@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's cyclic garbage collector")
def test_kept_events_give_the_garbage_collector_nothing_to_walk():
    """A recording keeps tens of thousands of events; tracked, they would bring on full collections
    of the whole process that the unobserved program never has. Untracked, they are still freed."""
    _lazy_steps()
    with ev.Collector() as c:
        _lazy_steps()
        torch.hpu.synchronize()
        ev.flush()
        runs = [x for x in list.__iter__(c.log.items) if type(x) is ev.OpRun]
        assert runs and not [r for r in runs if gc.is_tracked(r)]
    kinds = {type(e) for e in c.events}
    assert {ev.OpAccumulated, ev.MarkStep, ev.Launch, ev.DeviceExecution} <= kinds
    assert not [e for e in c.events if gc.is_tracked(e) or gc.is_tracked(vars(e))]
    ref = weakref.ref(c.events[0])
    del c
    assert ref() is None                     # reference counting frees them as before
    e = ev.MarkStep(0, 0, "host", 0)         # an event nobody observes is left as it was made
    assert gc.is_tracked(e) and not gc.is_tracked(vars(e))


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's cyclic garbage collector")
def test_an_op_is_no_object_until_read():
    """An op kept for a recording is four list items: no object the garbage collector counts."""
    with ev.Collector() as c:
        gc.disable()
        try:
            before = len(gc.get_objects())
            for i in range(3000):
                ev.op_accumulated("aten::add", f"x.py:{i % 7}")
            after = len(gc.get_objects())
        finally:
            gc.enable()
        assert after - before < 10
        ev.flush()
        runs = [x for x in c.log.items if type(x) is ev.OpRun]
        assert len(runs) == 1 and len(runs[0]) == 3000 and runs[0]._made is None   # built when read
    ops = c.of(ev.OpAccumulated)
    assert [e.src for e in ops] == [f"x.py:{i % 7}" for i in range(3000)]
    assert all(a.t_end <= b.t_end for a, b in zip(ops, ops[1:]))


def test_a_log_cleared_after_a_read_builds_the_runs_that_come_after():
    with ev.Collector() as c:
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


def test_muted_host_events_reach_nobody():
    with ev.Collector() as c:
        with ev.recorder.muted():
            ev.op_accumulated("aten::add", "x.py:1")
            ev.emit(ev.MarkStep(0, 0, "host", 0))
            ev.emit(ev.DeviceExecution(0, 0, "hpu:0", 0, launch_id=7))
        ev.op_accumulated("aten::mul", "x.py:2")
    assert [(e.kind, getattr(e, "op", "")) for e in c.events] == [("DeviceExecution", ""),
                                                                   ("OpAccumulated", "aten::mul")]


def test_threads_emitting_at_once_lose_and_repeat_no_event():
    """Two user threads emitting ops and host events while a third emits device events: every
    event arrives once, each thread's in its order."""
    n = 1500
    go = threading.Barrier(3)

    def user(name):
        go.wait()
        for i in range(n):
            ev.op_accumulated(f"{name}{i}", "x.py:1")
            if i % 50 == 0:
                ev.emit(ev.MarkStep(ev.now(), ev.now(), "host", 0, src=name))

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
        # each thread's events in the order it emitted them: its 30 steps after their ops
        mine = [e for e in events if (type(e) is ev.OpAccumulated and e.op[0] == k)
                or (type(e) is ev.MarkStep and e.src == k)]
        marks = [i for i, e in enumerate(mine) if type(e) is ev.MarkStep]
        assert [mine[i - 1].op for i in marks[1:]] == [f"{k}{50 * j}" for j in range(1, n // 50)]
    assert sorted(-e.launch_id for e in events if type(e) is ev.DeviceExecution) == list(range(1, n // 10 + 1))
    assert sum(type(e) is ev.MarkStep for e in events) == 2 * (n // 50)


def test_nobody_listening_costs_no_event():
    built = []
    real = ev.GraphBuilt.__init__

    def counted(self, *a, **kw):
        built.append(1)
        real(self, *a, **kw)
    ev.GraphBuilt.__init__ = counted
    try:
        x = torch.randn(8, 8).to("hpu")
        assert not ev.recorder.ops_wanted
        (x + 1).sum()
        htcore.mark_step()
        torch.hpu.synchronize()
    finally:
        ev.GraphBuilt.__init__ = real
    assert built == []                        # the global metrics take no GraphBuilt: none was built
    assert F.relu(torch.ones(2)).sum() == 2
