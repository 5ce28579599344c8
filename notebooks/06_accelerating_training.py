# %% [markdown]
# # Accelerating training: measure each switch of Optimum Habana
#
# Seed document: *Optimum Habana: Accelerating Training*. Optimum Habana's `GaudiTrainer` exposes the
# stack's optimisations as training arguments: `use_lazy_mode`, `dataloader_drop_last`,
# `throughput_warmup_steps`, HMP and autocast, `use_hpu_graphs_for_training`, `distribution_strategy="fast_ddp"`,
# `pipelining_fwd_bwd`, `dataloader_num_workers`, `non_blocking_data_copy`, `use_fused_adam`,
# `use_fused_clip_norm`. Each is a few lines of plain PyTorch; this notebook writes those lines and measures
# what each changes.
#
# **What you'll do**
# - for each switch, run the same small training loop with and without it, and compare the events;
# - read the counts that explain each gain: compiles, clusters, dtypes, graphs, launch order, ops per update.
#
# **What you'll learn**
# - which switches remove compilations, which remove host work, and which only help a host-bound model.
#
# **What you'll need**
# - notebooks 01–04; about two minutes of CPU time (sections 1 and 4 start two Python processes each).

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.observe.metrics import metric_global
from collections import Counter
import itertools, time, os, tempfile
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

def fresh(opt=torch.optim.SGD, **kw):
    torch.manual_seed(0)
    model = Net().to(device)
    return model, opt(model.parameters(), **({"lr": 0.1} | kw))

def train_epoch(model, optimizer, loader):
    for data, target in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data.to(device)), target.to(device))
        loss.backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
    return loss


# %% [markdown]
# ## 1. Lazy mode
#
# > *In lazy mode, the graph compiler generates optimized binary code that implements the given model topology on Gaudi. It performs operator fusion, data layout management, parallelization, pipelining and memory management, as well as graph-level optimizations.*
#
# `use_lazy_mode=False` means eager mode, which the bridge chooses once, from `PT_HPU_LAZY_MODE` read before `import habana_frameworks.torch` (seed 004: *"This flag needs to be set before invoking a Python script importing HPU"*). On a Gaudi the two modes are two processes, not a switch, and so they are here: the same two training steps run as a small script, `notebooks/scripts/two_steps.py` (open it beside this notebook), in a fresh Python process for each mode, with the variable set before its imports; the script prints what it counted as JSON.

# %%
from hpu_lab.lab.fresh import run_fresh   # hpu_lab/lab/fresh.py: run a script in a new process, env set first

TWO_STEPS = open("scripts/two_steps.py").read()      # notebooks/scripts/two_steps.py: open it, edit it
modes = {flag: run_fresh(TWO_STEPS, PT_HPU_LAZY_MODE=flag) for flag in ("0", "1")}
for flag, r in modes.items():
    print(f"PT_HPU_LAZY_MODE={flag}: {r}")

# %% [markdown]
# In eager mode every graph is one op (dropout's is two, its mask and the multiply), so there is nothing to fuse; lazy mode's graphs hold whole chains of elementwise ops, which the compiler fuses into clusters. The two processes computed the same loss:

# %%
# claim O1
eager_run, lazy_run = modes["0"], modes["1"]
assert not eager_run["lazy_mode"] and lazy_run["lazy_mode"]
assert eager_run["largest_graph"] <= 2 and eager_run["fused_clusters"] == 0
assert lazy_run["largest_graph"] > 10 and lazy_run["fused_clusters"] >= 2
assert eager_run["launches"] > 5 * lazy_run["launches"]
assert abs(eager_run["loss"] - lazy_run["loss"]) < 1e-5

# %% [markdown]
# The panel of the same two steps in this notebook's process, which runs in lazy mode (the default):

# %%
loader = torch.utils.data.DataLoader(train_set, batch_size=200)
two_batches = list(loader)[:2]

# %%
# %%hpu_section "Lazy mode: 2 steps" --as lazy
model, optimizer = fresh()
train_epoch(model, optimizer, two_batches)


# %% [markdown]
# ## 2. The last batch: padding or drop_last
#
# > *In lazy mode, the last batch is filled with extra samples by default so that it has the same dimensions as previous batches. This enables to avoid extra graph compilations during training. You can also discard the last batch with `dataloader_drop_last=True`.*
#
# 1600 images in batches of 256 leave 64 for the last batch. Padding, as Optimum does it: repeat samples from the start until the last batch is full.

# %%
class PadLastBatch(torch.utils.data.Sampler):   # one epoch, the last batch filled from the start
    def __init__(self, n, batch_size):
        self.n, self.pad = n, (-n) % batch_size
    def __iter__(self):
        return iter(list(range(self.n)) + list(range(self.pad)))
    def __len__(self):
        return self.n + self.pad

loaders = {
    "no padding":     torch.utils.data.DataLoader(train_set, batch_size=256),
    "padded":         torch.utils.data.DataLoader(train_set, batch_size=256, sampler=PadLastBatch(len(train_set), 256)),
    "drop_last=True": torch.utils.data.DataLoader(train_set, batch_size=256, drop_last=True),
}
for name, l in loaders.items():
    print(f"{name:15s} batches: {[len(t) for _, t in l]}")

# %% [markdown]
# Each loader trains one epoch from an empty recipe cache (`hpu_lab.compiler.clear()` before each, so no loader is served by another's recipes). Count the compiles of the forward+backward graph (more than 10 nodes; the optimizer's graph is smaller) and the batch sizes they were compiled for:

# %%
# claim O2
fwd_bwd_compiles = {}
for name, l in loaders.items():
    hpu_lab.compiler.clear()               # forget every recipe: this loader starts cold
    model, optimizer = fresh()
    with ev.Collector() as c:
        train_epoch(model, optimizer, l)
    compiles = [e for e in c.of(ev.Compile) if e.node_count > 10]
    fwd_bwd_compiles[name] = len(compiles)
    batch_sizes = sorted({n.shape[0] for e in compiles for n in e.graph.nodes if n.op == "input" and len(n.shape) == 4})
    print(f"{name:15s} forward+backward compiles: {len(compiles)}, for batch sizes {batch_sizes}")
assert fwd_bwd_compiles == {"no padding": 2, "padded": 1, "drop_last=True": 1}

# %% [markdown]
# The unpadded loader compiled the forward+backward graph twice, for 256 and once more for the last 64; padding or dropping the last batch leaves one shape, so one compile.

# %% [markdown]
# ## 3. Warm-up steps
#
# > *In lazy mode, the first two or three training iterations may be slower due to graph compilations. To not take them into account in the computation of the throughput at the end of the training, you can add the following training argument: `throughput_warmup_steps=3`.*
#
# Ten steps of batch 160, a shape not compiled yet, with Adadelta:

# %%
batches160 = list(torch.utils.data.DataLoader(train_set, batch_size=160))     # loaded beforehand: not timed
model, optimizer = fresh(torch.optim.Adadelta)

def timed_epoch():
    for data, target in batches160:
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data.to(device)), target.to(device))
        loss.backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()


# %% [markdown]
# A full garbage collection made due by the cells above would land in whichever timed step comes next, as host time (on a busy machine: tens of ms, more than a warm step). The timed steps start clean, as `python -m hpu_lab.lab.bench` does:

# %%
import gc
_ = gc.collect()

# %%
# %%hpu_section "Ten steps from a cold cache" --as warm --no-live
timed_epoch()
torch.hpu.synchronize()

# %% [markdown]
# Compiles happen in the first steps only:

# %%
# claim O3
first = warm.of(ev.MarkStep)[0].step
per_step = Counter((e.step - first) // 2 for e in warm.of(ev.Compile))
print("compiles per step:", [per_step.get(i, 0) for i in range(10)])
assert set(per_step) <= {0, 1, 2} and sum(per_step.values()) >= 2

# %% [markdown]
# and they make those steps slow, so a throughput that includes them understates the steady state. `lab.step_times_of` splits the recording into its ten steps (each ends with its second `mark_step`) and times each on the Gaudi clock of this notebook's card (`docs/gaudi_clock.md`): host and device modeled, a compile costing the graph compiler's modeled time for its graph's size, so the figures are the same on any machine:

# %%
# claim O3
cold = lab.step_times_of(warm.events, every=2, card=CARD, warmup=0, name="ten steps from a cold cache")
print(cold)
warmup = 3
all_steps, after_warmup = cold.per_second(160), cold.after(warmup).per_second(160)
print(f"throughput: {all_steps:.0f} samples/s over all steps, {after_warmup:.0f} samples/s with throughput_warmup_steps={warmup}")
walls = [s.wall_ns for s in cold.steps]
assert len(walls) == 10 and [s.compiles > 0 for s in cold.steps[warmup:]] == [False] * 7
assert max(walls[:warmup]) > 2 * sorted(walls[warmup:])[len(walls[warmup:]) // 2]
assert after_warmup > all_steps

# %% [markdown]
# The table's note, "the loop was not warm", is the point here. Step 0 compiles the forward+backward graph and Adadelta's first update (the one that creates its state), step 1 the steady update: about 116 and 66 ms of modeled compile time. From step 2 on a step is 4.8 ms of host work against 0.1 ms of device work (host-bound), so the two compiling steps make the mean over all ten 23 ms, and the throughput over all steps a fifth of the steady one.
#
# ## 4. Mixed-precision training: HMP
#
# > *Habana Mixed Precision (HMP) proposes to mix fp32 and bf16 operations … you can specify which operators to compute in bf16 with `hmp_bf16_ops` and which operators to compute in fp32 with `hmp_fp32_ops`.*
#
# Optimum's default lists, written to the files HMP reads:

# %%
import logging, warnings
from hpu_lab.hpex import hmp
lists = tempfile.mkdtemp()
with open(os.path.join(lists, "bf16.txt"), "w") as f:
    f.write("\n".join(hmp.hmp_bf16_ops))
with open(os.path.join(lists, "fp32.txt"), "w") as f:
    f.write("\n".join(hmp.hmp_fp32_ops))
print("bf16:", hmp.hmp_bf16_ops)
print("fp32:", hmp.hmp_fp32_ops)

# %%
with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)     # HMP is deprecated in favour of autocast, and says so
    hmp.convert(opt_level="O1", bf16_file_path=os.path.join(lists, "bf16.txt"),
                fp32_file_path=os.path.join(lists, "fp32.txt"))
model, optimizer = fresh()
data, target = two_batches[0]

# %%
# %%hpu_section "One step with HMP" --as hmp_step
optimizer.zero_grad(set_to_none=True)
output = model(data.to(device))
loss = F.nll_loss(output, target.to(device))
loss.backward()
htcore.mark_step()
with hmp.disable_casts():          # the optimizer keeps fp32 weights
    optimizer.step()
htcore.mark_step()

# %% [markdown]
# Each op of the forward graph runs in the dtype its list gives it; the casts are nodes of the graph:

# %%
# claim O4
graph = hmp_step.of(ev.Launch)[0].graph
forward_ops = [(n.op.replace("aten::", ""), n.dtype) for n in graph.nodes
               if n.op not in ("input", "output", "view") and not n.src.startswith("<")][:12]
print(forward_ops)
dtype_of = {op: dt for op, dt in forward_ops}
assert dtype_of["addmm"] == "bfloat16"            # linear: bf16 list
assert dtype_of["_log_softmax"] == "float32"      # log_softmax: fp32 list
assert sum(1 for n in graph.nodes if n.is_cast) >= 3
assert all(p.dtype == torch.float32 for p in model.parameters())
hmp._restore()                                    # lab-only: undo convert()

# %% [markdown]
# > *To apply HMP, you must set `"use_habana_mixed_precision"` to true in the Gaudi configuration file. … Torch Autocast can also be used as a backend for mixed-precision training. You need to add the argument `--bf16` to enable it.*
#
# `--bf16` runs the step under `torch.autocast("hpu", dtype=torch.bfloat16)`, which does the same with the bridge's autocast lists: notebook 01, section 9, measures it (claim T11).

# %% [markdown]
# > *Please refer to the list of supported PyTorch operators beforehand to make sure the ones you are interested in are compatible with bf16.*
#
# With autocast, the lists are files too: `PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST` and `PT_HPU_AUTOCAST_FP32_OPS_LIST` name files of op names, one a line, that **replace** the bridge's default lists (REFERENCE.md, section 5). The bridge reads them once, at import, so each setting is a fresh process: `notebooks/scripts/autocast_lists.py` runs `linear`, `matmul` and `digamma` under `torch.autocast("hpu", dtype=torch.bfloat16)` and prints the list it read, each op's dtype and the CPU fallbacks. First with the default lists, then with a file that lists `linear` and `digamma`, an op whose HPU kernel has no bf16 version (seed 003's fallback example):

# %%
my_list = os.path.join(lists, "lower_precision_ops.txt")
with open(my_list, "w") as f:
    f.write("linear\ndigamma\n")
AUTOCAST_LISTS = open("scripts/autocast_lists.py").read()      # notebooks/scripts/autocast_lists.py: open it, edit it
default_lists = run_fresh(AUTOCAST_LISTS)
my_lists = run_fresh(AUTOCAST_LISTS, PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST=my_list)
for name, r in (("default lists", default_lists), ("linear + digamma", my_lists)):
    print(f"{name:16s} lower-precision list of {len(r['lower_precision_list'])} ops; dtypes {r['dtypes']}; CPU fallbacks {r['fallbacks']}")

# %% [markdown]
# The file replaced the list, it did not add to it: `matmul`, on the default list, now runs in float32. And `digamma` did run in bf16 as asked, but not on the device: the HPU has no bf16 digamma, so each call falls back to the CPU, a host sync and a round trip (notebook 07, section 1). That is what to check before adding an op to the bf16 list:

# %%
# claim O4
assert default_lists["dtypes"] == {"linear": "bfloat16", "matmul": "bfloat16", "digamma": "float32"}
assert default_lists["fallbacks"] == [] and "matmul" in default_lists["lower_precision_list"]
assert my_lists["lower_precision_list"] == ["digamma", "linear"]
assert my_lists["dtypes"] == {"linear": "bfloat16", "matmul": "float32", "digamma": "bfloat16"}
assert my_lists["fallbacks"] == [["aten::digamma", ["bfloat16"]]]
assert my_lists["fp32_list_length"] == default_lists["fp32_list_length"]      # the fp32 list was not touched

# %% [markdown]
# ## 5. HPU Graphs for training
#
# > *To do so, specify `--use_hpu_graphs_for_training True`. This option will wrap the model in `habana_frameworks.torch.hpu.ModuleCacher`, which automatically records HPU Graphs on the model's usage.*
#
# In optimum-habana (1.21) the switch is three lines of `GaudiTrainer._wrap_model` (`optimum/habana/transformers/trainer.py`):
#
# ```python
# if self.args.use_hpu_graphs_for_training:
#     import habana_frameworks.torch as ht
#     ht.hpu.ModuleCacher()(model=model, inplace=True)
# ```
#
# This notebook runs that line on seed 000's model and measures what it changes. It does not run `GaudiTrainer`: `GaudiTrainingArguments(use_habana=True)` adapts transformers to Gaudi by importing every model family optimum-habana patches, one of them imports torchvision, and PyPI's torchvision for x86-64 is built for CUDA torch: it does not import beside the CPU torch this lab runs on.
#
# Where optimum-habana does import (the `[clients]` extra and a torchvision built for the CPU torch), a test runs `GaudiTrainer` itself, unchanged: `tests/clients/test_clients.py::test_use_hpu_graphs_for_training_is_the_module_cacher_line_of_notebook_06`, on a 2-layer BERT built in code (`tests/clients/gaudi_trainer_graphs.py`). It trains with `use_hpu_graphs_for_training=True`, with the flag off and the line above applied, and with neither, and checks that the flag does exactly what the line does: the model the trainer trains carries a `ModuleCacher` with one graph, the forward and the backward are captured once (2 HPU Graphs) and replayed every step (2 replays a step), the host traces the forward once instead of every step, and the losses and the trained parameters (bit for bit) are those of training without graphs. It fails if the flag stops wrapping the model.
#
# > **In practice:** let the flag wrap the model. `GaudiTrainer` runs the line when training starts, after transformers' `Trainer` has read the model's `forward` signature; a model wrapped before the trainer is built shows it the wrapper's `(*args, **kwargs)`, and the trainer then drops the dataset's input columns as unused (`remove_unused_columns`) and passes `num_items_in_batch` to a `forward` that does not take it.

# %%
model, optimizer = fresh()
model = htcore.hpu.ModuleCacher()(model=model, inplace=True)      # use_hpu_graphs_for_training=True

# %%
# %%hpu_section "use_hpu_graphs_for_training: one epoch" --as graphs
train_epoch(model, optimizer, loader)

# %% [markdown]
# The same epoch without the switch, its events collected (no panel: it looks like section 1's):

# %%
plain_model, plain_optimizer = fresh()
with ev.Collector() as no_graphs:
    train_epoch(plain_model, plain_optimizer, loader)

# %% [markdown]
# In the panel, after the first fetch (grey, measured), about 110 ms of modeled host time are the captures and compiles, four graphs compiled once each (yellow triangles, *first compile*): the forward and the backward captured as HPU Graphs (pink bars, each after a host sync, as `hpu.graph()` synchronizes before it captures); the loss and its gradient, which run outside the cached module, compiled as the first replay begins; and, at the backward's `mark_step`, a small graph that copies the bias gradients out of the replayed backward. The optimizer's update compiles nothing: an earlier section of this notebook compiled the same update graph, and the cache serves it. After that a step is two replays (blue dots) and the optimizer's launch, thin bars of modeled host work; the grey bars between them are the DataLoader's fetches, your code measured on this CPU, which here outlast everything the step does on the Gaudi clock.
#
# With the switch the model's forward and backward are captured once, as two HPU Graphs, and replayed every step; the host no longer traces the model's ops one by one (only the optimizer's, outside the graphs):

# %%
# claim O5
model_ops = ("aten::addmm", "aten::relu", "aten::_log_softmax")          # the forward's ops
traced = {name: sum(e.op in model_ops for e in s.of(ev.OpAccumulated))
          for name, s in (("without the switch", no_graphs), ("use_hpu_graphs_for_training", graphs))}
print("graphs captured:", len(graphs.of(ev.CaptureEnd)), "(forward and backward), replays:", len(graphs.of(ev.Replay)))
print("forward ops (addmm, relu, log_softmax) traced by the host in the epoch:", traced)
print("compiles in the epoch:", [(c.src.split(" (")[-1].rstrip(")") if "(" in c.src else c.src, c.node_count, c.reason)
                                 for c in graphs.of(ev.Compile)])
assert [c.reason for c in graphs.of(ev.Compile)] == ["first compile"] * 4      # four new graphs, no recompile
assert model.module_cacher.num_graphs == 1 and len(graphs.of(ev.CaptureEnd)) == 2
assert len(graphs.of(ev.Replay)) == 2 * len(loader) and no_graphs.of(ev.Replay) == []
per_step = traced["without the switch"] / len(loader)             # forward ops traced per step without graphs
assert traced["use_hpu_graphs_for_training"] <= 2 * per_step < traced["without the switch"]   # at the capture, not every step


# %% [markdown]
# ## 6. Fast DDP
#
# > *`--distribution_strategy fast_ddp` … replaces the usage of `torch.nn.parallel.DistributedDataParallel` with much simpler and usually faster `optimum.habana.distributed.all_reduce_gradients`.*

# %% [markdown]
# It needs two emulated cards: notebook 08, section 3, compares it with DDP.

# %% [markdown]
# ## 7. Pipelining forward and backward
#
# > *One potential optimization … is to trigger the HPU forward computation right after the CPU forward interpretation and before the CPU backward interpretation.* (`--pipelining_fwd_bwd True`)
#
# Optimum does it with one more `mark_step`, after the loss:

# %%
def step(data, target, pipelining):
    optimizer.zero_grad(set_to_none=True)
    loss = F.nll_loss(model(data), target)
    if pipelining:
        htcore.mark_step()             # launch the forward now
    loss.backward()
    htcore.mark_step()
    optimizer.step()
    htcore.mark_step()

model, optimizer = fresh()
data, target = two_batches[0][0].to(device), two_batches[0][1].to(device)
for p in (False, True, False, True):   # warm up both variants
    step(data, target, p)
torch.hpu.synchronize()

# %%
# %%hpu_section "One step, no pipelining" --as plain
step(data, target, pipelining=False)
torch.hpu.synchronize()

# %%
# %%hpu_section "One step, pipelining_fwd_bwd" --as piped
step(data, target, pipelining=True)
torch.hpu.synchronize()


# %% [markdown]
# (A panel's dotted lines are its `mark_step`s, labelled "end of step n": a pipelined training step has three, so its panel shows "end of step 1" and "end of step 2" inside one training step.) With pipelining the forward graph is launched before the first backward op is traced; without it, the device gets nothing until the backward pass has been traced too:

# %%
# claim O7
def first_launch_vs_backward(s):
    backward_ops = [e for e in s.of(ev.OpAccumulated) if "backward" in e.op or e.op.endswith("_bwd")]
    return s.of(ev.Launch)[0].t_start < backward_ops[0].t_start
print("forward launched before backward traced — no pipelining:", first_launch_vs_backward(plain),
      "| pipelining:", first_launch_vs_backward(piped))
assert not first_launch_vs_backward(plain) and first_launch_vs_backward(piped)
assert len(piped.of(ev.Launch)) == len(plain.of(ev.Launch)) + 1


# %% [markdown]
# Yet the pipelined panel's step is *longer* than the plain one. Both panels say why: this step is host-bound (the device is idle most of it), so the host's work is the step. Pipelining adds one graph to build, look up and launch, all host work, and what it gains is that the forward's device work, a few tens of µs here, starts earlier, on a device that was waiting anyway. The two variants in a warm loop, `lab.step_times` (3 warm-up steps, then 8 timed, on this notebook's card):

# %%
# claim O7
small = lab.compare({"no pipelining": lab.step_times(lambda: step(data, target, False), card=CARD, name="no pipelining"),
                     "pipelining_fwd_bwd": lab.step_times(lambda: step(data, target, True), card=CARD, name="pipelining_fwd_bwd")})
print(small)
t_plain, t_piped = small.runs["no pipelining"], small.runs["pipelining_fwd_bwd"]
assert t_plain.verdict == t_piped.verdict == "host-bound"
assert t_piped.host_ms > t_plain.host_ms and t_piped.wall_ms > t_plain.wall_ms     # the extra launch is on the critical path

# %% [markdown]
# What pipelining can gain is the forward's device time, run while the host traces the backward instead of after it, less the extra launch. A wider model (bf16, 3072 → 4096 → 10, batch 2048), one step each way recorded once, and re-timed, **what-if**, on first-generation Gaudi, where it is device-bound, and on Gaudi 2, where the same device work takes a fraction of the time and the host is the bottleneck again:

# %%
torch.manual_seed(0)
wide = nn.Sequential(nn.Linear(3072, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(torch.bfloat16).to(device)
wide_opt = torch.optim.SGD(wide.parameters(), lr=0.01)
wide_x, wide_t = torch.randn(2048, 3072, dtype=torch.bfloat16).to(device), torch.randint(0, 10, (2048,)).to(device)

def wide_step(pipelining):
    wide_opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(wide(wide_x), wide_t)
    if pipelining:
        htcore.mark_step()
    loss.backward()
    htcore.mark_step()
    wide_opt.step()
    htcore.mark_step()

def wide_step_read(pipelining):                # a step that reads its loss: it ends in a sync
    wide_step(pipelining)
    torch.hpu.synchronize()

wide_runs = {p: lab.step_times(lambda: wide_step_read(p), steps=2, warmup=2, card="gaudi", name=f"pipelining={p}")
             for p in (False, True)}

# %%
# claim O7
pipelining_gain = {}
for name in ("gaudi", "gaudi2"):
    cmp = lab.compare({str(p): t.on(name) for p, t in wide_runs.items()})
    off, on = cmp.runs["False"], cmp.runs["True"]
    pipelining_gain[name] = cmp.speedup("True")
    print(f"{pm.card(name).device_name:7s} {off.verdict:12s} step without {off.wall_ms * 1e3:5.0f} µs, with pipelining "
          f"{on.wall_ms * 1e3:5.0f} µs: {pipelining_gain[name]:.2f}x")
assert pipelining_gain["gaudi"] > 1.1 and pipelining_gain["gaudi2"] < 1.0

# %% [markdown]
# On first-generation Gaudi the forward's matmuls run while the host traces the backward, so the step (which ends in a sync here, as a step that reads its loss does) is shorter by about a fifth. On Gaudi 2 the same forward and backward are over while the host is still tracing the optimizer: there was no device time left to overlap, and the extra launch makes the step longer.
#
# **This is not the seed's recommendation**, and a reader should know it: *"We recommend using it on Gaudi2 as the host will often be the bottleneck. You should be able to see a speedup on first-generation Gaudi too, but it will be less significant than on Gaudi2 because your run is more likely to be HPU-bound."* On the Gaudi clock a host-bound step's time is the host's work, and pipelining adds to it; the gain needs device work on the step's critical path. The clock models the host per op and per launch; whatever makes Intel see the Gaudi 2 gain (for instance host work the clock does not model, or larger models where the device's forward does sit on the critical path) is not in this experiment. Measure it on your model and your card; the switch is one `mark_step`.


# %% [markdown]
# > *Furthermore, when training models that require large device memory, we suggest disabling this optimization because it will increase the HPU memory usage.*
#
# Why: without pipelining, forward and backward are one graph, and the activations the backward needs are tensors *inside* it (non-persistent: the compiler may reuse their memory within the graph). With pipelining the forward is a graph of its own, so every activation the backward needs becomes one of its outputs, a persistent tensor held in device memory until the backward graph runs. Count them, and their bytes, in each variant's first graph:

# %%
def held_activations(s):                     # persistent outputs of the step's first graph with the batch dimension
    g = s.of(ev.Launch)[0].graph
    return [(n.op.replace("aten::", ""), n.shape, n.out_bytes) for n in g.nodes
            if n.tensor_class == "persistent" and n.op != "input" and n.shape[:1] == (len(target),)]
for s in (plain, piped):
    acts = held_activations(s)
    print(f"{s.title}: {len(acts)} activations held for the backward, {sum(b for *_, b in acts) / 1024:.0f} KiB: {[a[:2] for a in acts]}")
assert held_activations(plain) == []
assert sum(b for *_, b in held_activations(piped)) >= 2 * len(target) * 128 * 4     # at least relu's output and the dropout mask

# %% [markdown]
# ## 8. More data-loader workers
#
# > *If the workload of the data loader is heavy, you can increase the number of workers to make your run faster.*
#
# > *Besides, using `--dataloader_num_workers 1` should help in most cases as it enables data loading in a thread different from the main one.*
#
# A dataset whose items take 4 ms each to prepare (decoding, augmenting ... here, a sleep: the time a real transform would take, not something hpu_lab models):

# %%
class HeavyDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 256
    def __getitem__(self, i):
        time.sleep(0.004)                        # expensive preprocessing
        g = torch.Generator().manual_seed(i)
        return torch.randn(1, 28, 28, generator=g), i % 10

import warnings
# on a machine with fewer cores than workers torch warns that 2 workers are too many; these workers
# mostly sleep (the stand-in for preprocessing), so they cost no core, and the warning does not apply
warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
model, optimizer = fresh()
heavy_loaders = {n: torch.utils.data.DataLoader(HeavyDataset(), batch_size=64, num_workers=n,
                                                persistent_workers=n > 0) for n in (0, 1, 2)}

def epoch_clock(num_workers):                # one epoch on the Gaudi clock of this notebook's card
    with ev.Collector() as c:
        train_epoch(model, optimizer, heavy_loaders[num_workers])
        torch.hpu.synchronize()
    return pm.retime(c.events, CARD)

_ = [epoch_clock(n) for n in heavy_loaders]   # warm up: compile, start the workers

# %% [markdown]
# On the Gaudi clock a DataLoader fetch is your own code, measured on this CPU and drawn as "your code" (`user_ns`, `docs/gaudi_clock.md`): real time the host would also spend, waiting for the items or preparing them. The clock's zero is the epoch's first event, the first fetch, so the wait for the first batch is counted too.
#
# What to expect, before measuring: the epoch is 4 batches of 64 items, at least 64 × 4 ms = 256 ms each (a sleep never returns early). With no worker the main process prepares the 4 batches in turn: at least 1024 ms. With one worker the batches are prepared in another process while the main one trains, but a batch takes far longer to prepare than to train on, so there is nothing to hide it behind: about as long. With two workers the DataLoader hands out batches in turn (worker 0 gets batches 0 and 2, worker 1 gets 1 and 3), and each worker prepares its two one after the other: at least 2 × 256 ms = 512 ms. **Two workers can at most halve this epoch's work**: 1024 ms of floor become 512 ms. (The waits are this machine's sleeps and item preparation, measured, so the figures vary: see below the measurement.)

# %%
# NBVAL_IGNORE_OUTPUT
# (the loader's waits are measured on this CPU)
# claim O8
clocks = {n: epoch_clock(n) for n in heavy_loaders}
for n, r in clocks.items():
    print(f"dataloader_num_workers={n}: epoch {r.wall_ns / 1e6:.0f} ms, host waiting for data {r.user_ns / 1e6:.0f} ms, "
          f"device busy {r.device_busy_ns / 1e6:.2f} ms")
r0, r1, r2 = clocks[0], clocks[1], clocks[2]
floor_ms = 64 * 4                                               # one batch's sleeps, at least
print(f"two workers: the epoch is {r0.wall_ns / r2.wall_ns:.2f}x shorter than with none; floors {4 * floor_ms} and {2 * floor_ms} ms (2x); "
      f"above their floors by {r0.wall_ns / 1e6 - 4 * floor_ms:.0f} and {r2.wall_ns / 1e6 - 2 * floor_ms:.0f} ms")
assert r2.wall_ns < 0.85 * r0.wall_ns and r0.user_ns > r2.user_ns

# %% [markdown]
# The 2x is the bound above, for the same work per item; the measured ratio strays around it. Each run is its floor plus what this machine adds: the sleeps' overshoot and the items' preparation (a `randn` per item, the collation), which the no-worker run does 256 times in a row on the main process, and a busy machine stretches. A measured ratio a little above 2 is that excess, not a gain two workers can give; a ratio of 3 would be a clock that leaves a batch's wait out. An earlier version of the clock started at the first torch op, after the first fetch: it dropped the first batch's 256 ms from every epoch, 768 ms against 256 ms, and this cell printed a "3x". Each epoch's fetches, on the clock: the first starts at its zero, and the sleeps set a floor on each epoch that no machine can beat:

# %%
# claim O8
batch_floor_ns = 64 * 4_000_000                                  # 64 items of at least 4 ms each
for n, r in clocks.items():
    fetches = [e for e in r.events if isinstance(e, ev.UserCode) and e.what == "data loading"]
    assert len(fetches) == 4 + 1                                 # 4 batches, then the fetch that ends the epoch
    assert fetches[0].t_start == 0                               # the clock starts with the first batch's wait
assert r0.user_ns >= 4 * batch_floor_ns                          # no worker: 4 batches in turn
assert r2.wall_ns >= 2 * batch_floor_ns                          # two workers: each prepares 2 batches in turn

# %% [markdown]
# ## 9. Non-blocking data copy
#
# > *`--non_blocking_data_copy True` … the host can continue to execute other tasks (e.g. graph building) to get a better pipelining between the host and the device.*

# %% [markdown]
# Optimum's switch is `data.to(device, non_blocking=True)` from a pinned loader. The same training step of a small MLP, on batches of 128 pinned by the DataLoader, with each kind of copy (`lab.step_times`: 8 steps each way after 2 of warm-up):

# %%
torch.manual_seed(0)
pinned_batches = list(torch.utils.data.DataLoader(torch.utils.data.Subset(train_set, range(1024)), batch_size=128,
                                                  pin_memory=True))

def copy_steps(non_blocking):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    mlp_opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
    batches = itertools.cycle(pinned_batches)

    def step():
        data, target = next(batches)
        data = data.to(device, non_blocking=non_blocking)
        target = target.to(device, non_blocking=non_blocking)
        loss = F.cross_entropy(mlp(data), target)
        loss.backward(); htcore.mark_step(); mlp_opt.step(); mlp_opt.zero_grad(); htcore.mark_step()
    return lab.step_times(step, steps=8, warmup=2, card=CARD, name=f"non_blocking={non_blocking}")

blocking, overlapped = copy_steps(False), copy_steps(True)

# %% [markdown]
# With `non_blocking=False` the host does every copy itself (`stream == -1`, on the host lane) and waits for it; with `non_blocking=True` each copy is queued on the device's stream and the host goes on tracing the step. Both loops make the same copies (two a step: the images and the labels; the recording holds the last warm-up step too) and the same host syncs:

# %%
# claim O9
held = lambda t: [e for e in t.events if isinstance(e, ev.HostToDevice) and e.stream == -1]   # the host's own copies
queued = lambda t: [e for e in t.events if isinstance(e, ev.CopyQueued)]                      # copies put on a stream
ran = lambda t: [e for e in t.events if isinstance(e, ev.HostToDevice) and e.stream >= 0]     # ... as they ran there
for t in (blocking, overlapped):
    print(f"{t.name}: {len(held(t))} copies the host did itself, {len(queued(t))} queued on a stream")
assert len(held(blocking)) == len(queued(overlapped)) == 2 * (len(blocking.steps) + 1)
assert queued(blocking) == [] and held(overlapped) == []
assert all(e.pinned and e.lane == "host" for e in held(blocking))
assert all(e.pinned and e.non_blocking and e.stream == 0 and e.lane == "hpu:0" for e in ran(overlapped))
syncs = lambda t: sum(isinstance(e, ev.HostSync) for e in t.events)
assert syncs(overlapped) == syncs(blocking)

# %% [markdown]
# A queued copy is not free for the host. In Intel's bridge (`gaudi-pytorch-bridge` 1.19), a pinned `non_blocking` copy still runs, on the host, the lazy copy's bookkeeping (its destination's device buffer, marked as a graph input) and the copy's submission: the DMA stream ordered after pending writes of both buffers, the destination's address locked, `synMemCopyAsync`, a completion event registered. A blocking copy does the same, then waits for the transfer. The Gaudi clock charges the queued copy `copy_queue_ns` (10 µs, assumed; `docs/gaudi_clock.md`, *The host lane*) on the host lane and its transfer on the device's; the blocking copy holds the host for the whole transfer. The host time of a step, and the host lane's share of it spent in copies, on this notebook's card:

# %%
# claim O9
def copy_host_ms(t):        # host-lane time in copies a step: blocking transfers, or queued copies' submissions
    spent = sum(e.duration_ns for e in t.retimed.events
                if e.lane == "host" and isinstance(e, (ev.HostToDevice, ev.CopyQueued)))
    return spent / 1e6 / (len(t.steps) + 1)                      # the recording holds the lead-in step too

in_copies = {t.name: copy_host_ms(t) for t in (blocking, overlapped)}
for t in (blocking, overlapped):
    print(f"{t.name:18s} host {t.host_ms:.3f} ms a step, {in_copies[t.name] * 1e3:.1f} µs of it in copies "
          f"(modeled, {pm.card(CARD).device_name}); wall {t.wall_ms:.3f} ms, {t.verdict}")
saved = blocking.host_ms - overlapped.host_ms
print(f"host time saved a step: {saved * 1e3:.1f} µs, {saved / blocking.host_ms:.1%} of the step's host time")
assert 0 < in_copies["non_blocking=True"] < in_copies["non_blocking=False"]     # the queued copies still cost the host
assert abs(saved - (in_copies["non_blocking=False"] - in_copies["non_blocking=True"])) < 1e-6   # only the copies changed
assert 0 < saved < 0.05 * blocking.host_ms       # this MLP's host time is its tracing, not its copies

# %% [markdown]
# The blocking copies held the host 35.7 µs a step, the 400 KB batch of images (25.7 µs) and the 1 KB of labels (10.0 µs, nearly all of it the DMA's set-up); the queued ones cost it their two submissions, 20 µs. The step's host time drops by the difference, 15.7 µs, and by nothing else: it is 1% of the step, because this small model's host time is its tracing (1.4 ms), not its copies. The label copy saves almost nothing: queuing 1 KB costs about what sending it does. `non_blocking` pays off with big batches, and only where the host is what the step waits for:

# %% [markdown]
# > *We recommend using it on Gaudi2 where the host can continue to execute other tasks … On first-generation Gaudi, the device executing time is longer so one should not expect to get any speedup.* And of HPU Graphs: *the potential performance gain could be dramatic!*
#
# Whether the saved host time shortens the step depends on who waits for whom. A model with more device work, bf16 weights and 12 MB batches (`lab.step_times`, 3 steps each way after 2 of warm-up: blocking copies, non-blocking copies, and the whole step in an HPU Graph), recorded once and, **what-if**, re-timed on first-generation Gaudi and on Gaudi 2:

# %%
torch.manual_seed(0)
big_batches = [(torch.randn(2048, 3072, dtype=torch.bfloat16).pin_memory(), torch.randint(0, 10, (2048,)).pin_memory())
               for _ in range(2)]

def big_model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3072, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(torch.bfloat16).to(device)
    return m, torch.optim.SGD(m.parameters(), lr=0.01)

def time_big(mode):
    m, opt = big_model()
    if mode == "HPU Graph":
        sx, st = big_batches[0][0].to(device), big_batches[0][1].to(device)
        g = htcore.hpu.HPUGraph()
        opt.zero_grad(set_to_none=True)
        with htcore.hpu.graph(g):
            F.cross_entropy(m(sx), st).backward()
            opt.step()
        def step(x, t):
            sx.copy_(x, non_blocking=True)
            st.copy_(t, non_blocking=True)
            g.replay()
    else:
        nb = mode == "non_blocking=True"
        def step(x, t):
            x, t = x.to(device, non_blocking=nb), t.to(device, non_blocking=nb)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), t).backward()
            htcore.mark_step()
            opt.step()
            htcore.mark_step()
    batches = itertools.cycle(big_batches)
    return lab.step_times(lambda: step(*next(batches)), steps=3, warmup=2, card=CARD, name=mode)   # warm-up: compile (or capture)

big_runs = {mode: time_big(mode) for mode in ("non_blocking=False", "non_blocking=True", "HPU Graph")}

# %%
# claim O9
speedup = {}
for name in ("gaudi", "gaudi2"):
    cmp = lab.compare({mode: t.on(name) for mode, t in big_runs.items()})
    base = cmp.baseline
    speedup[name] = {mode: cmp.speedup(mode) for mode in cmp.runs}
    print(f"{pm.card(name).device_name:7s} lazy mode {base.verdict:12s} step time: " +
          ", ".join(f"{mode} {t.wall_ms:.2f} ms" for mode, t in cmp.runs.items()))
    print(f"{'':7s} host time a step: " + ", ".join(f"{mode} {t.host_ms:.2f} ms" for mode, t in cmp.runs.items()))
    print(f"{'':7s} speed-up over blocking copies: non_blocking=True {speedup[name]['non_blocking=True']:.2f}x, "
          f"HPU Graph {speedup[name]['HPU Graph']:.2f}x")
    host = {mode: t.host_ms for mode, t in cmp.runs.items()}
    assert host["non_blocking=True"] < 0.9 * host["non_blocking=False"]       # 12 MB copies: the host saves on every card
assert speedup["gaudi"]["non_blocking=True"] <= 1.0 < 1.1 < speedup["gaudi2"]["non_blocking=True"]
assert speedup["gaudi2"]["HPU Graph"] > 1.5 * speedup["gaudi"]["HPU Graph"]

# %% [markdown]
# The host time a step is the same on both cards (one host model): queuing the 12 MB copies instead of waiting for them cuts it from 1.97 to 1.48 ms, and an HPU Graph, which takes the tracing away too, to 0.07 ms. What that does to the step depends on the card. On first-generation Gaudi the device is the bottleneck: the host's copies and tracing hide behind its work, so taking them off the host saves nothing. Worse, the non-blocking run is *slower* there (0.82x), and so is the HPU Graph, whose inputs are also non-blocking copies (0.85x): a copy the host does itself runs on the host lane while the device still works on the previous step, but a queued copy is a DMA on the device's stream, ordered after that step's work (`docs/gaudi_clock.md`, *Copies*), so on a device-bound card each step's 12 MB transfer joins the device's critical path. On Gaudi 2 the same device work takes a fraction of the time, the host is the bottleneck, and every microsecond taken off it shortens the step: non-blocking copies help, and an HPU Graph, which takes the tracing away too, helps most.

# %% [markdown]
# ## 10. Fused ADAM and fused gradient-norm clipping
#
# > *Habana provides a custom fused ADAM implementation … The default value of epsilon is 1e-6 for the Habana fused ADAM optimizer, while it is 1e-8 for `torch.optim.AdamW`.*

# %%
from hpu_lab.hpex.optimizers import FusedAdamW
from hpu_lab.hpex.normalization import FusedClipNorm

def update_graph(make_optimizer, clip):
    torch.manual_seed(0)
    model = Net().to(device)
    opt = make_optimizer(model.parameters())
    sizes = []
    for _ in range(2):                       # the second step: optimizer state exists
        opt.zero_grad(set_to_none=True)
        F.nll_loss(model(data), target).backward()
        htcore.mark_step()
        with ev.Collector(kinds=[ev.GraphBuilt]) as c:
            clip(model.parameters())
            htcore.mark_step()
            opt.step()
            htcore.mark_step()
        sizes = [g.node_count for g in c.events]
    return sizes


# %%
# claim O10
torch_sizes = update_graph(lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=False),
                           lambda p: torch.nn.utils.clip_grad_norm_(p, 1.0))
fused_sizes = update_graph(lambda p: FusedAdamW(p, lr=1e-3),
                           lambda p: FusedClipNorm(p, 1.0).clip_norm(p))
print("graph nodes of the clip + update, torch:", torch_sizes, " fused:", fused_sizes)
assert sum(fused_sizes) < sum(torch_sizes) / 5

# %% [markdown]
# The other difference the seed points out, the default epsilon:

# %%
# claim O10
torch_eps = torch.optim.AdamW([torch.zeros(1)]).defaults["eps"]
fused_eps = FusedAdamW([torch.zeros(1, device=device)]).defaults["eps"]
print(f"default eps: torch.optim.AdamW {torch_eps:g}, FusedAdamW {fused_eps:g}")
assert (torch_eps, fused_eps) == (1e-8, 1e-6)

# %% [markdown]
# In Optimum these two are switched on in the Gaudi configuration file, not by training arguments:
#
# > *It can be used by specifying `"use_fused_adam": true` in the Gaudi configuration file. … It can be used by specifying `"use_fused_clip_norm": true` in the Gaudi configuration file.*
#
# ```json
# {"use_habana_mixed_precision": false, "use_fused_adam": true, "use_fused_clip_norm": true}
# ```
#
# With that file, `GaudiTrainer.create_optimizer` takes `habana_frameworks.torch.hpex.optimizers.FusedAdamW` as the optimizer class, and the training loop clips with `FusedClipNorm(model.parameters(), args.max_grad_norm)` instead of `torch.nn.utils.clip_grad_norm_`: the two objects measured above. The rest of this notebook's switches are `GaudiTrainingArguments`, all in one place:
#
# ```python
# args = GaudiTrainingArguments(
#     output_dir="out", use_habana=True, gaudi_config_name="gaudi_config.json",
#     use_lazy_mode=True,                       # section 1
#     dataloader_drop_last=True,                # section 2 (or leave the default padding)
#     throughput_warmup_steps=3,                # section 3
#     bf16=True,                                # section 4: autocast (--bf16)
#     use_hpu_graphs_for_training=True,         # section 5
#     distribution_strategy="fast_ddp",         # section 6, notebook 08
#     pipelining_fwd_bwd=True,                  # section 7
#     dataloader_num_workers=1,                 # section 8
#     non_blocking_data_copy=True,              # section 9
#     logging_steps=500,                        # section 11: the default
# )
# ```

# %% [markdown]
# ## 11. Tracking memory usage
#
# > *`memory_allocated (GB)` refers to the current memory consumption in GB, `max_memory_allocated (GB)` … the maximum memory consumption reached during the run, `total_memory_available (GB)` … the total memory available on the device.*
#
# The three numbers Optimum logs every `logging_steps`, taken after an epoch with batch 800:

# %%
import gc
model = optimizer = None                   # drop the previous section's model and optimizer,
_ = gc.collect()                           # free what earlier sections left behind ...
torch.hpu.synchronize()
before = torch.hpu.memory_allocated()      # ... and what they still hold is not this run's
torch.hpu.reset_peak_memory_stats()
model, optimizer = fresh(torch.optim.Adadelta)
train_epoch(model, optimizer, torch.utils.data.DataLoader(train_set, batch_size=800))
_ = gc.collect()                           # free what Python no longer references ...
torch.hpu.synchronize()                    # ... and let the device thread finish its frees


# %% [markdown]
# The three figures, from `torch.hpu`'s memory functions, as `optimum.habana.utils.get_hpu_memory_stats` reads them:

# %%
# claim O11
def to_gb(b):
    return round(b / 1024 ** 3, 4)
free, total = torch.hpu.mem_get_info()
stats = {
    "memory_allocated (GB)": to_gb(torch.hpu.memory_allocated()),
    "max_memory_allocated (GB)": to_gb(torch.hpu.max_memory_allocated()),
    "total_memory_available (GB)": to_gb(total),
}
print(stats)
assert 0 < torch.hpu.memory_allocated() < torch.hpu.max_memory_allocated() < total
assert free + torch.hpu.memory_allocated() == total        # what is not allocated is free

# %% [markdown]
# What the numbers are made of. The notebook's earlier sections still hold some device memory (`before`); on top of it, after the epoch, the device holds the model's parameters, their gradients (the last step's, kept until the next `zero_grad`) and Adadelta's two state tensors per parameter: exactly their bytes. The peak is higher: during a step the batch of 800 images and the activations were on the device too.

# %%
# claim O11
def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None and t.device.type == "hpu")
held = (nbytes(model.parameters()) + nbytes(p.grad for p in model.parameters())
        + nbytes(t for st in optimizer.state.values() for t in st.values() if torch.is_tensor(t)))
batch_bytes = 800 * 28 * 28 * 4
this_run = torch.hpu.memory_allocated() - before
print(f"parameters + gradients + optimizer state: {held} bytes; memory_allocated by this run: {this_run} bytes")
print(f"peak above that: {torch.hpu.max_memory_allocated() - before - held} bytes (one batch of images alone: {batch_bytes})")
assert this_run == held
assert torch.hpu.max_memory_allocated() - before - held >= batch_bytes

# %% [markdown]
# Optimum logs these three every `logging_steps`, *"(default is 500) steps"*, and *"In distributed mode, memory stats are communicated only by the main process."* (seed 002): each card has its own memory, and the numbers logged are card 0's. Notebook 08 launches two cards; there, each process could read only its own card's statistics.

# %% [markdown]
# ## Summary
# - Lazy mode gives the compiler whole graphs to fuse; eager mode gives it one op at a time.
# - A last batch of another size costs a compile: pad it (Optimum's default) or drop it.
# - The first steps compile; exclude them from throughput (`throughput_warmup_steps`).
# - HMP's lists (or autocast's) decide each op's dtype; the casts are visible nodes. Autocast's lists are files
#   (`PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST`, `PT_HPU_AUTOCAST_FP32_OPS_LIST`) that replace the defaults: an op put
#   on the bf16 list without a bf16 kernel falls back to the CPU, so check the supported-ops list first.
# - `use_hpu_graphs_for_training` is `ModuleCacher`; `pipelining_fwd_bwd` is one more `mark_step` that lets the device
#   start the forward while the host traces the backward, at the cost of holding the activations as graph outputs; workers take data preparation off the main thread.
# - `non_blocking_data_copy` takes the copies' transfers off the host (each copy still costs the host its submission); the step gets shorter only where the host is the bottleneck (Gaudi 2 here, not first-generation Gaudi).
# - Fused AdamW and clip-norm replace the many small ops of the clip and update by a few nodes (section 10 counts them; note the different default eps);
#   Optimum switches them on in the Gaudi configuration file.
#
# ## Exercises
#
# Each exercise has a check cell: change the code it names, run the check with your answer, and it says *right*, *wrong* or *not yet*, and why, from what the emulator recorded (counts, dtypes, the Gaudi clock; never a wall time). Run as it is, every check says "not yet".

# %% [markdown]
# **1.** In section 2, use `batch_size=200` (change the 256 below). How many forward+backward recipes does the epoch of the loader without padding need now? Which of the three loaders still differ?

# %%
def my_run_1(batch_size=256):                # exercise 1: 200
    model, optimizer = fresh()
    train_epoch(model, optimizer, torch.utils.data.DataLoader(train_set, batch_size=batch_size))

answer_1 = None                              # forward+backward recipes of the epoch
lab.check("06.1", my_run_1, answer_1)

# %% [markdown]
# **2.** In section 4, move `optimizer.step()` out of `hmp.disable_casts()`. What dtype do the parameters have after the step, and what did HMP do to the update? (`my_run_2` is section 4's step with `AdamW`: SGD's update is one in-place `add_`, which no cast can change; AdamW computes its denominator out of place, with `div` and `add`, both on HMP's bf16 list.)

# %%
def my_run_2():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        hmp.convert(opt_level="O1", bf16_file_path=os.path.join(lists, "bf16.txt"),
                    fp32_file_path=os.path.join(lists, "fp32.txt"))
    try:
        model, optimizer = fresh(torch.optim.AdamW, lr=1e-3, foreach=False)
        data, target = two_batches[0]
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data.to(device)), target.to(device)).backward()
        htcore.mark_step()
        with hmp.disable_casts():            # exercise 2: call optimizer.step() outside this block
            optimizer.step()
        htcore.mark_step()
        return model
    finally:
        hmp._restore()                       # lab-only: undo convert()

answer_2 = None                              # the parameters' dtype after the step, as a string
lab.check("06.2", my_run_2, answer_2)

# %% [markdown]
# **3.** In section 7, time a step of the small MLP with and without pipelining: `lab.step_times` of each (return them as `{"plain": ..., "pipelined": ...}`). Does pipelining make the step faster here? (Notebook 02's host-bound model would answer the same; section 7's wide model on first-generation Gaudi is where it helps.)

# %%
def my_run_3():
    model, optimizer = fresh()
    data, target = two_batches[0][0].to(device), two_batches[0][1].to(device)

    def one_step(pipelining):
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data), target)
        if pipelining:
            htcore.mark_step()
        loss.backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
    one_step(False)                          # exercise 3: time both variants with lab.step_times, and return them
    return None

answer_3 = None                              # True or False
lab.check("06.3", my_run_3, answer_3)

# %% [markdown]
# **4.** In section 10, compare `torch.optim.AdamW(foreach=True)` with `FusedAdamW`: how many graph nodes does the update have with each? (Return `update_graph`'s counts.)

# %%
def my_run_4():
    return update_graph(lambda p: FusedAdamW(p, lr=1e-3),       # exercise 4: torch.optim.AdamW(p, lr=1e-3, foreach=True)
                        lambda p: None)                          # (no clipping)

answer_4 = None                              # graph nodes of the update with AdamW(foreach=True)
lab.check("06.4", my_run_4, answer_4)

# %% [markdown]
# ## Further reading
# The pages this notebook teaches, and where to go next:
# - [Optimum Habana: Accelerating Training](https://huggingface.co/docs/optimum/habana/usage_guides/accelerate_training), the seed of every section here.
# - [HPU Graphs for Training](https://docs.habana.ai/en/latest/PyTorch/Model_Optimization_PyTorch/HPU_Graphs_Training.html) (`ModuleCacher`, section 5).
# - [Mixed Precision Training with PyTorch Autocast](https://docs.habana.ai/en/latest/PyTorch/PyTorch_Mixed_Precision/index.html) (section 4's op lists).
# - [PyTorch Gaudi Theory of Operations](https://docs.habana.ai/en/latest/PyTorch/Reference/PyTorch_Gaudi_Theory_of_Operations.html): lazy mode, asynchronous launch, pinned memory (sections 1, 7, 9).
# - [Intel Gaudi PyTorch Python API](https://docs.habana.ai/en/latest/PyTorch/Python_Packages.html): `hpex.optimizers.FusedAdamW`, `hpex.normalization.FusedClipNorm` (section 10).
