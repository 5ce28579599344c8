# %% [markdown]
# # Start here: train on a Gaudi that isn't there
#
# This lab runs code written for Intel Gaudi's PyTorch stack (the `hpu` device) on an ordinary CPU,
# and shows you what the real stack does with it: ops piling up into graphs, graphs compiling into
# *recipes*, recipes being reused, the host and the device working at the same time. Every number and
# picture comes from what the emulator (`hpu_lab`) really did while your cell ran.
#
# **What you'll do**
# - move the MNIST model of the Gaudi documents to the `hpu` device and train it for one epoch;
# - do it three ways — eager, lazy (the default) and HPU Graph replay — and compare them;
# - read the live panel that records each experiment.
#
# **What you'll learn**
# - how to open any experiment's *Graph*, *Timeline*, *Recompiles*, *Metrics* and *Advice*;
# - the vocabulary of the other notebooks: op, graph, `mark_step`, recipe, compile, launch, sync.
#
# **What you'll need**
# - this repository set up with `make lab` (no Gaudi, no GPU, no download: the digits ship with scikit-learn);
# - about a minute of CPU time for the whole notebook.

# %% [markdown]
# ## 1. Import hpu_lab and find the `hpu` device
#
# Importing `hpu_lab` registers the device; `hpu_lab.core` plays `habana_frameworks.torch.core`.

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.observe.metrics import metric_global
from collections import Counter
import matplotlib.pyplot as plt
from hpu_lab.lab.data import MNISTLike
import widgets                        # the panel and other views (reads the events)
# %load_ext widgets
torch.manual_seed(0)                  # every run of the notebook draws the same numbers
print("torch", torch.__version__, "| hpu_lab", hpu_lab.__version__)

# %% [markdown]
# The times this notebook shows come from the **Gaudi clock** of one card, named here: its panels, tables and asserts all use it (section 7 tries the others, in a table labelled what-if).

# %%
CARD = "gaudi2"                       # this notebook's card: Gaudi 2 (HPU_LAB_DEVICE's default)
widgets.set_clock("gaudi", CARD)

# %% [markdown]
# The device answers like the real one would:

# %%
print(torch.hpu.is_available(), torch.hpu.device_count(), torch.hpu.get_device_name())

# %% [markdown]
# A tensor on `hpu` behaves like any PyTorch tensor; printing it brings its values back to the host.

# %%
x = torch.arange(6.0, device="hpu").reshape(2, 3)
y = x * 2 + 1
print(y)
assert y.device.type == "hpu"
assert torch.equal(y.cpu(), torch.arange(6.0).reshape(2, 3) * 2 + 1)   # same numbers as plain CPU PyTorch

# %% [markdown]
# The Gaudi documents import `habana_frameworks`; one call makes those imports resolve to hpu_lab, so their code runs unchanged (`python -m hpu_lab run script.py` does the same for a script).

# %%
import hpu_lab.compat
hpu_lab.compat.enable_habana_imports()
import habana_frameworks.torch.core as htcore_real_name
assert htcore_real_name is htcore

# %% [markdown]
# ## 2. Get MNIST-shaped data without downloading
#
# `MNISTLike` gives 28x28 handwritten digits normalised like torchvision's MNIST: 1600 for training.

# %%
train_set = MNISTLike(train=True)
image, label = train_set[0]
print(len(train_set), tuple(image.shape), image.dtype, type(label).__name__)
assert len(train_set) % 200 == 0          # batch 200 divides it: every batch has the same shape

# %% [markdown]
# Eight of them, as a learner should always look at the data first:

# %%
fig, axes = plt.subplots(1, 8, figsize=(8, 1.3))
for ax, i in zip(axes, range(8)):
    img, lab = train_set[i]
    ax.imshow(img[0], cmap="gray"); ax.set_title(int(lab)); ax.axis("off")
plt.show()


# %% [markdown]
# ## 3. Build the documents' model and move it to `hpu`
#
# This is seed 000's `Net`, a two-layer MLP; `.to("hpu")` puts its weights in (emulated) device memory.

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
train_loader = torch.utils.data.DataLoader(train_set, batch_size=200)
print(len(train_loader), "batches of 200")


# %% [markdown]
# The training loop of seed 000, with the two `mark_step` calls lazy mode needs (more on them in notebook 02):

# %%
def train(model, device, train_loader, optimizer):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad(set_to_none=True)
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        htcore.mark_step()       # mark step is needed for HPU Lazy mode before
        optimizer.step()
        htcore.mark_step()       # ... and after the optimizer step
    return loss


# %% [markdown]
# ## 4. Train one epoch in lazy mode, the default
#
# The cell runs inside `%%hpu_section`: a panel appears above the output and fills in as the cell runs.

# %%
torch.manual_seed(0)
model = Net().to(device)
optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)

# %%
# %%hpu_section "Lazy mode: one epoch, 8 steps" --as lazy
loss = train(model, device, train_loader, optimizer)
print(f"loss after one epoch: {loss.item():.3f}")

# %% [markdown]
# **How to read the panel** (every experiment in the lab has one):
# - **Graph**: the graph each recipe runs, one node per op. Colours are engines (MME = matrix unit,
#   TPC = vector cores); a halo in a cluster's colour marks each op the compiler fused into that
#   cluster, and the title counts fused vs unfused ops.
# - **Timeline**: two lanes, the host (Python tracing ops, building graphs, compiling) and the device
#   `hpu:0` (running recipes). Dotted lines are `mark_step`s; red bars are the host *waiting* for the device.
# - **Recompiles**: every compile with its *reason*, e.g. `input 0 shape changed (200, 1, 28, 28) -> (96, 1, 28, 28)`.
# - **Metrics**: counts for this section only — ops, graphs, compiles, cache hits, launches, syncs, memory.
# - **Advice**: what the real stack's documents would tell you to change, given these events.

# %% [markdown]
# What the panel counted can be checked in code. Each step builds two graphs (forward+backward, then the optimizer), so 8 steps make 16 launches; only the first steps compile:

# %%
first = lazy.of(ev.MarkStep)[0].step             # two mark_steps per training step
compiles_per_step = Counter((e.step - first) // 2 for e in lazy.of(ev.Compile))
print("launches:", len(lazy.of(ev.Launch)))
print("compiles per training step:", [compiles_per_step.get(i, 0) for i in range(8)])
for e in lazy.of(ev.Compile):
    print(f"  {e.node_count:3d} nodes, because: {e.reason}")
assert len(lazy.of(ev.Launch)) == 16
assert max(compiles_per_step) <= 2        # after the first steps, every graph is a cache hit

# %% [markdown]
# ## 5. The same epoch, two other ways
#
# Eager mode runs op by op; HPU Graphs record one step and replay it. Same model, same data.

# %% [markdown]
# **Eager mode** (`PT_HPU_LAZY_MODE=0`): every op is its own tiny graph, launched at once. The bridge reads this variable once, before `import habana_frameworks.torch` (seed 004: *"This flag needs to be set before invoking a Python script importing HPU"*), so on a Gaudi eager mode is another process, not a switch. Here too: the epoch runs as a small script, `notebooks/scripts/eager_epoch.py` (open it beside this notebook), in a fresh Python process with the variable set before its imports, and prints what it counted as JSON.

# %%
from hpu_lab.lab.fresh import run_fresh   # hpu_lab/lab/fresh.py: run a script in a new process, env set first

EAGER_EPOCH = open("scripts/eager_epoch.py").read()      # notebooks/scripts/eager_epoch.py: open it, edit it
eager = run_fresh(EAGER_EPOCH, PT_HPU_LAZY_MODE="0")
print(eager)
said = [line.strip() for line in eager.stderr.splitlines() if "does not have any effect" in line]
print(said)                           # 16 mark_step calls, one warning

# %% [markdown]
# In that process the ops were launched one by one, about one launch per op (an op whose result nobody holds launches nothing); this process, in lazy mode, launched two graphs per step:

# %%
print(f"eager: {eager['launches']} launches for {eager['ops']} ops; lazy: {len(lazy.of(ev.Launch))} launches")
assert eager["lazy_mode"] is False and hpu_lab.config.lazy_mode() and len(said) == 1
assert eager["launches"] > 10 * len(lazy.of(ev.Launch))


# %% [markdown]
# **HPU Graphs**: warm up, capture one whole training step into a graph, then for each batch copy the data into the captured input tensors and `replay()` (seed 000, *Training Loop with Capture and Replay*).

# %%
def train_with_capturereplay(model, device, train_loader, optimizer, batchsize):
    # Placeholders used for capture
    static_input = torch.randn(batchsize, 1, 28, 28, device='hpu')
    static_target = torch.randint(0, 10, (batchsize,), device='hpu')

    # First we warmup
    s = htcore.hpu.Stream()
    with htcore.hpu.stream(s):
        for i in range(3):
            optimizer.zero_grad(set_to_none=True)
            y_pred = model(static_input)
            loss = F.nll_loss(y_pred, static_target)
            loss.backward()
            optimizer.step()
            htcore.mark_step()

    # Then we capture
    g = htcore.hpu.HPUGraph()
    optimizer.zero_grad(set_to_none=True)
    with htcore.hpu.graph(g):
        static_y_pred = model(static_input)
        static_loss = F.nll_loss(static_y_pred, static_target)
        static_loss.backward()
        optimizer.step()

    # Finally the main training loop
    for batch_idx, (data, target) in enumerate(train_loader):
        # data must be copied to existing tensors that were used in the capture phase
        static_input.copy_(data)
        static_target.copy_(target)
        g.replay()
        # result is available in static_loss tensor after graph is replayed
    return static_loss

torch.manual_seed(0)
model = Net().to(device)
optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)

# %%
# %%hpu_section "HPU Graph: capture once, replay 8 steps" --as replay
loss = train_with_capturereplay(model, device, train_loader, optimizer, 200)
print(f"loss after one epoch: {loss.item():.3f}")

# %% [markdown]
# During replay nothing is traced: no op events at all after the capture ends.

# %%
end = replay.of(ev.CaptureEnd)[0].t_end
traced_after = [e for e in replay.of(ev.OpAccumulated) if e.t_start > end]
print("replays:", len(replay.of(ev.Replay)), " ops traced during the replays:", len(traced_after))
assert len(replay.of(ev.Replay)) == 8 and traced_after == []

# %% [markdown]
# **Reading this panel**: it holds more than the 8 replays, and five things in it need a word.
# - The two long yellow bars are the **warm-up's** compiles, not the capture. The warm-up calls `mark_step` once an iteration, so forward, backward and the optimizer are one graph: iteration 1 compiles it (76 nodes, Adadelta creating its state), iteration 2 recompiles it (68 nodes: the state now exists, so `zeros_like` became a `mul`), iteration 3 finds it in the cache.
# - The **capture** is the short salmon span after them, a few milliseconds on the Gaudi clock: it traces the step's ops once, as a lazy step would, and compiles nothing (the warm-up just compiled the same graph).
# - **Three device streams**: the warm-up runs on the side stream `s` (`hpu:1`), `htcore.hpu.graph` captures on a side stream of its own (`hpu:2`, as `torch.cuda.graph` does), and `replay()` launches on the current stream, the default `hpu:0`.
# - The two **red diamonds** are host syncs: `htcore.hpu.graph` synchronizes before it captures, and the final `loss.item()` waits for the last replay.
# - The **step labels** count the section's own `mark_step`s: the warm-up calls three (the third's label has no room). Replays need no `mark_step` (seed 001), so they have no label; each gets a blue dot instead. The grey bars of the *your code* lane above them are the DataLoader fetching the next batch, measured on this CPU.

# %%
# claim G2
import hpu_lab.perfmodel as pm
compiles = replay.of(ev.Compile)
streams = Counter((e.stream, "replay" if any(r.t_start <= e.t_start <= r.t_end for r in replay.of(ev.Replay))
                   else "capture" if e.t_start > replay.of(ev.CaptureBegin)[0].t_start else "warm-up")
                  for e in replay.of(ev.Launch))
timed = pm.retime(replay.events, CARD).events
(begin,), (end_,) = [e for e in timed if isinstance(e, ev.CaptureBegin)], [e for e in timed if isinstance(e, ev.CaptureEnd)]
print("compiles:", [(e.node_count, e.reason.split(" (")[0]) for e in compiles])
print("launches by (stream, phase):", dict(streams))
compile_ms = [(e.t_end - e.t_start) / 1e6 for e in timed if isinstance(e, ev.Compile)]
print(f"on the Gaudi clock: compiles {compile_ms} ms, capture {(end_.t_end - begin.t_start) / 1e6:.2f} ms")
assert [e.node_count for e in compiles] == [76, 68] and "zeros_like" in compiles[1].reason
assert {phase: s for s, phase in streams} == {"warm-up": 1, "capture": 2, "replay": 0}
assert streams[(0, "replay")] == 8 and (end_.t_end - begin.t_start) / 1e6 < min(compile_ms) / 5

# %% [markdown]
# ### Compare like with like
#
# *Fidelity: host and device times below are the Gaudi clock's, modeled for this notebook's card (Gaudi 2) from the events the emulator recorded (`docs/gaudi_clock.md`); your own code, had the step any, would be measured on this CPU and labelled so. No figure is this machine's wall time.*
#
# Section 4's epoch was the model's *first*: its first two steps compiled. The HPU Graph's replays came after three warm-up iterations and a capture. Putting the two side by side would compare compiles with warm replays. `lab.step_times(step, steps=8, warmup=3, card=CARD)` times any step the same way: three warm-up calls first (for lazy mode: recipes compiled, optimizer state created; for the HPU Graph: three replays after the seed's own warm-up and capture), then eight timed ones. First, what section 4's epoch looks like step by step:

# %%
from hpu_lab import lab
first_epoch = lab.step_times_of(lazy.events, every=2, card=CARD, warmup=0, name="lazy, first epoch")
for i, st in enumerate(first_epoch.steps):            # the modeled figures (the DataLoader's, measured here, vary)
    print(f"step {i}: host {st.host_ns / 1e6:6.1f} ms (modeled), {st.compiles} compile(s)")
print(f"mean: host {first_epoch.host_ms:.1f} ms a step, of which the two first steps' compiles are most")
assert first_epoch.steps[0].compiles == 2 and first_epoch.steps[1].compiles == 1
assert all(s.compiles == 0 for s in first_epoch.steps[2:])

# %% [markdown]
# The first two steps are dominated by compiles (the DataLoader's own time, measured on this CPU, comes on top and is left out here). Once warm, a lazy step costs the host the same few milliseconds every time. Now both loops warm, on the same batches (loaded beforehand, so the steps alone are timed):

# %%
import itertools
batches = itertools.cycle(list(train_loader))          # the epoch's 8 batches, on the host

torch.manual_seed(0)
lazy_model = Net().to(device)
lazy_opt = torch.optim.Adadelta(lazy_model.parameters(), lr=0.1)
def lazy_step():                                       # section 4's loop body
    data, target = next(batches)
    data, target = data.to(device), target.to(device)
    lazy_opt.zero_grad(set_to_none=True)
    loss = F.nll_loss(lazy_model(data), target)
    loss.backward()
    htcore.mark_step()
    lazy_opt.step()
    htcore.mark_step()

torch.manual_seed(0)
graph_model = Net().to(device)
graph_opt = torch.optim.Adadelta(graph_model.parameters(), lr=0.1)
static_input = torch.randn(200, 1, 28, 28, device="hpu")
static_target = torch.randint(0, 10, (200,), device="hpu")
with htcore.hpu.stream(htcore.hpu.Stream()):         # warm up and capture, as train_with_capturereplay does
    for i in range(3):
        graph_opt.zero_grad(set_to_none=True)
        F.nll_loss(graph_model(static_input), static_target).backward()
        graph_opt.step()
        htcore.mark_step()
g = htcore.hpu.HPUGraph()
graph_opt.zero_grad(set_to_none=True)
with htcore.hpu.graph(g):
    static_loss = F.nll_loss(graph_model(static_input), static_target)
    static_loss.backward()
    graph_opt.step()
def replay_step():                                     # the main loop's body above
    data, target = next(batches)
    static_input.copy_(data)
    static_target.copy_(target)
    g.replay()

lazy_t = lab.step_times(lazy_step, steps=8, warmup=3, card=CARD, name="lazy")
replay_t = lab.step_times(replay_step, steps=8, warmup=3, card=CARD, name="HPU Graph replay")
comparison = lab.compare({"lazy": lazy_t, "HPU Graph replay": replay_t})
print(comparison)

# %% [markdown]
# Both loops are warm (no compile in the timed steps) and host-bound: the device needs about 0.1 ms a step either way. The replay saves the host the tracing of every op and the building and hashing of every graph:

# %%
# claim G9
speedup = comparison.speedup("HPU Graph replay")
print(f"warm lazy step {lazy_t.wall_ms:.2f} ms, warm replay {replay_t.wall_ms:.2f} ms: {speedup:.1f}x; "
      f"first-epoch lazy mean host time {first_epoch.host_ms:.1f} ms")
assert lazy_t.compiles == replay_t.compiles == 0
assert lazy_t.verdict == "host-bound" and replay_t.host_ms < lazy_t.host_ms / 3.7    # seed 000: 4.8 vs 1.3 ms
assert abs(lazy_t.device_ms - replay_t.device_ms) < 0.5 * lazy_t.device_ms          # the same device work

# %% [markdown]
# How far to trust the ratio: seed 000 measured 4.8 ms of host time a step in lazy mode and 1.3 ms with capture and replay (3.7x) on a first-generation Gaudi. The clock is calibrated on the lazy figure (it gives 4.80 ms there, section 7) but models a replay at about 0.2 ms: nothing in the bridge's replay path that it knows of costs a millisecond (`docs/gaudi_clock.md`, "Validation"). So the replay's gain is at least the seed's 3.7x; its size on this clock is an upper bound.
#
# > **In practice.** The emulator really runs every recipe on this CPU, so its own time says nothing about a Gaudi; the Gaudi clock re-times what it recorded (ops traced, graphs built, recipes compiled and launched, copies) with a Gaudi server's costs. The panels above show the same clock; their grey "your code" bars are the one part measured here.

# %% [markdown]
# ## 6. The bridge's own counters
#
# `metric_global` reads process-wide metrics, as `habana_frameworks.torch.hpu.metrics` does on a real Gaudi.

# %%
for name in ("graph_compilation", "recipe_cache", "graph_launch", "host_sync"):
    stats = dict(metric_global(name).stats())
    print(f"{name:18s}", {k: v for k, v in stats.items() if k in ("TotalNumber", "TotalHit", "TotalMiss", "Reasons")})
assert metric_global("recipe_cache")["TotalHit"] > metric_global("recipe_cache")["TotalMiss"]

# %% [markdown]
# ## 7. What if: another card, no fusion, bf16, a bigger batch
#
# The times the panels show come from the **Gaudi clock** (`docs/gaudi_clock.md`): the work the emulator really traced and launched, re-timed by a performance model of a Gaudi, Gaudi 2 or Gaudi 3. The host's lane is modeled too, per event (an op traced, a graph built, a launch...), from the bridge's costs on a Gaudi server; only your own code (data loading, sleeps, prints) is measured on this CPU. One recording can be re-timed on every card. **What-if, every card:** `whatif_rows()` records 12 steps of this notebook's training step and re-times them:

# %%
import hpu_lab.perfmodel as pm
from hpu_lab.perfmodel.validation import whatif_rows
rows = whatif_rows()
for row in rows:
    print(f"{row['card']:7s} host {row['host ms/step']:.2f} ms/step, device {row['device ms/step']:.3f} ms/step, "
          f"device idle {row['device idle']}: {row['verdict']}")
print("seed 000, first-generation Gaudi: 4.8 ms of host time per step")
device_ms = [row["device ms/step"] for row in rows]
assert device_ms[0] > device_ms[1] > device_ms[2] and all(row["verdict"] == "host-bound" for row in rows)

# %% [markdown]
# `pm.estimate(fn, *args)` costs a step without running it (host, device, wall and verdict), so other settings cost nothing to try. **What-if, every card:** device microseconds per training step (after a first call that creates the optimizer's state):

# %%
def train_step(model, opt, data, target, bf16=False):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("hpu", dtype=torch.bfloat16, enabled=bf16):
        loss = F.nll_loss(model(data), target)
    loss.backward()
    htcore.mark_step()
    opt.step()
    htcore.mark_step()

def step_us(width=128, batch=200, card="gaudi", bf16=False, fusion=True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, width), nn.ReLU(), nn.Linear(width, 10),
                          nn.LogSoftmax(dim=1)).to("hpu")
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    x, y = torch.randn(batch, 1, 28, 28, device="hpu"), torch.randint(0, 10, (batch,), device="hpu")
    pm.estimate(train_step, model, opt, x, y, bf16=bf16, device=card, fusion=fusion)
    return pm.estimate(train_step, model, opt, x, y, bf16=bf16, device=card, fusion=fusion).device_ns / 1e3

variants = {"seed MLP, batch 200": {}, "fusion off": {"fusion": False}, "bf16 autocast": {"bf16": True},
            "batch 800": {"batch": 800}, "784-4096-10, batch 2048": {"width": 4096, "batch": 2048},
            "  the same in bf16": {"width": 4096, "batch": 2048, "bf16": True}}
us = {v: {c: step_us(card=c, **kw) for c in pm.DEVICES} for v, kw in variants.items()}
print(f"{'':26s}" + "".join(f"{pm.card(c).device_name:>9s}" for c in pm.DEVICES))
for v, row in us.items():
    print(f"{v:26s}" + "".join(f"{row[c]:9.0f}" for c in pm.DEVICES))

# %% [markdown]
# A step this small is mostly launch and per-kernel overhead: fusion matters (fewer kernels), bf16 does not, and four times the batch costs almost the same. A wider model is matrix work, where bf16 pays:

# %%
for c in pm.DEVICES:
    assert us["fusion off"][c] > us["seed MLP, batch 200"][c]
    assert us["batch 800"][c] < 1.5 * us["seed MLP, batch 200"][c]            # 4x the samples, under 1.5x the time
    assert us["  the same in bf16"][c] < us["784-4096-10, batch 2048"][c]
assert us["seed MLP, batch 200"]["gaudi"] > us["seed MLP, batch 200"]["gaudi2"] > us["seed MLP, batch 200"]["gaudi3"]

# %% [markdown]
# ## 8. Where to go next
#
# | notebook | Gaudi document (seed) | you will see |
# |---|---|---|
# | `01_theory_of_operations` | PyTorch Gaudi Theory of Operations | eager, torch.compile and lazy mode; the bridge's passes, recipe cache, async launch, memory, autocast |
# | `02_lazy_mode_and_mark_step` | HPU Graphs for Training; General Model Optimizations | what triggers execution, where `mark_step` goes, host-bound steps, mark_step against OOM |
# | `03_hpu_graphs_for_training` | HPU Graphs for Training | the MNIST example four ways, with the host-time table |
# | `04_dynamicity` | HPU Graphs for Training | shapes, last batches, control flow and dynamic ops, each recompile with its reason |
# | `05_hpu_graphs_for_inference` | Run Inference Using HPU Graphs | capture/replay on a stream, `wrap_in_hpu_graph`, each limitation's real error |
# | `06_accelerating_training` | Optimum Habana: Accelerating Training | warm-up, padding vs drop_last, HMP, fused Adam, pipelining, memory stats |
# | `07_general_optimizations` | General Model Optimizations | CPU fallback, batch size, fused ops, disk cache, print frequency, loop constants, weight sharing |
# | `08_distributed` | (all four, their distributed parts) | HCCL under torchrun, DDP gradient buckets, fast_ddp, multi-card inference in HPU Graphs |

# %% [markdown]
# ## Summary
# - `import hpu_lab` gives PyTorch an `hpu` device; Gaudi code runs unchanged on a CPU.
# - In lazy mode (the default) ops become graphs at each `mark_step`; a graph compiles once into a recipe and
#   the next steps reuse it from the cache.
# - Every experiment records events; the panel and the metrics are views of them, and the asserts check them.
# - Times come from the Gaudi clock: the recorded work re-timed on a modeled Gaudi, Gaudi 2 or Gaudi 3.
#
# ## Exercises
#
# Each exercise has a check cell: change the code it names, run `my_epoch` through the check with your answer, and it says *right*, *wrong* or *not yet*, and why, from what the emulator recorded (never from a time). Run as it is, every check says "not yet".
#
# `my_epoch` trains a fresh model for one epoch with **your** `train` (section 3's cell: edit it there and re-run it) and a loader of the batch size you pass:

# %%
from hpu_lab import lab

def my_epoch(batch_size=200):
    torch.manual_seed(0)
    m = Net().to(device)
    loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size)
    return train(m, device, loader, torch.optim.Adadelta(m.parameters(), lr=0.1))

# %% [markdown]
# **1.** Remove the first `htcore.mark_step()` from `train` and re-run its cell. How many launches per step now, and how many nodes in the graph? (Open the Graph tab of a section run with your `train` to see it.)

# %%
answer_1 = None                      # launches per step
lab.check("00.1", my_epoch, answer_1)

# %% [markdown]
# **2.** Train with `batch_size=256` (1600 is not a multiple of 256): change the 200 below. Which step (counting from 1) recompiles, and what reason does the Recompiles tab give?

# %%
answer_2 = None                      # the step that recompiles
lab.check("00.2", lambda: my_epoch(batch_size=200), answer_2)

# %% [markdown]
# **3.** Add `print(loss.item())` inside `train`'s loop. How many host syncs per step? What does the Timeline show at each print?

# %%
answer_3 = None                      # host syncs per step
lab.check("00.3", my_epoch, answer_3)

# %% [markdown]
# ## Further reading
# - [PyTorch Gaudi Theory of Operations](https://docs.habana.ai/en/latest/PyTorch/PyTorch_Gaudi_Theory_of_Operations.html) (seed 004): the modes, the bridge, recipes and their cache.
# - [HPU Graphs for Training](https://docs.habana.ai/en/latest/PyTorch/PyTorch_Model_Porting/HPU_Graphs_Training.html) (seed 000): the MNIST model, its training loop and capture/replay, the host-time table.
# - [Getting Started with Training on Intel Gaudi](https://docs.habana.ai/en/latest/PyTorch/Getting_Started_with_PyTorch_and_Gaudi/Getting_Started_with_PyTorch.html): the same first steps on a real Gaudi.
# - [mark_step](https://docs.habana.ai/en/latest/PyTorch/Reference/mark_step.html): what it does, and when to add one.
