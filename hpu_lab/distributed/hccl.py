"""The "hccl" process-group backend for device "hpu", on top of gloo (REFERENCE.md section 7).

``import hpu_lab`` (or ``import habana_frameworks.torch.distributed.hccl`` with the compat aliases)
registers it, so under ``torchrun``::

    world_size, rank, local_rank = initialize_distributed_hpu()
    torch.distributed.init_process_group("hccl")          # MASTER_ADDR/PORT from the environment

``ProcessGroupHCCL`` is a Python subclass of ``torch.distributed.ProcessGroup`` (torch's own support
for process groups written in Python): ``torch.distributed`` calls, and the C++ code of
``DistributedDataParallel`` (its reducer, parameter broadcast and shape check), call its methods.
Each method takes hpu tensors (cpu tensors pass straight to gloo) and runs either

- eagerly (``host.py``): a host sync, gloo on CPU copies, results copied back in place; or
- lazily (``lazy_collectives.py``, ``PT_HPU_ENABLE_LAZY_COLLECTIVES=true`` in lazy mode): as a node
  of the pending graph that the device thread runs.

Gloo has no ``AVG``: it is a ``SUM`` divided by the world size here. Point-to-point ops, gather,
scatter and all_to_all are not emulated (a clear error says so).
"""
from __future__ import annotations

import datetime
import itertools
import os
import threading
from typing import Optional, Tuple

import torch
import torch.distributed as dist

from .. import events as ev
from ..util import warmup
from ..util._source import user_src
from . import host, lazy_collectives as lc

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
_group_ids = itertools.count()


# ---------------------------------------------------------------- initialize_distributed_hpu

_MPI = {"OMPI_COMM_WORLD_LOCAL_RANK": "LOCAL_RANK", "OMPI_COMM_WORLD_SIZE": "WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK": "RANK"}


def initialize_distributed_hpu(world_size: Optional[int] = None, rank: Optional[int] = None,
                               local_rank: Optional[int] = None) -> Tuple[int, int, int]:
    """(world_size, rank, local_rank) of this process, as the bridge reads them.

    Given all three, they are written to ``WORLD_SIZE``/``RANK``/``LOCAL_RANK``; else an MPI launch's
    ``OMPI_COMM_WORLD_*`` are mapped to those (unless they are all set already, as under torchrun).
    ``MASTER_ADDR`` and ``MASTER_PORT`` default to ``localhost`` and ``12345``. Without any of these
    variables: ``(1, -1, -1)``. With more than one rank, ``HLS_MODULE_ID`` names the rank's card
    (``_setup_module_id``). The process group itself is made by ``init_process_group("hccl")``.
    """
    if world_size is not None and rank is not None and local_rank is not None:
        os.environ["WORLD_SIZE"], os.environ["RANK"] = str(world_size), str(rank)
        os.environ["LOCAL_RANK"] = str(local_rank)
    elif not all(v in os.environ for v in _MPI.values()) and all(k in os.environ for k in _MPI):
        for k, v in _MPI.items():
            os.environ[v] = os.environ[k]
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12345")
    ws = int(os.environ.get("WORLD_SIZE", 1))
    r = int(os.environ.get("RANK", -1))
    lr = int(os.environ.get("LOCAL_RANK", -1))
    _setup_module_id(lr, ws)
    if r != -1:
        os.environ["ID"] = str(r)
    return ws, r, lr


def _setup_module_id(local_rank: int, world_size: int) -> None:
    """The card a rank acquires, as the bridge chooses it: ``HLS_MODULE_ID`` is the local rank's entry of
    ``HABANA_VISIBLE_MODULES`` (or the local rank itself); a rank beyond the visible modules fails with
    the bridge's message (a tenant asking for more cards than it was given). Kept unless already set."""
    if "HLS_MODULE_ID" in os.environ or local_rank == -1 or world_size == 1:
        return
    visible = os.environ.get("HABANA_VISIBLE_MODULES")
    if visible is not None:
        modules = visible.split(",")
        assert local_rank < len(modules), """There is not enough devices
        available for training. Please verify if HABANA_VISIBLE_MODULES
        is set correctly."""
        os.environ["HLS_MODULE_ID"] = modules[local_rank]
        return
    os.environ["HLS_MODULE_ID"] = str(local_rank)


# ---------------------------------------------------------------- the process group

class _Done(dist._Work):
    """The Work of a collective that has finished (eager) or is ordered in the graph (lazy)."""

    def __init__(self, result):
        super().__init__()
        self._fut = torch.futures.Future()
        self._fut.set_result(result)

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def get_future(self):
        return self._fut

    def result(self):
        return self._fut.value()


def _listify(x):
    return [x] if isinstance(x, torch.Tensor) else list(x)


def _op_of(opts, default="SUM") -> str:
    if opts is None:
        return default
    op = getattr(opts, "reduceOp", opts)
    return lc.reduce_op_name(op)


def _gloo_allreduce(gloo, bufs, op: str, world: int) -> None:
    o = dist.AllreduceOptions()
    o.reduceOp = dist.ReduceOp.SUM if op == "AVG" else getattr(dist.ReduceOp, op)
    gloo.allreduce(bufs, o).wait()
    if op == "AVG":
        for b in bufs:
            if b.is_floating_point() or b.is_complex():
                b.div_(world)
            else:
                b.floor_divide_(world)


class ProcessGroupHCCL(dist.ProcessGroup):
    """hccl for hpu tensors, emulated over two gloo groups: one for collectives issued by the host
    (eager), one per device stream for collectives the device runs (lazy collectives)."""

    def __init__(self, store, rank: int, size: int, timeout=DEFAULT_TIMEOUT):
        super().__init__(rank, size)
        self._store, self._timeout = store, timeout
        # the name lazy collective nodes use for this group (torch's group_name is not set on a
        # Python process group); groups are made in the same order on every rank
        self.lab_name = f"hccl{next(_group_ids)}"
        self._host = dist.ProcessGroupGloo(dist.PrefixStore("hccl_host/", store), rank, size, timeout)
        self._dev = {}
        self._dev_lock = threading.Lock()

    # ---- naming
    def getBackendName(self):
        return "hccl"

    @property
    def _device_types(self):
        return [torch.device("hpu")]

    def __repr__(self):
        return f"<ProcessGroupHCCL rank {self.rank()} of {self.size()} (gloo underneath)>"

    def _device_comm(self):
        """(gloo group, lane) for a collective run by the current device thread."""
        name = threading.current_thread().name
        lane = name[len("hpu_lab-"):] if name.startswith("hpu_lab-hpu:") else "host"
        g = self._dev.get(lane)
        if g is None:
            with self._dev_lock:
                g = self._dev.get(lane)
                if g is None:
                    g = self._dev[lane] = dist.ProcessGroupGloo(
                        dist.PrefixStore(f"hccl_device_{lane}/", self._store), self.rank(), self.size(),
                        self._timeout)
        return g, lane

    # ---- the two paths
    def _lazy(self, kind, arg, inputs, outputs, result):
        lc.register_group(self)
        lc.record(self, kind, arg, inputs, outputs)
        return _Done(result)

    def _eager(self, kind, inputs, outputs, run, result):
        """Sync the inputs, run ``run(host_in, host_out)`` with gloo, write the outputs back."""
        src = user_src(3)
        if any(host.is_hpu(t) for t in list(inputs) + list(outputs)):
            host.refuse_in_capture(kind, src)
        t0 = ev.now()
        hin = host.host_values(inputs, kind, src)
        hout = host.host_buffers(outputs)
        run(hin, hout)
        host.write_back(outputs, hout)
        host.emit(kind, host.nbytes(inputs), t0, src)
        return _Done(result)

    # ---- collectives
    def allreduce(self, tensors, opts=None):
        tensors = _listify(tensors)
        op = _op_of(opts)
        if lc.enabled(tensors):
            return self._lazy("all_reduce", op, tensors, tensors, tensors)

        def run(hin, hout):
            _gloo_allreduce(self._host, hin, op, self.size())
            hout[:] = hin
        return self._eager("all_reduce", tensors, tensors, run, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)      # one call, one fused all_reduce of the list

    def broadcast(self, tensors, opts=None):
        tensors = _listify(tensors)
        root = (opts.rootRank, opts.rootTensor) if opts is not None else (0, 0)
        if lc.enabled(tensors):
            return self._lazy("broadcast", root, tensors, tensors, tensors)

        def run(hin, hout):
            o = dist.BroadcastOptions()
            o.rootRank, o.rootTensor = root
            self._host.broadcast(hin, o).wait()
            hout[:] = hin
        return self._eager("broadcast", tensors, tensors, run, tensors)

    def allgather(self, output_lists, inputs, opts=None):
        inputs = _listify(inputs)
        flat_out = [t for lst in output_lists for t in lst]
        if len(inputs) == 1 and lc.enabled(inputs + flat_out):
            return self._lazy("all_gather", None, inputs, flat_out, output_lists)
        shape = [len(lst) for lst in output_lists]

        def run(hin, hout):
            it = iter(hout)
            lists = [[next(it) for _ in range(n)] for n in shape]
            self._host.allgather(lists, hin).wait()
        return self._eager("all_gather", inputs, flat_out, run, output_lists)

    def _allgather_base(self, output, input, opts=None):
        if lc.enabled([output, input]):
            return self._lazy("all_gather_into_tensor", None, [input], [output], output)

        def run(hin, hout):
            self._host._allgather_base(hout[0], hin[0]).wait()
        return self._eager("all_gather_into_tensor", [input], [output], run, output)

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i, opts)
        return _Done(list(outputs))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        outputs = _listify(outputs)
        op = _op_of(opts)
        flat_in = [t for lst in input_lists for t in lst]
        shape = [len(lst) for lst in input_lists]

        def run(hin, hout):
            it = iter(hin)
            lists = [[next(it) for _ in range(n)] for n in shape]
            o = dist.ReduceScatterOptions()
            o.reduceOp = dist.ReduceOp.SUM if op == "AVG" else getattr(dist.ReduceOp, op)
            self._host.reduce_scatter(hout, lists, o).wait()
            if op == "AVG":
                for b in hout:
                    b.div_(self.size())
        return self._eager("reduce_scatter", flat_in, outputs, run, outputs)

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _op_of(opts)

        def run(hin, hout):
            o = dist.ReduceScatterOptions()
            o.reduceOp = dist.ReduceOp.SUM if op == "AVG" else getattr(dist.ReduceOp, op)
            self._host._reduce_scatter_base(hout[0], hin[0], o).wait()
            if op == "AVG":
                hout[0].div_(self.size())
        return self._eager("reduce_scatter_tensor", [input], [output], run, output)

    reduce_scatter_single = _reduce_scatter_base

    def reduce(self, tensors, opts=None):
        tensors = _listify(tensors)

        def run(hin, hout):
            o = dist.ReduceOptions()
            o.rootRank, o.rootTensor, o.reduceOp = opts.rootRank, opts.rootTensor, opts.reduceOp
            self._host.reduce(hin, o).wait()
            hout[:] = hin
        return self._eager("reduce", tensors, tensors, run, tensors)

    def barrier(self, opts=None):
        src = user_src(2)
        host.refuse_in_capture("barrier", src)
        t0 = ev.now()
        from ..runtime import executor
        executor.synchronize_all("collective barrier", src)    # the device's work comes first
        self._host.barrier().wait()
        host.emit("barrier", 0, t0, src)
        return _Done([])



def _unsupported(name):
    def fail(self, *args, **kwargs):
        raise NotImplementedError(f"torch.distributed {name} is not emulated by hpu_lab's hccl backend "
                                  "(all_reduce, broadcast, all_gather, reduce_scatter, reduce and barrier are)")
    fail.__name__ = name
    return fail


for _name in ("send", "recv", "recv_anysource", "gather", "scatter", "alltoall", "alltoall_base",
              "all_to_all_single", "allgather_coalesced"):
    setattr(ProcessGroupHCCL, _name, _unsupported(_name))


# ---------------------------------------------------------------- registration

def _create(store, rank, size, timeout):
    # hpu_lab's background warm-up (util/warmup.py) imports torch.distributed.tensor, and with it
    # torch.distributed.nn.functional, whose functions take ``group=group.WORLD`` as a default
    # argument, read at import. Finished after this group exists, that import bound the group as
    # their default for good: destroy_process_group() then left it alive, its gloo groups' threads
    # running until the interpreter's teardown (and those functions on a destroyed group).
    # Imported first, the default is None (the default group at call time), as in plain torch.
    warmup.wait()
    return ProcessGroupHCCL(store, rank, size, timeout)


def register() -> None:
    """Register "hccl" for device "hpu" with torch.distributed (idempotent)."""
    if "HCCL" in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend("hccl", _create, devices=["hpu"])
