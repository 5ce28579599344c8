"""Queued host-to-device copies on the Gaudi clock (runtime/transfers.py, perfmodel/timeline.py).

A pinned ``non_blocking=True`` copy is queued on the current stream; the host goes on at once. The
host's queue point is a ``CopyQueued`` event, the copy's run on the stream a ``HostToDevice`` (same
``launch_id``) emitted by the stream when it runs, possibly after later host events. On the Gaudi
clock the copy's DMA starts at the queue point (or when its lane is free), and whatever reads the
copy starts after its modeled end: a recipe on another stream (``Launch.waits_for``), a recipe on
the same stream (stream order), a ``.item()`` on the host (``HostSync.launch_id``).

Every assertion is on the model or on counts, never on wall time.
"""
import gc

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab import perfmodel as pm
from hpu_lab.perfmodel import cost

from helpers import ONE_US, hand_made, no_cyclic_gc

HPU = torch.device("hpu")
MB = 1 << 20
# The cross-stream copy: 10.5 ms on Gaudi's link, 5.3 ms on Gaudi 3's. The reader must be queued
# while it still runs, and the host's CPU from the copy's queue point to the reader's launch is
# 0.3-1.05 ms here (load 1-6) but was >2 ms on a busier CI machine, where a 64 MB copy (2.6 ms on
# Gaudi) failed the test: the copy is made long enough for the premise to hold by construction.
CROSS_MB = 256


def _reader(y, w):
    z = (y[:64] @ w).sum()
    htcore.mark_step()
    return z


def _record_cross_stream(copy_stream_is_side: bool):
    """A CROSS_MB pinned copy queued on one stream, read by a small recipe launched on the other
    (compiled before the window), then ``.item()`` of the result and of the copy itself."""
    side = torch.hpu.Stream()
    x = torch.zeros(CROSS_MB * MB // 1024, 256)
    x[:64] = torch.randn(64, 256)                        # what the reader reads (randn of it all: seconds)
    x = x.pin_memory()
    w = torch.randn(256, 8).to(HPU)
    copy_ctx = torch.hpu.stream(side) if copy_stream_is_side else torch.hpu.stream(torch.hpu.default_stream())
    read_ctx = torch.hpu.stream(torch.hpu.default_stream()) if copy_stream_is_side else torch.hpu.stream(side)
    with copy_ctx:
        y = x.to(HPU, non_blocking=True)
    with read_ctx:
        _reader(y, w).item()                             # compile the reader outside the window
    torch.hpu.synchronize()
    del y               # its 256 MB are not freed inside the window
    with no_cyclic_gc(), ev.Collector() as c:
        with copy_ctx:
            y = x.to(HPU, non_blocking=True)
        with read_ctx:
            z = _reader(y, w)
        v = z.item()
        first = y[0, 0].item()
    assert v == pytest.approx(float((x[:64] @ w.cpu()).sum()), rel=1e-4) and first == float(x[0, 0])
    return side, c


@pytest.mark.parametrize("copy_on_side", [True, False], ids=["copy-on-side", "copy-on-default"])
def test_a_recipe_reading_a_queued_copy_on_another_stream_waits_for_its_modeled_end(copy_on_side):
    side, c = _record_cross_stream(copy_on_side)
    queued, = c.of(ev.CopyQueued)
    h2d, = c.of(ev.HostToDevice)
    copy_lane, read_lane = (f"hpu:{side.stream_id}", "hpu:0") if copy_on_side else ("hpu:0", f"hpu:{side.stream_id}")
    assert h2d.lane == copy_lane and h2d.stream == queued.stream and h2d.launch_id == queued.launch_id > 0
    assert h2d.nbytes == queued.nbytes == CROSS_MB * MB and h2d.pinned and h2d.non_blocking
    reader = c.of(ev.Launch)[-1]
    assert reader.stream == int(read_lane[4:]) and queued.launch_id in reader.waits_for   # the runtime's wait
    queued_while_copying = []
    for name, card in pm.DEVICES.items():
        r = pm.retime(c.events, name)
        (cp,) = [s for s in r.spans[copy_lane] if s.kind == "copy H2D"]
        assert cp.duration_ns == cost.copy_ns(CROSS_MB * MB, card, pinned=True) > 5_000_000
        q = next(e for e in r.events if isinstance(e, ev.CopyQueued))
        assert cp.start_ns == q.t_end                      # the lane was idle: the DMA starts at the queue point
        (rd,) = [s for s in r.spans[read_lane] if s.kind == "execute"]
        launch = next(e for e in r.events if isinstance(e, ev.Launch) and e.launch_id == reader.launch_id)
        assert cp.end_ns <= rd.start_ns, name                      # ran after the copy's end
        queued_while_copying.append(launch.t_end < cp.end_ns)
        ran = next(e for e in r.events if isinstance(e, ev.HostToDevice))
        assert (ran.t_start, ran.t_end, ran.lane) == (cp.start_ns, cp.end_ns, copy_lane)
        syncs = [e for e in r.events if isinstance(e, ev.HostSync)]
        assert syncs[0].t_end >= rd.end_ns and syncs[-1].t_end >= cp.end_ns
        # the host waited at a sync, unless its own (CPU) time already reached past the copy's end:
        # on a loaded machine the tracing can outlast the copy on Gaudi 3's link
        assert r.host_ns >= 0 and (r.sync_wait_ns > 0 or syncs[-1].t_start >= cp.end_ns), name
    # the reader was queued while the copy still ran (on Gaudi's 32 GB/s link, 10.5 ms: ten times the
    # host's 0.3-1.05 ms of tracing and launching), so the wait is what ordered them
    assert queued_while_copying[0], queued_while_copying


def test_item_of_a_queued_copy_waits_for_the_copy():
    x = torch.randn(64 * MB // 4).pin_memory()
    torch.hpu.synchronize()
    with ev.Collector() as c:
        y = x.to(HPU, non_blocking=True)
        v = y[-1].item()
    assert v == float(x[-1])
    q, = c.of(ev.CopyQueued)
    sync = c.of(ev.HostSync)[0]
    assert sync.launch_id == q.launch_id                 # the host waited for the copy, by its id
    for name, card in pm.DEVICES.items():
        r = pm.retime(c.events, name)
        (cp,) = r.spans["hpu:0"]
        s = next(e for e in r.events if isinstance(e, ev.HostSync))
        assert s.t_end >= cp.end_ns and r.sync_wait_ns > 0


def _same_stream(copy_first: bool):
    """Hand-built: a big recipe on stream 0, then a 64 MB copy queued on stream 0, then a recipe on
    stream 0 reading it; the copy's run (HostToDevice) listed before or after the reader's launch
    (the stream thread emits it when it runs, which a busy stream makes late)."""
    g = ev.GraphSummary()
    host = hand_made(ev.Launch(0, 0, "host", 0, launch_id=1, key="big", stream=0, graph=g),
                   ev.CopyQueued(0, 0, "host", 0, launch_id=2, stream=0, nbytes=64 * MB),
                   ev.Launch(0, 0, "host", 0, launch_id=3, key="reader", stream=0, graph=g),
                   ev.HostSync(0, 0, "host", 0, launch_id=3))
    ran = ev.HostToDevice(0, 0, "hpu:0", 0, nbytes=64 * MB, pinned=True, non_blocking=True, stream=0, launch_id=2)
    return host[:2] + [ran] + host[2:] if copy_first else host[:3] + [ran] + host[3:]


def test_a_late_copy_event_keeps_stream_order():
    for name, card in pm.DEVICES.items():
        a, b = pm.retime(_same_stream(True), name, host=ONE_US), pm.retime(_same_stream(False), name, host=ONE_US)
        assert a.spans == b.spans and a.wall_ns == b.wall_ns
        big, cp, rd = a.spans["hpu:0"]
        assert (big.kind, cp.kind, rd.kind) == ("execute", "copy H2D", "execute")
        assert big.end_ns <= cp.start_ns and cp.end_ns <= rd.start_ns
        assert cp.duration_ns == cost.copy_ns(64 * MB, card, pinned=True)
        ran = next(e for e in b.events if isinstance(e, ev.HostToDevice))
        assert (ran.t_start, ran.t_end) == (cp.start_ns, cp.end_ns)


def test_copy_events_of_a_recording_without_their_queue_point_still_land_on_the_lane():
    """A Collector of HostToDevice alone (no CopyQueued): the copy is placed where the host was when
    it ran (an upper bound of the queue point), on its stream's lane."""
    x = torch.randn(MB // 4).pin_memory()
    torch.hpu.synchronize()
    with ev.Collector(kinds=(ev.HostToDevice,)) as c:
        y = x.to(HPU, non_blocking=True)
        torch.hpu.synchronize()
    assert torch.equal(y.cpu(), x)
    r = pm.retime(c.events, "gaudi2")
    (cp,) = r.spans["hpu:0"]
    assert cp.kind == "copy H2D" and cp.duration_ns == cost.copy_ns(MB, pm.DEVICES["gaudi2"], pinned=True)


def test_retimed_copies_are_not_tracked_by_the_garbage_collector():
    """A panel keeps a recording's re-timed copies; like the recorded events (events._untrack) they
    stay out of the cyclic collector's lists, which every full collection walks."""
    import gc
    x = torch.randn(MB // 4).pin_memory()
    torch.hpu.synchronize()
    with ev.Collector() as c:
        y = (x.to(HPU, non_blocking=True) * 2).sum()
        htcore.mark_step()
        y.item()
    r = pm.retime(c.events, "gaudi2")
    assert len(r.events) == len(c.events)
    assert r.events and not [e for e in r.events if gc.is_tracked(e)]


def _host_lane_copies(non_blocking, nbytes, card):
    """One pinned copy of ``nbytes`` recorded and re-timed on ``card``: (host-lane ns spent in it, the
    step's host ns), as notebook 06 section 9 reads them."""
    x = torch.zeros(nbytes // 4).pin_memory()
    torch.hpu.synchronize()
    with ev.Collector() as c:
        y = x.to(HPU, non_blocking=non_blocking)
        torch.hpu.synchronize()
    del y
    r = pm.retime(c.events, card)
    spent = sum(e.duration_ns for e in r.events
                if e.lane == "host" and isinstance(e, (ev.HostToDevice, ev.CopyQueued)))
    return spent, c


@pytest.mark.parametrize("card", sorted(pm.DEVICES))
def test_a_queued_copy_costs_the_host_its_submission_and_a_blocking_one_its_transfer(card):
    # the bridge's pinned non_blocking H2D copy still runs its bookkeeping and synMemCopyAsync on the host
    # (docs/gaudi_clock.md, "The host lane"): copy_queue_ns, on every card, whatever the size; a blocking
    # copy holds the host for the modeled transfer (set-up + bytes over the host link)
    c = pm.card(card)
    for nbytes in (1024, 12 * MB):
        queued, rq = _host_lane_copies(True, nbytes, card)
        held, rb = _host_lane_copies(False, nbytes, card)
        assert len(rq.of(ev.CopyQueued)) == 1 and rb.of(ev.CopyQueued) == []
        assert queued == pm.HOST.copy_queue_ns > 0
        assert held == cost.copy_ns(nbytes, c, pinned=True)
    # so a queued 1 KB copy saves the host almost nothing (its transfer is mostly the DMA set-up), and a
    # 12 MB one nearly all of its transfer
    assert cost.copy_ns(1024, c, pinned=True) - pm.HOST.copy_queue_ns < 1_000     # ns
    assert cost.copy_ns(12 * MB, c, pinned=True) - pm.HOST.copy_queue_ns > 0.9 * cost.copy_ns(12 * MB, c, pinned=True)
