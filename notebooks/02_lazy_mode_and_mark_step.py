# %% [markdown]
# # Lazy mode and mark_step: decide where your graphs begin and end
#
# Seed documents: *HPU Graphs for Training* (its opening on lazy mode), *General Model Optimizations*
# (*Usage of mark_step*) and *Theory of Operations* (*Lazy mode*).
#
# > *Lazy mode … accumulates and flushes ops only when mark_step is triggered. In large models, the
# > accumulation time for the ops (host time) can be significantly greater than for devices.*
#
# **What you'll do**
# - watch ops pile up in the pending graph, and find every way to make it run;
# - place `mark_step` in a training loop and see the graphs one step builds;
# - find out whether a model is host-bound, and use `mark_step` against out-of-memory and recompiles.
#
# **What you'll learn**
# - what a host sync is, and what causes one (`.item()`, `print`, `.cpu()`, data-dependent ops);
# - where `mark_step` belongs and what happens without it.
#
# **What you'll need**
# - notebooks 00 and 01; about a minute of CPU time.

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.observe.metrics import metric_global
from collections import Counter
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

from hpu_lab.lab.data import MNISTLike
train_loader = torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200)
torch.manual_seed(0)
model = Net().to("hpu")
optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
data, target = next(iter(train_loader))
data, target = data.to("hpu"), target.to("hpu")
htcore.mark_step()

# %% [markdown]
# ## 1. Ops accumulate until mark_step
#
# Run the forward pass and the loss, and stop before `mark_step`:

# %%
# %%hpu_section "Forward pass, no mark_step yet" --as acc
output = model(data)
loss = F.nll_loss(output, target)

# %% [markdown]
# Every op was recorded (with the line that issued it), and nothing ran:

# %%
ops = acc.of(ev.OpAccumulated)
print(len(ops), "ops accumulated:", ", ".join(e.op.replace("aten::", "") for e in ops))
assert len(ops) >= 6 and acc.of(ev.Launch) == [] and acc.of(ev.GraphBuilt) == []

# %% [markdown]
# Now `mark_step`: the pending ops become one graph, which compiles and launches.

# %%
# %%hpu_section "mark_step" --as ms --picture graph
htcore.mark_step()

# %% [markdown]
# The pending ops became one graph and one launch, and the host did not wait for it:

# %%
(g,) = ms.of(ev.GraphBuilt)
print(f"one graph of {g.node_count} nodes, {g.input_count} inputs, {g.output_count} outputs; "
      f"launches: {len(ms.of(ev.Launch))}")
assert len(ms.of(ev.Launch)) == 1 and ms.of(ev.HostSync) == []    # mark_step does not wait


# %% [markdown]
# ## 2. What else makes the graph run
#
# > *The execution … is triggered in a lazy manner, only when a tensor value is required by the user.*
#
# Each of these needs a value on the host, so the host must wait for the device (a *host sync*). Try them one by one:

# %%
def sync_reasons(fn):
    with ev.Collector() as c:
        fn()
    return [e.reason for e in c.of(ev.HostSync)], len(c.of(ev.Launch))

y = model(data)
triggers = {
    "loss.item()":          lambda: F.nll_loss(model(data), target).item(),
    "print(tensor)":        lambda: print(target[:8] * 2),
    "tensor.cpu()":         lambda: (y * 2).cpu(),
    "if tensor > 0:":       lambda: bool((y.exp().sum() > 0)),
    "y[y > -2.3] (boolean mask)": lambda: y[y > -2.3],
    "torch.nonzero":        lambda: torch.nonzero(y > -2.3),
}
reasons = {}
for name, fn in triggers.items():
    reasons[name], launches = sync_reasons(fn)
    print(f"{name:26s} -> launches {launches}, host sync: {reasons[name]}")

# %% [markdown]
# Each one launched what it needed and made the host wait, and the reason names the cause. Boolean masks and `nonzero` are *data-dependent*: their output shape depends on the values, so the bridge cannot even build the rest of the graph before running it:

# %%
assert reasons["loss.item()"] == [".item()"]
assert reasons["tensor.cpu()"] == [".cpu()"]
assert all(r for r in reasons.values())                       # every trigger waited
assert any("nonzero" in r for r in reasons["torch.nonzero"])   # 'data-dependent op aten::nonzero'
assert any("data-dependent" in r for r in reasons["y[y > -2.3] (boolean mask)"])

# %% [markdown]
# `torch.hpu.synchronize()` waits for launched work but does *not* launch what is still pending:

# %%
with ev.Collector() as c:
    pending = model(data).sum()
    torch.hpu.synchronize()
print("launches:", len(c.of(ev.Launch)))
assert c.of(ev.Launch) == []
htcore.mark_step()


# %% [markdown]
# ## 3. The graphs of one training step
#
# Seed 000's loop calls `mark_step` after `loss.backward()` and after `optimizer.step()` (*mark step is needed for HPU Lazy mode before and after the optimizer step*):

# %%
def train_step(data, target, marks=(True, True)):
    optimizer.zero_grad(set_to_none=True)
    output = model(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    if marks[0]:
        htcore.mark_step()
    optimizer.step()
    if marks[1]:
        htcore.mark_step()
    return loss

for _ in range(3):                     # warm up: compile the step's graphs
    train_step(data, target)

# %%
# %%hpu_section "One training step, two mark_steps" --as two
loss = train_step(data, target)

# %% [markdown]
# Two graphs per step: forward + backward, then the optimizer update. The Graph tab draws them; here are their sizes and the first lines of the forward+backward recipe:

# %%
launches = two.of(ev.Launch)
print("graphs launched:", [len(l.graph.nodes) for l in launches], "nodes (inputs and output included)")
recipe = next(r for r in hpu_lab.compiler.recipes() if r.id == launches[0].recipe_id)
print("\n".join(recipe.code.strip().splitlines()[:8]), "\n    ...")
assert len(launches) == 2 and two.of(ev.Compile) == []        # warm: both recipes from the cache

# %% [markdown]
# The optimizer's graph is the bigger one, as the panel's two tracing bars show (17 ops, then 44): the forward and backward of a two-layer MLP are a few matrix products and their elementwise neighbours, while Adadelta updates each of the 4 parameter tensors with about eleven elementwise ops (its running averages of squared gradients and of squared updates, then the step). Counted from the events:

# %%
first_mark, second_mark = two.of(ev.MarkStep)
traced = two.of(ev.OpAccumulated)
fwd_bwd_ops = sum(1 for e in traced if e.t_start < first_mark.t_start)
update_ops = sum(1 for e in traced if first_mark.t_end <= e.t_start < second_mark.t_start)
params = len(list(model.parameters()))
print(f"ops traced: forward+backward {fwd_bwd_ops}, Adadelta update {update_ops} ({update_ops / params:.0f} per parameter tensor)")
assert update_ops > fwd_bwd_ops

# %% [markdown]
# With a single `mark_step` at the end of the step, forward, backward and optimizer are one bigger graph. With none, the graph keeps growing across steps until something needs a value:

# %%
for _ in range(3):
    train_step(data, target, marks=(False, True))            # warm up the one-graph variant too
with ev.Collector() as one_mark:
    train_step(data, target, marks=(False, True))
with ev.Collector() as no_mark:
    for _ in range(3):
        loss = train_step(data, target, marks=(False, False))
    htcore.mark_step()                                       # only after three steps
size = lambda c: [g.node_count for g in c.of(ev.GraphBuilt)]
print("one mark_step per step:         graphs of", size(one_mark), "nodes")
print("one mark_step after three steps: graphs of", size(no_mark), "nodes")
assert len(size(one_mark)) == 1 and size(no_mark)[0] > 2.5 * size(one_mark)[0]


# %% [markdown]
# A graph that spans several steps is compiled for exactly that number of steps: change the count and it compiles again. `mark_step` gives every step the same graph, so the cache serves it.

# %% [markdown]
# ## 4. Is the model host-bound?
#
# > *In large models, the accumulation time for the ops (host time) can be significantly greater than for devices. This could decrease the model's performance by making it host-bound.*
#
# Host time grows with the number of ops; device time with the amount of arithmetic. A model made of many small layers is the extreme case: 24 narrow blocks, each a `Linear` and a `Tanh`.

# %%
def deep_narrow(width=32, blocks=24):
    layers = [nn.Flatten(), nn.Linear(784, width)]
    for _ in range(blocks):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(width, 10), nn.LogSoftmax(dim=1))

torch.manual_seed(0)
deep = deep_narrow().to("hpu")
deep_opt = torch.optim.SGD(deep.parameters(), lr=0.01)
small_batches = [(d[:16].to("hpu"), t[:16].to("hpu")) for d, t in list(train_loader)[:8]]

def deep_step(data, target):
    deep_opt.zero_grad(set_to_none=True)
    loss = F.nll_loss(deep(data), target)
    loss.backward()
    htcore.mark_step()
    deep_opt.step()
    htcore.mark_step()
    return loss

for d, t in small_batches[:3]:          # warm up: compile before measuring
    deep_step(d, t)
torch.hpu.synchronize()

# %% [markdown]
# Eight steps. Look at the Timeline: the device lane is mostly idle, waiting for the host to trace the next graph. (The panel's step labels count `mark_step`s, two a training step: 16 for these 8 steps.)

# %%
# %%hpu_section "Many small ops: 8 steps" --as host_bound --no-live
for d, t in small_batches:
    loss = deep_step(d, t)
torch.hpu.synchronize()

# %% [markdown]
# How much time does each side spend per step? *Fidelity: both lanes are the Gaudi clock's, modeled for Gaudi 2 (`docs/gaudi_clock.md`): the device's time is the modeled cost of the recipes the emulator launched, the host's the modeled cost of what the bridge does for each op traced, each graph built and each launch on a Gaudi server. Nothing here is measured on this CPU, so the figures are the same on any machine.* `lab.step_times_of` splits the recording into its 8 steps (two `mark_step`s each), after the 3 warm-up steps above:

# %%
# claim G1
from hpu_lab import lab
print(f"ops traced per step: {len(host_bound.of(ev.OpAccumulated)) // 8}")
deep_t = lab.step_times_of(host_bound.events, every=2, card=CARD, warmup=3, name="24 narrow blocks, batch 16")
print(deep_t)
assert deep_t.compiles == 0 and deep_t.verdict == "host-bound" and deep_t.host_ms > 2 * deep_t.device_ms

# %% [markdown]
# The host needs many times the device's time for each step, so the device waits: the model is host-bound. **What-if, every card** (the same recording, re-timed): the host's work is the same on each; the faster the card, the longer its device waits.

# %%
for name in ("gaudi", "gaudi2", "gaudi3"):
    t = deep_t.on(name)
    print(f"{t.card.device_name:7s} per step: host {t.host_ms:.2f} ms, device {t.device_ms:.3f} ms, "
          f"wall {t.wall_ms:.2f} ms: {t.verdict}")
assert deep_t.on("gaudi").device_ms > deep_t.on("gaudi3").device_ms
assert deep_t.on("gaudi").host_ms == deep_t.on("gaudi3").host_ms

# %% [markdown]
# HPU Graphs (notebook 03) remove exactly this host work. Seed 000's two-layer MLP is host-bound too (4.8 ms of host work a step on first-generation Gaudi, against ~0.1 ms of device work): time it in exercise 2.

# %% [markdown]
# ## 5. mark_step against out-of-memory
#
# > *mark_step is added to avoid out of memory (OOM) issues. In cases where the size of the graph exceeds memory usage, the graph is broken using mark_step.*
#
# Give the device a small memory Limit (a lab-only setting) and stream 30 batches of 4 MB through it:

# %%
hpu_lab.config.set(HPU_LAB_MEMORY_LIMIT="64MiB")
w = torch.randn(1000, 1000, device="hpu") / 30
htcore.mark_step()

def accumulate(mark_each_batch):
    acc = torch.zeros(1000, 1000, device="hpu")
    for i in range(30):
        batch = torch.randn(1000, 1000).to("hpu")   # 4 MB copied to the device
        acc = acc + torch.tanh(batch @ w)
        if mark_each_batch:
            htcore.mark_step()
    htcore.mark_step()
    return acc.sum().item()


# %% [markdown]
# With a `mark_step` per batch, each batch's graph runs and its input is freed:

# %%
# claim M2
torch.hpu.reset_peak_memory_stats()
accumulate(mark_each_batch=True)
peak = torch.hpu.max_memory_allocated()
print(f"fits: peak {'under' if peak < 64 * 2**20 else 'over'} the 64 MiB Limit")
assert peak < 64 * 2**20

# %% [markdown]
# Without it, all 30 batches are inputs of one graph and must be on the device together:

# %%
# claim M2
try:
    accumulate(mark_each_batch=False)
    raise AssertionError("expected an out-of-memory error")
except RuntimeError as e:
    oom = e
import re
message = re.sub(r"recipe [0-9a-f]+ ", "recipe ", str(oom))     # recipe keys are hashes, new every run
print(type(oom).__name__ + ":", message.split(" on top of")[0], "...")     # (InUse varies a little)
assert "out of memory" in str(oom)

# %% [markdown]
# The refused graph was not lost: it is still pending. Give the device its memory back and it runs:

# %%
hpu_lab.config.set(HPU_LAB_MEMORY_LIMIT="96GiB")
with ev.Collector() as recovered:
    htcore.mark_step()
print("pending nodes launched:", recovered.of(ev.MarkStep)[0].pending_nodes)
assert len(recovered.of(ev.Launch)) == 1


# %% [markdown]
# ## 6. mark_step between static and dynamic parts
#
# > *mark_step can also be used when the graph has static and dynamic shapes … Adding mark_step after static graph may reduce recompilations or recompile with small dynamic graphs.*
#
# A static part (forward and backward on a full batch) followed by a dynamic part (the accuracy of the first `n` predictions, `n` changing every step):

# %%
def step_with_metric(n, mark_between):
    optimizer.zero_grad(set_to_none=True)
    output = model(data)                                  # static: same shapes every step
    loss = F.nll_loss(output, target)
    loss.backward()
    if mark_between:
        htcore.mark_step()
    correct = (output[:n].argmax(dim=1) == target[:n])     # dynamic: n changes
    accuracy = correct.float().mean()
    htcore.mark_step()
    return accuracy

def compiles(mark_between):
    with ev.Collector() as c:
        for n in (50, 80, 120, 160):
            step_with_metric(n, mark_between)
    return [e.node_count for e in c.of(ev.Compile)]


# %%
# claim M3
without, with_mark = compiles(mark_between=False), compiles(mark_between=True)
print("without mark_step:", len(without), "compiles, nodes per compile:", without)
print("with mark_step:   ", len(with_mark), "compiles, nodes per compile:", with_mark)
big = lambda nodes: sum(1 for n in nodes if n >= 20)
assert big(without) == 4                 # the whole step recompiled for every n
assert big(with_mark) <= 1               # the static graph compiled at most once (it may be cached)
assert sum(1 for n in with_mark if n < 20) == 4    # only the small dynamic graph recompiles

# %% [markdown]
# ## 7. Logging without breaking the step
#
# `htcore.add_step_closure(fn, args)` runs `fn` right after the next `mark_step`, when the values exist, instead of forcing a sync in the middle of the step:

# %%
losses = []
with ev.Collector() as clo:
    for data_b, target_b in list(train_loader)[:4]:
        loss = train_step(data_b.to("hpu"), target_b.to("hpu"), marks=(True, False))
        htcore.add_step_closure(lambda l: losses.append(round(l.item(), 3)), (loss,))
        htcore.mark_step()
print("losses logged:", len(losses), " host syncs:", [e.reason for e in clo.of(ev.HostSync)])
assert len(losses) == 4

# %% [markdown]
# ## Summary
# - In lazy mode, ops accumulate into a pending graph; nothing runs until `mark_step` or until a value is needed.
# - `.item()`, `print`, `.cpu()`, Python conditions on tensors and data-dependent ops are host syncs: the host
#   waits for the device. They are the ones to keep out of the hot loop.
# - `mark_step` after `backward()` and after `optimizer.step()` gives every step the same graphs, so the recipe cache serves them.
# - A small model is host-bound: the device idles while Python traces ops.
# - `mark_step` can cut a graph that would not fit in memory, and separate static from dynamic parts so only small graphs recompile.
#
# ## Exercises
#
# Each exercise has a check cell holding the section's code as a function: change it as the exercise asks, give your answer, run the cell. The check says *right*, *wrong* or *not yet*, and why, from what the emulator recorded (counts, reasons, the Gaudi clock; never a time measured here). Run as they are, the checks say "not yet".

# %% [markdown]
# **1.** In section 3, move the first `mark_step` to just after `model(data)`. How many graphs per step, and which recipe is the biggest?

# %%
def my_run_1():
    torch.manual_seed(0)
    m = Net().to("hpu")
    opt = torch.optim.Adadelta(m.parameters(), lr=0.1)
    for data_b, target_b in list(train_loader)[:4]:
        data_b, target_b = data_b.to("hpu"), target_b.to("hpu")
        opt.zero_grad(set_to_none=True)
        output = m(data_b)
        loss = F.nll_loss(output, target_b)
        loss.backward()
        htcore.mark_step()             # exercise 1: move this mark_step to just after m(data_b)
        opt.step()
        htcore.mark_step()

answer_1 = None                        # graphs per step
lab.check("02.1", my_run_1, answer_1)

# %% [markdown]
# **2.** Time seed 000's `Net` with `lab.step_times` (as section 4 times the narrow model), on batches of 200 and of 800, on this notebook's card. Is it host-bound at 200? And at 800? Return `{200: ..., 800: ...}`.

# %%
def seed_net_step(batch):              # one training step of seed 000's Net on a fixed batch
    torch.manual_seed(0)
    m = Net().to("hpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(batch, 1, 28, 28).to("hpu"), torch.randint(0, 10, (batch,)).to("hpu")
    def step():
        opt.zero_grad(set_to_none=True)
        F.nll_loss(m(x), y).backward()
        htcore.mark_step()
        opt.step()
        htcore.mark_step()
    return step

def my_run_2():
    return {}                          # exercise 2: {b: lab.step_times(seed_net_step(b), steps=2, warmup=2, card=CARD) for b in ...}

answer_2 = None                        # the verdict at 800: "host-bound" or "device-bound"
lab.check("02.2", my_run_2, answer_2)

# %% [markdown]
# **3.** In section 5, `mark_step` every 5 batches instead of every batch (with the memory Limit back at 96 GiB). How many graphs run in all, and what peak memory do you get?

# %%
def my_run_3(every=1):                 # exercise 3: every 5 batches
    w = torch.randn(1000, 1000, device="hpu") / 30
    htcore.mark_step()
    torch.hpu.reset_peak_memory_stats()
    acc = torch.zeros(1000, 1000, device="hpu")
    for i in range(30):
        batch = torch.randn(1000, 1000).to("hpu")
        acc = acc + torch.tanh(batch @ w)
        if (i + 1) % every == 0:
            htcore.mark_step()
    htcore.mark_step()
    acc.sum().item()
    return torch.hpu.max_memory_allocated()

answer_3 = None                        # graphs launched in all
lab.check("02.3", my_run_3, answer_3)

# %% [markdown]
# **4.** In section 6, remove the `mark_step` at the end of `step_with_metric`. What triggers the graphs now, and how many graphs a step?

# %%
def my_run_4():
    accuracies = []
    for n in (50, 80, 120, 160):
        optimizer.zero_grad(set_to_none=True)
        output = model(data)
        F.nll_loss(output, target).backward()
        htcore.mark_step()
        accuracies.append((output[:n].argmax(dim=1) == target[:n]).float().mean())
        htcore.mark_step()             # exercise 4: remove this one
    return accuracies

answer_4 = None                        # graphs a step
lab.check("02.4", my_run_4, answer_4)

# %% [markdown]
# ## Further reading
# - [HPU Graphs for Training](https://docs.habana.ai/en/latest/PyTorch/PyTorch_Model_Porting/HPU_Graphs_Training.html) (seed 000): lazy accumulation and host-bound models.
# - [mark_step](https://docs.habana.ai/en/latest/PyTorch/Reference/mark_step.html): what it does, its `sync` argument, and where to put it.
# - [Optimizations of PyTorch Models](https://docs.habana.ai/en/latest/PyTorch/Model_Optimization_PyTorch/Optimization_in_PyTorch_Models.html) (seed 003): *Usage of mark_step* against OOM and recompiles.
# - [PyTorch Gaudi Theory of Operations](https://docs.habana.ai/en/latest/PyTorch/PyTorch_Gaudi_Theory_of_Operations.html) (seed 004): lazy mode.
