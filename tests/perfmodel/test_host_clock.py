"""The Gaudi clock's host lane (hpu_lab/perfmodel/host.py): modeled per host event, calibrated on
seed 000's lazy figure, checked on its other two; your own code measured (events/user_time.py).

The modeled figures are a function of the events alone: these tests compare them exactly, on any
machine, busy or idle. The measured ones (your code) are checked only from below (a sleep never
returns early)."""
import subprocess
import sys
import threading
import time

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import events as ev, perfmodel as pm, tensor as hpu_tensor
from hpu_lab.perfmodel import seed000 as host

STEPS = 6


@pytest.fixture(scope="module")
def seed_recordings():
    """Seed 000's three modes, each recorded for STEPS warm steps."""
    return {m: host.record_seed(s, STEPS) for m, s in host.seed_modes().items()}


def _per_step(events) -> float:
    return pm.retime(events, "gaudi").host_ns / STEPS / 1e6


def test_op_ns_is_what_seed_000s_lazy_figure_gives(seed_recordings):
    """The one calibrated constant: seed 000's lazy step (4.8 ms on first-gen Gaudi) less every
    other modeled cost, over its traced ops. A change in what the lazy step emits shows here."""
    assert host.calibrate_op_ns(seed_recordings["lazy"], STEPS) == pm.HOST.op_ns
    assert _per_step(seed_recordings["lazy"]) == pytest.approx(4.8, rel=0.005)


def test_the_seeds_three_modes_come_in_the_seeds_order(seed_recordings):
    """Held out of the fit: make_graphed_callables within 0.67-1.5x of the seed's 3.9 ms, and the
    seed's order lazy > make_graphed_callables > capture and replay."""
    lazy, mgc, replay = (_per_step(seed_recordings[m]) for m in host.SEED_HOST_MS)
    assert 0.67 <= mgc / 3.9 <= 1.5, mgc
    assert lazy > mgc > replay > 0


@pytest.mark.xfail(strict=True, reason="the model gives capture-and-replay ~0.2 ms a step, 0.15x of the seed's "
                   "1.3 ms: nothing in the bridge's replay path (HPUGraph::replay, ExecuteCachedGraph) or the "
                   "input copies costs ~1 ms (docs/gaudi_clock.md, 'Seed 000')")
def test_capture_and_replay_is_within_the_target_of_the_seeds_figure(seed_recordings):
    replay = _per_step(seed_recordings["capture/replay"])
    assert 0.67 <= replay / 1.3 <= 1.5, replay


def test_the_lazy_figure_is_the_same_beside_a_cpu_burner(seed_recordings):
    burn = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        loaded = host.record_seed(host.seed_modes()["lazy"], STEPS)
    finally:
        burn.kill()
        burn.wait()
    assert _per_step(loaded) == pytest.approx(_per_step(seed_recordings["lazy"]), rel=0.02)
    assert _per_step(loaded) == _per_step(seed_recordings["lazy"])     # in fact exactly


def test_a_slower_emulator_leaves_the_modeled_host_time_as_it_was(seed_recordings, monkeypatch):
    """The emulator's own time never enters the host lane: with every op's dispatch made 0.3 ms
    slower, the lazy step's modeled host time does not move."""
    real = hpu_tensor._dispatch

    def slow(func, args, kwargs):
        t = time.perf_counter_ns()
        while time.perf_counter_ns() - t < 300_000:
            pass
        return real(func, args, kwargs)
    slow.inner = getattr(real, "inner", real)
    monkeypatch.setattr(hpu_tensor, "_dispatch", slow)
    t0 = time.perf_counter()
    slowed = host.record_seed(host.seed_modes()["lazy"], STEPS)
    assert time.perf_counter() - t0 > STEPS * 61 * 300e-6            # it really was slower
    assert _per_step(slowed) == _per_step(seed_recordings["lazy"])


def test_estimate_gives_the_recorded_steps_host_time(seed_recordings):
    """estimate() lays the same events out without running: host, device, wall and verdict."""
    torch.manual_seed(0)
    from hpu_lab.lab.examples import Net, train_step
    model = Net().to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, y = torch.randn(200, 1, 28, 28), torch.randint(0, 10, (200,))
    train_step(model, opt, x, y)
    torch.hpu.synchronize()
    e = pm.estimate(train_step, model, opt, x, y, device="gaudi")
    r = pm.retime(seed_recordings["lazy"], "gaudi")
    assert e.host_ns == pytest.approx(r.host_ns / STEPS, rel=0.01)
    # (the optimizer's graph as estimate() traces it fuses its Adadelta ops in other clusters than
    # the run's: its device time differs by ~10%)
    assert e.device_ns == pytest.approx(r.device_busy_ns / STEPS, rel=0.15)
    assert e.wall_ns >= max(e.host_ns, e.device_ns) and e.verdict == r.verdict == "host-bound"


def test_a_sync_point_in_an_estimated_step_makes_the_host_wait():
    a = torch.randn(2048, 2048).to("hpu")
    htcore.mark_step()

    def step(wait):
        b = a @ a @ a
        if wait:
            pm.sync_point("read the loss")
        c = b + 1
        htcore.mark_step()
        return c
    free, waits = pm.estimate(step, False, device="gaudi"), pm.estimate(step, True, device="gaudi")
    assert free.device_ns == pytest.approx(waits.device_ns, rel=0.05)
    # without the wait the host traces the next step while the device runs; with it, it cannot
    assert max(free.host_ns, free.device_ns) <= free.wall_ns < waits.wall_ns
    assert waits.wall_ns <= free.wall_ns + waits.host_ns


# ------------------------------------------------------------------ your code, measured

def test_a_dataloader_fetch_is_your_code_and_a_sleep_inside_it_is_not_counted_twice():
    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            time.sleep(0.005)
            return torch.ones(4) * i
    loader = torch.utils.data.DataLoader(Slow(), batch_size=4)
    with ev.Collector() as c:
        for b in loader:
            (b.to("hpu") * 2).sum()
        htcore.mark_step()
    mine = c.of(ev.UserCode)
    fetches = [e for e in mine if e.what == "data loading"]
    assert len(fetches) == 3 and not [e for e in mine if e.what == "sleep"]   # two batches, then the end
    assert all(e.own_ns >= 4 * 5_000_000 for e in fetches[:2])             # four sleeps in each
    assert fetches[0].src.startswith("test_host_clock.py:")
    r = pm.retime(c.events, "gaudi2")
    assert r.user_ns == sum(e.own_ns for e in mine) and r.host_ns > r.user_ns


def test_a_print_is_your_code_and_the_emulator_inside_it_is_not():
    x = torch.randn(512, 512).to("hpu")
    htcore.mark_step()
    torch.hpu.synchronize()
    with ev.Collector() as c:
        y = x @ x @ x
        print("the sum", y.sum())                      # a host read inside the print
    (p,) = c.of(ev.UserCode)
    sync = c.of(ev.HostSync)[-1]
    assert p.what == "print" and p.t_start <= sync.t_start and sync.t_end <= p.t_end
    assert p.own_ns <= (p.t_end - p.t_start) - (sync.t_end - sync.t_start)
    r = pm.retime(c.events, "gaudi2")
    (span,) = [s for s in r.spans["host"] if s.kind == "UserCode"]
    synced = [e for e in r.events if isinstance(e, ev.HostSync)][-1]
    # on the clock the print holds the modeled sync (the device's matmuls) and its own measured time
    assert span.start_ns <= synced.t_start and span.end_ns >= synced.t_end + p.own_ns


def test_user_code_blocks_are_measured_only_on_the_main_thread_and_only_while_recording():
    with ev.Collector() as c:
        with ev.user_code("augment"):
            time.sleep(0.002)
        t = threading.Thread(target=time.sleep, args=(0.002,))
        t.start()
        t.join()
    (u,) = c.of(ev.UserCode)
    assert u.what == "augment" and u.own_ns >= 2_000_000
    with ev.Collector(kinds=[ev.MarkStep]) as d:        # nobody takes UserCode: nothing measured
        time.sleep(0.001)
        htcore.mark_step()
    assert not [e for e in d.events if isinstance(e, ev.UserCode)]
