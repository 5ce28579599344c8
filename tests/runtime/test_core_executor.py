"""The device executor: asynchronous launches, errors at the next sync, memory accounting."""
import threading

import pytest
import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab import lazy
from hpu_lab.runtime import executor


def test_launch_returns_before_the_device_finishes(collect):          # claim T9
    gate = threading.Event()
    executor.stream(0).submit_fn(gate.wait)       # the device is busy until we open the gate
    x = torch.randn(64, 64).to("hpu")
    y = x @ x
    launch = lazy.mark_step()
    assert launch is not None and not launch.done.is_set()   # host went on: asynchronous
    z = y + 1                                                # and keeps tracing the next step
    assert len(lazy.S.pg) == 1
    gate.set()
    torch.hpu.synchronize()
    assert launch.done.is_set()
    assert torch.allclose(z.cpu(), x.cpu() @ x.cpu() + 1, atol=1e-5)
    launches = collect.of(ev.Launch)
    execs = collect.of(ev.DeviceExecution)
    assert execs[0].lane == "hpu:0" and execs[0].t_end > launches[0].t_end


def test_device_error_surfaces_at_next_sync_and_runtime_stays_usable():
    x = torch.arange(5.0).to("hpu")
    idx = torch.tensor([7]).to("hpu")
    y = x[idx] * 2                                  # out of range: fails on the device, not here
    htcore.mark_step()
    with pytest.raises(RuntimeError) as info:
        torch.hpu.synchronize()
    msg = str(info.value)
    assert "aten::index" in msg and "test_core_executor.py:" in msg
    # the runtime goes on
    assert (x * 3).sum().item() == 30.0
    torch.hpu.synchronize()


def test_reading_a_failed_value_raises_again_with_the_op():
    x = torch.arange(5.0).to("hpu")
    y = x[torch.tensor([9]).to("hpu")]
    with pytest.raises(RuntimeError, match="aten::index"):
        y.item()
    assert (x + 1).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_memory_stats_follow_tensors():
    torch.hpu.synchronize()
    base = torch.hpu.memory_allocated()
    stats = torch.hpu.memory_stats()
    assert set(stats) == {"Limit", "InUse", "MaxInUse", "NumAllocs", "NumFrees", "ActiveAllocs",
                          "MaxAllocSize", "TotalSystemAllocs", "TotalSystemFrees", "TotalActiveAllocs"}
    a = torch.empty(1024, 256, device="hpu")             # 1 MiB
    assert torch.hpu.memory_allocated() - base == 1024 * 256 * 4
    torch.hpu.reset_peak_memory_stats()
    b = (a.fill_(1) * 2).sum()
    htcore.mark_step()
    peak = torch.hpu.max_memory_allocated()
    assert peak >= torch.hpu.memory_allocated()
    del a
    assert torch.hpu.memory_allocated() < base + 1024 * 256 * 4
    free, total = torch.hpu.mem_get_info()
    assert total == stats["Limit"] == 96 * 2**30 and free == total - torch.hpu.memory_allocated()
    assert "InUse" in torch.hpu.memory_summary()
    assert b.item() == 2 * 1024 * 256


def test_events_observers_have_removable_handles():
    seen = []
    h = ev.subscribe(seen.append, [ev.MarkStep])
    htcore.mark_step()
    h.remove()
    htcore.mark_step()
    assert len(seen) == 1 and isinstance(seen[0], ev.MarkStep)


def test_a_streams_last_launch_keeps_no_buffer_once_its_tensors_are_gone():
    """A stream remembers its last launch for the next sync, not the launch's outputs: a side
    stream's one copy (or recipe) must not keep its buffer alive after the tensors are gone."""
    import weakref

    side = torch.hpu.Stream()
    x = torch.randn(1000).pin_memory()
    with torch.hpu.stream(side):
        y = x.to("hpu", non_blocking=True)          # a Copy, the last launch of the side stream
        z = y * 2                                   # a recipe on the side stream reading it
        z.cpu()
    side.synchronize()
    bufs = [weakref.ref(t._st.value.get()) for t in (y, z)]
    del y, z
    assert [b() is None for b in bufs] == [True, True]   # freed by reference counting, no gc needed
    side.synchronize()                              # a sync on the settled last launch still works
    assert side.query()
