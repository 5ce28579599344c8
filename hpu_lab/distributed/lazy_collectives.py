"""Lazy collectives (``PT_HPU_ENABLE_LAZY_COLLECTIVES=true``, seed 001; REFERENCE.md section 7).

In lazy mode with the variable set, a collective on hpu tensors does not sync: it is appended to
the pending graph as one node, like any op. The node's op is a ``DeviceCollective``; when the
recipe runs, the device thread calls it with the input values and it runs gloo on them (on the
group's *device* communicator for that stream, apart from the host one, so host-issued and
device-issued collectives never interleave differently on two ranks). Its results are written to
the output tensors as an in-place op's are: the storage is rebound to the node's output (a
``scatter`` node for a view).

So a collective can sit inside an HPU Graph capture and is replayed with it (claim I7), and DDP's
bucket all-reduces become part of the backward graph. The ``Collective`` event is emitted when the
device really runs it (lane ``hpu:<stream>``), once per replay too.

Collective nodes are never removed as dead code (the other ranks would wait forever): each op is
in ``torch.fx``'s set of side-effectful functions, and the output storages are kept alive until the
graph holding them has been launched.
"""
from __future__ import annotations

import threading
import weakref

import torch
import torch.fx.node as _fx_node

from .. import config
from .. import events as ev
from .. import lazy
from ..util._source import user_src
from ..compiler.graph import ref_sig
from ..tensor import HPUTensor, Inp, Out, contiguous_strides
from . import host

_GROUPS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()   # group name -> ProcessGroupHCCL
_OPS: dict = {}
_keep: list = []          # storages written by pending collectives (see the module docstring)
_lock = threading.Lock()


def enabled(tensors) -> bool:
    """Record lazily? Lazy mode, the variable set, and every tensor on hpu."""
    return (config.get("PT_HPU_ENABLE_LAZY_COLLECTIVES") and not lazy.S.eager
            and all(isinstance(t, HPUTensor) for t in tensors))


def register_group(pg) -> None:
    _GROUPS[pg.lab_name] = pg


class DeviceCollective:
    """A collective as a graph op: ``kind`` on group ``group`` (of ``world`` ranks) with constant ``arg``.

    Called on the device thread with the input values (a list of CPU tensors); returns new tensors
    (inputs are device buffers other storages may share: never written in place).
    """

    def __init__(self, kind: str, group: str, arg, world: int = 0):
        self.kind, self.group, self.arg, self.world = kind, group, arg, world
        # the name is the op's identity in recipe keys (graph.op_key) and the disk cache's graph text:
        # it must tell SUM from MAX, root 0 from root 1, one group from another; it ends with the
        # group's size, which the Gaudi clock reads to cost the node (perfmodel.cost.collective_node)
        extra = "_".join(str(a) for a in (arg if isinstance(arg, tuple) else (arg,)) if a is not None)
        self.__name__ = "_".join(x for x in ("hccl", kind, extra, group) if x) + f"_of{world}"

    def __call__(self, values):
        pg = _GROUPS.get(self.group)
        if pg is None:
            raise RuntimeError(f"hccl {self.kind}: process group {self.group!r} was destroyed before the "
                               "device ran this collective")
        gloo, lane = pg._device_comm()
        t0 = ev.now()
        bufs = [torch.empty(tuple(v.shape), dtype=v.dtype).copy_(v) for v in values]
        if self.kind == "all_reduce":
            opts = torch.distributed.AllreduceOptions()
            opts.reduceOp = _reduce_op(self.arg)
            gloo.allreduce(bufs, opts).wait()
            outs = bufs
        elif self.kind == "broadcast":
            opts = torch.distributed.BroadcastOptions()
            opts.rootRank, opts.rootTensor = self.arg
            gloo.broadcast(bufs, opts).wait()
            outs = bufs
        elif self.kind == "all_gather":          # one input -> world-size outputs
            outs = [torch.empty_like(bufs[0]) for _ in range(pg.size())]
            gloo.allgather([outs], bufs).wait()
        elif self.kind == "all_gather_into_tensor":
            world = pg.size()
            x = bufs[0]
            out = torch.empty((x.shape[0] * world,) + tuple(x.shape[1:]), dtype=x.dtype)
            gloo._allgather_base(out, x).wait()
            outs = [out]
        else:
            raise RuntimeError(f"hccl: no device implementation of {self.kind}")
        host.emit(self.kind, host.nbytes(values), t0, "", lane)
        return outs

    def __eq__(self, other):
        return type(other) is DeviceCollective and (other.kind, other.group, other.arg, other.world) == \
            (self.kind, self.group, self.arg, self.world)

    def __hash__(self):
        return hash((self.kind, self.group, self.arg, self.world))

    def __reduce__(self):
        return (op_for, (self.kind, self.group, self.arg, self.world))

    def __repr__(self):
        return f"hccl_{self.kind}({self.group}, {self.arg})"


def op_for(kind: str, group: str, arg, world: int = 0) -> DeviceCollective:
    """The interned op (one object per kind/group/arg/size: the recipe cache keys on it)."""
    key = (kind, group, arg, world)
    op = _OPS.get(key)
    if op is None:
        op = _OPS[key] = DeviceCollective(kind, group, arg, world)
        _fx_node._side_effectful_functions.add(op)      # never dead code
    return op


def _reduce_op(name: str):
    return getattr(torch.distributed.ReduceOp, name)


def reduce_op_name(op) -> str:
    """'SUM', 'AVG', ... of a ReduceOp (or its RedOpType)."""
    s = str(getattr(op, "op", op))
    return s.split(".")[-1].split(":")[0].strip("<> ")


def record(pg, kind: str, arg, inputs, outputs) -> None:
    """Append one collective node reading ``inputs`` and writing ``outputs`` (hpu tensors)."""
    S = lazy.S
    src = user_src(3)
    with S.lock:
        pg_ = S.pg
        refs = []
        for t in inputs:
            r = lazy.read_ref(t)
            if type(r) is Inp and r.owner is None:
                r.owner = weakref.ref(t._st)
            refs.append(r)
        metas = [(tuple(o.shape), contiguous_strides(tuple(o.shape)), o.dtype) for o in outputs]
        spec = tuple((i,) for i in range(len(outputs)))
        sig = (tuple(ref_sig(pg_, r) for r in refs),)
        op = op_for(kind, pg.lab_name, arg, pg.size())
        outs = pg_.add(op, (list(refs),), {}, metas, spec, sig, (), tuple(refs), src)
        for t, o in zip(outputs, outs):
            lazy.write(t, o, f"c10d::{kind}")
        with _lock:
            _keep[:] = [st for st in _keep if type(st.value) is Out]
            _keep.extend(t._st for t in outputs)
    torch._C._increment_version(list(outputs))
