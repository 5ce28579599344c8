"""Pinned memory, non_blocking copies and CPU operands of hpu ops (issue 11, points 5 and 10)."""
import gc
import threading

import pytest
import torch

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import events
from hpu_lab.runtime import pinned
from hpu_lab.runtime import executor

from helpers import cyclic_garbage


def h2d(c):
    return c.of(events.HostToDevice)


def test_pin_memory_and_is_pinned():
    x = torch.randn(4, 6)[:, ::2]                          # strided: layout is kept
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned() and p[1:].is_pinned()
    assert torch.equal(p, x) and p.stride() == x.stride()
    assert not torch.ones(2, device="hpu").is_pinned()
    r = pinned.region_of(p)
    assert r is not None and r.end - r.start >= p.numel() * 4
    before = pinned.stats()["regions"]
    view = p[2]
    del p
    gc.collect()
    assert view.is_pinned()                                # a view keeps the mapping alive
    del view
    gc.collect()
    assert pinned.stats()["regions"] == before - 1
    empty = torch.empty(0).pin_memory()
    assert empty.is_pinned() and empty.shape == (0,)


def test_dataloader_pins_batches_for_hpu():
    ds = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.arange(8))
    with pytest.warns(UserWarning, match="pin_memory_device is deprecated"):   # torch's own notice
        dl = torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True, pin_memory_device="hpu")
        batches = list(dl)
    assert all(a.is_pinned() and b.is_pinned() for a, b in batches)


def test_copy_paths_recorded(collect):
    x = torch.randn(16, 4)
    p = x.pin_memory()
    a = x.to("hpu")                                   # pageable: staged by the host, host waits
    b = x.to("hpu", non_blocking=True)                # pageable: non_blocking cannot help
    c = p.to("hpu")                                   # pinned, blocking: no staging copy
    d = p.to("hpu", non_blocking=True)                # pinned + non_blocking: queued on the stream
    total = (a + b + c + d).sum().item()
    assert total == pytest.approx((x * 4).sum().item(), rel=1e-6)
    ev = h2d(collect)
    got = [(e.pinned, e.non_blocking, e.staging_bytes, e.stream, e.lane) for e in ev]
    n = x.numel() * 4
    assert got == [(False, False, n, -1, "host"), (False, True, n, -1, "host"), (True, False, 0, -1, "host"),
                   (True, True, 0, 0, "hpu:0")]
    assert all(e.nbytes == n and e.op == "aten::copy_" for e in ev)


def test_non_blocking_copy_does_not_wait_and_later_reads_order_after_it(collect):
    p = torch.arange(10.0).pin_memory()
    gate = threading.Event()
    executor.stream(0).submit_fn(gate.wait)          # the stream is busy until the gate opens
    h = p.to("hpu", non_blocking=True)
    # .to returned while the stream was blocked: the copy is queued, not done
    assert h2d(collect) == [] and h._st.value.launch is not None and not h._st.value.launch.done.is_set()
    y = h * 2                                         # recorded lazily, reads h's pending buffer
    htcore.mark_step()                                # launched on stream 0, behind the copy
    gate.set()
    assert y.cpu().tolist() == [2.0 * i for i in range(10)]
    (e,) = h2d(collect)
    launches = collect.of(events.DeviceExecution)
    assert e.stream == 0 and launches and launches[-1].t_start >= e.t_end   # the recipe ran after the copy


def test_non_blocking_copy_read_from_another_stream():
    p = torch.full((64,), 3.0).pin_memory()
    gate = threading.Event()
    executor.stream(0).submit_fn(gate.wait)
    h = p.to("hpu", non_blocking=True)               # queued on stream 0 (blocked)
    side = torch.hpu.Stream()
    with torch.hpu.stream(side):
        z = h + 1
        htcore.mark_step()                            # launched on the side stream: must wait for the copy
    gate.set()
    assert z.cpu().tolist() == [4.0] * 64


def test_non_blocking_copy_into_a_view():
    dst = torch.zeros(3, 4, device="hpu")
    src = torch.ones(4).pin_memory()
    dst[1].copy_(src, non_blocking=True)
    assert dst.cpu().tolist() == [[0.0] * 4, [1.0] * 4, [0.0] * 4]


def test_cpu_operands_are_copied_to_the_device(collect):
    # the Gaudi inference tutorials end with output.max(1)[1].eq(label), label still on the CPU
    torch.manual_seed(0)
    out = torch.randn(8, 5)
    label = torch.randint(0, 5, (8,))
    correct = out.to("hpu").max(1)[1].eq(label).sum()
    assert correct.device.type == "hpu" and correct.item() == out.max(1)[1].eq(label).sum().item()
    (e,) = [e for e in h2d(collect) if e.op == "CPU operand"]
    assert e.nbytes == label.numel() * 8 and e.stream == -1
    w = torch.randn(5, 3)
    assert torch.allclose((out.to("hpu") @ w).cpu(), out @ w)           # any shape, matmul too
    assert torch.equal(torch.where(torch.ones(5, dtype=torch.bool, device="hpu"), torch.zeros(5), 1.0).cpu(),
                       torch.zeros(5))


def test_cpu_operands_that_still_fail():
    h = torch.ones(3, device="hpu")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3).add_(h)                         # a CPU tensor written by an hpu op
    assert (h + 1).sum().item() == 6.0                # the runtime is still usable


def test_cpu_tensor_in_a_list_operand():
    # the bridge's shape ops take list inputs through GetOrCreateHbLazyTensor, which also makes a
    # device tensor of a CPU one
    h = torch.arange(3.0, device="hpu")
    assert torch.cat([h, torch.ones(2)]).cpu().tolist() == [0.0, 1.0, 2.0, 1.0, 1.0]


def test_a_queued_copy_or_marker_frees_what_it_holds_without_a_cyclic_collection():
    """A queued copy's function names its own launch (for its event), and the launch holds the
    buffer the copy made: the worker drops the function once it ran, so no cycle keeps the buffer
    alive until a cyclic collection (which then freed every such buffer at once, in the middle of
    whatever the user's thread was doing: 64 MB copies made a 20-40 ms system-time stall)."""
    x = torch.randn(64, 256).pin_memory()
    with cyclic_garbage() as garbage:
        y = x.to("hpu", non_blocking=True)
        e = torch.hpu.Event(enable_timing=True)
        e.record()
        assert torch.equal(y.cpu(), x)
        e.synchronize()
        del y, e
        torch.hpu.synchronize()
    held = [t.__name__ for t in garbage if issubclass(t, executor.Launch)]
    assert held == []


def test_a_pageable_copy_is_one_memcpy_here_and_staged_on_the_clock(collect, monkeypatch):
    """The staging copy of a pageable source is the Gaudi clock's (``staging_bytes``): the emulator
    copies the data once, straight into the device buffer, and the values are the source's, strided
    source included."""
    clones = []
    real_clone = torch.Tensor.clone

    def counting_clone(self, *a, **k):
        clones.append(self.shape)
        return real_clone(self, *a, **k)
    monkeypatch.setattr(torch.Tensor, "clone", counting_clone)
    x = torch.randn(8, 6)[:, ::2]
    d = torch.empty(8, 3, device="hpu")
    d.copy_(x)
    monkeypatch.undo()
    assert clones == []
    assert torch.equal(d.cpu(), x)
    (e,) = h2d(collect)
    assert (e.pinned, e.staging_bytes, e.stream) == (False, x.numel() * 4, -1)
