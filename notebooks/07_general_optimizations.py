# %% [markdown]
# # General model optimizations: the checklist, one experiment each
#
# Seed document: *General Model Optimizations*. A list of things to check in any model that runs on Gaudi:
# ops that fall back to the CPU, where `mark_step` goes, batch size, fused ops, fused attention, the disk recipe
# cache, how often you print, pinned memory, constants in loops, weight sharing.
#
# **What you'll do**
# - read the CPU-fallback log and its frequency table;
# - measure what batch size, fused optimizers and FusedSDPA change;
# - use the disk recipe cache across two runs of a script, and watch it evict;
# - count the host syncs that printing causes, and the recompiles a loop variable causes.
#
# **What you'll learn**
# - how to spot each of these problems in the panel, and the one-line fix for each.
#
# **What you'll need**
# - notebooks 01–04; about a minute of CPU time.

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.observe.metrics import metric_global
from collections import Counter
import time, os, re, sys, json, subprocess, tempfile
from hpu_lab.lab.data import MNISTLike
import hpu_lab.perfmodel as pm        # the Gaudi clock (docs/gaudi_clock.md)
from hpu_lab import lab              # step_times, compare, check (docs/lab.md)
import widgets                        # the panel and other views (reads the events)
# %load_ext widgets
torch.manual_seed(0)                  # every run of the notebook draws the same numbers
print("torch", torch.__version__, "| hpu_lab", hpu_lab.__version__)
CARD = "gaudi2"                       # this notebook's card, for its timelines, tables and asserts (the Gaudi clock)
widgets.set_clock("gaudi", CARD)


# %%
class Net(nn.Module):                 # the model of seed 000, verbatim
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output

device = torch.device("hpu")
train_set = MNISTLike(train=True)

# %% [markdown]
# ## 1. Placement of ops on HPU: CPU fallback
#
# > *Execution of an op automatically falls back to CPU if the op is not registered with its backend as HPU or if op is registered but the requested datatype is not supported on HPU.*
#
# Turn the fallback log on and call `digamma` on bfloat16. On a Gaudi these are environment variables set
# before the process starts (`ENABLE_CONSOLE=true LOG_LEVEL_PT_FALLBACK=1 python train.py`); inside this
# running kernel `hpu_lab.config.set` changes the same settings and validates them at once:

# %%
# claim M1
hpu_lab.config.set(ENABLE_CONSOLE="true", LOG_LEVEL_PT_FALLBACK="1")
x = torch.linspace(1, 3, 6, device=device).to(torch.bfloat16)
with ev.Collector() as fb:
    y = torch.digamma(x)
    z = torch.digamma(x * 2)
htcore.mark_step()
assert [e.op for e in fb.of(ev.CPUFallback)] == ["aten::digamma"] * 2

# %% [markdown]
# At exit the bridge prints how often each op ran on the CPU; `hpu_lab.dispatch.fallback.frequency_table()` gives the table now, and the `cpu_fallback` metric counts the same:

# %%
# claim M1
from hpu_lab.dispatch import fallback
print(fallback.frequency_table())
print(dict(metric_global("cpu_fallback").stats()))
assert "aten::digamma" in fallback.frequency_table()
assert metric_global("cpu_fallback")["FallbackOps"]["aten::digamma"] >= 2
hpu_lab.config.set(ENABLE_CONSOLE="false", LOG_LEVEL_PT_FALLBACK="5")

# %% [markdown]
# A fallback stops the graph at that op: what the op reads must be computed first, so the host waits for the device (a `HostSync` whose reason names the fallback), then the op runs on the CPU and its result is written back to the device. The syncs, from the event stream of the two calls above:

# %%
# claim M1
fallback_syncs = [e.reason for e in fb.of(ev.HostSync)]
print(fallback_syncs)
assert fallback_syncs == ["cpu fallback aten::digamma"] * 2
assert y.device.type == z.device.type == "hpu"                     # the results are back on the device

# %% [markdown]
# (hpu_lab does not record the two copies, the operand read to the host and the result written back, as separate `DeviceToHost`/`HostToDevice` events: they are part of the fallback's time on the host lane.) In float32, where HPU has the kernel, there is no fallback:

# %%
with ev.Collector() as fp32:
    y32 = torch.digamma(torch.linspace(1, 3, 6, device=device))
    htcore.mark_step()
print("fallbacks in float32:", len(fp32.of(ev.CPUFallback)))
assert fp32.of(ev.CPUFallback) == []

# %% [markdown]
# The other case of the seed: an op *not registered* for HPU at all, whatever the dtype. In hpu_lab that is an op its graph compiler cannot put in a graph (no shape inference, so no graph node); `torch.geqrf` (a QR factorisation) is one. It falls back in float32 too, and gives the CPU's answer:

# %%
a = torch.randn(4, 3)
with ev.Collector() as unregistered:
    qr_hpu, tau_hpu = torch.geqrf(a.to(device))
qr_cpu, tau_cpu = torch.geqrf(a)
print([(e.op, e.dtypes) for e in unregistered.of(ev.CPUFallback)], "| result on", qr_hpu.device)
assert [(e.op, e.dtypes) for e in unregistered.of(ev.CPUFallback)] == [("aten::geqrf", ("float32",))]
assert qr_hpu.device.type == "hpu" and torch.equal(qr_hpu.cpu(), qr_cpu) and torch.equal(tau_hpu.cpu(), tau_cpu)


# %% [markdown]
# ## 2. Usage of mark_step
#
# Both uses the seed lists — breaking a graph that does not fit in memory (claim M2), and separating static from dynamic parts (claim M3) — are demonstrated in notebook 02, sections 5 and 6.

# %% [markdown]
# ## 3. Batch size
#
# > *A large batch size is, in general, beneficial for throughput … Batch size is limited by Gaudi's device memory (HBM) size. Usually, larger batch size means more memory consumption in device.*
#
# One epoch of seed 000's model at batch sizes 100, 400 and 800:

# %%
def epoch(batch_size):
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size)
    batches = [(d.to(device), t.to(device)) for d, t in loader]
    htcore.mark_step()
    torch.hpu.synchronize()
    torch.hpu.reset_peak_memory_stats()
    base = torch.hpu.memory_allocated()
    with ev.Collector() as c:                   # the epoch's events, for the Gaudi clock
        for data, target in batches:
            optimizer.zero_grad(set_to_none=True)
            F.nll_loss(model(data), target).backward()
            htcore.mark_step()
            optimizer.step()
            htcore.mark_step()
        torch.hpu.synchronize()
    steps = lab.step_times_of(c.events, every=2, card=CARD, name=f"batch {batch_size}")   # each step ends at its 2nd mark_step
    return steps, torch.hpu.max_memory_allocated() - base

for b in (100, 400, 800):
    epoch(b)                                   # compile each shape first
results = {b: epoch(b) for b in (100, 400, 800)}

# %% [markdown]
# Device memory at the peak grows with the batch:

# %%
# claim M4
peaks = [results[b][1] for b in (100, 400, 800)]
print("peak device memory above the inputs:", {b: f"{results[b][1] / 2**20:.2f} MiB" for b in results})
assert peaks[0] < peaks[1] < peaks[2]

# %% [markdown]
# and so does throughput, as the per-step host cost is spread over more samples, and so is each launch's fixed device cost (the modeled device time of the same 1600 samples falls). `lab.step_times_of` splits each epoch's recording into its steps and times them on the Gaudi clock of this notebook's card (`docs/gaudi_clock.md`; host and device are both modeled, so the figures are the same on any machine):

# %%
# claim M4
samples_per_s = {b: results[b][0].per_second(b) for b in results}
for b, (t, _) in results.items():
    print(f"batch {b:3d}: {samples_per_s[b]:9.0f} samples/s on {t.card.device_name}, {t.verdict}, {len(t.steps):2d} steps, "
          f"device busy {t.device_ms:.3f} ms of a {t.wall_ms:.3f} ms step")
busy = {b: results[b][0].device_ms * len(results[b][0].steps) for b in results}   # modeled device time for the same 1600 samples
launches = {b: sum(s.launches for s in results[b][0].steps) for b in results}
assert busy[100] > busy[400] > busy[800]                       # fewer, bigger launches: less fixed cost per sample
assert launches[800] < launches[100]                           # 8x fewer steps, each costs the same host work
assert samples_per_s[100] < samples_per_s[400] < samples_per_s[800]

# %% [markdown]
# The step takes the same 1.69 ms at every batch size: it is the host's work, the same ops whatever the batch, and the device's 0.07 ms a step barely grows. So the throughput grows in proportion to the batch (8x the batch, 8x the samples/s), for as long as the step stays host-bound; notebook 03's curves show where that stops.

# %% [markdown]
# The seed's two other limits on batch size:
#
# > *2. Large batch size cannot be used when low latency instead of throughput is required.*
#
# For inference, the time to answer one request is the time of its whole batch. `hpu_lab.perfmodel.estimate` traces the model's forward in lazy mode without running it and gives its modeled device time on this notebook's card (`docs/gaudi_clock.md`): the batch's latency grows with the batch while the time per sample falls:

# %%
eval_model = Net().to(device).eval()
latency_ns = {}
for b in (1, 16, 256, 4096):
    with torch.no_grad():
        latency_ns[b] = pm.estimate(eval_model, torch.randn(b, 1, 28, 28).to(device), device=CARD).device_ns
    print(f"batch {b:4d}: latency {latency_ns[b] / 1e3:7.1f} µs, {latency_ns[b] / b / 1e3:8.3f} µs per sample")
sizes = sorted(latency_ns)
assert all(latency_ns[a] < latency_ns[b] for a, b in zip(sizes, sizes[1:]))              # latency grows
assert all(latency_ns[a] / a > latency_ns[b] / b for a, b in zip(sizes, sizes[1:]))      # per-sample cost falls

# %% [markdown]
# The latency grows by less than half from 1 image to 4096: at these sizes a launch's fixed cost is most of the modeled device time. For this small model, batching is almost free; for a large one the latency grows with the batch, and a latency budget caps it.

# %% [markdown]
# > *3. Large batch size in each Gaudi device may impact the convergence in data parallelism distributed training. For example, the highest global batch size that gives RN50 convergence is around 32K. This means that with an increasing number of Gaudi devices, batch size should be reduced in each device.*
#
# Convergence is a property of training to the end, which hpu_lab does not reproduce; the arithmetic is simple: the global batch is the per-card batch times the cards, so at about 32K, 8 cards can take 4096 each, 64 cards only 512, 256 cards 128.

# %% [markdown]
# ## 4. PyTorch mixed precision
#
# See notebook 01 (autocast, claim T11) and notebook 06 (HMP lists, claim O4).

# %% [markdown]
# ## 5. Usage of fused operators
#
# > *Create a custom op for optimizers (E.g. FusedSGD, FusedAdamW) and other complex ops (e.g FusedClipNorm) to minimize host performance overheads of running many small ops.*
#
# A deep model has many parameter tensors, and `torch.optim.SGD` traces a few ops for each of them, every step:

# %%
from hpu_lab.hpex.optimizers import FusedSGD

def deep(layers=24, width=64):
    torch.manual_seed(0)
    mods = [nn.Flatten(), nn.Linear(784, width)]
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods, nn.Linear(width, 10)).to(device)

data, target = torch.randn(32, 1, 28, 28).to(device), torch.randint(0, 10, (32,)).to(device)

def update(make_optimizer, steps=6):
    model = deep()
    opt = make_optimizer(model.parameters())
    nodes, host = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(data), target).backward()
        htcore.mark_step()
        with ev.Collector() as c:
            opt.step()
            htcore.mark_step()
        host.append(pm.retime(c.events, CARD).host_ns / 1e6)     # the update's modeled host time
        nodes.append(sum(1 for l in c.of(ev.Launch) for n in l.graph.nodes    # ops (not inputs, outputs, views)
                         if n.op not in ("input", "output", "view")))
    return nodes[-1], host[-1]

torch_nodes, torch_ms = update(lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, foreach=False))
fused_nodes, fused_ms = update(lambda p: FusedSGD(p, lr=0.01, momentum=0.9))

# %% [markdown]
# The update's graph: the fused optimizer is one op for all the parameters:

# %%
# claim M5
print(f"{len(list(deep().parameters()))} parameter tensors; nodes in the update graph: "
      f"torch.optim.SGD {torch_nodes}, FusedSGD {fused_nodes}")
assert fused_nodes <= 3 and torch_nodes > 20 * fused_nodes

# %% [markdown]
# Fewer ops traced is less host time per update (the Gaudi clock's host lane: the bridge's modeled cost of each op traced and of the update's graph and launch):

# %%
# claim M5
print(f"host time of one update: torch.optim.SGD {torch_ms:.2f} ms, FusedSGD {fused_ms:.2f} ms")
assert fused_ms < torch_ms

# %% [markdown]
# ## 6. Fused scaled dot product attention (FusedSDPA)
#
# > *FusedSDPA … maintains the same functionality and interface as the original function but with reduced memory usage … Recompute mode … necessary parts of the forward pass are recomputed during backward pass to reduce memory usage … No-recompute mode … can have larger memory needs compared to recompute mode. This mode still has memory benefits compared to non-fused attention implementations.*

# %%
from hpu_lab.hpex.kernels import FusedSDPA

def attention(kind, q, k, v):
    if kind == "unfused":                 # written out: F.scaled_dot_product_attention itself picks a fused
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5      # (flash) kernel, as on the CPU
        return torch.softmax(scores, dim=-1) @ v
    return FusedSDPA.apply(q, k, v, None, 0.0, False, None, "None", kind == "recompute")

def run(kind, shape=(2, 4, 256, 32)):
    torch.manual_seed(0)
    q, k, v = [torch.randn(*shape).to(device).requires_grad_() for _ in range(3)]
    htcore.mark_step()
    torch.hpu.synchronize()
    base = torch.hpu.memory_allocated()
    torch.hpu.reset_peak_memory_stats()
    out = attention(kind, q, k, v)
    out.sum().backward()
    htcore.mark_step()
    torch.hpu.synchronize()
    return out.detach().cpu(), q.grad.cpu(), torch.hpu.max_memory_allocated() - base

runs = {kind: run(kind) for kind in ("recompute", "no-recompute", "unfused")}

# %% [markdown]
# Same results as PyTorch's own attention (on the CPU), forward and gradient:

# %%
# claim M6
torch.manual_seed(0)
qc, kc, vc = [torch.randn(2, 4, 256, 32).requires_grad_() for _ in range(3)]
ref = F.scaled_dot_product_attention(qc, kc, vc)
ref.sum().backward()
for kind, (out, dq, _) in runs.items():
    assert torch.allclose(out, ref.detach(), atol=1e-5) and torch.allclose(dq, qc.grad, atol=1e-4), kind
print("outputs and gradients equal F.scaled_dot_product_attention on CPU for", list(runs))

# %% [markdown]
# and the peak device memory of forward + backward, in the order the seed gives:

# %%
# claim M6
peak = {kind: r[2] for kind, r in runs.items()}
print({kind: f"{b / 2**20:.1f} MiB" for kind, b in peak.items()})
assert peak["recompute"] < peak["no-recompute"] < peak["unfused"]

# %% [markdown]
# The mode can also be chosen for a block of code, without touching the call: `FusedSDPA.apply(..., recompute_mode=None)` (the default) follows `torch.hpu.sdp_kernel(enable_recompute=...)`. Under `enable_recompute=False`, what the forward keeps for the backward is the no-recompute mode's, the attention probabilities, (N, heads, L, S):

# %%
def kept_for_backward(enable_recompute):
    q, k, v = [torch.randn(2, 4, 256, 32).to(device).requires_grad_() for _ in range(3)]
    with torch.hpu.sdp_kernel(enable_recompute=enable_recompute), ev.Collector(kinds=[ev.OpAccumulated]) as c:
        FusedSDPA.apply(q, k, v)                 # recompute_mode left to the switch
    return [e.op for e in c.events if "sdpa" in e.op]
modes = {flag: kept_for_backward(flag) for flag in (True, False)}
print("fused forward op traced: enable_recompute=True", modes[True], "| enable_recompute=False", modes[False])
assert modes == {True: ["hpu_lab::sdpa_recomp_fwd"], False: ["hpu_lab::sdpa_fwd"]}
assert torch.hpu.recompute_sdp_enabled()         # the block ended: back to the default

# %% [markdown]
# The seed's restrictions fail loudly, with the message saying what to change:
#
# > *This mode does not support broadcasting on batch size dimension. Query, key and value tensors should have same batch size. … The supported data types are FP32 and BF16.*

# %%
def error_of(fn):
    try:
        fn()
    except (TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return None

q = torch.randn(2, 4, 16, 8)
kv_one_batch = torch.randn(1, 4, 16, 8)                     # batch 1: would broadcast over q's batch of 2
errors = {
    "float16": error_of(lambda: FusedSDPA.apply(*[q.half().to(device)] * 3)),
    "batch broadcast, recompute mode": error_of(lambda: FusedSDPA.apply(
        q.to(device), kv_one_batch.to(device), kv_one_batch.to(device), recompute_mode=True)),
}
for case, err in errors.items():
    print(f"{case}: {err}")
assert errors["float16"].startswith("TypeError: FusedSDPA supports FP32 and BF16 only")
assert "does not support broadcasting on batch size dimension" in errors["batch broadcast, recompute mode"]

# %% [markdown]
# No-recompute mode does broadcast the batch dimension, and agrees with PyTorch's attention on the CPU:

# %%
broadcast = FusedSDPA.apply(q.to(device), kv_one_batch.to(device), kv_one_batch.to(device), recompute_mode=False)
reference = F.scaled_dot_product_attention(q, kv_one_batch, kv_one_batch)
assert torch.allclose(broadcast.cpu(), reference, atol=1e-5)
print("no-recompute with a batch-1 key/value: same as F.scaled_dot_product_attention,", tuple(broadcast.shape))

# %% [markdown]
# > *attn_mask supports shape (N,…,1,S), in addition to the PyTorch specified shape (N,…,L,S).*
#
# A padding mask (which keys each sequence may attend to) is the same for every query position, so it needs one row, not L. The same mask in both shapes, in both modes, against PyTorch's attention on the CPU with the full (N, 1, L, S) mask:

# %%
# claim M6
torch.manual_seed(0)
N, L, S = 2, 256, 256
qm, km, vm = [torch.randn(N, 4, L, 32) for _ in range(3)]
lengths = torch.tensor([200, 100])                                   # each sequence's real length
mask_1S = torch.zeros(N, 1, 1, S).masked_fill(torch.arange(S) >= lengths.view(N, 1, 1, 1), float("-inf"))
mask_LS = mask_1S.expand(N, 1, L, S).contiguous()                    # PyTorch's shape
reference = F.scaled_dot_product_attention(qm, km, vm, attn_mask=mask_LS)
for recompute in (True, False):
    for mask in (mask_1S, mask_LS):
        out = FusedSDPA.apply(qm.to(device), km.to(device), vm.to(device), mask.to(device), 0.0, False, None, "None", recompute).cpu()
        assert torch.allclose(out, reference, atol=1e-5), (recompute, mask.shape)
print(f"mask (N,1,1,S): {mask_1S.numel() * 4} bytes, (N,1,L,S): {mask_LS.numel() * 4} bytes; same output in both modes")
assert mask_LS.numel() == L * mask_1S.numel()

# %% [markdown]
# > *You can try running this mode even in inference scenarios that result in out of memory issues with non-fused attention implementations. … Users are advised to try both modes and choose the optimal mode for a given topology.*
#
# The same attention in inference (`torch.no_grad()`, nothing kept for a backward), peak device memory of each:

# %%
# claim M6
def inference_peak(kind):
    qh, kh, vh = [t.to(device) for t in (qm, km, vm)]
    htcore.mark_step()
    torch.hpu.synchronize()
    base = torch.hpu.memory_allocated()
    torch.hpu.reset_peak_memory_stats()
    with torch.no_grad():
        attention(kind, qh, kh, vh)
        htcore.mark_step()
        torch.hpu.synchronize()
    return torch.hpu.max_memory_allocated() - base
inference = {kind: inference_peak(kind) for kind in ("recompute", "no-recompute", "unfused")}
print({kind: f"{b / 2**20:.2f} MiB" for kind, b in inference.items()})
assert inference["recompute"] < inference["no-recompute"] < inference["unfused"]

# %% [markdown]
# Even with no backward, no-recompute mode materialises the (N, heads, L, S) probabilities (2 × 4 × 256 × 256 floats, 2 MiB) and recompute mode does not: it is the mode to try when attention runs out of memory in inference. In training the modes trade memory for time (recompute repeats part of the forward in the backward), which is why the seed asks you to try both on your model.

# %% [markdown]
# ## 7. Perf tool
#
# > *The habana_perf_tool scans and provides guidance on existing log files … such as increasing batch size or MME and TPC usages and timings.*
#
# The panel's Advice tab does the same from the events. The batch-100 epoch of section 3, once more. The model is built and the batches are loaded and copied to the device *before* the recorded block, and every shape is compiled already (section 3), so the panel and its verdict are the 16 training steps and nothing else: no data loading (your code, measured) and no compile inside the window to decide the verdict for the steps.

# %%
torch.manual_seed(0)
model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(d.to(device), t.to(device)) for d, t in torch.utils.data.DataLoader(train_set, batch_size=100)]
htcore.mark_step()
torch.hpu.synchronize()

# %%
# %%hpu_section "Batch 100, 16 steps, for the advisor" --as small_batch
for data, target in batches:
    optimizer.zero_grad(set_to_none=True)
    F.nll_loss(model(data), target).backward()
    htcore.mark_step()
    optimizer.step()
    htcore.mark_step()
torch.hpu.synchronize()

# %% [markdown]
# The panel's dotted lines are its `mark_step`s, two a training step, so its "end of step 26" is the end of the 13th training step's first graph. The advice, first words of each line (the full text is in the panel's Advice tab). On the Gaudi clock the device is busy for a small part of each step (section 3), so the first line says host-bound, and the window holds only the steps (no compile, no data loading):

# %%
advice = widgets.advise(small_batch.events)
for line in advice:
    print("-", line.split(":")[0])
r = lab.step_times_of(small_batch.events, every=2, card=CARD, name="batch 100")       # its 16 steps
print(f"{r.card.device_name}: device busy {r.device_ms:.3f} ms of a {r.wall_ms:.3f} ms step, {r.verdict}")
assert small_batch.of(ev.Compile) == [] and small_batch.of(ev.UserCode) == []
assert len(small_batch.of(ev.MarkStep)) == 2 * 16
assert advice[0].startswith("host-bound") and r.verdict == "host-bound"

# %% [markdown]
# The same rules as a command, as the seed runs it: `habana_perf_tool --trace trace_example.json`. The section's events go to a trace file (the profiler's Chrome trace, on the Gaudi clock), and the command scans the file alone, in another process: it lists the metrics it reads from the trace, then its guidance. Its first line says host-bound, and the fix the seed names first: increase the batch size (section 3 measured what that buys).

# %%
from hpu_lab.observe import profiler
trace_file = os.path.join(tempfile.mkdtemp(), "trace_example.json")
profiler.export_chrome_trace(trace_file, small_batch.events, device=CARD)
tool = os.path.join(os.path.dirname(sys.executable), "habana_perf_tool")   # the venv's command (pyproject)
out = subprocess.run([tool, "--trace", trace_file], capture_output=True, text=True, check=True).stdout
print(out.replace(trace_file, "trace_example.json"))
guidance = out.split("Guidance:")[1]
assert "verdict                  host-bound" in out and "mark_steps               32" in out
assert guidance.strip().startswith("- host-bound") and "increase the batch size" in guidance

# %% [markdown]
# ## 8. Disk caching eviction policy
#
# > *Disk Caching is a mechanism that can limit the number of graph compilations for both training and inference workloads … the PyTorch bridge iterates over recipes in cache and removes the oldest recipes (by creation date on file system) first until the total size is under the limit.*
#
# A training script, `notebooks/scripts/cached_training.py` (open it beside this notebook), run as separate processes with `PT_HPU_RECIPE_CACHE_CONFIG=<folder>,<delete>,<max MB>`; it prints what its recipe lookups found, as JSON:

# %%
workdir = tempfile.mkdtemp()
cache_dir = os.path.join(workdir, "recipes")
TRAIN_SCRIPT = os.path.abspath("scripts/cached_training.py")   # notebooks/scripts/cached_training.py: open it, edit it

def run_script(width, delete="false", max_mb=1024, log=False):
    env = dict(os.environ, PT_HPU_RECIPE_CACHE_CONFIG=f"{cache_dir},{delete},{max_mb}")
    if log:
        env.update(ENABLE_CONSOLE="true", LOG_LEVEL_PT_HABHELPER="2")
    p = subprocess.run([sys.executable, TRAIN_SCRIPT, str(width)], cwd=workdir, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr

def recipes():
    return [n for n in os.listdir(cache_dir) if n.endswith(".recipe")]

def folder_mb():
    return sum(os.path.getsize(os.path.join(cache_dir, n)) for n in recipes()) / 2**20


# %% [markdown]
# The first run compiles and stores its recipes; the second, a new process, finds them on disk:

# %%
# claim M7
cold, _ = run_script(128)
warm, _ = run_script(128)
print("first run: ", cold)
print("second run:", warm)
assert cold["compiles"] >= 2 and warm["compiles"] == 0
assert warm["disk_hits"] == cold["compiles"] and warm["loss"] == cold["loss"]

# %% [markdown]
# > *The Intel Gaudi PyTorch bridge verifies if a recipe is already in cache (first in mem cache, then in disk cache).*
#
# The second run asked the disk only for the graphs its in-memory cache did not hold yet, once each; every later launch of the same graph was served from memory:

# %%
assert warm["disk_hits"] + warm["memory_hits"] == warm["launches"]
assert warm["memory_hits"] == warm["launches"] - len(recipes()) > 0 and warm["disk_misses"] == 0
print(f"{warm['launches']} launches: {warm['disk_hits']} recipes read from disk (one per graph), {warm['memory_hits']} served from memory")

# %% [markdown]
# The recipes are serialized and written by a background thread (`hpu_lab-disk-cache`), so storing a recipe does not delay the launch; `disk_cache.flush_writes()` (also run at exit) waits for it, so a short script's recipes are on disk for the next process. Both runs had the thread:

# %%
assert cold["writer_threads"] == warm["writer_threads"] == ["hpu_lab-disk-cache"]
print("writer thread:", cold["writer_threads"], "| recipe files:", len(recipes()), "| lock file:", os.path.exists(os.path.join(cache_dir, "eviction.lock")))

# %% [markdown]
# Now cap the folder below what two more models need, and log the evictions:
#
# > *In order to ensure that eviction logic removes recipes in a coherent way, only one process may perform eviction at a time. This is implemented using an `eviction.lock` file in disk cache directory and locking it using flock … the eviction tries to keep the size of cache directory <= 0.99 * <RECIPE_CACHE_SIZE_MB>.*

# %%
# claim M7
cap_mb = round(1.2 * folder_mb(), 3)                 # room for about one model's recipes
logs = [run_script(w, max_mb=cap_mb, log=True)[1] for w in (96, 64)]
removed = [l for log in logs for l in log.splitlines() if l.startswith("Removed ")]
print(f"cap {cap_mb} MB; evictions logged: {len(removed)}; folder {folder_mb():.4f} MB, 0.99 x cap = {0.99 * cap_mb:.4f} MB")
# the log line's form (which recipe goes first depends on file times, ties broken by name: not its id)
print(re.sub(r"Removed \S+ (.*): .*", r"Removed <recipe id> \1: ...", removed[0]))
assert removed and folder_mb() <= 0.99 * cap_mb
assert os.path.exists(os.path.join(cache_dir, "eviction.lock"))

# %% [markdown]
# The lock, at work: this notebook takes `eviction.lock` itself (as another process in the middle of its eviction would), then runs one more script with the same cap. The script trains, stores its recipes, and its eviction waits for the lock: while the notebook holds it, no recipe is removed; once released, the script evicts and exits:

# %%
import fcntl
before_lock = set(recipes())
env = dict(os.environ, PT_HPU_RECIPE_CACHE_CONFIG=f"{cache_dir},false,{cap_mb}")
with open(os.path.join(cache_dir, "eviction.lock"), "a+") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)                  # "another process is evicting"
    p = subprocess.Popen([sys.executable, TRAIN_SCRIPT, "32"], cwd=workdir, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trained = json.loads(next(l for l in p.stdout if l.startswith("{")))   # it has trained and queued its recipes
    kept_while_locked = before_lock <= set(recipes())
    fcntl.flock(lock, fcntl.LOCK_UN)
_, err = p.communicate(timeout=600)
assert p.returncode == 0, err[-3000:]
print(f"while the notebook held the lock: all {len(before_lock)} older recipes kept: {kept_while_locked}; "
      f"after: {len(before_lock - set(recipes()))} of them evicted, folder within 0.99 x cap: {folder_mb() <= 0.99 * cap_mb}")
assert trained["compiles"] >= 2 and kept_while_locked
assert before_lock - set(recipes()) and folder_mb() <= 0.99 * cap_mb

# %% [markdown]
# > *If too many eviction messages are observed, it may be time to reset the recipe cache directory size to a larger number.*
#
# What those messages tell you: every one is a recipe that a later run will have to compile again. The same two models once more, first with the tight cap, then twice with a cap ten times larger:

# %%
# claim M7
def evictions_and_compiles(max_mb):
    out = [run_script(w, max_mb=max_mb, log=True) for w in (96, 64)]
    return (sum(l.startswith("Removed ") for _, log in out for l in log.splitlines()),
            sum(r["compiles"] for r, _ in out))
tight, roomy = evictions_and_compiles(cap_mb), evictions_and_compiles(round(10 * cap_mb, 3))
again = evictions_and_compiles(round(10 * cap_mb, 3))
print(f"cap {cap_mb} MB: {tight[0]} eviction messages, {tight[1]} compiles | cap {10 * cap_mb:.3f} MB: "
      f"{roomy[0]} messages, {roomy[1]} compiles, then a second time: {again[0]} messages, {again[1]} compiles")
assert tight[0] > 0 and tight[1] > 0                 # evicted, so compiled again
assert roomy[0] == again[0] == 0 and again[1] == 0   # room for both: no message, and the next runs compile nothing

# %% [markdown]
# The first pass with the larger cap still compiles twice: under the tight cap each run evicted the other model's recipes, so the width-96 model's were gone. With room for both nothing is evicted, and the next pass compiles nothing.

# %% [markdown]
# The middle field is the seed's "delete" flag:
#
# > *`PT_HPU_RECIPE_CACHE_CONFIG=/tmp/iter1_recipe_cache/,true,1024` … recipes will be stored in /tmp/iter1_recipe_cache/. The cache will be cleared at the beginning of each script execution and the size of recipe cache will be limited to 1024MB.*
#
# The same setting on our folder: the width-128 model, whose recipes the second run above read from disk, compiles everything again:

# %%
cleared, _ = run_script(128, delete="true", max_mb=1024)
print("with delete=true:", cleared)
assert cleared["disk_hits"] == 0 and cleared["compiles"] == cold["compiles"]
assert len(recipes()) == cleared["compiles"]          # only this run's recipes are left

# %% [markdown]
# ## 9. Gradient buckets in multi-card training
#
# > *Based on the size of the model, the size of the gradient bucket can be adjusted to minimize the number of invocations of all-reduce in the backward pass.*

# %% [markdown]
# > *In ResNet50, bucket size of 100MB is optimal whereas ResNext101 requires bucket size of 200MB.*
#
# (PyTorch DDP's default `bucket_cap_mb` is 25.) Notebook 08, section 3, launches DDP on two emulated cards with two bucket sizes, counts the all-reduces, and measures what `gradient_as_bucket_view=True` saves in device memory.
#
# > *HPUParallelStrategy provided by PyTorch Lightning package supports features such setting size of gradient bucket, setting gradients view of allreduce buckets and static_graph. By setting static_graph when instantiating the Trainer, allreduce on unused parameters in the graph can be avoided.*
#
# PyTorch Lightning is not part of this lab; `HPUParallelStrategy(bucket_cap_mb=..., gradient_as_bucket_view=True, static_graph=True)` passes these three on to DDP, whose first two notebook 08 shows.

# %% [markdown]
# ## 10. Reducing the frequency of printing quantities
#
# > *Printing these tensors in the training script requires these device tensors to be pulled to the host CPU and therefore needs the device execution to finish. This can result in non-overlapped execution between host and device.*
#
# The same 8 steps, printing the loss every step, then only at the end. The model is seed 000's with a wider hidden layer (4096), so that on the Gaudi clock its forward and backward keep the device busy longer than the host takes to ask for the loss:

# %%
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(d.to(device), t.to(device)) for d, t in torch.utils.data.DataLoader(train_set, batch_size=200)]

def train(print_freq):
    for i, (data, target) in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        htcore.mark_step()
        if print_freq and i % print_freq == 0:
            print(f"step {i}: loss {loss.item():.3f}")
        optimizer.step()
        htcore.mark_step()
    return loss

train(0); torch.hpu.synchronize()           # warm up

# %%
# %%hpu_section "print(loss.item()) every step" --as chatty
train(print_freq=1)
torch.hpu.synchronize()

# %%
# %%hpu_section "print only at the end" --as quiet
loss = train(print_freq=0)
print(f"final loss {loss.item():.3f}")

# %% [markdown]
# Every print made the host wait for the device (the red diamonds, one a step; the panel labels each `mark_step`, two a step, as "end of step n"); the quiet run waited once:

# %%
# claim M9
reads = {s.title: Counter(e.reason for e in s.of(ev.HostSync))[".item()"] for s in (chatty, quiet)}
print("host syncs to read the loss:", reads)
assert list(reads.values()) == [8, 1]


# %% [markdown]
# How long did those syncs hold the host? On the Gaudi clock (the sections re-timed on this notebook's card, `docs/gaudi_clock.md`) each print waits until the modeled end of the forward+backward graph launched just before it: the host can queue nothing in the meantime. In the quiet run the host went straight on to trace the optimizer step, and by its one read at the end the device had long finished:

# %%
# claim M9
waited = {s.title: pm.retime(s.events, CARD).sync_wait_ns for s in (chatty, quiet)}
print(f"host time spent waiting for the device on {pm.card(CARD).device_name}: "
      + ", ".join(f"{t}: {ns / 1e3:.1f} µs" for t, ns in waited.items()))
assert waited[chatty.title] > waited[quiet.title]

# %% [markdown]
# Yet the chatty panel is longer than the quiet one by more than those waits. Most of the rest is the printing itself: formatting and writing eight lines is your code, measured on this CPU (the grey "your code" bars after each red wait), not a sync. The chatty run's extra time, split:

# %%
# NBVAL_IGNORE_OUTPUT
# (printing is measured on this CPU)
# claim M9
clock = {s.title: pm.retime(s.events, CARD) for s in (chatty, quiet)}
printing = {t: sum(e.own_ns for e in r.events if isinstance(e, ev.UserCode) and e.what == "print") for t, r in clock.items()}
readback = {t: sum(e.duration_ns for e in r.events if isinstance(e, ev.DeviceToHost)) for t, r in clock.items()}
extra = clock[chatty.title].wall_ns - clock[quiet.title].wall_ns
print(f"chatty run longer by {extra / 1e3:.0f} µs: waiting for the device {(waited[chatty.title] - waited[quiet.title]) / 1e3:.0f} µs, "
      f"reading the loss back {(readback[chatty.title] - readback[quiet.title]) / 1e3:.0f} µs, "
      f"printing {(printing[chatty.title] - printing[quiet.title]) / 1e3:.0f} µs (measured)")

# %% [markdown]
# On Gaudi 2 each of the eight waits is about 60 µs (this model's forward and backward on the device), so printing costs more than syncing. The wait grows with the device's time per step: the same recorded runs re-timed, **what-if**, on first-generation Gaudi, whose device takes longer for the same graphs:

# %%
# claim M9
waited_first_gen = {s.title: pm.retime(s.events, "gaudi").sync_wait_ns for s in (chatty, quiet)}
prints = {s.title: sum(isinstance(e, ev.UserCode) and e.what == "print" for e in s.events) for s in (chatty, quiet)}
print(f"print calls: {prints}")
print(f"host waiting for the device, printing every step: {pm.card(CARD).device_name} {waited[chatty.title] / 1e3:.0f} µs, "
      f"{pm.card('gaudi').device_name} {waited_first_gen[chatty.title] / 1e3:.0f} µs")
assert list(prints.values()) == [8, 1]
assert waited_first_gen[chatty.title] > 2 * waited[chatty.title]

# %% [markdown]
# Each wait is the device's forward+backward time less the little the host did after launching it; it grows with the device's time per step. (Printed *after* `optimizer.step()`, the host first traces the optimizer while the device runs the forward and backward: the wait shrinks by that much, or hides behind it, but the sync is still there. Exercise 3.)
#
# A progress bar does the same when it shows the loss:
#
# > *For the progress bar, it is recommended to Wait until a run completes 20 or more iterations to minimize unnecessary synchronization.*
#
# 40 steps with `tqdm`, the loss in the bar's postfix every step, then every 20 steps (the bar writes to a string here, so the notebook stays readable):

# %%
import io
from tqdm import tqdm

def train_with_bar(update_every, steps=40):
    with ev.Collector(kinds=[ev.HostSync]) as c:
        bar = tqdm(range(steps), file=io.StringIO())
        for i in bar:
            data, target = batches[i % len(batches)]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            htcore.mark_step()
            optimizer.step()
            htcore.mark_step()
            if i % update_every == 0:
                bar.set_postfix(loss=loss.item())
        bar.close()
        torch.hpu.synchronize()
    return sum(e.reason == ".item()" for e in c.events)

bar_syncs = {n: train_with_bar(n) for n in (1, 20)}
print("host syncs for the bar's loss, 40 steps: updated every step", bar_syncs[1], "| every 20 steps", bar_syncs[20])
assert bar_syncs == {1: 40, 20: 2}

# %% [markdown]
# ## 11. Pinning memory for the data loader
#
# > *Pinning the memory while instantiating the dataloader avoids a redundant copy in host during the training iteration.*

# %% [markdown]
# The same 512 samples through `DataLoader(pin_memory=False)` (the default) and `pin_memory=True`. Each `HostToDevice` event says how many bytes went to the device and how many the host first copied into a pinned staging buffer (`staging_bytes`): with pageable batches every byte is copied twice, with pinned batches once:

# %%
# claim M10
def copy_path(pin):
    dl = torch.utils.data.DataLoader(torch.utils.data.Subset(MNISTLike(), range(512)), batch_size=128, pin_memory=pin)
    with ev.Collector(kinds=(ev.HostToDevice,)) as c:
        for data, target in dl:
            assert data.is_pinned() == pin
            data.to("hpu"), target.to("hpu")
    return c.events

pageable, pinned = copy_path(False), copy_path(True)
moved = lambda evs: sum(e.nbytes for e in evs)
staged = lambda evs: sum(e.staging_bytes for e in evs)
print(f"pin_memory=False: {moved(pageable)/1e6:.2f} MB to the device, {staged(pageable)/1e6:.2f} MB copied on the host first")
print(f"pin_memory=True:  {moved(pinned)/1e6:.2f} MB to the device, {staged(pinned)/1e6:.2f} MB copied on the host first")
assert moved(pageable) == moved(pinned) > 0
assert staged(pageable) == moved(pageable) and staged(pinned) == 0

# %% [markdown]
# **Fidelity note.** `staging_bytes` follows from whether the source is pinned, so the cell above shows what the runtime recorded, not yet a saving. What is not set by the cell: torch's DataLoader really handed over page-locked batches (`data.is_pinned()`, asserted in the loop), and the copy each `.to("hpu")` made is the one the runtime records. The staging memcpy itself is modeled: the emulator copies once either way; the Gaudi clock charges a pageable copy the host's staging memcpy (8 GB/s, assumed) before its DMA (`docs/gaudi_clock.md`, *Copies*). The recorded copies, re-timed on this notebook's card, host time in copies:

# %%
# claim M10
from hpu_lab.perfmodel.cost import staging_ns
def host_copy_ns(evs):                     # the recorded copies on the Gaudi clock's host lane
    return sum(e.duration_ns for e in pm.retime(evs, CARD).events if isinstance(e, ev.HostToDevice) and e.lane == "host")
t = {False: host_copy_ns(pageable), True: host_copy_ns(pinned)}
print(f"{pm.card(CARD).device_name} host time in the epoch's copies: pageable {t[False] / 1e3:.0f} µs, pinned {t[True] / 1e3:.0f} µs, "
      f"difference {(t[False] - t[True]) / 1e3:.0f} µs = the staging memcpy of {moved(pageable) / 1e6:.2f} MB")
assert all(not e.pinned for e in pageable) and all(e.pinned for e in pinned)
staging = sum(staging_ns(e.nbytes) for e in pageable)                 # the modeled memcpy of the staged bytes
assert staging > 0 and abs((t[False] - t[True]) - staging) <= len(pageable)   # (1 ns of rounding per copy)

# %% [markdown]
# *In practice:* with `num_workers=0`, as here, `pin_memory=True` pins each batch on your own thread, inside the DataLoader fetch: that memcpy is still host time of the training loop (measured, "your code"), so the copy moves rather than disappears. With `num_workers >= 1` the DataLoader pins in its own thread while the loop trains, and the redundant copy leaves the training iteration, which is the seed's point.

# %% [markdown]
# ## 12. Avoiding constant variables in loops
#
# > *Such a loop iterator variable may cause a creation of different constant operators in the execution graph every iteration.*
#
# The seed's V-Diffusion loop, before and after:

# %%
num_steps = 10
x = torch.randn(4, 16, device=device)
htcore.mark_step()

def sample(use_roll):
    global x
    steps = torch.linspace(1, 0, num_steps + 1, device=device)
    htcore.mark_step()
    for i in range(4, num_steps):
        if use_roll:
            # The following 3 lines remove graph recompilation (variable "i" is not used)
            t_1 = steps[0]  # before: steps[i]
            t_2 = steps[1]  # before: steps[i+1]
            steps = torch.roll(steps, shifts=(-1), dims=(0))
        else:
            t_1 = steps[i]
            t_2 = steps[i + 1]
        x = x * t_1 + (t_2 - t_1) * torch.tanh(x)
        htcore.mark_step()


# %%
# %%hpu_section "Loop variable in the graph" --as loopvar
sample(use_roll=False)

# %%
# %%hpu_section "torch.roll instead" --as rolled
sample(use_roll=True)


# %% [markdown]
# With `steps[i]`, `i` is a constant of the graph, so each of the six iterations (`range(4, num_steps)`, as in the seed) compiles a new graph — the Recompiles tab names it; with `torch.roll`, the graph is the same every iteration:

# %%
# claim M11
def loop_compiles(s):                      # leave out the graph that made `steps` (linspace)
    return [e for e in s.of(ev.Compile) if not any(n.op == "aten::linspace" for n in e.graph.nodes)]
for e in loop_compiles(loopvar):
    print(e.reason)
print("compiles in the loop — steps[i]:", len(loop_compiles(loopvar)), "  torch.roll:", len(loop_compiles(rolled)))
assert len(loop_compiles(loopvar)) == num_steps - 4 and len(loop_compiles(rolled)) == 1
assert sum("loop variable?" in e.reason for e in loop_compiles(loopvar)) == num_steps - 5

# %% [markdown]
# ## 13. Weight sharing
#
# > *Weights can be shared using PyTorch with Gaudi only if they are created inside the module.*

# %% [markdown]
# The seed's example: `module.a = module.b` ties the two slots to one parameter, created inside the module, then the module moves to `hpu`:

# %%
class WeightShareModule(torch.nn.Module):   # the seed's example, verbatim
    def __init__(self):
        super(WeightShareModule, self).__init__()
        self.a = torch.nn.Parameter(torch.ones([2]))
        self.b = torch.nn.Parameter(torch.ones([2]))

    def forward(self, input):
        c = self.a * input + self.b * input
        return c

def shared_module(dev):
    module = WeightShareModule()
    module.a = module.b                     # module.a and module.b are shared
    return module.to(dev)

# %% [markdown]
# After the move the two slots are still one parameter, so the optimizer updates it once with both gradients. A few SGD steps on `hpu` give exactly the CPU's values:

# %%
# claim M12
def train_shared(dev, steps=3):
    module = shared_module(dev)
    opt = torch.optim.SGD(module.parameters(), lr=0.01)
    for i in range(steps):
        x = torch.tensor([1.0, 2.0 + i]).to(dev)
        opt.zero_grad()
        (module(x) ** 2).sum().backward()
        opt.step()
        htcore.mark_step()
    return module

on_hpu, on_cpu = train_shared(device), train_shared("cpu")
print("parameters:", len(list(on_hpu.parameters())), "| a is b:", on_hpu.a is on_hpu.b,
      "| device:", on_hpu.a.device)
print("hpu:", on_hpu.a.detach().cpu().tolist(), " cpu:", on_cpu.a.detach().tolist())
assert on_hpu.a is on_hpu.b and on_hpu.a.device.type == "hpu" and len(list(on_hpu.parameters())) == 1
assert torch.equal(on_hpu.a.detach().cpu(), on_cpu.a.detach())
assert not torch.equal(on_cpu.a.detach(), torch.ones(2))      # the steps did change the weight

# %% [markdown]
# The negative case, *"only if they are created inside the module"*: a weight made **outside** the module and handed to it twice, as two `Parameter`s around one tensor. On the CPU the two parameters share that tensor's storage, so each SGD step updates the one weight twice. `.to("hpu")` moves each parameter on its own (`nn.Module._apply`, as for CUDA), and one storage becomes two: the slots are untied, and training gives another answer than on the CPU, exactly that of two independent weights:

# %%
# claim M12
class SharedFromOutside(torch.nn.Module):   # weights made outside the module, then wrapped
    def __init__(self, weight_a, weight_b):
        super().__init__()
        self.a = torch.nn.Parameter(weight_a)
        self.b = torch.nn.Parameter(weight_b)

    def forward(self, input):
        return self.a * input + self.b * input

def train_outside(dev, weight_a, weight_b, steps=3):
    module = SharedFromOutside(weight_a, weight_b).to(dev)
    opt = torch.optim.SGD(module.parameters(), lr=0.01)
    for i in range(steps):
        x = torch.tensor([1.0, 2.0 + i]).to(dev)
        opt.zero_grad()
        (module(x) ** 2).sum().backward()
        opt.step()
        htcore.mark_step()
    return module

w = torch.ones([2])
outside_cpu = train_outside("cpu", w, w)                          # one tensor, two parameters
w = torch.ones([2])
outside_hpu = train_outside(device, w, w)
untied_cpu = train_outside("cpu", torch.ones([2]), torch.ones([2]))   # two separate weights, for reference
print("one storage for a and b: cpu", outside_cpu.a.data_ptr() == outside_cpu.b.data_ptr(),
      "| hpu", outside_hpu.a.data_ptr() == outside_hpu.b.data_ptr())
print("a after 3 steps: cpu", outside_cpu.a.detach().tolist(), " hpu", outside_hpu.a.detach().cpu().tolist(),
      " two separate weights on cpu", untied_cpu.a.detach().tolist())
assert outside_cpu.a.data_ptr() == outside_cpu.b.data_ptr()                  # tied on the CPU ...
assert outside_hpu.a.data_ptr() != outside_hpu.b.data_ptr()                  # ... not after the move
assert not torch.equal(outside_hpu.a.detach().cpu(), outside_cpu.a.detach())   # so the training differs
assert torch.equal(outside_hpu.a.detach().cpu(), untied_cpu.a.detach())         # it is the untied model's

# %% [markdown]
# The CPU run's weight also differs from the tied one above, in the seventh digit (0.77868795 against 0.77868801): two parameters over one storage are two SGD updates of the same memory, each with its own gradient, where the tied parameter gets one update with the sum of both gradients.

# %% [markdown]
# Nothing warns: the hpu model trains, just not the model you built. The same happens on CUDA; the fix is the seed's, tie the weights inside the module (`module.a = module.b`), so that there is one `Parameter` to move.

# %% [markdown]
# ## Summary
# - Check the CPU-fallback log: every fallback is a host sync and a round trip to the CPU; change the dtype or the op.
# - Bigger batches use more device memory and give more throughput, until memory runs out; they raise the latency of
#   each batch, and across many cards the global batch is bounded by convergence (RN50: about 32K).
# - Fused optimizers and FusedSDPA replace many small ops by one: less host time, less memory; FusedSDPA's mode follows
#   `torch.hpu.sdp_kernel(enable_recompute=...)`, and its restrictions (FP32/BF16, no batch broadcast in recompute mode) raise.
# - `pin_memory=True` saves the host's staging copy of every batch. Weights tied inside the module (`module.a = module.b`)
#   stay tied after `.to("hpu")`; two parameters around one tensor made outside it are untied by the move, silently.
# - The disk recipe cache carries compiled recipes across runs (memory first, then disk), writes them in the background,
#   and keeps its folder under 0.99 x the cap, one evicting process at a time; `true` in the middle clears it at start.
# - Print rarely, and update a progress bar's loss every 20 steps or more: every `.item()` is a host sync. Keep loop variables out of the graph (`torch.roll`).
#
# ## Exercises
#
# Each exercise has a check cell: change the code it names, run the check with your answer, and it says *right*, *wrong* or *not yet*, and why, from what the emulator recorded (fallbacks, errors, syncs, recipes; never a wall time). Run as it is, every check says "not yet".

# %% [markdown]
# **1.** In section 1, call `torch.lgamma` on bfloat16 instead of `torch.digamma`. Which op does the fallback log name?

# %%
def my_run_1():
    x = torch.linspace(1, 3, 6, device=device).to(torch.bfloat16)
    y = torch.digamma(x)                     # exercise 1: torch.lgamma
    htcore.mark_step()
    return y

answer_1 = None                              # the op's name, as the log gives it
lab.check("07.1", my_run_1, answer_1)

# %% [markdown]
# **2.** In section 3, train one step at batch 1600 with `HPU_LAB_MEMORY_LIMIT` set (`hpu_lab.config.set`, a size such as `"4MiB"`) so that 800 fits but 1600 does not. What error do you get?

# %%
def my_run_2(batch_size=800, limit=None):    # exercise 2: 1600, and a limit
    old = hpu_lab.config.get("HPU_LAB_MEMORY_LIMIT")
    if limit is not None:
        hpu_lab.config.set(HPU_LAB_MEMORY_LIMIT=limit)
    try:
        torch.manual_seed(0)
        model = Net().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data, target = torch.randn(batch_size, 1, 28, 28).to(device), torch.randint(0, 10, (batch_size,)).to(device)
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data), target).backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
        torch.hpu.synchronize()
    finally:
        hpu_lab.config.set(HPU_LAB_MEMORY_LIMIT=str(old))     # the limit is only for this run

answer_2 = None                              # the error's type name
lab.check("07.2", my_run_2, answer_2)

# %% [markdown]
# **3.** In section 10, print every 4 steps, and move the print after `optimizer.step()`. How many host syncs in the 8 steps? How long does the Gaudi clock say the host waited (the check prints it)?

# %%
def my_run_3():
    for i, (data, target) in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        htcore.mark_step()
        print(f"step {i}: loss {loss.item():.3f}")       # exercise 3: every 4 steps, after optimizer.step()
        optimizer.step()
        htcore.mark_step()

answer_3 = None                              # host syncs in the 8 steps
lab.check("07.3", my_run_3, answer_3)

# %% [markdown]
# **4.** In section 12, replace `steps[i]` and `steps[i + 1]` by `steps[i].item()` and `steps[i + 1].item()` (Python floats). Does that avoid the recompiles? How many recipes does the loop need, and what does it cost instead?

# %%
def my_run_4():
    x = torch.randn(4, 16, device=device)
    steps = torch.linspace(1, 0, num_steps + 1, device=device)
    htcore.mark_step()
    for i in range(4, num_steps):
        t_1 = steps[i]                       # exercise 4: steps[i].item()
        t_2 = steps[i + 1]                   # exercise 4: steps[i + 1].item()
        x = x * t_1 + (t_2 - t_1) * torch.tanh(x)
        htcore.mark_step()

answer_4 = None                              # recipes the loop needs
lab.check("07.4", my_run_4, answer_4)

# %% [markdown]
# ## Further reading
# The Intel pages this notebook teaches, and where to go next:
# - [General Model Optimizations](https://docs.habana.ai/en/latest/PyTorch/Model_Optimization_PyTorch/Optimization_in_PyTorch_Models.html), the seed of every section here.
# - [Model Optimization Checklist](https://docs.habana.ai/en/latest/PyTorch/Model_Optimization_PyTorch/Optimization_Getting_Started.html).
# - [Intel Gaudi PyTorch Python API](https://docs.habana.ai/en/latest/PyTorch/Python_Packages.html): `hpex.kernels.FusedSDPA`, `hpex.optimizers`.
# - [Runtime Environment Variables](https://docs.habana.ai/en/latest/PyTorch/Reference/Runtime_Flags.html): `PT_HPU_RECIPE_CACHE_CONFIG`, `LOG_LEVEL_PT_FALLBACK`.
# - [Profiling](https://docs.habana.ai/en/latest/Profiling/index.html): the perf tool and TensorBoard plugin; section 7 runs hpu_lab's `habana_perf_tool` on a trace.
