"""Distributed training on "hpu" (REFERENCE.md sections 6 and 7; seeds 001, 002, 003).

- ``hccl``: the "hccl" process-group backend (gloo underneath) and ``initialize_distributed_hpu``;
  registered by ``import hpu_lab``, so ``torch.distributed.init_process_group("hccl")`` works under
  ``torchrun``; ``DistributedDataParallel`` runs over it unchanged.
- ``host`` / ``lazy_collectives``: a collective runs eagerly (a host sync) or, with
  ``PT_HPU_ENABLE_LAZY_COLLECTIVES=true``, as a node of the lazy graph (HPU Graphs can hold it).
- ``ddp_reducer``: DDP with ``static_graph=True`` / ``find_unused_parameters=True`` on hpu (the
  reducer's pinned staging of its used-parameter map).
- ``fast_ddp``: optimum-habana's ``all_reduce_gradients`` (one fused all_reduce per step).

Every collective that runs emits an ``events.Collective``; ``metric_global("collective")`` counts them.
"""
from . import ddp_reducer
from .hccl import ProcessGroupHCCL, initialize_distributed_hpu, register

register()
ddp_reducer.install()

__all__ = ["ProcessGroupHCCL", "initialize_distributed_hpu", "register"]
