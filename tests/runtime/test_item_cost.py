"""The host reads of one element (``.item()``, ``float(t)``, ``bool(t)``): equal to CPU, reported as the
Gaudi clock needs them (one HostSync, one DeviceToHost of the element), and without the emulator's own
layers on the user's host lane: they skip torch's dispatch into ``__torch_dispatch__`` (docs/gaudi_clock.md
§3, "Host reads"). Counts and the recorder's calls, never wall time."""
import sys
import threading
import time

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import hpu_lab.core as htcore
from hpu_lab import config, events as ev
from hpu_lab.runtime import executor

READS = {"item": lambda t: t.item(), "float": float, "bool": bool}


def _cases():
    torch.manual_seed(0)
    yield "0-d float32", torch.randn(())
    yield "0-d bfloat16", torch.randn((), dtype=torch.bfloat16)
    yield "0-d int64", torch.tensor(-(2 ** 40) - 3)
    yield "0-d bool", torch.tensor(True)
    yield "0-d zero", torch.tensor(0.0)
    yield "[[x]] float64", torch.randn(1, 1, dtype=torch.float64)
    yield "view of a matrix", torch.randn(5, 7)[3, 5]
    yield "strided view", torch.randn(6, 4).t()[2:3, 1]


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("read", sorted(READS))
def test_one_element_reads_equal_cpu(lazy, read):
    config.set(PT_HPU_LAZY_MODE="1" if lazy else "0")
    fn = READS[read]
    for name, c in _cases():
        base = c._base if c._base is not None else c
        h = base.to("hpu")
        if c._base is not None:             # the same view of the hpu copy
            h = h.as_strided(c.size(), c.stride(), c.storage_offset())
        want = fn(c)
        assert type(fn(h)) is type(want) and fn(h) == want, name           # finished value
        assert fn(h * 1) == fn(c * 1), name                                # pending value: a flush
        htcore.mark_step()
        assert fn(h + 0) == fn(c + 0), name


def test_reads_of_a_grad_requiring_and_a_zero_tensor_equal_cpu():
    w = torch.randn((), requires_grad=True)
    hw = w.detach().to("hpu").requires_grad_()
    assert hw.item() == w.item() and float(hw * 3) == float(w * 3)
    z = torch._efficientzerotensor((1,), dtype=torch.float32, device="hpu")
    assert z._is_zerotensor() and z.item() == 0.0 and float(z) == 0.0 and bool(z) is False


def test_more_than_one_element_raises_as_cpu(collect):
    h = torch.randn(2).to("hpu")
    with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"):
        h.item()
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
        float(h)
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(h)
    h.cpu()       # the refused reads left their name to the next sync (before: "bool(tensor): ...")
    assert [e.reason for e in collect.of(ev.HostSync)][-1] == ".cpu()"


def test_item_of_a_grad_requiring_tensor_warns_as_cpu():
    """torch warns once a process (TORCH_WARN_ONCE) on ``.item()`` of a tensor requiring grad: the
    first such read takes torch's way, so that its warning is given or not exactly as on CPU; the
    later ones the short way."""
    from hpu_lab import tensor
    tensor._GRAD_WARNING[:] = [True]
    h = torch.tensor(1.5).to("hpu").requires_grad_()
    first, later = _python_calls(h.item), _python_calls(h.item)
    assert any(f == "__torch_dispatch__" for _, f in first)
    assert not any(f == "__torch_dispatch__" for _, f in later) and not tensor._GRAD_WARNING
    assert h.item() == 1.5


def _python_calls(fn):
    """The (file, function) of every Python frame entered while ``fn()`` runs: a file as
    folder/name.py (``dispatch/route.py``)."""
    names = []

    def prof(frame, event, arg):
        if event == "call":
            names.append(("/".join(frame.f_code.co_filename.rsplit("/", 2)[-2:]), frame.f_code.co_name))
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return names


def test_item_of_a_finished_value_skips_torch_dispatch_into_the_emulator(collect):
    """Before, ``.item()`` went item -> torch -> __torch_dispatch__ -> backward_errors -> router ->
    local_scalar_dense -> to_cpu -> a host tensor cloned for the copy -> its .item(): 10 frames of
    the emulator besides the events, ~11 us of the user's host lane a read on an idle machine."""
    s = (torch.randn(8).to("hpu") * 2).sum()
    htcore.mark_step()
    s.item()
    calls = _python_calls(s.item)
    assert not any(f == "__torch_dispatch__" or m == "dispatch/route.py" for m, f in calls)
    emulator = [c for c in calls if c[0] in ("tensor/__init__.py", "lazy/state.py", "lazy/storage.py",
                                             "lazy/trace.py", "lazy/flushing.py", "dispatch/special_ops.py",
                                             "dispatch/route.py", "kernels/backward_errors.py",
                                             "runtime/readback.py")]
    # item, _plain_read, read_item, _synced, build_layout, readback.report
    assert len(emulator) <= 6, emulator


def test_a_dispatch_mode_still_sees_the_read():
    seen = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    h = torch.tensor(2.5).to("hpu")
    htcore.mark_step()
    with Watch():
        assert h.item() == 2.5 and float(h) == 2.5 and bool(h) is True
    assert seen.count(torch.ops.aten._local_scalar_dense.default) == 3
