# %% [markdown]
# # HPU Graphs for training: record a step once, replay it
#
# Seed document: *HPU Graphs for Training*.
#
# > *HPU Graphs feature overcomes this bottleneck by bypassing all the op accumulations by recording a
# > static version of the entire graph, and then replaying it. These static graphs use fixed memory
# > locations for its inputs, outputs, and the underlying graph.*
#
# **What you'll do**
# - capture a computation with the basic API (`capture_begin` / `capture_end` / `replay`) and replay it;
# - train the seed's MNIST example the four ways of the document and put their timelines side by side;
# - measure host time per step and set it next to the seed's table (4.8 / 3.9 / 1.3 ms);
# - hit each documented limitation and read its error.
#
# **What you'll learn**
# - what a replay skips, and why that only pays off when the model is host-bound;
# - when to use capture/replay, `make_graphed_callables` or `ModuleCacher`.
#
# **What you'll need**
# - notebooks 00 and 02 (host-bound models); about two minutes of CPU time (section 6 trains a wide MLP).

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.observe.metrics import metric_global
from collections import Counter
from hpu_lab.lab.data import MNISTLike
import hpu_lab.perfmodel as pm        # the Gaudi clock (docs/gaudi_clock.md)
from hpu_lab import lab               # step times, checkable exercises (docs/lab.md)
import widgets                        # the panel and other views (reads the events)
# %load_ext widgets
torch.manual_seed(0)                  # every run of the notebook draws the same numbers
print("torch", torch.__version__, "| hpu_lab", hpu_lab.__version__)
CARD = "gaudi2"                       # this notebook's card, for its timelines, tables and asserts (the Gaudi clock)
widgets.set_clock("gaudi", CARD)

# %% [markdown]
# ## 1. Record once, replay many times
#
# The basic API, on a tiny computation: capture it once on fixed ("static") tensors ...

# %%
static_x = torch.randn(4, 8, device="hpu")
w = torch.randn(8, 3, device="hpu")

g = htcore.hpu.HPUGraph()
g.capture_begin()
static_y = torch.tanh(static_x @ w) * 2
g.capture_end()
import re
print(re.sub(r"recipe [0-9a-f]{12}", "recipe <key>", g.describe()))   # (keys are hashes, new every run)

# %% [markdown]
# ... then, for each new input, copy it into the static input and `replay()`:

# %%
# %%hpu_section "Five replays" --as rep
inputs = [torch.randn(4, 8) for _ in range(5)]
results = []
for x_host in inputs:
    static_x.copy_(x_host)
    g.replay()
    results.append(static_y.cpu())

# %% [markdown]
# The replays ran the recorded recipe five times and traced no op at all; the results are those of plain PyTorch on the CPU:

# %%
# claim G2
print("replays:", len(rep.of(ev.Replay)), " ops traced:", len(rep.of(ev.OpAccumulated)),
      " graphs built:", len(rep.of(ev.GraphBuilt)), " compiles:", len(rep.of(ev.Compile)))
assert len(rep.of(ev.Replay)) == 5
assert rep.of(ev.OpAccumulated) == [] and rep.of(ev.GraphBuilt) == [] and rep.of(ev.Compile) == []
w_cpu = w.cpu()
assert all(torch.allclose(r, torch.tanh(x @ w_cpu) * 2) for r, x in zip(results, inputs))

# %% [markdown]
# Fixed memory locations: the output is always the same tensor, overwritten by each replay. A reference taken before two replays holds the first replay's result, then the second's; in lazy mode each step's result is a new tensor, and both stay as they were:

# %%
# claim G3
kept = static_y                                        # a reference taken before the replays
static_x.copy_(torch.ones(4, 8)); g.replay()
after_one = kept.cpu()
static_x.copy_(torch.zeros(4, 8)); g.replay()
after_two = kept.cpu()
print("values changed under the same reference:", not torch.equal(after_one, after_two))
assert torch.allclose(after_one, torch.tanh(torch.ones(4, 8) @ w_cpu) * 2)   # replay 1 wrote here ...
assert torch.equal(after_two, torch.zeros(4, 3))                            # ... and replay 2 overwrote it

lazy_outputs = [torch.tanh(x_.to("hpu") @ w) * 2 for x_ in inputs[:2]]
htcore.mark_step()
first, second = (o.cpu() for o in lazy_outputs)
print("lazy mode: the first step's result kept its values:", torch.allclose(first, torch.tanh(inputs[0] @ w_cpu) * 2))
assert torch.allclose(first, torch.tanh(inputs[0] @ w_cpu) * 2)            # not overwritten by step 2
assert torch.allclose(second, torch.tanh(inputs[1] @ w_cpu) * 2) and not torch.allclose(first, second)


# %% [markdown]
# ### The same API as CUDA graphs, and what differs
#
# > *HPU Graph APIs are similar to the CUDA graph APIs, but they provide extra wrappers such as ModuleCacher.*
#
# Stock PyTorch's `torch.cuda` defines the CUDA graph API even in this CPU build, so the two can be set side by side: porting is mostly a rename (`torch.cuda.CUDAGraph` → `htcore.hpu.HPUGraph`, `torch.cuda.graph` → `htcore.hpu.graph`, `torch.cuda.make_graphed_callables` → `htcore.hpu.make_graphed_callables`):

# %%
import inspect
cuda_graph_api = {m for m in dir(torch.cuda.CUDAGraph) if not m.startswith("_")}
hpu_graph_api = {m for m in dir(htcore.hpu.HPUGraph) if not m.startswith("_")}
shared = sorted(cuda_graph_api & hpu_graph_api)
print("CUDAGraph and HPUGraph share:", shared)
extras = [n for n in ("ModuleCacher", "wrap_in_hpu_graph") if hasattr(htcore.hpu, n) and not hasattr(torch.cuda, n)]
print("in htcore.hpu, not in torch.cuda:", extras)
print("make_graphed_callables warm-up:  cuda num_warmup_iters =",
      inspect.signature(torch.cuda.make_graphed_callables).parameters["num_warmup_iters"].default,
      "| hpu warmups =", inspect.signature(htcore.hpu.make_graphed_callables).parameters["warmups"].default)
assert {"capture_begin", "capture_end", "replay", "reset"} <= set(shared)
for name in ("graph", "make_graphed_callables", "Stream", "stream", "Event"):
    assert hasattr(torch.cuda, name) and hasattr(htcore.hpu, name), name
assert extras == ["ModuleCacher", "wrap_in_hpu_graph"]

# %% [markdown]
# The contrast, each point shown in this notebook:
# - **What is recorded.** A CUDA graph records the kernels that eager PyTorch launches during capture. An HPU Graph records lazy mode's graph: the capture is traced like any lazy step, compiled into recipes (the `describe()` above), and replay launches those recipes. So HPU Graphs exist only in lazy mode (section 3); CUDA graphs need no mode.
# - **Warm-up.** CUDA's `make_graphed_callables` runs 3 warm-up iterations by default, on a side stream; the HPU one runs none by default (`warmups=0`): warm up yourself, as section 4's capture-and-replay loop does.
# - **Wrappers.** `ModuleCacher` (training, one graph per input shape and per non-tensor argument) and `wrap_in_hpu_graph` (inference, notebook 05) have no `torch.cuda` counterpart; with CUDA you write that cache yourself, or use `torch.compile(mode="reduce-overhead")`.
# - **Same rules.** Static shapes, fixed input and output memory (section 1's G3), tensors only in the basic APIs (section 3).

# %% [markdown]
# ## 2. Theory of operations: only the input shapes are checked
#
# > *For each iteration, the entire graph is parsed. HPU Graphs speeds up this process as subsequent iterations check the input shapes only … [and rely] on input shapes only to determine whether the precompiled recipe can be used or if a recompilation is required.*
#
# `ModuleCacher` (section 4) keeps one graph per input shape. Feed it batches of 200, then one of 96:

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
torch.manual_seed(0)
model = Net().to(device)
optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)
batches = [(torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))) for n in (200, 200, 200, 96, 96)]

# %%
# %%hpu_section "ModuleCacher: shapes 200, 200, 200, 96, 96" --as shapes
for data, target in batches:
    data, target = data.to(device), target.to(device)
    optimizer.zero_grad(set_to_none=True)
    loss = F.nll_loss(model(data), target)
    loss.backward()
    htcore.mark_step()
    optimizer.step()
    htcore.mark_step()

# %% [markdown]
# A capture for the first shape, replays while it stays the same, a new capture when the shape changes (each capture records a forward and a backward graph):

# %%
# claim G4
captures = shapes.of(ev.CaptureEnd)
print("captures:", len(captures), " replays:", len(shapes.of(ev.Replay)),
      " graphs cached:", model.module_cacher.num_graphs)
assert model.module_cacher.num_graphs == 2 and len(captures) == 4    # 2 shapes x (forward, backward)

# %% [markdown]
# ## 3. Limitations of the basic APIs
#
# > *Running HPU Graphs is supported with Lazy mode. Eager mode is currently not supported.*
#
# The bridge reads `PT_HPU_LAZY_MODE` once, before `import habana_frameworks.torch`, so eager mode is another process: a short script, run in a fresh Python process with `PT_HPU_LAZY_MODE=0` set before its imports, tries to create an HPU Graph and prints what happened as JSON.

# %%
from hpu_lab.lab.fresh import run_fresh   # hpu_lab/lab/fresh.py: run a script in a new process, env set first

GRAPH_IN_EAGER = """
import json, hpu_lab, hpu_lab.core as htcore
try:
    htcore.hpu.HPUGraph()
    print(json.dumps({"lazy_mode": hpu_lab.config.lazy_mode(), "error": None}))
except RuntimeError as e:
    print(json.dumps({"lazy_mode": hpu_lab.config.lazy_mode(), "error": f"{type(e).__name__}: {e}"}))
"""
eager_process = run_fresh(GRAPH_IN_EAGER, PT_HPU_LAZY_MODE="0")
print(eager_process)

# %% [markdown]
# The eager-mode process got the error; this process, in lazy mode, creates the same graph without one:

# %%
# claim G5
assert eager_process["lazy_mode"] is False and "lazy mode only" in (eager_process["error"] or "")
lazy_graph = htcore.hpu.HPUGraph()          # the same call, here: no error
print("in this lazy-mode process:", type(lazy_graph).__name__)

# %% [markdown]
# > *HPU Graphs training API mandates the use of only tensors as inputs and outputs. The inputs can only be provided as positional args.*
#
# A `Linear` layer graphed with `make_graphed_callables`, called three wrong ways:

# %%
# claim G6
layer = htcore.hpu.make_graphed_callables(nn.Linear(8, 3).to(device), (torch.randn(4, 8, device=device),))
x8 = torch.randn(4, 8, device=device)
wrong_calls = {
    "a keyword argument": lambda: layer(input=x8),
    "an extra non-tensor": lambda: layer(x8, 0.5),
}
for what, call in wrong_calls.items():
    try:
        call()
        raise AssertionError(f"{what}: expected an error")
    except TypeError as e:
        print(f"{what:20s} -> TypeError: {e}")
try:
    htcore.hpu.make_graphed_callables(lambda a, scale: a * scale, (x8, 2.0))
except TypeError as e:
    print(f"{'a float sample arg':20s} -> TypeError: {e}")
assert layer(x8).shape == (4, 3)             # the right way still works


# %% [markdown]
# `ModuleCacher` lifts both limits: keyword and non-tensor arguments are part of its cache key, and it keeps one graph per distinct call, up to `max_graphs`; beyond that, calls run uncached (plain lazy mode):

# %%
class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x, *, temperature=1.0):          # a keyword-only, non-tensor argument
        return F.log_softmax(self.fc(torch.flatten(x, 1)) / temperature, dim=1)

torch.manual_seed(0)
scaled = Scaled().to(device)
scaled = htcore.hpu.ModuleCacher(max_graphs=3)(model=scaled, inplace=True)

# %%
# %%hpu_section "ModuleCacher: keyword args, 5 distinct calls, max_graphs=3" --as mc
for n, temperature in [(200, 1.0), (200, 1.0), (200, 2.0), (96, 1.0), (64, 1.0), (32, 1.0), (200, 2.0)]:
    out = scaled(torch.randn(n, 1, 28, 28, device=device), temperature=temperature)
    out.sum().backward()
    htcore.mark_step()

# %% [markdown]
# Its statistics: the graphs it keeps, the calls they served, and the calls that ran without a graph:

# %%
# claim G7
stats = scaled.module_cacher.stats()
print(stats)
assert stats["graphs"] == 3                       # (200, 1.0), (200, 2.0), (96, 1.0): capped at max_graphs
assert stats["uncached_train_hits"] == 2          # (64, 1.0) and (32, 1.0) ran without a graph
assert stats["cached_hits"] == 5

# %% [markdown]
# ## 4. The MNIST example, four ways
#
# The seed's common code: the model, Adadelta, batches of 200. `MNISTLike` stands in for torchvision's MNIST (no download); 1600 images make 8 batches per epoch.
#
# The batches are loaded once, into a list, and every epoch below iterates over it (the seed's `train` takes any iterable of batches). A DataLoader's fetch is your code, measured on this CPU, not modeled: left in, it would fill the panels' host lanes and hide the bridge's work, which is what this section compares.

# %%
train_loader = torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200)
mnist_batches = list(train_loader)    # loaded once, before the timed epochs

def test(model, device, train_loader):
    print('Running Test')
    total = 0
    correct = 0
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        output = model(data)
        correct += (torch.max(output, 1)[1] == target).sum().item()
        total += output.shape[0]
    print("Eval:", round(correct / total, 2))
    return correct / total

def fresh():
    torch.manual_seed(0)
    model = Net().to(device)
    return model, torch.optim.Adadelta(model.parameters(), lr=0.1)


# %% [markdown]
# ### Training loop without HPU Graphs

# %%
def train(model, device, train_loader, optimizer):
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad(set_to_none=True)
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        # mark step is needed for HPU Lazy mode before and after the optimizer step
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
    return loss


# %%
model, optimizer = fresh()
train(model, device, mnist_batches, optimizer)               # first epoch: compiles
torch.hpu.synchronize()

# %%
# %%hpu_section "No HPU Graphs (lazy mode)" --as lazy
train(model, device, mnist_batches, optimizer)
torch.hpu.synchronize()


# %% [markdown]
# ### Training loop with capture and replay
#
# > *The capture phase involves recording all the forward and backward passes, then, replaying it again and again in the actual training phase.* Here the optimizer step is captured too, so one replay is one whole step.

# %%
def train_with_capturereplay(model, device, train_loader, optimizer, batchsize, epochs=1):
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
    def epoch():
        for batch_idx, (data, target) in enumerate(train_loader):
            # data must be copied to existing tensors that were used in the capture phase
            static_input.copy_(data)
            static_target.copy_(target)
            g.replay()
            # result is available in static_loss tensor after graph is replayed
        return static_loss
    return epoch

model, optimizer = fresh()
replay_epoch = train_with_capturereplay(model, device, mnist_batches, optimizer, 200)
replay_epoch()                                          # first epoch
torch.hpu.synchronize()

# %%
# %%hpu_section "Capture and replay" --as replay
replay_epoch()
torch.hpu.synchronize()

# %% [markdown]
# One replay per batch, and the host traced nothing. In the panel above, the host's work in a step is the batch's two copies into the static tensors (grey) and the replay's launch (blue); the device is idle most of the time, waiting for them:

# %%
# claim G2
print("replays:", len(replay.of(ev.Replay)), " ops traced:", len(replay.of(ev.OpAccumulated)),
      " graphs built:", len(replay.of(ev.GraphBuilt)))
assert len(replay.of(ev.Replay)) == 8 and replay.of(ev.OpAccumulated) == []

# %% [markdown]
# ### Training loop with make_graphed_callables
#
# > *A model wrapped in this API creates separate graphs for forward and backward passes.*

# %%
model, optimizer = fresh()
with ev.Collector() as wrapping:
    x = torch.randn(200, 1, 28, 28, device='hpu')
    model = htcore.hpu.make_graphed_callables(model, (x,))
train(model, device, mnist_batches, optimizer)                # first epoch
torch.hpu.synchronize()

# %% [markdown]
# Wrapping captured two graphs, a forward and a backward:

# %%
# claim G8
captured = wrapping.of(ev.CaptureEnd)
print(len(captured), "graphs captured, with", [c.node_count for c in captured], "nodes")
assert len(captured) == 2

# %%
# %%hpu_section "make_graphed_callables" --as mgc
train(model, device, mnist_batches, optimizer)
torch.hpu.synchronize()

# %% [markdown]
# Forward and backward replay; the loss and the optimizer (outside the graphed module) are still traced:

# %%
# claim G8
print("replays per step:", len(mgc.of(ev.Replay)) // 8, " ops traced per step:", len(mgc.of(ev.OpAccumulated)) // 8)
assert len(mgc.of(ev.Replay)) == 2 * 8

# %% [markdown]
# ### Training loop with ModuleCacher
#
# > *ModuleCacher handles dynamic inputs automatically and is the recommended method for using HPU Graphs in training models.*

# %%
model, optimizer = fresh()
htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)
train(model, device, mnist_batches, optimizer)                 # first epoch: captures
torch.hpu.synchronize()

# %%
# %%hpu_section "ModuleCacher" --as cacher
train(model, device, mnist_batches, optimizer)
torch.hpu.synchronize()

# %% [markdown]
# One graph for the one batch shape, replayed forward and backward at every step; the loss and the optimizer are traced, as with `make_graphed_callables`:

# %%
print("graphs:", model.module_cacher.num_graphs, " replays:", len(cacher.of(ev.Replay)),
      " ops traced per step:", len(cacher.of(ev.OpAccumulated)) // 8)
assert model.module_cacher.num_graphs == 1 and len(cacher.of(ev.Replay)) == 16

# %% [markdown]
# And the seed's `test`, on the model trained with ModuleCacher:

# %%
model.eval()
accuracy = test(model, device, train_loader)
assert accuracy > 0.5

# %% [markdown]
# ### Without `mark_step`
#
# > *Make sure to set sync/mark_step.*
#
# What goes wrong if you leave them out? The seed's ModuleCacher loop, once as `train` above and once with its two `htcore.mark_step()` calls deleted, each on a fresh model for two epochs (the first captures), the second recorded:

# %%
def train_without_mark_step(model, device, train_loader, optimizer):
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad(set_to_none=True)
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()                     # no mark_step before or after
    return loss

def cached_run(train_fn):
    model, optimizer = fresh()
    htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)
    train_fn(model, device, mnist_batches, optimizer)                  # first epoch: captures
    with ev.Collector() as c:
        train_fn(model, device, mnist_batches, optimizer)
    with ev.Collector() as after:                                      # what the loop left pending
        htcore.mark_step()
    torch.hpu.synchronize()
    return model, c, after.of(ev.MarkStep)[0].pending_nodes

marked_model, marked, marked_left = cached_run(train)
unmarked_model, unmarked, unmarked_left = cached_run(train_without_mark_step)
for name, c, left in (("with mark_step", marked, marked_left), ("without", unmarked, unmarked_left)):
    print(f"{name:15s} graphs launched: {len(c.of(ev.GraphBuilt)):2d}, launched by {dict(Counter(g.trigger for g in c.of(ev.GraphBuilt)))}; "
          f"nodes of the first three: {[g.node_count for g in c.of(ev.GraphBuilt)][:3]}; ops pending after the loop: {left}")

# %% [markdown]
# Nothing breaks, and the weights are the same bit for bit. A replay marks a step itself: the bridge's `HPUGraph::replay` calls the lazy step marker before it launches (as `capture_begin` does, `backend/habana_device/HPUGraph.cpp`), and the emulator does the same. So the optimizer's 44 ops, left pending, are launched by the next step's forward replay, together with the 4 ops that stored the gradients after the backward replay (one 48-node graph), instead of by the two `mark_step`s (graphs of 4 and 44 nodes). (In both loops the backward replay also launches, once a step, the loss's 3 ops traced between the two replays: `nll_loss`, its gradient and the `ones_like` that seeds it. That is the 3-node graph, and the 8 launches by `HPUGraph.replay` with `mark_step`.) What the `mark_step` does buy is a defined end: without it, the **last** step's update has not run when the loop returns (48 ops are still pending: its gradients' 4 and the optimizer's 44) and runs only when something reads a weight or marks a step. A checkpoint, an evaluation or a timing taken right after the loop then includes that work, or, for a timer that does not sync, misses it.

# %%
same = all(torch.equal(a.detach().cpu(), b.detach().cpu())
           for a, b in zip(marked_model.parameters(), unmarked_model.parameters()))
assert same                                                           # the same training, bit for bit
assert set(g.trigger for g in unmarked.of(ev.GraphBuilt)) == {"HPUGraph.replay"}   # launched by the replays
assert len(unmarked.of(ev.Replay)) == len(marked.of(ev.Replay)) == 16
assert marked_left == 0 and unmarked_left >= 44                     # the last update still pending

# %% [markdown]
# ### The four timelines side by side
#
# Same steps, same data. Compare the host lanes. (**Fidelity:** the Gaudi clock of Gaudi 2, host and device lanes modeled, as section 5 details; the widget's other clock, "measured on this CPU", shows the emulator's own times, which say nothing about a Gaudi.)

# %%
# NBVAL_IGNORE_OUTPUT
# (a widget: its output is not compared)
widgets.compare([lazy, mgc, cacher, replay], steps=8)      # 8 training steps each

# %% [markdown]
# ## 5. Host time per step, next to the seed's table
#
# > *The base case with no HPU Graphs has a CPU processing time of 4.8ms … make_graphed_callables … 3.9 ms … capture and replay mode, with a host time of around 1.3ms.*
#
# **Fidelity.** The four epochs recorded above (8 steps each, after a warm epoch of 8), timed with `hpu_lab.lab.step_times_of` on the Gaudi clock (`docs/gaudi_clock.md`, `docs/lab.md`) of this notebook's card, Gaudi 2. The *host* lane is modeled per event from what the bridge does on a Gaudi server (an op traced, a graph built and hashed, a launch, a replay, the batch's copy): one calibrated constant (fitted on the seed's lazy 4.8 ms, first-gen Gaudi) and assumed ones; it is modeled the same on every card, so the seed's first-gen figures compare directly. The *device* lane is modeled from the card's public figures. *Measured*: nothing; the batches were loaded before the epochs, so no fetch of your code is in the recordings (`user_ns` is zero).

# %%
# claim G9
from hpu_lab.perfmodel.host import SEED_HOST_MS
modes = {"lazy": lazy, "make_graphed_callables": mgc, "ModuleCacher": cacher, "capture/replay": replay}
times = {m: lab.step_times_of(s.events, steps=8, card=CARD, name=m, warmup=8) for m, s in modes.items()}
host = {m: t.host_ms for m, t in times.items()}                  # modeled host ms a step
device_ms = {m: t.device_ms for m, t in times.items()}
print(f"on {pm.card(CARD).device_name} (host modeled, device modeled):")
print(f"{'mode':24s} {'host ms/step':>12s} {'seed ms':>8s} {'device ms/step':>14s}  verdict")
for m, t in times.items():
    seed = f"{SEED_HOST_MS[m]:8.1f}" if m in SEED_HOST_MS else f"{'-':>8s}"
    print(f"{m:24s} {host[m]:12.2f} {seed} {device_ms[m]:14.3f}  {t.verdict}")
    assert t.verdict == "host-bound" and t.user_ms == 0          # nothing measured
assert host["lazy"] > host["make_graphed_callables"] > host["capture/replay"]      # the seed's order
assert host["capture/replay"] < host["ModuleCacher"]
assert abs(host["ModuleCacher"] - host["make_graphed_callables"]) < 0.01            # the same work: see below

# %% [markdown]
# The table is in the seed's order, top to bottom: lazy > `make_graphed_callables` > capture and replay. Each number, read:
#
# - **lazy 4.80 ms** equals the seed's 4.8 *by construction*: it is the one figure the host model was fitted on. It is not a prediction.
# - **`make_graphed_callables` 4.03 ms** is a prediction (kept out of the fit), 3% above the seed's 3.9. The forward and backward replay, but the loss and Adadelta's update are still traced (49 of lazy mode's 61 ops, counted below) and built into three graphs: the host saves only a sixth.
# - **ModuleCacher 4.03 ms**, exactly `make_graphed_callables`'s: on one batch shape it does the same thing, one forward and one backward graph replayed, the rest traced. It earns its place with dynamic inputs (section 2, notebook 04), not speed.
# - **capture and replay 0.20 ms**, far below the seed's 1.3: the step is two copies of the batch and one replay, and nothing the model knows of in the bridge's replay path costs a millisecond (`docs/gaudi_clock.md`, "Seed 000"). The order holds; the size of the gain is this model's, not the seed's.
# - **device 0.10 / 0.17 / 0.08 ms**: tiny next to the host, so every mode is host-bound and the step's wall time is the host's. `make_graphed_callables` and ModuleCacher cost the device *more* than lazy mode: five recipes a step (two replayed graphs, three traced ones) instead of lazy mode's two, and each recipe launch costs the card 20 µs; replay is one graph, one launch.
#
# What makes the order is how much each mode traces per step, counted exactly:

# %%
# claim G9
for m, s in modes.items():
    print(f"{m:24s} ops traced {len(s.of(ev.OpAccumulated)) // 8:3d}, graphs built {len(s.of(ev.GraphBuilt)) // 8}, "
          f"replays {len(s.of(ev.Replay)) // 8}, recipes launched {len(s.of(ev.Launch)) // 8} per step")
traced = [len(modes[m].of(ev.OpAccumulated)) for m in ("lazy", "make_graphed_callables", "capture/replay")]
assert traced[0] > traced[1] > traced[2] == 0
launches = {m: len(s.of(ev.Launch)) // 8 for m, s in modes.items()}
assert launches["capture/replay"] < launches["lazy"] < launches["make_graphed_callables"]
assert device_ms["capture/replay"] < device_ms["lazy"] < device_ms["make_graphed_callables"]   # follows the launches

# %% [markdown]
# ## 6. When HPU Graphs do not help
#
# > *Run a host profile to make sure the model is host-bound. If it is device-bound, using HPU Graphs is not beneficial.*
#
# A wide MLP (784-4096-4096-10, fp32) on a batch of 2048 keeps this notebook's card busier than the host needs to trace it. The batch stays on the device (no copy per step), so the two loops differ only in the host's tracing. Three steps each way, lazy mode and replay (each step costs a few seconds of CPU here: the emulator really computes it):

# %%
def wide_step_fns():
    torch.manual_seed(0)
    xb, tb = torch.randn(2048, 784).to(device), torch.randint(0, 10, (2048,)).to(device)
    fns = {}
    for mode in ("lazy", "replay"):
        wide = nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                             nn.Linear(4096, 10)).to(device)
        opt = torch.optim.SGD(wide.parameters(), lr=0.01)
        if mode == "lazy":
            def step(wide=wide, opt=opt):
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(wide(xb), tb).backward()
                htcore.mark_step()
                opt.step()
                htcore.mark_step()
        else:
            sx, st = xb, tb                      # the graph's static inputs: the batch itself
            g = htcore.hpu.HPUGraph()
            opt.zero_grad(set_to_none=True)
            with htcore.hpu.graph(g):
                F.cross_entropy(wide(sx), st).backward()
                opt.step()
            def step(g=g):
                g.replay()
        step(); torch.hpu.synchronize()          # warm up
        fns[mode] = step
    return fns

wide_steps = wide_step_fns()
n_wide = 3


# %%
# %%hpu_section "Device-bound: wide MLP, lazy mode" --as wide_lazy --no-live
for _ in range(n_wide):
    wide_steps["lazy"]()
torch.hpu.synchronize()

# %%
# %%hpu_section "Device-bound: wide MLP, replay" --as wide_replay --no-live
for _ in range(n_wide):
    wide_steps["replay"]()
torch.hpu.synchronize()

# %% [markdown]
# **Fidelity.** Both lanes on the Gaudi clock of Gaudi 2: the host modeled per event (as in section 5), the device modeled from the card's figures, with one assumption that decides the verdict: the FP32 matrix rate, which no source publishes, taken as a quarter of BF16 (the verdict line says so). Nothing here is measured.
#
# On this notebook's card the wide MLP is device-bound in lazy mode already: while the device runs one step, the host traces the next, and the device's work is the longer. Replay removes the host's work and leaves the device's as it was:

# %%
# claim G10
wl, wr = pm.retime(wide_lazy.events, CARD), pm.retime(wide_replay.events, CARD)
print(f"lazy:   {wl.verdict_text}")
print(f"replay: {wr.verdict_text}")
print(f"per step: lazy host {wl.host_ns / n_wide / 1e6:.2f} ms, device {wl.device_busy_ns / n_wide / 1e6:.2f} ms, "
      f"wall {wl.wall_ns / n_wide / 1e6:.2f} ms | replay host {wr.host_ns / n_wide / 1e6:.2f} ms, "
      f"device {wr.device_busy_ns / n_wide / 1e6:.2f} ms, wall {wr.wall_ns / n_wide / 1e6:.2f} ms")
assert wl.verdict == "device-bound" and wr.verdict == "device-bound"
assert abs(wr.device_busy_ns - wl.device_busy_ns) < 0.1 * wl.device_busy_ns   # (one graph for two: fused a little differently)
assert wl.device_busy_ns > wl.host_ns                  # the device's work is the longer one

# %% [markdown]
# Why is lazy mode's wall (3.3 ms a step) longer than its device time (2.8 ms), and why does the panel show the device idle only at the start? The three steps start on an idle device: the device waits while the host traces the *first* step (the hatched bar, about 1.5 ms); from then on the host traces each step while the device runs the one before, and the device never waits again. That lead-in is paid once per loop, not per step. Counted from the re-timed spans:

# %%
# claim G10
def lead_in_ns(r):                                      # the device's idle time before its first recipe starts
    return min(sp.start_ns for lane, spans in r.spans.items() if lane.startswith("hpu") for sp in spans)
lead = lead_in_ns(wl)
print(f"lazy: device idle before the first recipe {lead / 1e6:.2f} ms, "
      f"idle in total {(wl.wall_ns - wl.device_busy_ns) / 1e6:.2f} ms")
assert wl.wall_ns - wl.device_busy_ns < 1.1 * lead     # all the idle time is the lead-in
assert lead < wl.host_ns / n_wide                       # ... about one step's tracing

# %% [markdown]
# So in a long loop a step lasts the device's time in both modes. `lab.step_times` times such a loop: one warm-up step recorded as the lead-in and not reported, then three steps, each starting where the one before ended. Replay saves only what the graph compiler fuses differently in one graph instead of two. The seed MLP of section 5 is the opposite case: host-bound, and replay cuts most of its step:

# %%
# claim G10
wide_times = {mode: lab.step_times(wide_steps[mode], steps=n_wide, warmup=1, card=CARD, name=f"wide MLP, {mode}")
              for mode in ("lazy", "replay")}
print(lab.compare(wide_times))
small = times["capture/replay"].wall_ms / times["lazy"].wall_ms      # host-bound: the step's time is the host's
big = wide_times["replay"].wall_ms / wide_times["lazy"].wall_ms      # device-bound: the step's time is the device's
print(f"seed MLP (host-bound):   replay / lazy time per step {small:.2f}")
print(f"wide MLP (device-bound): replay / lazy time per step {big:.2f} "
      f"(the 3 recorded steps with their one-off lead-in: {wr.wall_ns / wl.wall_ns:.2f})")
assert wide_times["lazy"].verdict == "device-bound" == wide_times["replay"].verdict
assert small < 0.5 and 0.9 < big <= 1.0

# %% [markdown]
# **What-if, the other cards and bf16:** the device's time shrinks on a faster card (or with bf16, the rate the sources publish), the host's does not; past the boundary the model is host-bound and HPU Graphs matter again:

# %%
for name in pm.DEVICES:
    r = pm.retime(wide_lazy.events, name)
    print(f"{r.card.device_name:7s} fp32 lazy mode: {r.verdict:12s} device {r.device_busy_ns / n_wide / 1e6:5.2f} ms/step, "
          f"host {r.host_ns / n_wide / 1e6:5.2f} ms/step")

def wide_bf16_step(wide, opt, xb, tb):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("hpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(wide(xb), tb)
    loss.backward()
    htcore.mark_step()
    opt.step()
    htcore.mark_step()

torch.manual_seed(0)
wide_bf16 = nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(device)
opt_bf16 = torch.optim.SGD(wide_bf16.parameters(), lr=0.01)
xb16, tb16 = torch.randn(2048, 784).to(device), torch.randint(0, 10, (2048,)).to(device)
htcore.mark_step()
est16 = pm.estimate(wide_bf16_step, wide_bf16, opt_bf16, xb16, tb16, device=CARD)
print(f"bf16 autocast, estimated: {est16}")

# %% [markdown]
# Under autocast the device's step falls to about a third of fp32's (the BF16 matrix rate, published), and the host's grows: autocast traces more ops a step (casts of each matrix product's inputs to bf16, and back to fp32 where an op needs it, as the loss does). The host is now the longer lane: the same MLP is host-bound in bf16, and HPU Graphs would pay again.

# %%
# claim G10
fp32_lazy = pm.retime(wide_lazy.events, CARD)
print(f"per step on {pm.card(CARD).device_name}: fp32 host {fp32_lazy.host_ns / n_wide / 1e6:.2f} ms, device "
      f"{fp32_lazy.device_busy_ns / n_wide / 1e6:.2f} ms | bf16 host {est16.host_ns / 1e6:.2f} ms, device {est16.device_ns / 1e6:.2f} ms")
assert est16.verdict == "host-bound" and fp32_lazy.verdict == "device-bound"
assert est16.device_ns < 0.5 * fp32_lazy.device_busy_ns / n_wide
assert est16.host_ns > fp32_lazy.host_ns / n_wide

# %% [markdown]
# ## 7. Profiling
#
# > *Detecting if a process is host-bound is important when using HPU Graphs and can be achieved by profiling.*
#
# On a Gaudi, seed 000 takes a host profile by setting, before the script starts, `PT_FORCED_TRACING_MASK=0xffffffff TRACE_POINT_ENABLE=1 HBN_SYNAPSE_LOGGER_COMMANDS=stop_data_capture:no_eager_flush:use_pid_suffix` and preloading the Synapse logger (`LD_PRELOAD=…/habana_frameworks/torch/lib/pytorch_synapse_logger.so`), with `--steps=20` to profile 20 steps. None of that exists here (there is no Synapse library to preload); hpu_lab writes the same kind of host/device trace from its events, for https://ui.perfetto.dev or `chrome://tracing`:

# %%
import json, os, tempfile
from hpu_lab.observe import profiler
path = profiler.export_chrome_trace(os.path.join(tempfile.mkdtemp(), "lazy_epoch.json"), lazy.events)
trace = json.load(open(path))["traceEvents"]
lanes = sorted({e["args"]["name"] for e in trace if e.get("name") == "thread_name"})
print("lanes:", lanes)     # how many events depends on the host's waits, so only the lanes are printed
assert len(trace) > 100
assert any(l.startswith("hpu:0") for l in lanes) and any(l.startswith("host") for l in lanes)

# %% [markdown]
# ## Summary
# - An HPU Graph records the device work of a step once; `replay()` launches it again with no tracing, no graph
#   building and no cache lookup. Inputs and outputs live at fixed places: copy data in, read results out.
# - Only input shapes are checked: a new shape needs a new graph (ModuleCacher keeps one per shape, up to `max_graphs`).
# - The basic APIs take tensors only, positionally, and exist in lazy mode only.
# - Ops traced per step, counted: lazy mode > `make_graphed_callables` (forward and backward replayed, the rest
#   traced) > capture and replay (nothing traced). That is the host work behind the seed's 4.8 / 3.9 / 1.3 ms, and
#   the Gaudi clock's modeled host times come in the same order: lazy > `make_graphed_callables` > replay.
# - If the device is the bottleneck, HPU Graphs change little: profile first.
#
# ## Exercises
# 1. In section 1, capture `torch.tanh(static_x @ w) * step` with a Python variable `step`. Replay after changing `step`. What do you get, and why?
# 2. Wrap only `model.fc1` with `make_graphed_callables`. How many ops are traced per step now?
# 3. Run section 4's ModuleCacher loop with `batch_size=256`. How many graphs does the cacher hold after one epoch?
# 4. In section 6, halve the batch of the MLP until its lazy step is host-bound, where replay pays again. What is the largest host-bound batch on this notebook's card? (`pm.estimate` finds it without running.)

# %% [markdown]
# ### Check your answers
#
# Each exercise has a check cell. Its function starts as the section's code: change it as the exercise asks, set `answer`, and run the cell. The check records your run and reads what it did from the event stream (replays, ops traced, graphs held, the Gaudi clock's verdicts), never the wall time: it says **right**, **wrong** (and why) or **not yet**. Reference answers: `hpu_lab.lab.answers` (`docs/lab.md`).


# %%
# Exercise 1: change `step` between the capture and the replay; answer: the multiplier the replay used
def exercise_1():
    torch.manual_seed(0)
    static_x, w = torch.randn(4, 8, device=device), torch.randn(8, 3, device=device)
    step = 2.0
    g = htcore.hpu.HPUGraph()
    g.capture_begin()
    static_y = torch.tanh(static_x @ w) * step
    g.capture_end()
    # (change step here)
    static_x.copy_(torch.randn(4, 8))
    g.replay()
    base = torch.tanh(static_x.cpu() @ w.cpu())
    return {"multiplier_used": round((static_y.cpu() / base).mean().item(), 3), "step_now": step}

answer_1 = None
print(lab.check("03.1", exercise_1, answer_1))

# %%
# Exercise 2: graph only model.fc1 (sample input: torch.randn(200, 784, device=device)); answer: ops traced per step
def exercise_2():
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
    model = htcore.hpu.make_graphed_callables(model, (torch.randn(200, 1, 28, 28, device=device),))
    train(model, device, list(train_loader)[:4], optimizer)

answer_2 = None
print(lab.check("03.2", exercise_2, answer_2))

# %%
# Exercise 3: batch_size=256; answer: graphs the cacher holds after one epoch
def exercise_3():
    model, optimizer = fresh()
    htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)
    train(model, device, torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200), optimizer)
    return model.module_cacher.num_graphs

answer_3 = None
print(lab.check("03.3", exercise_3, answer_3))

# %%
# Exercise 4: estimate the wide MLP's lazy step at smaller batches (nothing runs); answer: the largest host-bound batch
def exercise_4():
    torch.manual_seed(0)
    wide = nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 10)).to(device)
    opt = torch.optim.SGD(wide.parameters(), lr=0.01)

    def step(xb, tb):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(wide(xb), tb).backward()
        htcore.mark_step()
        opt.step()
        htcore.mark_step()
    estimates = {}
    for batch in [2048]:                     # (add smaller batches)
        xb, tb = torch.randn(batch, 784).to(device), torch.randint(0, 10, (batch,)).to(device)
        htcore.mark_step()
        estimates[batch] = pm.estimate(step, xb, tb, device=CARD)
    return estimates

answer_4 = None
print(lab.check("03.4", exercise_4, answer_4))

# %% [markdown]
# ## Further reading
# - Intel Gaudi docs, *HPU Graphs for Training* (this notebook's seed): https://docs.habana.ai/en/latest/PyTorch/PyTorch_Model_Porting/HPU_Graphs_Training.html
# - Intel Gaudi docs, *Run Inference Using HPU Graphs* (notebook 05): https://docs.habana.ai/en/latest/PyTorch/Inference_on_PyTorch/Inference_Using_HPU_Graphs.html
# - PyTorch, *CUDA Graphs* (the API the HPU one mirrors): https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs
# - hpu_lab's Gaudi clock, how the times above are modeled: `docs/gaudi_clock.md`
