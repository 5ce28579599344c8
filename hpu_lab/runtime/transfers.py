"""Host-to-device transfers: ``copy_``/``.to("hpu")`` (pinned or pageable, blocking or not) and CPU
operands of hpu ops.

Copy paths (seed 004: pinned memory avoids a copy on the host side):

- pageable source: the host first copies the data into a staging buffer (the extra host copy, charged
  by the Gaudi clock from ``staging_bytes``; the emulator itself copies once), then the transfer
  runs; the host waits for both, ``non_blocking`` or not (as with CUDA, an
  asynchronous copy needs page-locked memory).
- pinned source (``pin_memory()``, ``DataLoader(pin_memory=True)``): the transfer reads the buffer
  directly. With ``non_blocking=True`` it is queued on the current stream and the host goes on at
  once; the destination's buffer is that queue entry's output, so a later read (``.item()``, a
  recipe launched on this or another stream) waits for it (``lazy.launch.launch_recipe`` orders
  cross-stream inputs). Without ``non_blocking`` the host does the transfer and waits.

Each transfer emits one ``events.HostToDevice``: ``pinned`` (source in pinned memory),
``non_blocking`` (what the caller asked), ``staging_bytes`` (bytes the host copied into a staging
buffer first: 0 when pinned), ``stream`` (-1: the host did it and waited; else the device stream
it was queued on, and the event lies on that stream's lane, timed when the copy ran) and ``op``.
A queued copy also emits ``events.CopyQueued`` on the host when it is queued (the same
``launch_id`` as its ``HostToDevice``): where its DMA starts on the Gaudi clock.

Mixed operands (issue 11, point 5): the Gaudi bridge's lazy ops (``LazyOp::set_inputs`` in
``habana_kernels/lazy_kernels.h``) move every non-HPU tensor input to the device with
``tensor.to(kHPU, non_blocking=true)`` before the op is recorded, whatever its shape; a Python
number wrapped as a tensor becomes a (cached) device scalar. So ``hpu_out.eq(cpu_label)`` works on
Gaudi and gives an hpu tensor. Its shape ops take list inputs through
``GetOrCreateHbLazyTensor`` (``habana_lazy/aten_lazy_bridge.cpp``), which also turns a CPU tensor
into a device one. hpu_lab does the same for every CPU tensor read by an hpu op, alone or in a list
(``torch.cat([hpu, cpu])``): it is copied to the device (a blocking transfer, one ``HostToDevice``
event with ``op="CPU operand"``) and the op reads the copy; the result is on hpu. A CPU tensor
*written* by an hpu op (``cpu.add_(hpu)``, ``out=cpu``) still fails with torch's device-mismatch
error, as the op's result cannot live on the CPU.
"""
from __future__ import annotations

import torch

from .. import events as ev
from . import pinned
from ..util._source import user_src


def _emit(t0, t1, lane, nbytes, is_pinned, non_blocking, staging, stream, op, src, launch_id=0):
    if ev.wants(ev.HostToDevice):
        # positional, in the event's field order (emit_host: built when a recording reads it)
        ev.emit_host(ev.HostToDevice, (t0, t1, lane, ev.recorder.step, nbytes, src, is_pinned, non_blocking,
                                       staging, stream, op, launch_id))


def host_to_device(size, stride, dtype, src_t, non_blocking: bool, op: str, src: str, stream_index=None):
    """Transfer CPU tensor ``src_t`` into a new device buffer of layout (size, stride, dtype).

    Returns ``(tensor, None)`` when the host did the transfer, or ``(None, launch)`` when it was
    queued on stream ``stream_index`` (``launch.outputs[0]`` is the buffer once it has run)."""
    from . import executor
    is_pinned = pinned.region_of(src_t) is not None
    nbytes = src_t.numel() * src_t.element_size()
    if is_pinned and non_blocking and stream_index is not None:
        s = executor.stream(stream_index)
        box = [src_t.detach()]        # released once copied: the pinned buffer may be freed then

        def dma():
            t0 = ev.now()
            val = torch.empty_strided(size, stride, dtype=dtype)
            val.copy_(box.pop())
            _emit(t0, ev.now(), s.lane, nbytes, True, True, 0, s.index, op, src, launch.id)
            return (val,)

        launch = executor.Copy(dma, s.index)
        # the queue point on the host's clock, before the stream can run the copy (whose event
        # comes from the stream thread, when it runs): the Gaudi clock starts the DMA here
        if ev.wants(ev.CopyQueued):
            t = ev.now()
            ev.emit(ev.CopyQueued(t, t, "host", ev.recorder.step, launch_id=launch.id, stream=s.index,
                                  nbytes=nbytes, src=src))
        s.submit(launch)
        return None, launch
    # A pageable source goes through a staging buffer on a real host: the Gaudi clock charges that
    # memcpy from the event's staging_bytes (perfmodel.cost.staging_ns). The emulator copies once,
    # synchronously, which gives the same values: a second copy here would be its own time only.
    t0 = ev.now()
    val = torch.empty_strided(size, stride, dtype=dtype)
    val.copy_(src_t)
    _emit(t0, ev.now(), "host", nbytes, is_pinned, bool(non_blocking), 0 if is_pinned else nbytes, -1, op, src)
    return val, None


def operand(a: torch.Tensor, op: str = ""):
    """A CPU tensor given to an hpu op: its device copy (a blocking transfer), as a CPU tensor that
    stands for the device buffer."""
    size, stride = tuple(a.shape), tuple(a.stride())
    if not a.is_contiguous():
        size, stride = tuple(a.shape), tuple(torch.empty(a.shape, device="meta").stride())
    val, _ = host_to_device(size, stride, a.dtype, a, False, f"{op} (CPU operand)" if op else "CPU operand", user_src(4))
    return val
