"""Streams and events: work lands on the chosen stream, events order and time it."""
import threading

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab import lazy
from hpu_lab.runtime import executor


def test_default_and_side_streams():
    d = torch.hpu.default_stream()
    assert d.stream_id == 0 and torch.hpu.current_stream() == d
    s = torch.hpu.Stream()
    assert s.stream_id != 0 and s != d
    with torch.hpu.stream(s):
        assert torch.hpu.current_stream() == s and lazy.S.stream == s.stream_id
        with torch.hpu.stream(None):               # None: no-op
            assert torch.hpu.current_stream() == s
    assert torch.hpu.current_stream() == d
    torch.hpu.set_stream(s)
    assert torch.hpu.current_stream() == s
    torch.hpu.set_stream(d)
    assert lazy.S.stream == 0


def test_work_is_launched_on_the_current_stream():
    s = torch.hpu.Stream()
    x = torch.ones(3).to("hpu")
    with ev.Collector(kinds=[ev.Launch, ev.DeviceExecution]) as c:
        with torch.hpu.stream(s):
            y = x + 1
            htcore.mark_step()
        z = y * 2                                   # reads a value made on the side stream
        htcore.mark_step()
        assert z.tolist() == [4.0] * 3
    launches = c.of(ev.Launch)
    assert [e.stream for e in launches] == [s.stream_id, 0]
    assert {e.lane for e in c.of(ev.DeviceExecution)} == {f"hpu:{s.stream_id}", "hpu:0"}


def _block_stream(index):
    """Hold a stream's worker until the returned event is set (a slow kernel, deterministically)."""
    gate = threading.Event()
    executor.stream(index).submit_fn(gate.wait)
    return gate


def test_cross_stream_input_waits_for_its_producer():
    """Without wait_stream, reading a value another stream has not finished is still correct."""
    s = torch.hpu.Stream()
    x = torch.ones(4).to("hpu")
    gate = _block_stream(s.stream_id)
    with torch.hpu.stream(s):
        y = x * 7
        htcore.mark_step()                         # queued behind the gate
    z = y + 1
    htcore.mark_step()                             # stream 0 must wait for stream s
    assert not torch.hpu.default_stream().query()
    gate.set()
    assert z.tolist() == [8.0] * 4


def test_event_record_query_synchronize_and_wait():
    s = torch.hpu.Stream()
    gate = _block_stream(s.stream_id)
    e = torch.hpu.Event()
    assert e.query()                               # never recorded: complete
    e.record(s)
    assert not e.query() and not s.query()
    d = torch.hpu.default_stream()
    d.wait_event(e)                                # future work on stream 0 waits for e
    x = torch.ones(2).to("hpu")
    y = x + 1
    htcore.mark_step()
    assert not d.query()
    gate.set()
    e.synchronize()
    assert e.query() and s.query()
    assert y.tolist() == [2.0, 2.0]


def test_wait_stream_orders_two_streams():
    s = torch.hpu.Stream()
    gate = _block_stream(0)
    s.wait_stream(torch.hpu.current_stream())
    done = []
    executor.stream(s.stream_id).submit_fn(lambda: done.append(1))
    assert not done
    gate.set()
    s.synchronize()
    assert done == [1]


def test_event_timing():
    start, end = torch.hpu.Event(enable_timing=True), torch.hpu.Event(enable_timing=True)
    x = torch.randn(256, 256).to("hpu")
    start.record()
    y = x
    for _ in range(5):
        y = y @ x
    end.record()                                   # launches the pending matmuls first
    end.synchronize()
    ms = start.elapsed_time(end)
    assert ms > 0
    untimed = torch.hpu.Event()
    untimed.record()
    untimed.synchronize()
    with pytest.raises(RuntimeError, match="enable_timing"):
        start.elapsed_time(untimed)
    with pytest.raises(RuntimeError, match="recorded"):
        torch.hpu.Event(enable_timing=True).elapsed_time(end)


def test_record_event_and_stream_synchronize():
    s = torch.hpu.Stream()
    ev_ = s.record_event()
    assert isinstance(ev_, torch.hpu.Event)
    s.synchronize()
    assert s.query() and ev_.query()
    torch.hpu.record_stream(torch.ones(1).to("hpu"), s)      # accepted, nothing to do


def test_record_stream_is_accepted_on_hpu_streams():
    # the allocator hint of real prefetching code; it raised "Could not run 'aten::record_stream'
    # with arguments from the 'CPU' backend" (Intel's test_hpu_record_stream)
    t = torch.arange(4.).to("hpu")
    s = torch.hpu.Stream()
    with torch.hpu.stream(s):
        u = t * 2
    torch.hpu.current_stream().wait_stream(s)
    assert u.record_stream(torch.hpu.current_stream()) is None and u[1:].record_stream(s) is None
    assert u.cpu().tolist() == [0., 2., 4., 6.]
    with pytest.raises(RuntimeError, match="expected a stream on device hpu"):
        u.record_stream(torch.Stream("cpu"))


def test_record_stream_under_no_dispatch():
    # FSDP's post-backward hook records each gradient's stream with Python dispatch off
    # (torch.distributed.fsdp._common_utils._no_dispatch_record_stream); the call found no hpu kernel
    # ("Could not run 'aten::record_stream' with arguments from the 'hpu' backend"), inside the
    # autograd engine, which then aborted the process
    from torch.utils._mode_utils import no_dispatch
    u = torch.arange(4.).to("hpu") * 2
    with no_dispatch():
        assert u.record_stream(torch.hpu.current_stream()) is None
        with pytest.raises(RuntimeError, match="expected a stream on device hpu"):
            u.record_stream(torch.Stream("cpu"))
    assert u.cpu().tolist() == [0., 2., 4., 6.]
