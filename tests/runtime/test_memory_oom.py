"""Device memory: Limit, InUse/MaxInUse, mem_get_info, memory_summary, and out-of-memory errors
the runtime recovers from (seed 003 "Usage of mark_step", claim M2)."""
import gc

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import config, events as ev, lazy
from hpu_lab.runtime.memory import HPUOutOfMemoryError

MiB = 1 << 20


def _limit(extra: int) -> None:
    """Limit = what is in use now (other tests' garbage included) + ``extra`` bytes."""
    gc.collect()
    config.set(HPU_LAB_MEMORY_LIMIT=str(torch.hpu.memory_allocated() + extra))


@pytest.fixture
def batches():
    torch.manual_seed(0)
    return [torch.randn(MiB // 4) for _ in range(24)]       # 24 host batches of 1 MiB


def _accumulate(batches, cut):
    """A loop over host batches; ``cut``: mark_step after each one (seed 003)."""
    acc = torch.zeros((), device="hpu")
    for b in batches:
        x = b.to("hpu")                     # an input of the graph; the tensor dies next iteration
        acc = acc + (x * 2).sum()
        if cut:
            htcore.mark_step()
    return acc


def test_limit_and_queries():
    config.set(HPU_LAB_MEMORY_LIMIT="64MiB")
    base = torch.hpu.memory_allocated()
    x = torch.zeros(MiB // 4, device="hpu")
    assert torch.hpu.memory_allocated() == base + MiB
    assert torch.hpu.mem_get_info() == (64 * MiB - torch.hpu.memory_allocated(), 64 * MiB)
    assert torch.hpu.memory_stats()["Limit"] == 64 * MiB == torch.hpu.memory_reserved()
    del x
    assert torch.hpu.memory_allocated() == base
    summary = torch.hpu.memory_summary()
    assert "64.00 MiB" in summary and all(k in summary for k in ("Limit", "InUse", "MaxInUse"))


def test_one_huge_lazy_graph_ooms_where_mark_step_cuts_fit(batches):     # claim M2
    _limit(16 * MiB)
    torch.hpu.reset_peak_memory_stats()
    base = torch.hpu.memory_allocated()
    cut = _accumulate(batches, cut=True)
    assert torch.hpu.max_memory_allocated() - base <= 4 * MiB   # one batch in flight at a time
    with pytest.raises(HPUOutOfMemoryError) as err:
        whole = _accumulate(batches, cut=False)
        htcore.mark_step()
    msg = str(err.value)
    assert "Device out of memory" in msg and "24.00 MiB of inputs whose tensors were freed" in msg
    assert "Limit is" in msg and "nodes)" in msg and "mark_step()" in msg


def test_after_an_oom_the_pending_graph_is_kept_and_runs_when_it_fits(batches, collect):
    _limit(16 * MiB)
    whole = _accumulate(batches, cut=False)
    pending = len(lazy.S.pg)
    with pytest.raises(HPUOutOfMemoryError):
        whole.item()                                            # the sync that needed the graph
    assert len(lazy.S.pg) == pending and collect.of(ev.Launch) == []
    config.set(HPU_LAB_MEMORY_LIMIT="64MiB")
    assert whole.item() == sum((b * 2).sum() for b in batches).item()
    assert len(collect.of(ev.Compile)) == 1                      # compiled once, before the OOM


def test_freeing_tensors_makes_room(collect):
    _limit(12 * MiB)
    hog = torch.zeros(2 * MiB, device="hpu")                     # 8 MiB held by the user
    htcore.mark_step()
    y = torch.ones(MiB // 4, device="hpu")
    z = (y * 3 + 1) * 2                                          # 1 MiB intermediate, 1 MiB out
    big = torch.ones(MiB, device="hpu") + 1                      # 4 MiB more: does not fit
    with pytest.raises(HPUOutOfMemoryError, match="InUse"):
        htcore.mark_step()
    del hog
    htcore.mark_step()                                           # same graph, now it fits
    assert z.cpu()[0].item() == 8.0 and big.cpu()[0].item() == 2.0


def test_plan_counts_intermediates_alive_together(collect):
    x = torch.ones(MiB // 4, device="hpu")                       # 1 MiB
    htcore.mark_step()
    y = x
    for _ in range(5):
        y = y * 2                                                # each dies at the next op
    htcore.mark_step()
    a, b, c = x * 2, x * 3, x * 4                                # all three alive until the end
    s = (a + b) + c
    del a, b, c
    htcore.mark_step()
    chain, together = [e.peak_bytes for e in collect.of(ev.Compile)][-2:]
    assert chain <= 2 * MiB and together >= 3 * MiB
    assert s.cpu()[0].item() == 9.0


def test_eager_oom_fails_the_op_and_the_runtime_goes_on():
    config.set(PT_HPU_LAZY_MODE="0")
    _limit(5 * MiB // 2)
    x = torch.ones(MiB // 4, device="hpu")                       # 1 MiB
    y = x * 2                                                    # 2 MiB in use: fits
    try:
        x + y                                                    # a third MiB: does not
        raise AssertionError("expected an out-of-memory error")
    except HPUOutOfMemoryError:
        pass                                                     # (drops the failed op's output)
    assert len(lazy.S.pg) == 0
    del y
    assert (x + x).cpu()[0].item() == 2.0


def test_more_than_the_host_can_hold_is_a_clear_error_not_a_killed_process(monkeypatch):
    """Buffers live in the host's RAM: tensors the emulated Limit allows but the host cannot hold
    (Intel's test_huge_tensor: 8 GiB tensors) are refused with an error at the op that makes them,
    where the kernel's OOM killer would otherwise end the process without a word."""
    from hpu_lab.runtime import memory
    gc.collect()
    ram = int((torch.hpu.memory_allocated() + 200 * MiB) / memory._HOST_SHARE) + 1
    monkeypatch.setattr(memory, "host_ram", lambda: ram)                 # room for 200 MiB more
    a = torch.ones(128 * MiB, dtype=torch.uint8, device="hpu")           # fits
    with pytest.raises(HPUOutOfMemoryError, match="Host out of memory.*more than the host can back"):
        torch.ones(128 * MiB, dtype=torch.uint8, device="hpu")            # the second does not
    with pytest.raises(HPUOutOfMemoryError, match="Host out of memory"):
        torch.empty(128 * MiB, dtype=torch.uint8, device="hpu")
    assert a.sum().item() == 128 * MiB                                    # the runtime goes on
    del a
    gc.collect()
    b = torch.ones(128 * MiB, dtype=torch.uint8, device="hpu")           # room again once freed
    assert b[:4].cpu().tolist() == [1, 1, 1, 1]
    del b
    monkeypatch.setattr(memory, "host_ram", lambda: None)                # unreadable: no check
    assert torch.empty(300 * MiB, dtype=torch.uint8, device="hpu").numel() == 300 * MiB
