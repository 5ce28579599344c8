"""The eager path of a collective: a host sync, gloo on CPU copies, the results written back.

Without lazy collectives (``PT_HPU_ENABLE_LAZY_COLLECTIVES`` unset, or eager mode) a collective on
hpu tensors cuts the lazy graph where it stands: what the inputs need is launched and waited for
(one ``HostSync`` with reason ``collective all_reduce``), gloo runs on CPU copies, and each output
tensor gets its result through hpu_lab's ordinary ``copy_`` (an H2D write: views of a storage and
its base see it, as after any in-place op). A ``Collective`` event (lane ``host``) reports the op.

During an HPU Graph capture this path is refused: a host sync cannot be part of a graph. With lazy
collectives the same call is a node of the graph instead (``lazy_collectives.py``).
"""
from __future__ import annotations

import torch

from .. import events as ev
from .. import lazy
from ..runtime import executor
from ..tensor import HPUTensor, Out


def is_hpu(t) -> bool:
    return isinstance(t, HPUTensor)


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


LAZY_HINT = ("multi-card HPU Graphs need PT_HPU_ENABLE_LAZY_COLLECTIVES=true, which records collectives "
             "into the graph (seed 001)")


def refuse_in_capture(op: str, src: str) -> None:
    """An eager collective is a host sync: an HPU Graph capture cannot contain one (claim I7)."""
    cap = lazy.S.capture
    if cap is None:
        return
    from ..graphs import HPUGraphError
    msg = (f"torch.distributed.{op} is not supported during HPU Graph capturing (at {src}): without lazy "
           f"collectives a collective runs eagerly, a host sync; {LAZY_HINT}")
    cap.abandon(msg, f"c10d::{op}", src)
    raise HPUGraphError(msg)


def host_values(tensors, op: str, src: str):
    """CPU copies of the values of ``tensors`` (hpu ones after one host sync; cpu ones as they are)."""
    hpu = [t for t in tensors if is_hpu(t)]
    if not hpu:
        return list(tensors)
    reason = f"collective {op}"
    pending = [t._st.value for t in hpu if type(t._st.value) is Out]
    if pending:
        lazy.flush(reason, src, needed=pending)
    executor.synchronize_all(reason, src)         # one HostSync; raises a device error, if any
    out = []
    for t in tensors:
        if not is_hpu(t):
            out.append(t)
            continue
        st = t._st
        base = lazy.build_layout(executor._resolve(st.value), st)
        out.append(base.as_strided(t._size, t._stride, t._offset).clone())
    return out


def host_buffers(tensors):
    """Fresh CPU buffers to receive results for ``tensors`` (outputs are not read: no sync)."""
    return [torch.empty(tuple(t.shape), dtype=t.dtype) if is_hpu(t) else t for t in tensors]


def write_back(tensors, values) -> None:
    """Each hpu tensor takes its result through hpu_lab's copy_ (cpu tensors were written by gloo)."""
    with torch.no_grad():
        for t, v in zip(tensors, values):
            if is_hpu(t) and v is not t:
                t.copy_(v)


def emit(op: str, n: int, t0: int, src: str, lane: str = "host") -> None:
    dist = torch.distributed
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 0
    ev.emit(ev.Collective(t0, ev.now(), lane, ev.recorder.step, op=op, nbytes=n, src=src, world_size=world))
