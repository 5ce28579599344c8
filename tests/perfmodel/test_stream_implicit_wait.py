"""The runtime's implicit cross-stream wait is on the Gaudi clock (lazy/launch.py, perfmodel/timeline.py):
a recipe that reads what a launch on another stream produced starts after that launch's modeled end,
with no wait_event/wait_stream in the program; independent work on another stream still overlaps."""
import torch

import hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab import perfmodel as pm

from helpers import ONE_US, hand_made

HPU = torch.device("hpu")


def _record(dependent: bool):
    """A big matmul launched on a side stream; then, on the default stream, a recipe that reads its
    result (dependent) or one that does not; no explicit wait in either program."""
    side = torch.hpu.Stream()
    a = torch.randn(512, 512).to(HPU)
    c = torch.randn(64, 64).to(HPU)
    torch.hpu.synchronize()
    with ev.Collector() as col:
        with torch.hpu.stream(side):
            b = a @ a @ a
            htcore.mark_step()                      # launched on `side`
        d = (b + 1).sum() if dependent else (c + 1).sum()
        htcore.mark_step()                          # launched on the default stream
        torch.hpu.synchronize()
    want = (a.cpu() @ a.cpu() @ a.cpu() + 1).sum() if dependent else (c.cpu() + 1).sum()
    assert torch.allclose(d.cpu(), want, rtol=1e-4)
    return side, col


def test_a_read_across_streams_is_recorded_on_the_launch():
    side, col = _record(dependent=True)
    producer, consumer = col.of(ev.Launch)
    assert producer.stream == side.stream_id and consumer.stream == 0
    assert consumer.waits_for == (producer.launch_id,) and producer.waits_for == ()
    assert not col.of(ev.StreamWait)                # nothing explicit in the program
    for card in pm.DEVICES:
        r = pm.retime(col.events, card)
        (p,) = r.spans[f"hpu:{side.stream_id}"]
        (q,) = r.spans["hpu:0"]
        assert q.start_ns >= p.end_ns
    side, col = _record(dependent=False)
    assert [e.waits_for for e in col.of(ev.Launch)] == [(), ()]


def _two_streams(waits_for):
    """A launch on stream 1, then, 1 us of host CPU later, a launch on stream 0 (each lasts a recipe's
    launch latency: longer than 1 us on every card); 1 us apart on the ONE_US host model."""
    return hand_made(ev.Launch(0, 0, "host", 0, launch_id=1, key="side", stream=1),
                   ev.Launch(0, 0, "host", 0, launch_id=2, key="main", stream=0, waits_for=waits_for))


def test_implicit_cross_stream_wait_is_on_the_gaudi_clock():
    for card in pm.DEVICES:
        free = pm.retime(_two_streams(()), card, host=ONE_US)
        (p,), (q,) = free.spans["hpu:1"], free.spans["hpu:0"]
        assert q.start_ns < p.end_ns                # independent: the lanes overlap
        ordered = pm.retime(_two_streams((1,)), card, host=ONE_US)
        (p2,), (q2,) = ordered.spans["hpu:1"], ordered.spans["hpu:0"]
        assert p2 == p and q2.start_ns == p.end_ns and q2.duration_ns == q.duration_ns
        assert ordered.wall_ns == q2.end_ns > free.wall_ns


def _sync_on_default_stream(how: str):
    """Long work on a side stream, short work on the default stream, then the host waits for the
    default stream only: ``Event.synchronize()`` of an event recorded there, or
    ``Stream.synchronize()`` after it."""
    side = torch.hpu.Stream()
    a = torch.randn(2048, 2048).to(HPU)
    c = torch.randn(64, 64).to(HPU)

    def work():
        with torch.hpu.stream(side):
            b = a @ a @ a
            htcore.mark_step()                      # long, on `side`
        d = (c + 1).sum()
        htcore.mark_step()                          # short, on the default stream
        return b, d
    work()
    torch.hpu.synchronize()
    with ev.Collector() as col:
        b, d = work()
        done = torch.hpu.Event()
        done.record()
        if how == "event":
            done.synchronize()
        else:
            torch.hpu.current_stream().synchronize()
    torch.hpu.synchronize()
    assert torch.allclose(d.cpu(), (c.cpu() + 1).sum(), rtol=1e-4)
    return side, col


def test_a_sync_on_a_recorded_event_waits_for_its_stream_only():
    for how in ("event", "stream"):
        side, col = _sync_on_default_stream(how)
        long_launch, short_launch = col.of(ev.Launch)
        rec, = col.of(ev.StreamRecord)
        sync = col.of(ev.HostSync)[-1]
        assert (long_launch.stream, short_launch.stream, rec.stream) == (side.stream_id, 0, 0)
        assert sync.launch_id == rec.marker > 0          # the sync names the marker it waited for
    # on the model: the two recorded recipes, the marker and the sync, 1 us of host CPU apart (the
    # side stream's matmuls outlast that on every card)
    events = hand_made(ev.Launch(0, 0, "host", 0, launch_id=1, key="long", stream=1, graph=long_launch.graph),
                     ev.Launch(0, 0, "host", 0, launch_id=2, key="short", stream=0, graph=short_launch.graph),
                     ev.StreamRecord(0, 0, "host", 0, marker=3, stream=0),
                     ev.HostSync(0, 1, "host", 0, reason="Event.synchronize()", launch_id=3))
    for card in pm.DEVICES:
        r = pm.retime(events, card, host=ONE_US)
        (long_,), (short,) = r.spans["hpu:1"], r.spans["hpu:0"]
        s = [e for e in r.events if isinstance(e, ev.HostSync)][-1]
        assert short.end_ns < long_.end_ns, card
        assert s.t_end == short.end_ns, card             # its stream's work, not the side stream's
