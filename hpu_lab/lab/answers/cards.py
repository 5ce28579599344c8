"""Reference runs of notebook 08's multi-card exercises (08.1-08.3), and the script each card runs.

``launch(scenario, *options, cards=2, **env)`` starts this file on ``cards`` emulated cards with
``torchrun``, as notebook 08's ``launch`` does with its ``multicard.py``, and returns each card's
report ``{rank: {...}}``. The scenarios are small versions of the notebook's: ``buckets [fusion dtype]``
(DDP with 50 KB buckets and fast_ddp; the all-reduces each step, the weights' checksum) and
``inference [row|column]`` (a tensor-parallel linear layer in an HPU Graph).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys


def launch(scenario: str, *options: str, cards: int = 2, **env: str) -> dict:
    """This script on ``cards`` cards under torchrun; {rank: report}. Raises if a card failed."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **env)
    for _ in range(3):
        with socket.socket() as s:                 # a free port for the rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={cards}",
               "--master_addr=127.0.0.1", f"--master_port={port}", os.path.abspath(__file__), scenario, *options]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if not (p.returncode != 0 and "EADDRINUSE" in p.stderr):
            break                                  # (else another process took the port: retry)
    if p.returncode != 0:
        raise RuntimeError(f"the cards failed (status {p.returncode}): {p.stderr[-2000:]}")
    reports = {}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            _, rank, payload = line.split(" ", 2)
            reports[int(rank)] = json.loads(payload)
    return reports


# -- what each card runs --------------------------------------------------------------------------------
def _card_main(argv) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    import hpu_lab  # noqa: F401
    import hpu_lab.core as htcore
    from hpu_lab.distributed.fast_ddp import all_reduce_gradients
    from hpu_lab.distributed.hccl import initialize_distributed_hpu
    from hpu_lab.observe.metrics import metric_localcontext

    world_size, rank, _ = initialize_distributed_hpu()
    dist.init_process_group("hccl", rank=rank, world_size=world_size)

    def report(**results):
        sys.stdout.write(f"RESULT {rank} {json.dumps(results)}\n")
        sys.stdout.flush()

    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                             nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))

    def train(mode, steps=3, **kw):
        model = mlp().to("hpu")
        net = nn.parallel.DistributedDataParallel(model, **kw) if mode == "ddp" else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1234 + rank)
        per_step = []
        for _ in range(steps):
            x, y = torch.randn(8, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
            with metric_localcontext("collective") as m:
                opt.zero_grad(set_to_none=False)
                F.cross_entropy(net(x.to("hpu")), y.to("hpu")).backward()
                if mode == "fast_ddp":
                    all_reduce_gradients(model, **kw)
                opt.step()
                htcore.mark_step()
                torch.hpu.synchronize()
            per_step.append(m.ops.get("all_reduce", 0))
        checksum = sum(p.detach().cpu().double().sum().item() for p in model.parameters())
        return {"all_reduce_per_step": per_step, "checksum": checksum}

    def buckets(fusion="float32"):
        report(ddp_25MB=train("ddp", bucket_cap_mb=25), ddp_50KB=train("ddp", bucket_cap_mb=0.05),
               fast_ddp=dict(train("fast_ddp", fusion_buffer_dtype=getattr(torch, fusion)), fusion_dtype=fusion))

    class RowParallelLinear(nn.Module):            # each card multiplies its share of the inputs
        def __init__(self, full):
            super().__init__()
            self.k = full.in_features // world_size
            self.weight = nn.Parameter(full.weight.detach()[:, rank * self.k:(rank + 1) * self.k].clone())
            self.bias = nn.Parameter(full.bias.detach().clone())

        def forward(self, x):
            y = x[:, rank * self.k:(rank + 1) * self.k] @ self.weight.t()
            dist.all_reduce(y)                     # the partial products summed
            return y + self.bias

    class ColumnParallelLinear(nn.Module):         # each card computes its share of the outputs
        def __init__(self, full):
            super().__init__()
            k = full.out_features // world_size
            self.weight = nn.Parameter(full.weight.detach()[rank * k:(rank + 1) * k].clone())
            self.bias = nn.Parameter(full.bias.detach()[rank * k:(rank + 1) * k].clone())

        def forward(self, x):
            y = F.linear(x, self.weight, self.bias)
            parts = [torch.empty_like(y) for _ in range(world_size)]
            dist.all_gather(parts, y)              # the shares put side by side
            return torch.cat(parts, dim=1)

    def inference(layer="row"):
        torch.manual_seed(0)
        full = nn.Linear(16, 8)
        parallel = {"row": RowParallelLinear, "column": ColumnParallelLinear}[layer](full)
        model = htcore.hpu.wrap_in_hpu_graph(parallel.to("hpu").eval())
        xs = [torch.randn(4, 16) * i for i in (1, 2, 3, 4)]
        try:
            with metric_localcontext("hpu_graph") as hg, metric_localcontext("collective") as m, torch.no_grad():
                answers = [model(x.to("hpu")).cpu() for x in xs]
        except RuntimeError as e:
            report(layer=type(parallel).__name__, error=f"{type(e).__name__}: {e}")
            return
        report(layer=type(parallel).__name__, error=None, captures=hg.captures, replays=hg.replays,
               collectives=dict(m.ops), correct=all(torch.allclose(a, full(x), atol=1e-5) for a, x in zip(answers, xs)))

    {"buckets": buckets, "inference": inference}[argv[0]](*argv[1:])
    dist.destroy_process_group()


if __name__ == "__main__":
    _card_main(sys.argv[1:])
