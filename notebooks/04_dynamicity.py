# %% [markdown]
# # Dynamicity: when shapes, paths and values change
#
# Seed document: *HPU Graphs for Training* (its limitations and *Dynamicity in Models*).
#
# > *HPU Graphs assumes there is no dynamic op or dynamic flow in the graph, and relies on input shapes
# > only to determine whether the precompiled recipe can be used or if a recompilation is required.*
#
# A graph is compiled for fixed shapes, a fixed sequence of ops and fixed constants. Anything that changes one
# of them — a batch of another size, an `if` on a tensor, an op whose output size depends on the data — is
# *dynamicity*, and costs a recompile, a new graph, or a host sync.
#
# **What you'll do**
# - change input shapes in lazy mode and read each recompile's reason;
# - meet the last-batch problem and fix it two ways (`ModuleCacher`, `drop_last=True`);
# - run the seed's two examples: dynamic control flow (one graph per path) and a dynamic op kept outside the cached modules;
# - see what `ModuleCacher` refuses to capture.
#
# **What you'll learn**
# - how to recognise each kind of dynamicity in the panel (Recompiles tab, host syncs);
# - how to split a model so that its static parts still run as graphs.
#
# **What you'll need**
# - notebooks 02 and 03; about a minute of CPU time.

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.observe.metrics import metric_global
from collections import Counter
import random
import itertools
from hpu_lab.lab.data import MNISTLike
from hpu_lab import lab               # checkable exercises (docs/lab.md)
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

# %% [markdown]
# ## 1. Dynamic inputs in lazy mode
#
# Batches of 200, 200, then 96, then 200 again. Every graph is compiled for its input shapes:

# %%
torch.manual_seed(0)
model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

def train_step(data, target):
    optimizer.zero_grad(set_to_none=True)
    loss = F.nll_loss(model(data.to(device)), target.to(device))
    loss.backward()
    htcore.mark_step()
    optimizer.step()
    htcore.mark_step()
    return loss

sizes = [200, 200, 96, 200, 96]
batches = [(torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))) for n in sizes]

# %%
# %%hpu_section "Lazy mode: batch sizes 200, 200, 96, 200, 96" --as dyn
for data, target in batches:
    loss = train_step(data, target)

# %% [markdown]
# The Recompiles tab lists every compile with its reason. The batch of 96 compiled the step's graph again; when 200 and 96 come back, both recipes are in the cache:

# %%
first = dyn.of(ev.MarkStep)[0].step                 # two mark_steps per training step
for e in dyn.of(ev.Compile):
    print(f"training step {(e.step - first) // 2}: {e.node_count:3d} nodes, {e.reason}")
shape_changes = [e for e in dyn.of(ev.Compile) if "shape changed" in e.reason]
assert shape_changes and "(200, 1, 28, 28) -> (96, 1, 28, 28)" in shape_changes[0].reason
hits_after = [e.hit for e in dyn.of(ev.CacheLookup) if e.step >= dyn.of(ev.MarkStep)[6].step]
assert all(hits_after)                     # steps 4 and 5: every graph from the cache

# %% [markdown]
# ## 2. The last batch
#
# > *Even simple models with static inputs might exhibit dynamicity. For example, if the batch size does not divide the dataset evenly, one gets a batch at the end that is a different shape … This can handled by using ModuleCacher or by using drop_last=True in the dataloader.*
#
# 1600 images in batches of 256: six full batches and a last one of 64.

# %%
train_set = MNISTLike(train=True)
loader = torch.utils.data.DataLoader(train_set, batch_size=256)
print([len(t) for _, t in loader])

def epoch_with_cacher(loader):
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)
    for data, target in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data.to(device)), target.to(device))
        loss.backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
    return model.module_cacher.num_graphs


# %% [markdown]
# The basic APIs replay static shapes only: a graph captured for 256 refuses the last batch.

# %%
graphed = htcore.hpu.make_graphed_callables(Net().to(device), (torch.randn(256, 1, 28, 28, device=device),))
last_data, _ = list(loader)[-1]
try:
    graphed(last_data.to(device))
    raise AssertionError("expected an error")
except ValueError as e:
    print("ValueError:", e)

# %% [markdown]
# `ModuleCacher` captures a second graph for the last shape; `drop_last=True` never produces it:

# %%
# %%hpu_section "Last batch: ModuleCacher vs drop_last" --as last
graphs_cacher = epoch_with_cacher(loader)
graphs_drop_last = epoch_with_cacher(torch.utils.data.DataLoader(train_set, batch_size=256, drop_last=True))
print("ModuleCacher, all batches:", graphs_cacher, "graphs;  drop_last=True:", graphs_drop_last, "graph")

# %% [markdown]
# Two graphs with the last batch, one without it:

# %%
# claim G11
assert graphs_cacher == 2 and graphs_drop_last == 1

# %% [markdown]
# ## 3. Dynamic control flow: one graph per path
#
# > *When the dynamic control flow is present, the model needs to be separated into different HPU Graphs. In the example below, the output of module1 feeds module2 or module3 depending on the dynamic control flow.*
#
# The seed's example, with 20 iterations instead of 200 (and the backward pass and optimizer step it elides):

# %%
random.seed(0)
torch.manual_seed(0)
module1 = nn.Linear(784, 128).to(device)
module2 = nn.Linear(128, 100).to(device)
module3 = nn.Linear(128, 50).to(device)
all_params = itertools.chain(module1.parameters(), module2.parameters(), module3.parameters())
optimizer = torch.optim.Adadelta(all_params, lr=0.1)

x = torch.randn(5, 784, device=device)
h = torch.randn(5, 128, device=device, requires_grad=True)   # the seed omits requires_grad=True: then the
                                                             # graphs of module2/3 pass no gradient back to module1

graph_of = {}                                  # which captured graphs belong to which module
for name in ("module1", "module2", "module3"):
    with ev.Collector(kinds=[ev.CaptureEnd]) as c:
        globals()[name] = torch.hpu.make_graphed_callables(globals()[name], (x,) if name == "module1" else (h,))
    graph_of.update({e.graph_id: name for e in c.events})
print({name: sum(1 for n in graph_of.values() if n == name) for name in ("module1", "module2", "module3")},
      "graphs (forward, backward) per module")

real_inputs = [torch.rand_like(x) for _ in range(20)]
real_targets = [real_inputs[i].mean() for i in range(20)]

# %%
# %%hpu_section "Dynamic control flow: 20 iterations" --as flow
paths = []
for data, target in zip(real_inputs, real_targets):
    data = data.to(device)
    target = target.to(device)
    tmp = module1(data)              # forward ops run as a graph
    if random.random() > 0.5:
        paths.append(1)
        tmp = module2(tmp)           # forward ops run as a graph
    else:
        paths.append(2)
        tmp = module3(tmp)           # forward ops run as a graph
    loss = torch.abs(tmp.mean() - target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    htcore.mark_step()
print("path 1 taken", paths.count(1), "times, path 2", paths.count(2), "times")

# %% [markdown]
# No graph was captured during the loop: each path replayed the graphs of its own module, forward and backward:

# %%
# claim G12
replays = Counter(graph_of[e.graph_id] for e in flow.of(ev.Replay) if e.graph_id in graph_of)
print("replays per module:", dict(sorted(replays.items())))
assert flow.of(ev.CaptureEnd) == []
assert replays["module1"] == 2 * 20
assert replays["module2"] == 2 * paths.count(1) and replays["module3"] == 2 * paths.count(2)

# %% [markdown]
# ## 4. Dynamic ops: keep them outside the cached modules
#
# > *This example shows module1 -> dynamic boolean indexing -> module2. Thus, the static modules are placed into separate ModuleCacher and the dynamic op part is left out.*

# %%
torch.manual_seed(0)
module1 = nn.Linear(10, 3).to(device)
module2 = nn.ReLU().to(device)
all_params = itertools.chain(module1.parameters(), module2.parameters())
optimizer = torch.optim.Adadelta(all_params, lr=0.1)

htcore.hpu.ModuleCacher(max_graphs=10)(model=module1, inplace=True)
htcore.hpu.ModuleCacher(max_graphs=10)(model=module2, inplace=True)

real_inputs = [torch.randn(5, 10) for _ in range(20)]
real_targets = [real_inputs[i].mean() for i in range(20)]
module2_sizes = []                   # (not in the seed) module2's input size, each iteration

# %%
# %%hpu_section "Dynamic op between two cached modules" --as dynop
for data, target in zip(real_inputs, real_targets):
    data = data.to(device)
    target = target.to(device)
    tmp = module1(data)

    # dynamic op
    tmp = tmp[torch.where(tmp > 0)]
    module2_sizes.append(len(tmp))   # (not in the seed)

    tmp = module2(tmp)
    loss = torch.abs(tmp.mean() - target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    htcore.mark_step()

# %% [markdown]
# `torch.where(tmp > 0)` is `nonzero`: its output size depends on the values, so the host waits for the device at every iteration. `module1` (static) has one graph; `module2` sees a new shape whenever the number of positive values changes, and gets one graph per shape:

# %%
# claim G13
syncs = Counter(e.reason for e in dynop.of(ev.HostSync))
print("host syncs:", dict(syncs))
print("module1:", module1.module_cacher.num_graphs, "graph;  module2:", module2.module_cacher.num_graphs,
      f"graphs, for {len(set(module2_sizes))} input sizes seen {sorted(set(module2_sizes))}")
assert syncs["data-dependent op aten::nonzero"] == 20
assert module1.module_cacher.num_graphs == 1 and module1.module_cacher.stats()["cached_hits"] == 20
assert module2.module_cacher.num_graphs == len(set(module2_sizes)) > 1       # one graph per size

# %% [markdown]
# The panel counts many more compiles and syncs than that: "recompile (33)" and "host sync (36)". Both come from the one dynamic op, and both stop once every size has been seen.
#
# **The syncs:** 20 are the `nonzero`s above. The other 16 are captures: `ModuleCacher` synchronizes before each capture (as `torch.cuda.graph` does), and it captured a forward and a backward graph for `module1`'s one shape and for each of `module2`'s sizes: 2 × (1 + 7) = 16.
#
# **The compiles:** the ops *between* and *after* the cached modules (the indexing, `mean`, `abs` and their backward) run in plain lazy mode, and their graphs take the indexed tensor's size as an input shape. Each size not seen before recompiles five of them (the reason names the input and both shapes), once; a size seen before finds its recipes in the cache. So the 40 compiles are: iteration 0's first compiles (7, and one recompile as the size first appears), five for each of the 6 later new sizes (30), and one more of Adadelta's update at iteration 1: its first step also created its state (`zeros_like`, 28 nodes), its second step's graph does not (24 nodes). After the last new size (iteration 10), no compile at all:

# %%
# claim G13
captures_sync = syncs["hpu.graph(): synchronize before capture"]
print("host syncs before a capture:", captures_sync, " captures:", len(dynop.of(ev.CaptureEnd)))
assert captures_sync == len(dynop.of(ev.CaptureEnd)) == 2 * (module1.module_cacher.num_graphs + module2.module_cacher.num_graphs)
assert sum(syncs.values()) == 20 + captures_sync

marks = [e.step for e in dynop.of(ev.MarkStep)]                # one mark_step an iteration
def iteration_of(e):
    return sum(1 for m in marks if m < e.step)
compiles_at = Counter(iteration_of(e) for e in dynop.of(ev.Compile))
new_size_at = [i for i, n in enumerate(module2_sizes) if n not in module2_sizes[:i]]
print("module2's input size per iteration:", module2_sizes)
print("iterations with a size not seen before:", new_size_at)
print("compiles per iteration:", dict(sorted(compiles_at.items())))
print("compiles:", len(dynop.of(ev.Compile)), " reasons:", dict(Counter(e.reason.split(" shape changed")[0] for e in dynop.of(ev.Compile))))
print(f"no compile after iteration {max(compiles_at)}, the last new size")
assert set(compiles_at) == set(new_size_at)          # compiles only where a size is new, at every new size
assert all(compiles_at[i] == 5 for i in new_size_at[2:])   # the five lazy graphs around the dynamic op



# %% [markdown]
# ## 5. What ModuleCacher does not handle
#
# > *ModuleCacher does not handle dynamic control flow or dynamic ops.*
#
# Put the dynamic parts *inside* a cached module, and its capture fails with the bridge's message:

# %%
class Branchy(nn.Module):                      # dynamic control flow inside the module
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(10, 3), nn.Linear(10, 3)

    def forward(self, x):
        if x.sum() > 0:                        # a Python decision on a device value
            return self.a(x)
        return self.b(x)

class Masked(nn.Module):                       # a dynamic op inside the module
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 3)

    def forward(self, x):
        t = self.a(x)
        return t[torch.where(t > 0)]


# %%
# claim G14
errors = {}
for cls in (Branchy, Masked):
    m = cls().to(device)
    htcore.hpu.ModuleCacher(max_graphs=10)(model=m, inplace=True)
    try:
        m(torch.randn(5, 10, device=device)).sum().backward()
        raise AssertionError(f"{cls.__name__}: expected the capture to fail")
    except RuntimeError as e:
        errors[cls.__name__] = str(e)
        print(f"{cls.__name__}: {type(e).__name__}: {e}")
assert all("is not supported during HPU Graph capturing" in msg for msg in errors.values())

# %% [markdown]
# The runtime is still usable after the refused captures:

# %%
y = (torch.ones(3, device=device) * 2).sum()
print(y.item())
assert y.item() == 6.0

# %% [markdown]
# Nothing is left behind either. The ops traced before a capture was refused produced tensors that died with the error, and a `mark_step` runs only what a live tensor still needs (Intel's bridge, too, syncs the graph of the live tensors). So the next `mark_step` builds no graph, and whatever runs next starts from a clean graph with its usual recipe:

# %%
with ev.Collector(kinds=[ev.GraphBuilt]) as leftover:
    htcore.mark_step()
print("graphs left pending by the refused captures:", [g.node_count for g in leftover.events])
assert leftover.events == []                  # the dead ops are dropped, not run

# %% [markdown]
# ## Summary
# - A new input shape means a new graph: lazy mode recompiles (the reason names the input and both shapes) and caches
#   one recipe per shape; HPU Graphs need one graph per shape, which `ModuleCacher` keeps for you.
# - A last batch of another size is the most common dynamicity: `ModuleCacher` captures one more graph; `drop_last=True`
#   (or padding, notebook 06) avoids it.
# - Dynamic control flow: give each path its own graphs (one graphed callable per branch) and choose in Python.
# - Dynamic ops (`nonzero`, boolean masks) need the values on the host: keep them between cached modules, never inside.
#
# ## Exercises
# 1. In section 1, add a batch of 97. How many recipes does the cache hold for the forward+backward graph now?
# 2. In section 3, make `module2` and `module3` one module with an argument `path` and wrap it with `ModuleCacher`. Does it keep one graph per path?
# 3. In section 4, replace the boolean indexing with `torch.relu(tmp)` (same values where positive, zeros elsewhere). What happens to the host syncs and to `module2`'s graphs?

# %% [markdown]
# ### Check your answers
#
# Each exercise has a check cell. Its function starts as the section's code: change it as the exercise asks, set `answer`, and run the cell. The check records your run and reads what it did from the event stream (recipe keys, captures, host-sync reasons), never the wall time: it says **right**, **wrong** (and why) or **not yet**. Reference answers: `hpu_lab.lab.answers` (`docs/lab.md`).


# %%
# Exercise 1: add a batch of 97; answer: recipes of the forward+backward graph
def exercise_1():
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for n in [200, 200, 96, 200, 96]:
        data, target = torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data.to(device)), target.to(device)).backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()

answer_1 = None
print(lab.check("04.1", exercise_1, answer_1))

# %%
# Exercise 2: module2 and module3 as one module with an argument `path`, under ModuleCacher;
# return its module_cacher.num_graphs; answer: graphs it keeps after both paths ran
def exercise_2():
    random.seed(0)
    torch.manual_seed(0)
    module1 = torch.hpu.make_graphed_callables(nn.Linear(784, 128).to(device), (torch.randn(5, 784, device=device),))
    module2 = torch.hpu.make_graphed_callables(nn.Linear(128, 100).to(device),
                                               (torch.randn(5, 128, device=device, requires_grad=True),))
    module3 = torch.hpu.make_graphed_callables(nn.Linear(128, 50).to(device),
                                               (torch.randn(5, 128, device=device, requires_grad=True),))
    optimizer = torch.optim.Adadelta(itertools.chain(module1.parameters(), module2.parameters(),
                                                     module3.parameters()), lr=0.1)
    for _ in range(8):
        data = torch.rand(5, 784).to(device)
        tmp = module1(data)
        tmp = module2(tmp) if random.random() > 0.5 else module3(tmp)
        loss = torch.abs(tmp.mean() - data.mean())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        htcore.mark_step()
    return None

answer_2 = None
print(lab.check("04.2", exercise_2, answer_2))

# %%
# Exercise 3: torch.relu(tmp) instead of the boolean indexing; answer: data-dependent host syncs
def exercise_3():
    torch.manual_seed(0)
    module1, module2 = nn.Linear(10, 3).to(device), nn.ReLU().to(device)
    optimizer = torch.optim.Adadelta(itertools.chain(module1.parameters(), module2.parameters()), lr=0.1)
    htcore.hpu.ModuleCacher(max_graphs=10)(model=module1, inplace=True)
    htcore.hpu.ModuleCacher(max_graphs=10)(model=module2, inplace=True)
    for data in [torch.randn(5, 10) for _ in range(8)]:
        data, target = data.to(device), data.mean().to(device)
        tmp = module1(data)
        tmp = tmp[torch.where(tmp > 0)]      # the dynamic op
        tmp = module2(tmp)
        loss = torch.abs(tmp.mean() - target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        htcore.mark_step()
    return module2.module_cacher.num_graphs

answer_3 = None
print(lab.check("04.3", exercise_3, answer_3))

# %% [markdown]
# ## Further reading
# - Intel Gaudi docs, *HPU Graphs for Training*, sections *Limitations of HPU Graph APIs* and *Dynamicity in Models* (this notebook's seed): https://docs.habana.ai/en/latest/PyTorch/PyTorch_Model_Porting/HPU_Graphs_Training.html
# - Intel Gaudi docs, *Run Inference Using HPU Graphs* (dynamic shapes and data-dependent flow at inference, notebook 05): https://docs.habana.ai/en/latest/PyTorch/Inference_on_PyTorch/Inference_Using_HPU_Graphs.html
