# %% [markdown]
# # Distributed training: HCCL, gradient buckets, fast_ddp, multi-card inference
#
# Seed documents: *Theory of Operations* (*Distributed Training*), *General Model Optimizations* (gradient buckets),
# *Optimum Habana: Accelerating Training* (fast_ddp) and *Run Inference Using HPU Graphs* (lazy collectives).
#
# > *Intel Gaudi PyTorch implements HCCL communication backend to support scale-up and scale-out.*
#
# hpu_lab emulates several cards on one machine: `torchrun` starts one process per card, and the `"hccl"` backend
# (gloo underneath) carries the collectives between them.
#
# **What you'll do**
# - write one training script and launch it on two emulated cards with `torchrun`;
# - count the all-reduces of DDP for two bucket sizes, and of Optimum Habana's `fast_ddp`;
# - count what `static_graph=True` saves against `find_unused_parameters=True` for a model with an unused parameter;
# - run tensor-parallel inference in an HPU Graph, without and with `PT_HPU_ENABLE_LAZY_COLLECTIVES`.
#
# **What you'll learn**
# - what `bucket_cap_mb` trades, what `fast_ddp` does differently, and why graphs need lazy collectives.
#
# **What you'll need**
# - notebooks 03 and 05; about half a minute (each launch starts two Python processes).

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.observe.metrics import metric_global
from collections import Counter
import os, sys, json, socket, subprocess, tempfile
workdir = tempfile.mkdtemp()
import widgets                        # the panel and other views (reads the events)
# %load_ext widgets
torch.manual_seed(0)                  # every run of the notebook draws the same numbers
print("torch", torch.__version__, "| hpu_lab", hpu_lab.__version__)
CARD = "gaudi2"                       # this notebook's card, for its timelines, tables and asserts (the Gaudi clock)
widgets.set_clock("gaudi", CARD)

# %% [markdown]
# ## 1. The script, and a launcher
#
# Every card runs the same script; it prints one `RESULT` line per card:

# %%
# %%writefile {workdir}/multicard.py
import gc, hashlib, json, sys
import torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist
import hpu_lab.compat
hpu_lab.compat.enable_habana_imports()                 # the Gaudi spelling of the imports below
import habana_frameworks.torch.core as htcore
from habana_frameworks.torch.distributed.hccl import initialize_distributed_hpu
from hpu_lab.distributed.fast_ddp import all_reduce_gradients
from hpu_lab.observe.metrics import metric_localcontext
from hpu_lab import events as ev
from hpu_lab import lab                                # lab.step_times_of: the Gaudi clock's step times
import widgets                                         # records a run's events and draws its timeline
from widgets.static import png_bytes

world_size, rank, local_rank = initialize_distributed_hpu()   # reads torchrun's variables
dist.init_process_group("hccl", rank=rank, world_size=world_size)


def report(**results):                                 # one line per rank, read by the notebook
    sys.stdout.write(f"RESULT {rank} {json.dumps(results)}\n")   # one write: the ranks share the pipe
    sys.stdout.flush()


def hello():
    t = torch.full((4,), float(rank + 1), device="hpu")
    dist.all_reduce(t)                                 # 1 + 2 on every card
    report(backend=dist.get_backend(), world_size=world_size, sum=t.cpu().tolist())


def mlp():
    torch.manual_seed(0)                               # the same initial weights on every card
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                         nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def train(mode, steps=3, warmup=1, **kw):
    gc.collect()                                       # the previous run's model and buckets are gone
    base = torch.hpu.memory_allocated()
    model = mlp().to("hpu")
    net = nn.parallel.DistributedDataParallel(model, **kw) if mode == "ddp" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1234 + rank)     # each card its own data
    all_reduces, collective_waits, copies, warm = [], [], [], []
    for i in range(steps):
        x, y = torch.randn(8, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
        with metric_localcontext("collective") as m, ev.Collector() as c:
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(net(x.to("hpu")), y.to("hpu")).backward()
            if mode == "fast_ddp":
                all_reduce_gradients(model, **kw)
            opt.step()
            htcore.mark_step()
            torch.hpu.synchronize()
        all_reduces.append(m.ops.get("all_reduce", 0))
        collective_waits.append(sum(e.reason.startswith("collective") for e in c.of(ev.HostSync)))
        copies.append(sum(e.op in ("aten::copy", "aten::copy_") for e in c.of(ev.OpAccumulated)))   # device-to-device
        if i >= warmup:                                # compiled, buckets learnt: steady steps
            warm += c.events
    step_us = lab.step_times_of(warm, steps=steps - warmup, card="gaudi2").wall_ms * 1e3   # a step, on Gaudi 2's clock
    gc.collect()                                       # only what is still referenced: not when Python collects
    held = torch.hpu.memory_allocated() - base         # weights, gradients, DDP's buckets
    checksum = sum(p.detach().cpu().double().sum().item() for p in model.parameters())
    return {"all_reduce_per_step": all_reduces, "host_waits_for_collectives": collective_waits,
            "copies_per_step": copies,
            "step_us": round(step_us, 1), "checksum": round(checksum, 5), "device_bytes": held,
            "grad_bytes": sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())}


def timeline(name, run):                               # run(), and this card's timeline of it as a PNG
    with widgets.section(f"card {rank}: {name}", display=False) as s:
        result = run()
    # the last two steps: warm (the first steps compile); a palette PNG, as panels store theirs
    with open(f"timeline_{name}_card{rank}.png", "wb") as f:
        f.write(png_bytes(s.timeline(step_range=(-2, -1))))
    return result


def buckets(fusion="float32"):                         # fast_ddp's buffer dtype (optimum-habana's default: bfloat16)
    report(ddp_25MB=train("ddp", bucket_cap_mb=25),
           ddp_50KB=train("ddp", bucket_cap_mb=0.05),
           ddp_50KB_grad_view=train("ddp", bucket_cap_mb=0.05, gradient_as_bucket_view=True),
           fast_ddp=dict(train("fast_ddp", fusion_buffer_dtype=getattr(torch, fusion)), fusion_dtype=fusion))


def collectives(pictures="no"):                        # steady steps, timed on Gaudi 2's clock
    def steady(name, mode, **kw):                      # 8 steps: the first compile, DDP rebuilds its buckets
        run = lambda: train(mode, steps=8, warmup=4, **kw)
        return timeline(name, run) if pictures == "timelines" else run()
    report(ddp_50KB=steady("ddp_50KB", "ddp", bucket_cap_mb=0.05),
           ddp_50KB_grad_view=steady("ddp_50KB_grad_view", "ddp", bucket_cap_mb=0.05, gradient_as_bucket_view=True),
           fast_ddp=steady("fast_ddp", "fast_ddp", fusion_buffer_dtype=torch.float32))


class WithSpare(nn.Module):                            # a parameter the forward never uses
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10))
        self.spare = nn.Linear(128, 10)                # e.g. a head this task does not use

    def forward(self, x):
        return self.body(x)


def unused(steps=7, warmup=3):                         # find_unused_parameters=True against static_graph=True
    def run(**kw):
        gc.collect()
        model = WithSpare().to("hpu")
        net = nn.parallel.DistributedDataParallel(model, **kw)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        map_bytes = 4 * len(list(model.parameters()))  # the reducer's used-parameter map: one int32 a parameter
        g = torch.Generator().manual_seed(1234 + rank)
        all_reduces, map_copies, syncs, warm = [], [], [], []
        for i in range(steps):
            x, y = torch.randn(8, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
            with ev.Collector() as c:
                opt.zero_grad()
                F.cross_entropy(net(x.to("hpu")), y.to("hpu")).backward()
                opt.step()
                htcore.mark_step()
                torch.hpu.synchronize()
            all_reduces.append(sum(e.op == "all_reduce" for e in c.of(ev.Collective)))
            map_copies.append(sum(e.nbytes == map_bytes for e in c.of(ev.HostToDevice) + c.of(ev.DeviceToHost)))
            syncs.append(sum(e.reason != "torch.hpu.synchronize()" for e in c.of(ev.HostSync)))   # not ours
            if i >= warmup:
                warm += c.events
        step_us = lab.step_times_of(warm, steps=steps - warmup, card="gaudi2").wall_ms * 1e3
        return {"all_reduce_per_step": all_reduces, "map_copies_per_step": map_copies,
                "host_syncs_per_step": syncs, "step_us": round(step_us, 1), "map_bytes": map_bytes,
                "weights": [p.detach().cpu() for p in model.parameters()]}

    def cpu_reference():                               # one model, both cards' batches, gradients averaged
        model = WithSpare()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gs = [torch.Generator().manual_seed(1234 + r) for r in range(world_size)]
        for i in range(steps):
            batches = [(torch.randn(8, 32, generator=g), torch.randint(0, 10, (8,), generator=g)) for g in gs]
            opt.zero_grad()
            (sum(F.cross_entropy(model(x), y) for x, y in batches) / world_size).backward()
            opt.step()
        return [p.detach() for p in model.parameters()]

    runs, ref = {"find_unused": run(find_unused_parameters=True), "static_graph": run(static_graph=True)}, cpu_reference()
    for r in runs.values():                            # the weights as a digest: one short line a card (a pipe
        w = r.pop("weights")                           # write over 64 KB could interleave with the other card's)
        r["weights_sha256"] = hashlib.sha256(b"".join(t.numpy().tobytes() for t in w)).hexdigest()
        r["max_diff_vs_cpu"] = max((a - b).abs().max().item() for a, b in zip(w, ref))
    report(**runs)


class RowParallelLinear(nn.Module):                    # tensor parallelism: each card holds half the inputs
    def __init__(self, full):
        super().__init__()
        k = full.in_features // world_size
        self.weight = nn.Parameter(full.weight.detach()[:, rank * k:(rank + 1) * k].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())
        self.k = k

    def forward(self, x):
        y = x[:, rank * self.k:(rank + 1) * self.k] @ self.weight.t()
        dist.all_reduce(y)                             # sum the partial products of the cards
        return y + self.bias


def inference(layer="row"):                            # PT_HPU_ENABLE_LAZY_COLLECTIVES comes from the launch
    torch.manual_seed(0)
    full = nn.Linear(16, 8)
    parallel = {"row": RowParallelLinear}[layer](full)  # (exercise 3: add a column-parallel layer)
    model = htcore.hpu.wrap_in_hpu_graph(parallel.to("hpu").eval())
    xs = [torch.randn(4, 16) * i for i in (1, 2, 3, 4)]
    try:
        with metric_localcontext("hpu_graph") as hg, torch.no_grad():
            answers = [model(x.to("hpu")).cpu() for x in xs]
    except RuntimeError as e:
        report(layer=type(parallel).__name__, error=f"{type(e).__name__}: {e}")
        return
    correct = all(torch.allclose(a, full(x), atol=1e-5) for a, x in zip(answers, xs))
    report(layer=type(parallel).__name__, error=None, captures=hg.captures, replays=hg.replays, correct=correct)


globals()[sys.argv[1]](*sys.argv[2:])                 # the scenario, and its options
dist.destroy_process_group()


# %% [markdown]
# `launch` starts it on two cards with `torchrun`, as you would on a Gaudi server, and collects the results:

# %%
def launch(scenario, cards=2, **env):
    env = dict(os.environ, OMP_NUM_THREADS="1", **env)    # set before the cards' processes start
    for attempt in range(3):
        with socket.socket() as s:                  # a free port for the rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={cards}",
               "--master_addr=127.0.0.1", f"--master_port={port}", "multicard.py", *scenario.split()]
        p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
        if not (p.returncode != 0 and "EADDRINUSE" in p.stderr):
            break                                   # (else another process took the port meanwhile: retry)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = [l.split(" ", 2) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    results = {int(rank): json.loads(payload) for _, rank, payload in lines}
    assert sorted(results) == list(range(cards)), p.stdout[-3000:] + p.stderr[-3000:]
    return results


# %% [markdown]
# ## 2. HCCL
#
# `dist.init_process_group("hccl")`, then an all-reduce of `rank + 1` on each card:

# %%
hello = launch("hello")
for rank, r in sorted(hello.items()):
    print(rank, r)
assert all(r["backend"] == "hccl" and r["sum"] == [3.0] * 4 for r in hello.values())

# %% [markdown]
# ## 3. Gradient buckets and fast_ddp
#
# > *Based on the size of the model, the size of the gradient bucket can be adjusted to minimize the number of invocations of all-reduce in the backward pass of every training iteration.*
#
# Three steps of a 4-layer MLP (~38k parameters, 150 KB of gradients) under DDP with 25 MB buckets and with 50 KB buckets, with `gradient_as_bucket_view=True`, and with Optimum Habana's `fast_ddp`:

# %%
runs = launch("buckets")
for name, r in runs[0].items():
    print(f"{name:20s} all-reduces per step: {r['all_reduce_per_step']}")

# %% [markdown]
# DDP's first iteration uses one bucket (it learns the order of the gradients); after that, small buckets mean more all-reduces per step. Every card ends with the same weights:

# %%
# claim M8
r0, r1 = runs[0], runs[1]
big, small = r0["ddp_25MB"]["all_reduce_per_step"], r0["ddp_50KB"]["all_reduce_per_step"]
assert big == [1, 1, 1] and small[1] == small[2] >= 3
assert r0["ddp_50KB_grad_view"]["all_reduce_per_step"] == small      # views of the buckets: same traffic
assert all(r0[k]["checksum"] == r1[k]["checksum"] for k in r0)       # the cards agree

# %% [markdown]
# > *In ResNet50, bucket size of 100MB is optimal whereas ResNext101 requires bucket size of 200MB.* (seed 003)
#
# Those models have about 100 MB (ResNet50, 25.6M parameters in fp32) and 350 MB of gradients: a bucket of that order makes an all-reduce or a few per step. This MLP has 150 KB of gradients, so 50 KB buckets play the part of small buckets here. Every all-reduce after the first step carries at most one bucket, so the count is at least the gradient bytes over the bucket size:

# %%
# claim M8
grad_bytes = r0["ddp_50KB"]["grad_bytes"]
print(f"{grad_bytes} bytes of gradients; 50 KB buckets: at least {-(-grad_bytes // int(0.05 * 2**20))} all-reduces, measured {small[1]}")
assert small[1] >= -(-grad_bytes // int(0.05 * 2**20)) and big[1] == 1

# %% [markdown]
# > *PyTorch DDP allows parameter gradient tensors to be views of the gradient bucket. This improves performance as device-to-device copies can be reduced and also reduces device memory requirement.*
#
# Each card's device memory after the three steps, with the model, its gradients and DDP's buckets alive: with `gradient_as_bucket_view=True` the gradients live inside the buckets, so one copy of the gradient bytes is saved:

# %%
copies, views = r0["ddp_50KB"]["device_bytes"], r0["ddp_50KB_grad_view"]["device_bytes"]
print(f"device memory held: gradients as copies {copies} bytes, as bucket views {views} bytes; "
      f"saved {copies - views} of {grad_bytes} gradient bytes")
assert all(r[k]["device_bytes"] > 0 for r in runs.values() for k in ("ddp_50KB", "ddp_50KB_grad_view"))
assert copies - views >= 0.9 * grad_bytes

# %% [markdown]
# The two figures are whole copies of the 154 152 gradient bytes: without views a card holds three (the weights, the gradients, the buckets), with views two (the weights, and the buckets, which are the gradients).

# %% [markdown]
# And the device-to-device copies the seed speaks of: without views, DDP copies each of the 8 gradients into its bucket before the all-reduce and the reduced bucket back into the gradient after it; with views the backward writes straight into the bucket. Copies traced per step:

# %%
copy_ops = {k: runs[0][k]["copies_per_step"] for k in ("ddp_50KB", "ddp_50KB_grad_view")}
print("device-to-device copies per step:", copy_ops)
n_params = 8                                                          # 4 weights, 4 biases
assert copy_ops["ddp_50KB"] == [2 * n_params] * 3                      # into the bucket and back, every step
assert copy_ops["ddp_50KB_grad_view"] == [n_params, n_params, 0]         # none once the views are in place

# %% [markdown]
# With views, the first two steps still copy each gradient once: autograd's first gradients are fresh tensors, and DDP rebuilds its buckets after the first step (in the order the gradients arrived), so the views are re-pointed once more. From the third step on the backward writes into the buckets and there is nothing to copy.

# %% [markdown]
# The same runs longer, for their time: DDP with 50 KB buckets, with bucket views, and fast_ddp, 8 steps each, the last 4 timed on Gaudi 2's clock (the first steps compile, and DDP rebuilds its buckets after the first). Each is launched twice, without and with `PT_HPU_ENABLE_LAZY_COLLECTIVES=true` (why, below), and card 0 saves its timeline of the last two steps:

# %%
eager_transport = launch("collectives timelines")     # and card 0's timelines of the default transport
device_stream = launch("collectives", PT_HPU_ENABLE_LAZY_COLLECTIVES="true")

# %% [markdown]
# Card 0's timeline of the 50 KB-bucket run, its last two steps (steps 7 and 8 of 8; the time axis counts from the start of step 7): each `all_reduce` is a *collective* bar, three per step, issued during the backward pass as each bucket fills.
#
# **Fidelity note.** Host and device lanes are the Gaudi clock's (modeled, Gaudi 2); the collective's time is the clock's ring model over the card's NIC (`docs/gaudi_clock.md`). **One thing here is the emulator's, not Gaudi's:** before each collective the host waits for the device (a red sync bar). On a Gaudi, HCCL queues a collective on a device stream, after the work that produces its inputs, and the host goes on tracing. The wait is this emulator's transport: without lazy collectives it sums the buckets with gloo, on CPU copies, so it needs their values on the host first. With `PT_HPU_ENABLE_LAZY_COLLECTIVES=true` the emulator models what a Gaudi does: the all-reduce is a node of the launched graph, on the device's stream, and the host does not wait (counted below).

# %%
from IPython.display import Image
Image(filename=os.path.join(workdir, "timeline_ddp_50KB_card0.png"))

# %% [markdown]
# The collective bars themselves are slivers (pink, each beside a red wait): on Gaudi 2's clock an all-reduce of a 50 KB bucket between two cards is a few µs. What the picture shows at each collective is the host waiting; between them, the host's tracing (the green bars) is most of the 6 ms step, and the device is idle 96% of it.

# %% [markdown]
# *In practice:* host waits for a collective per step, in the two launches:

# %%
for name, res in (("gloo on the host (default)", eager_transport), ("lazy collectives", device_stream)):
    for k, r in res[0].items():
        print(f"{name:27s} {k:20s} all-reduces {r['all_reduce_per_step'][-4:]}, host waits {r['host_waits_for_collectives'][-4:]}")

# %%
for k in eager_transport[0]:
    e, d = eager_transport[0][k], device_stream[0][k]
    assert e["all_reduce_per_step"] == d["all_reduce_per_step"]                  # the same traffic
    assert e["host_waits_for_collectives"][-4:] == e["all_reduce_per_step"][-4:]  # gloo: one wait per all-reduce
    assert d["host_waits_for_collectives"] == [0] * 8                             # on the device's stream: none
    assert e["checksum"] == d["checksum"]                                         # and the same training

# %% [markdown]
# > *This option replaces the usage of `torch.nn.parallel.DistributedDataParallel` with much simpler and usually faster `optimum.habana.distributed.all_reduce_gradients`.*
#
# `fast_ddp` packs all gradients into one buffer and makes exactly one all-reduce per step, whatever the model:

# %%
# claim O6
print("fast_ddp all-reduces per step:", r0["fast_ddp"]["all_reduce_per_step"])
assert r0["fast_ddp"]["all_reduce_per_step"] == [1, 1, 1]
assert abs(r0["fast_ddp"]["checksum"] - r0["ddp_25MB"]["checksum"]) < 1e-3      # the same training

# %% [markdown]
# The same on card 0's timeline (the steady run above, its last two steps): one collective per step, after the backward pass. The light-blue *HPU Graph replay* bars around it are fast_ddp's packing of the gradients into its buffer and unpacking after the all-reduce: `all_reduce_gradients` captures them as two HPU Graphs (optimum-habana's `use_hpu_graphs=True` default) and replays them each step. The time axis counts from the start of step 7:

# %%
Image(filename=os.path.join(workdir, "timeline_fast_ddp_card0.png"))

# %% [markdown]
# "Usually faster", in time. Steady step time on Gaudi 2's clock (modeled: the same on every machine and every card), from the two launches above:

# %%
# claim O6
for name, res in (("gloo on the host (default)", eager_transport), ("lazy collectives", device_stream)):
    t = {k: r["step_us"] for k, r in res[0].items()}
    print(f"{name:27s} step: DDP {t['ddp_50KB']:.0f} µs, DDP with bucket views {t['ddp_50KB_grad_view']:.0f} µs, "
          f"fast_ddp {t['fast_ddp']:.0f} µs ({t['ddp_50KB'] / t['fast_ddp']:.2f}x)")
    assert t["fast_ddp"] < t["ddp_50KB_grad_view"] < t["ddp_50KB"]
    assert t["ddp_50KB"] > 1.3 * t["fast_ddp"]

# %% [markdown]
# Lazy collectives take the host's waits away, yet the step is only about 5% shorter: the device has little to do, so each wait was short, and the host's own work is most of the step. This small MLP's step is host-bound, so what decides is the host's work per step: DDP's hooks, its copies into and out of the buckets (16 per step here) and three collectives, against fast_ddp's one buffer and one all-reduce. Bucket views take the copies away and recover part of the difference. "Usually": for a device-bound model whose all-reduces hide under the backward pass, DDP's overlap of early buckets with the rest of the backward can win back what its host work costs.

# %% [markdown]
# ### A parameter the forward does not use: `find_unused_parameters` against `static_graph`
#
# > *HPUParallelStrategy ... supports ... static_graph. By setting static_graph when instantiating the Trainer, allreduce on unused parameters in the graph can be avoided. This also avoids overhead of copying them from host to device and vice versa after performing the allreduce.* (seed 003)
#
# A model with a head its forward never uses (`spare`, 1 290 of its 6 804 parameters). Plain DDP would wait for that head's gradient forever, so it needs `find_unused_parameters=True` (torch re-finds the unused parameters every step) or `static_graph=True` (torch learns them in the first step and trusts that the graph does not change). Lightning's `HPUParallelStrategy(static_graph=True)` passes the second to DDP. 7 steps on two cards, the last 4 timed, launched with `PT_HPU_ENABLE_LAZY_COLLECTIVES=true` so the collectives run on the device's stream as on a Gaudi (the default transport adds the emulator's own waits, above). Counted per step: all-reduces, copies of the reducer's *used-parameter map* (one int32 a parameter, 24 bytes) between host and device, and host syncs other than the script's own `synchronize()`:
#
# **Fidelity note.** The counts are what torch's reducer (C++, unchanged) did on the emulated device. The step times are the Gaudi clock's host and device lanes, modeled for Gaudi 2 from its documented constants (`docs/gaudi_clock.md`); card 0's. Nothing here is measured wall time.

# %%
spare = launch("unused", PT_HPU_ENABLE_LAZY_COLLECTIVES="true")
for k in ("find_unused", "static_graph"):
    r = spare[0][k]
    print(f"{k:13s} all-reduces {r['all_reduce_per_step']}, map copies {r['map_copies_per_step']}, "
          f"host syncs {r['host_syncs_per_step']}, steady step {r['step_us']:.0f} µs")

# %% [markdown]
# `find_unused_parameters=True`, every step: after the last gradient bucket the reducer copies its map of the parameters this card used to the device (through a pinned host buffer), all-reduces it (the second, 24-byte all-reduce), and, because `spare` was unused here, waits for that all-reduce and copies the map back to the host to learn whether some other card used it (the host sync: a blocking device-to-host copy). `static_graph=True` does that once, in the first step, and keeps the answer: from the second step on, one all-reduce and no map traffic. Its third step's extra host syncs are DDP rebuilding its buckets in the order the gradients arrived (two broadcasts of the new order from card 0), once; `find_unused_parameters=True` never rebuilds them.

# %%
fu, sg = spare[0]["find_unused"], spare[0]["static_graph"]
steady = slice(3, None)                                                  # after the first step and the rebuild
assert fu["all_reduce_per_step"] == [2] * 7 and fu["map_copies_per_step"] == [2] * 7   # gradients + map; there and back
assert fu["host_syncs_per_step"] == [1] * 7                               # the blocking copy back
assert sg["all_reduce_per_step"][0] == 2 and sg["map_copies_per_step"][0] == 2         # the first step learns the map
assert sg["all_reduce_per_step"][steady] == [1] * 4                       # then only the gradient bucket
assert sg["map_copies_per_step"][1:] == [0] * 6 and sg["host_syncs_per_step"][steady] == [0] * 4

# %% [markdown]
# "Allreduce on unused parameters ... can be avoided" is true of the map, not of `spare`'s gradient: both runs all-reduce one gradient bucket of the same size, and it still holds `spare`'s 1 290 (zero) gradients; DDP's buckets are laid out once and do not shrink. What `static_graph` removes is the map's all-reduce and its host↔device copies, as the seed's second sentence says. The training is the same: both runs end with the same weights as each other, on both cards, and as one CPU model trained on both cards' batches:

# %%
print("max |weight - CPU|: find_unused", fu["max_diff_vs_cpu"], "| static_graph", sg["max_diff_vs_cpu"])
assert fu["weights_sha256"] == sg["weights_sha256"]                       # bitwise, the same sums
assert all(r[k]["weights_sha256"] == sg["weights_sha256"] for r in spare.values() for k in ("find_unused", "static_graph"))
assert all(r[k]["max_diff_vs_cpu"] <= 1e-6 for r in spare.values() for k in ("find_unused", "static_graph"))

# %% [markdown]
# And the time on Gaudi 2's clock, the 4 steady steps:

# %%
print(f"steady step: find_unused_parameters {fu['step_us']:.0f} µs, static_graph {sg['step_us']:.0f} µs "
      f"({1 - sg['step_us'] / fu['step_us']:.0%} shorter)")
assert sg["step_us"] < fu["step_us"]

# %% [markdown]
# About 6%: what `static_graph` saves each step is host work (two 24-byte copies, one all-reduce call, and a blocking wait for it) on a small step that is mostly the host's tracing already (section 3). The bigger the model, the smaller that fixed cost is against the step; but the blocking wait also keeps the host from tracing ahead of the device, which costs more when the device has a long backward queued. What the clock does not count is torch's search of the autograd graph for unused parameters, which `find_unused_parameters=True` runs on the host after every forward (C++ in the reducer, not an op on the device, so not on the host lane here): on a Gaudi that is a further cost `static_graph` removes.

# %% [markdown]
# ## 4. Multi-card inference with HPU Graphs
#
# > *Multi-card support for inference (DeepSpeed) using HPU Graphs is applicable only with `PT_HPU_ENABLE_LAZY_COLLECTIVES=true`.*
#
# A row-parallel linear layer (each card multiplies half of the inputs, an all-reduce sums the halves), wrapped with `wrap_in_hpu_graph`. The variable is read when the cards' processes start, so it is two launches: first without it, then with `PT_HPU_ENABLE_LAZY_COLLECTIVES=true` in the environment of `torchrun`:

# %%
# claim I7
without = launch("inference")
with_lazy = launch("inference", PT_HPU_ENABLE_LAZY_COLLECTIVES="true")
for rank in sorted(without):
    print(rank, "without:", without[rank]["error"])
    r = with_lazy[rank]
    print(rank, f"with lazy collectives: {r['captures']} capture, {r['replays']} replays, answers correct: {r['correct']}")
assert all("PT_HPU_ENABLE_LAZY_COLLECTIVES=true" in r["error"] for r in without.values())
assert all(r["error"] is None and r["captures"] == 1 and r["replays"] == 3 and r["correct"] for r in with_lazy.values())

# %% [markdown]
# ## Summary
# - `dist.init_process_group("hccl")` under `torchrun` gives one process per card; DDP runs unchanged on top.
# - DDP all-reduces gradients bucket by bucket: `bucket_cap_mb` sets how many all-reduces a step makes (the seed's
#   100 MB for ResNet50, 200 MB for ResNext101); `gradient_as_bucket_view=True` saves one copy of the gradients.
# - A parameter the forward skips needs `find_unused_parameters=True` (the used-parameter map all-reduced, copied to the
#   device and back, and a host sync, every step) or `static_graph=True` (all that once, in the first step).
# - `fast_ddp` makes one all-reduce of one fused buffer per step; on this host-bound step it is about 1.5x faster than DDP on Gaudi 2's clock.
# - On a Gaudi a collective is queued on a device stream; this emulator's default transport (gloo) makes the host wait for it, `PT_HPU_ENABLE_LAZY_COLLECTIVES=true` does not.
# - A collective inside an HPU Graph must be part of the graph: that is what `PT_HPU_ENABLE_LAZY_COLLECTIVES=true` does.
#
# ## Exercises
#
# Each exercise has a check cell: change the code it names, run the check with your answer, and it says *right*, *wrong* or *not yet*, and why, from what the cards reported (all-reduce counts, checksums, captures; never a wall time). Run as it is, every check says "not yet". Each check launches the cards again: a few seconds each.

# %%
from hpu_lab import lab

# %% [markdown]
# **1.** Launch `buckets` on 3 cards. Do the all-reduce counts change? Should they? (How many all-reduces a step with 50 KB buckets, after the first step?)

# %%
def my_run_1():
    return launch("buckets", cards=2)        # exercise 1: 3 cards

answer_1 = None                              # all-reduces a step, 50 KB buckets, after the first step
lab.check("08.1", my_run_1, answer_1)

# %% [markdown]
# **2.** Give `fast_ddp` its optimum-habana default, `fusion_buffer_dtype=torch.bfloat16` (the scenario's option: `"buckets bfloat16"`). Are its weights still DDP's, to within 1e-5 of their sum? Do the cards still agree with each other?

# %%
def my_run_2():
    return launch("buckets float32")         # exercise 2: "buckets bfloat16"

answer_2 = None                              # True or False
lab.check("08.2", my_run_2, answer_2)

# %% [markdown]
# **3.** Make the row-parallel layer column-parallel: in `multicard.py`, a `ColumnParallelLinear` whose card holds `out_features // world_size` rows of the weight and of the bias, computes its share of the outputs, and puts the shares side by side with `dist.all_gather` then `torch.cat`; add it to `inference`'s dict as `"column"`, re-run the `%%writefile` cell, and launch `"inference column"`. Does it capture with lazy collectives, with correct answers?

# %%
def my_run_3():
    return launch("inference row", PT_HPU_ENABLE_LAZY_COLLECTIVES="true")     # exercise 3: "inference column"

answer_3 = None                              # True or False
lab.check("08.3", my_run_3, answer_3)

# %% [markdown]
# ## Further reading
# The Intel pages this notebook teaches, and where to go next:
# - [PyTorch Gaudi Theory of Operations](https://docs.habana.ai/en/latest/PyTorch/Reference/PyTorch_Gaudi_Theory_of_Operations.html), *Distributed Training*: HCCL as torch.distributed's backend.
# - [General Model Optimizations](https://docs.habana.ai/en/latest/PyTorch/Model_Optimization_PyTorch/Optimization_in_PyTorch_Models.html): gradient bucket size, gradients as bucket views.
# - [Optimum Habana: Accelerating Training](https://huggingface.co/docs/optimum/habana/usage_guides/accelerate_training): `distribution_strategy="fast_ddp"`.
# - [Run Inference Using HPU Graphs](https://docs.habana.ai/en/latest/PyTorch/Inference_on_PyTorch/Inference_Using_HPU_Graphs.html): `PT_HPU_ENABLE_LAZY_COLLECTIVES`.
# - [Distributed training with PyTorch on Gaudi](https://docs.habana.ai/en/latest/PyTorch/PyTorch_Scaling_Guide/index.html) and the [HCCL API](https://docs.habana.ai/en/latest/API_Reference_Guides/HCCL_APIs/index.html).
