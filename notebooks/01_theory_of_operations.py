# %% [markdown]
# # Theory of operations: take the Gaudi bridge apart
#
# Seed document: *PyTorch Gaudi Theory of Operations*. The Gaudi PyTorch bridge sits between PyTorch and
# the device: it receives every op, decides when and how to run it, compiles graphs into *recipes*,
# caches them and launches them. This notebook runs one small computation through each of its execution
# modes and then opens each part of the bridge.
#
# **What you'll do**
# - run the same ops in eager mode, eager with `torch.compile`, and lazy mode, and count what each launches;
# - look inside a compiled recipe: fused clusters, engines (MME/TPC), persistent tensors, memory plan;
# - watch the recipe cache, the asynchronous launch, the memory manager and autocast at work.
#
# **What you'll learn**
# - why lazy mode is the default, and what it costs the host every iteration;
# - what "compiled once, reused every iteration unless the ops change" looks like in numbers.
#
# **What you'll need**
# - notebook 00 (the panel); about a minute of CPU time.

# %% [markdown]
# ## 1. Three modes of execution
#
# > *Eager mode — op-by-op execution … Eager mode extended with torch.compile … Lazy mode — deferred execution of graphs … Lazy mode is the default mode.*
#
# Set up, and check the default:

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
print("lazy mode:", hpu_lab.config.lazy_mode())
assert hpu_lab.config.lazy_mode()          # PT_HPU_LAZY_MODE=1 is the default


# %% [markdown]
# One small computation used in every mode: a two-layer forward pass, 5 ops.

# %%
def forward(x, w1, w2):
    h = torch.relu(x @ w1)
    return torch.softmax(h @ w2, dim=1).sum()

x, w1, w2 = (torch.randn(64, 32, device="hpu"), torch.randn(32, 16, device="hpu"),
             torch.randn(16, 8, device="hpu"))
htcore.mark_step()                        # launch the three random inputs first

# %% [markdown]
# ## 2. Eager mode
#
# > *During Eager mode execution, the framework executes one op at a time from Python.*

# %% [markdown]
# Eager mode is chosen with `PT_HPU_LAZY_MODE=0`, and the bridge reads it once: *"This flag needs to be set before invoking a Python script importing HPU … since Eager mode uses a separate backend library and replaces Lazy backend."* So each experiment in another mode below is a small script run in a **fresh Python process**, with the variable set before its imports; the script prints its counts as JSON, and this notebook (in lazy mode throughout) parses and checks them. The scripts are files in `notebooks/scripts/`, `theory_*.py`: open them beside this notebook, change them, re-run the cell. `theory_prelude.py` holds what they share: section 1's forward pass and its inputs.

# %%
from hpu_lab.lab.fresh import run_fresh   # hpu_lab/lab/fresh.py: run a script in a new process, env set first

from pathlib import Path
SCRIPTS = Path("scripts")            # notebooks/scripts/theory_*.py: open them beside this notebook, edit, re-run

# %% [markdown]
# Run the forward pass in an eager-mode process and count:

# %%
eager = run_fresh(SCRIPTS / "theory_eager_forward.py", PT_HPU_LAZY_MODE="0")
print(eager)

# %% [markdown]
# Each op was its own graph and its own launch:

# %%
# claim T1
print(f"{eager['ops']} ops, {eager['launches']} launches")
assert eager["lazy_mode"] is False
assert eager["launches"] == eager["ops"] == 5

# %% [markdown]
# > *For any op that is not supported by the Gaudi device, the Intel Gaudi PyTorch bridge falls back to CPU to execute the op and continue execution on the device for further supported ops thereafter.*

# %% [markdown]
# `digamma` has no bfloat16 kernel on HPU (seed 003's own example). Use it between two device ops:

# %%
# %%hpu_section "CPU fallback in the middle of device ops" --as fb
a = torch.linspace(1, 4, 8, device="hpu").to(torch.bfloat16)
b = torch.digamma(a) * 2          # digamma falls back to the CPU; * 2 runs on the device again
htcore.mark_step()
b_host = b.float().cpu()

# %% [markdown]
# One fallback event, the right numbers, and the result back on `hpu` for the next ops:

# %%
# claim T2
(f,) = fb.of(ev.CPUFallback)
print(f.op, f.dtypes, "->", b.device)
expected = torch.digamma(torch.linspace(1, 4, 8).to(torch.bfloat16)) * 2
assert f.op == "aten::digamma" and b.device.type == "hpu"
assert torch.equal(b_host, expected.float())
launched_after = [e for e in fb.of(ev.Launch) if e.t_start > f.t_end]
assert launched_after                  # the '* 2' ran on the device, after the fallback

# %% [markdown]
# Reading the panel: the lilac *CPU fallback* band starts when `digamma` is called and holds everything the fallback needed. The CPU needs `a`'s values, so the bridge first compiles and runs the 2-op graph that makes `a` (the first yellow compile, inside the band), then waits for it (a host sync) and copies it back. After it, `* 2` and `.float()` each compile a one-op graph of their own: three first compiles of about 21 ms each on the Gaudi clock, for 0.07 ms of device work. The cache lookups before each compile take microseconds and are too thin to see.

# %%
# claim T2
(fallback_sync,) = [e for e in fb.of(ev.HostSync) if "fallback" in e.reason]
inside = [e for e in fb.of(ev.Compile) if f.t_start <= e.t_start <= f.t_end]
print(f"inside the fallback: {len(inside)} compile of {inside[0].node_count} ops, host sync {fallback_sync.reason!r}; "
      f"compiles in all: {[e.node_count for e in fb.of(ev.Compile)]}")
assert len(inside) == 1 and inside[0].node_count == 2 and fallback_sync.reason == "cpu fallback aten::digamma"

# %% [markdown]
# > *Eager mode as a subset of Lazy mode is deprecated.* … *Since Eager mode support, as a subset of Lazy mode, is deprecated, its functionality can be emulated by using `PT_HPU_MAX_COMPOUND_OP_SIZE` … limiting cluster sizes to 1. This results in a small graph (1 element) compilation after each op. The software reads this environment variable once at the time of initialization.*
#
# Again a fresh process, in lazy mode, with the variable set before the import:

# %%
compound1 = run_fresh(SCRIPTS / "theory_compound_forward.py", PT_HPU_MAX_COMPOUND_OP_SIZE="1")
print(compound1)

# %% [markdown]
# Five ops, five one-node graphs:

# %%
# claim T3
sizes = compound1["sizes"]
print("ops:", compound1["ops"], " graphs:", len(sizes), " nodes per graph:", sizes)
assert len(sizes) == compound1["ops"] == 5 and set(sizes) == {1}


# %% [markdown]
# ## 3. Eager mode with torch.compile
#
# > *Model parts wrapped with torch.compile are compiled once at the beginning and later such compiled part is called. Model parts without such wrapping run in pure Eager mode, each op separately.*

# %% [markdown]
# > *In upcoming Intel Gaudi software releases, Eager mode extended with torch.compile will replace Lazy Mode. Unlike Lazy mode, Eager mode with torch.compile does not require rebuilding a graph in each iteration which reduces host computation overhead.*
#
# The seed's MNIST `train_function` pattern (`scripts/theory_torch_compile.py`): the model is compiled with `backend="hpu_backend"`, the loss (`F.nll_loss`) outside it runs eagerly. torch.compile runs in eager mode, so this is an eager-mode process again:

# %%
tc = run_fresh(SCRIPTS / "theory_torch_compile.py", PT_HPU_LAZY_MODE="0")
print(tc)

# %% [markdown]
# One compile of the wrapped model on the first call; later calls only launch its recipe. The loss ops outside it run as eager one-op launches:

# %%
# claim T4
model_compiles = [n for n in tc["compiles"] if n > 1]
print("compiles of the wrapped model:", len(model_compiles), " launches:", tc["launches"], " eager ops:", tc["eager_ops"])
assert len(model_compiles) == 1
assert tc["launches"] > 5           # 5 calls of the compiled part + the eager ops around it
assert tc["eager_ops"] > 0          # the unwrapped part ran op by op

# %% [markdown]
# ## 4. Lazy mode
#
# > *The execution of the ops in the accumulated graph is triggered in a lazy manner, only when a tensor value is required by the user.*
#
# Run the forward pass and look at the device *before* asking for the value:

# %%
# %%hpu_section "Lazy mode: accumulate" --as lz
y = forward(x, w1, w2)

# %% [markdown]
# Five ops were recorded and nothing was launched: the device has not done any work yet.

# %%
# claim T5
print(f"ops accumulated: {len(lz.of(ev.OpAccumulated))}, graphs built: {len(lz.of(ev.GraphBuilt))}, "
      f"launches: {len(lz.of(ev.Launch))}")
assert len(lz.of(ev.OpAccumulated)) == 5 and lz.of(ev.Launch) == []

# %% [markdown]
# Now the value is required:

# %%
# %%hpu_section "Lazy mode: .item()" --as lz_item
value = y.item()

# %% [markdown]
# `.item()` built one graph of all five ops, launched it and made the host wait for the result:

# %%
# claim T5
(g,) = lz_item.of(ev.GraphBuilt)
(sync,) = lz_item.of(ev.HostSync)
print(f"one graph of {g.node_count} nodes (trigger {g.trigger!r}), {len(lz_item.of(ev.Launch))} launch, "
      f"host sync reason {sync.reason!r}")
assert len(lz_item.of(ev.Launch)) == 1 and g.node_count == 5 and sync.reason == ".item()"

# %% [markdown]
# > *Unlike Eager Mode with torch.compile, graph is analyzed in each iteration leading to a higher CPU usage.*

# %% [markdown]
# Ten iterations of a 20-layer chain, lazy vs compiled. Lazy mode traces every op and hashes the graph every time, even when the recipe comes from the cache; the compiled function is just called. Lazy mode runs here; torch.compile in an eager-mode process (`scripts/theory_compiled_chain.py`; the chain itself is `scripts/theory_chain.py`, imported by both), which also re-times its own recording on the Gaudi clock (`hpu_lab.perfmodel.retime`):

# %%
from scripts.theory_chain import chain, chain_weights   # notebooks/scripts/theory_chain.py
ws = chain_weights()
htcore.mark_step()                       # make the weights first: otherwise their randn ops join the first graph
y = chain(x, ws); htcore.mark_step(); torch.hpu.synchronize()   # compile the loop's graph before the measurement

comp10 = run_fresh(SCRIPTS / "theory_compiled_chain.py", PT_HPU_LAZY_MODE="0", HPU_LAB_DEVICE=CARD)

# %%
# %%hpu_section "Lazy mode: 10 iterations" --as lazy10 --no-live
for i in range(10):
    y = chain(x, ws)
    htcore.mark_step()
torch.hpu.synchronize()

# %% [markdown]
# Every iteration, lazy mode traced the 41 ops again and built a graph; the compiled function traced nothing:

# %%
# claim T6
print(f"lazy mode:     ops traced: {len(lazy10.of(ev.OpAccumulated)):3d}  graphs built: {len(lazy10.of(ev.GraphBuilt)):2d}  "
      f"compiles: {len(lazy10.of(ev.Compile))}  launches: {len(lazy10.of(ev.Launch))}")
print(f"torch.compile: ops traced: {comp10['ops']:3d}  graphs built: {comp10['graphs']:2d}  "
      f"compiles: {comp10['compiles']}  launches: {comp10['launches']}")
assert len(lazy10.of(ev.OpAccumulated)) == 410 and len(lazy10.of(ev.GraphBuilt)) == 10
assert lazy10.of(ev.Compile) == []            # both warm: the lazy recipe comes from the cache every iteration
assert comp10["ops"] == 0 and comp10["graphs"] == 0
assert comp10["launches"] == 10 and comp10["compiles"] == 0

# %% [markdown]
# That work is host time. *Fidelity: the figures below are the Gaudi clock's (Gaudi 2), modeled per event from what the bridge does on a Gaudi server (`docs/gaudi_clock.md`): each op traced, each graph built and hashed, each launch; a compiled function's call instead costs its guards and one launch. Nothing is measured on this CPU, so they are the same on any machine.* Both loops were warm (no compile inside), and `lab.step_times_of` reads each recording as 10 steps:

# %%
# claim T6
import hpu_lab.perfmodel as pm
from hpu_lab import lab
lazy_chain = lab.step_times_of(lazy10.events, every=1, card=CARD, warmup=1, name="lazy, 41-op chain")
print(f"host time per iteration: lazy {lazy_chain.host_ms:.2f} ms, torch.compile {comp10['host_ms']:.2f} ms "
      f"({lazy_chain.host_ms / comp10['host_ms']:.0f}x); device time per iteration: {lazy_chain.device_ms:.3f} ms "
      f"and {comp10['device_ms']:.3f} ms")
assert lazy_chain.compiles == 0 and lazy_chain.host_ms > 5 * comp10["host_ms"]
assert abs(lazy_chain.device_ms - comp10["device_ms"]) < 0.5 * lazy_chain.device_ms    # the same work on the device

# %% [markdown]
# ## 5. The bridge: lowering
#
# > *Various optimization passes are applied to the graph, such as: fusion of ops … identification of persistent, non-persistent and tensors with duplicate or aliased memory.*
#
# Compile a slightly longer chain and open the recipe:

# %%
# %%hpu_section "One recipe, opened up" --as low --picture graph
b = torch.randn(16, device="hpu")
y = torch.relu(x @ w1 + b) * 2 - 1          # an elementwise chain after a matmul
z = torch.sigmoid(y).sum(dim=1)
htcore.mark_step()

# %% [markdown]
# The recipe is a `torch.fx` graph; `recipe.code` is what the device runs:

# %%
compile_event = low.of(ev.Compile)[-1]
recipe = next(r for r in hpu_lab.compiler.recipes() if r.id == compile_event.recipe_id)
print(recipe.code.strip())

# %% [markdown]
# Each node carries what the passes decided: its engine, its fusion cluster, and its tensor class:

# %%
# claim T7
for n in compile_event.graph.nodes:
    if n.op != "output":
        print(f"{n.index:2d} {n.op:14s} {str(n.shape):9s} engine={n.engine or '-':4s} "
              f"cluster={n.cluster:2d} {n.tensor_class}")
nodes = compile_event.graph.nodes
assert compile_event.clusters >= 1                                       # add/relu/mul/sub fused
assert {n.tensor_class for n in nodes if n.op == "input"} == {"persistent"}
assert "non-persistent" in {n.tensor_class for n in nodes}              # intermediates never leave the device

# %% [markdown]
# Outputs that the program still holds (`y`, `z`) are persistent; everything in between is non-persistent and needs only the recipe's working memory (its *memory plan*):

# %%
print("recipe working memory (peak of non-persistent tensors):", compile_event.peak_bytes, "bytes")
assert compile_event.peak_bytes > 0

# %% [markdown]
# The same pass finds the *"tensors with duplicate or aliased memory"*. Use `x` four times, twice through a transposing view:

# %%
with ev.Collector(kinds=(ev.Compile,)) as ca:
    q = torch.relu(x.t() @ x) + x.t() @ x
    htcore.mark_step()
(alias_compile,) = ca.of(ev.Compile)
for n in alias_compile.graph.nodes:
    if n.op != "output":
        print(f"{n.index:2d} {n.op:10s} {str(n.shape):9s} {n.tensor_class}")
inputs = [n for n in alias_compile.graph.nodes if n.op == "input"]
aliases = [n for n in alias_compile.graph.nodes if n.tensor_class == "alias"]
assert len(inputs) == 1                                  # x, used four times, is one device buffer
assert len(aliases) == 2 and {n.op for n in aliases} == {"view"}   # the views read x's memory, no copy

# %% [markdown]
# > *Optimal placement of permutations for channel last memory format of tensors.*
#
# Gaudi's convolutions read and write channels-last (NHWC) activations; a PyTorch tensor is NCHW. Lowered op by op, every convolution would need a permute in and a permute out. The pass keeps values NHWC from one convolution to the next (through the elementwise ops between them) and permutes only where they enter or leave. Its switch, `PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING` (default `true`), is read at start-up, so a three-convolution net (`scripts/theory_layouts.py`) runs in two fresh processes, with it on and off; each counts the permutes in its recipe and re-times it on the Gaudi clock:

# %%
layout = {v: run_fresh(SCRIPTS / "theory_layouts.py", PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING=v, HPU_LAB_DEVICE=CARD) for v in ("true", "false")}
for v, r in layout.items():
    print(f"PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING={v:5s} {r}")

# %% [markdown]
# Placed, the recipe permutes twice (into NHWC before the first convolution, back after the last); unplaced, twice per convolution. The values are the CPU's bit for bit either way, and the modeled device time is lower with the pass:

# %%
# claim T7
on, off = layout["true"], layout["false"]
assert on["convolutions"] == off["convolutions"] == 3
assert on["permutes"] == 2 and off["permutes"] == 2 * off["convolutions"]
assert on["equal_to_cpu"] and off["equal_to_cpu"]
assert on["device_us"] < off["device_us"]


# %% [markdown]
# ## 6. The bridge: PyTorch kernels
#
# > *The PyTorch op could be implemented with a single or multiple TPC/MME ops.*
#
# In one training step of seed 000's MLP, matrix products go to the MME, everything else to the TPC:

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


# %%
torch.manual_seed(0)
model = Net().to("hpu")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data, target = torch.randn(200, 1, 28, 28).to("hpu"), torch.randint(0, 10, (200,)).to("hpu")

def train_step(penalty=False):
    optimizer.zero_grad(set_to_none=True)
    loss = F.nll_loss(model(data), target)
    if penalty:                          # an L2 penalty: used once, in section 7
        loss = loss + 1e-4 * model.fc1.weight.pow(2).sum()
    loss.backward()
    htcore.mark_step()
    optimizer.step()
    htcore.mark_step()
    return loss


# %%
# %%hpu_section "Ten training steps" --as ten
for step in range(10):
    loss = train_step()

# %% [markdown]
# The first recipe of the run is the forward+backward graph. Its engines:

# %%
fwd_bwd = ten.of(ev.Compile)[0].graph
engines = Counter(n.engine for n in fwd_bwd.nodes if n.engine)
mme_ops = sorted({n.op for n in fwd_bwd.nodes if n.engine == "MME"})
print(dict(engines), "MME ops:", mme_ops)
assert engines["MME"] >= 3 and engines["TPC"] > engines["MME"]

# %% [markdown]
# ### Writing your own op
#
# > *Habana provides a few custom operators that achieve better performance than their PyTorch counterparts on Gaudi. You can also define your own custom operator for Gaudi.* (seed 002) … *Create a custom op for optimizers (E.g. FusedSGD, FusedAdamW) and other complex ops (e.g FusedClipNorm) to minimize host performance overheads of running many small ops.* (seed 003)
#
# On a Gaudi a custom op has two halves. The device half is a TPC kernel, written in TPC-C and built with Intel's TPC tools. The PyTorch half is a C++ extension that describes the op to the bridge with the *PyTorch CustomOp API* (a `UserCustomOpDescriptor`: the TPC kernel's name, its parameters, and a function giving the outputs' shapes and dtypes), registered as a PyTorch op and loaded with `torch.ops.load_library`. From then on it is one node of the graph, like an `aten::` op.
#
# In the emulator both halves are Python, through PyTorch's own `torch.library`: the op's body stands for the TPC kernel (the emulated device runs it inside the recipe), and `register_fake` is the shape function, which lazy mode needs to trace the op without running it. Here, an SGD update with weight decay, `p - lr * (g + wd * p)`: four small ops as plain PyTorch, one op as a custom op:

# %%
@torch.library.custom_op("lab01::sgd_update", mutates_args=())
def sgd_update(p: torch.Tensor, g: torch.Tensor, lr: float, wd: float) -> torch.Tensor:
    return p - lr * (g + wd * p)          # the kernel: on a Gaudi, the TPC kernel

@sgd_update.register_fake
def _(p, g, lr, wd):                     # the shape function: on a Gaudi, the descriptor's output metadata
    return torch.empty_like(p)

def sgd_update_plain(p, g, lr, wd):
    return p - lr * (g + wd * p)          # mul, add, mul, sub: four ops traced


# %% [markdown]
# Eight 256×256 parameters updated both ways. *Fidelity: host and device times are the Gaudi clock's (Gaudi 2), modeled from the events (each op traced, each graph built, each launch; each recipe's kernels from its graph); nothing is measured on this CPU.*

# %%
torch.manual_seed(0)
params = [torch.randn(256, 256).to("hpu") for _ in range(8)]
grads = [torch.randn(256, 256).to("hpu") for _ in range(8)]
htcore.mark_step()

def update_step(update):
    def step():
        new = [update(p, g, 0.1, 1e-4) for p, g in zip(params, grads)]
        htcore.mark_step()
        return new
    return step

updates = {}
for name, update in (("plain ops", sgd_update_plain), ("custom op", sgd_update)):
    with ev.Collector() as c:
        new = update_step(update)()
    t = lab.step_times(update_step(update), steps=3, warmup=1, card=CARD, name=name)
    updates[name] = dict(values=[v.cpu() for v in new], ops=len(c.of(ev.OpAccumulated)),
                         nodes=sorted({n.op for e in c.of(ev.Launch) if e.graph is not None for n in e.graph.nodes} - {"input", "output"}),
                         clusters=sum(e.clusters for e in c.of(ev.Compile)), host_ms=t.host_ms, device_ms=t.device_ms)
    u = updates[name]
    print(f"{name:9s}: {u['ops']:2d} ops traced, node kinds {u['nodes']}, fusion clusters {u['clusters']}; "
          f"host {u['host_ms']:.3f} ms, device {u['device_ms']:.3f} ms a step")

# %% [markdown]
# The custom op is one node per parameter (8 ops traced instead of 32), the same numbers bit for bit (its kernel runs the same four operations in the same order), and the host's part of the step drops from 2.45 to 0.66 ms: 24 ops fewer to trace, and a graph of 8 nodes instead of 32 to build and hash. The device time does not move: the graph compiler had already fused each plain update's four elementwise ops into one TPC kernel (one fusion cluster per parameter, 8 in all) that reads `p` and `g` and writes the result, which is what the custom kernel does too. That is seed 003's point: a fused op pays where the host is the bottleneck, here by a factor of about 3.7.

# %%
plain, custom = updates["plain ops"], updates["custom op"]
assert all(torch.equal(a, b) for a, b in zip(plain["values"], custom["values"]))
assert plain["ops"] == 4 * 8 and custom["ops"] == 8 and custom["nodes"] == ["lab01::sgd_update"]
assert custom["host_ms"] < plain["host_ms"] / 2                  # the host traces a quarter of the ops
assert abs(custom["device_ms"] - plain["device_ms"]) <= 0.01 * plain["device_ms"]   # the same HBM traffic

# %% [markdown]
# ## 7. The bridge: execution module and recipe cache
#
# > *During training, the graph compilation is only required for the initial iteration, thereafter, the same compiled recipe is re-executed every iteration (with new inputs) unless there is a change in the ops being executed.*
#
# Count the compiles in each of the ten steps above, and the cache's answers:

# %%
# claim T8
first = ten.of(ev.MarkStep)[0].step                    # two mark_steps per training step
per_step = Counter((e.step - first) // 2 for e in ten.of(ev.Compile))
hits = sum(e.hit for e in ten.of(ev.CacheLookup))
print("compiles per training step:", [per_step.get(i, 0) for i in range(10)])
print(f"cache lookups: {len(ten.of(ev.CacheLookup))}, hits: {hits}")
assert per_step.get(0, 0) >= 2                                  # the first step compiles its graphs
assert sum(per_step.get(i, 0) for i in range(2, 10)) == 0     # then flat
assert hits >= 16

# %% [markdown]
# > *This caching is done at an eager op level as well as at a JIT graph level.*
#
# The 5-op forward pass of section 1, three times: in an eager-mode process the cache is asked once per op, here in lazy mode once per graph:

# %%
op_level = run_fresh(SCRIPTS / "theory_op_level_cache.py", PT_HPU_LAZY_MODE="0")
with ev.Collector() as c:
    for i in range(3):
        y = forward(x, w1, w2)
        htcore.mark_step()
graph_level = dict(lookups=len(c.of(ev.CacheLookup)), hits=sum(e.hit for e in c.of(ev.CacheLookup)),
                   compiles=len(c.of(ev.Compile)))
print("eager (per op):    ", op_level)
print("lazy (per graph):  ", graph_level)
assert op_level["lookups"] == 3 * 5 and op_level["hits"] >= 2 * 5      # each op compiled once, then hit
assert graph_level["lookups"] == 3 and graph_level["hits"] >= 2          # one recipe for all five ops

# %% [markdown]
# Now change the ops — add an L2 penalty to the loss for one step:

# %%
# %%hpu_section "A step whose ops changed" --as changed
loss = train_step(penalty=True)

# %% [markdown]
# The forward+backward graph compiles again; the reason is a diff against the graph compiled before at the same `mark_step`:

# %%
fwd_bwd_compiles = [e for e in changed.of(ev.Compile) if e.node_count > 20]
for e in fwd_bwd_compiles:
    print("recompiled because:", e.reason)
assert len(fwd_bwd_compiles) == 1 and "new op" in fwd_bwd_compiles[0].reason

# %% [markdown]
# > *… launch the resulting recipe in an asynchronous method.*
#
# *Fidelity: the timeline below is the Gaudi clock's (Gaudi 2): host lane and device lane both modeled from the recorded events (`docs/gaudi_clock.md`); nothing in it is measured on this CPU.*
#
# `mark_step` queues the recipe and returns; the device runs it while Python goes on. Launch a graph that keeps the device busy, then trace more ops at once. Both graphs are compiled first, so that a compile (a hundred milliseconds of host time) does not fill the picture:

# %%
a = torch.randn(700, 700, device="hpu") / 30
htcore.mark_step()
def heavy(h):
    for _ in range(8):
        h = torch.tanh(h @ a)
    return h

def launch_then_trace():
    h = heavy(a)
    htcore.mark_step()                 # returns as soon as the recipe is queued
    more = torch.ones(4, device="hpu")
    for i in range(100):               # the host traces the next ops while the device is busy
        more = more * 1.01 + 0.1
    htcore.mark_step()
    torch.hpu.synchronize()

launch_then_trace()                    # compile both graphs first

# %%
# %%hpu_section "Asynchronous launch" --as asyn
launch_then_trace()

# %% [markdown]
# The panel: the host traces `heavy()`'s 16 ops, `mark_step` launches them (the grey line from the host lane to the device lane), and the host goes straight on to trace the small ops (201: a multiply and an add a loop iteration, and `torch.ones`) while the device runs `heavy()`; at the end `synchronize()` waits for the small graph. On a Gaudi 2, eight 700x700 matrix products take the device about 0.1 ms, while tracing an op costs the host about 72 µs: the host gets one or two ops traced in the device's shadow, not more. Count it on the Gaudi clock:

# %%
# claim T9
timed = pm.retime(asyn.events, CARD).events
heavy_launch = next(e for e in timed if isinstance(e, ev.Launch) and e.graph is not None
                    and any(n.op == "aten::mm" for n in e.graph.nodes))
heavy_run = next(e for e in timed if isinstance(e, ev.DeviceExecution) and e.launch_id == heavy_launch.launch_id)
mark = next(e for e in timed if isinstance(e, ev.MarkStep))          # the mark_step that launched heavy()
shadowed = [e for e in timed if isinstance(e, ev.OpAccumulated) and heavy_launch.t_end <= e.t_end <= heavy_run.t_end]
print(f"{CARD}: mark_step returns {(heavy_run.t_end - mark.t_end) / 1e3:.0f} us before the device finishes heavy() "
      f"({(heavy_run.t_end - heavy_run.t_start) / 1e3:.0f} us of device work); ops traced meanwhile: {len(shadowed)}")
assert mark.t_end < heavy_run.t_end and len(shadowed) >= 1     # the host did not wait for the device
assert not [e for e in asyn.of(ev.HostSync) if e.t_start < asyn.of(ev.MarkStep)[1].t_start]   # no wait before the end

# %% [markdown]
# ## 8. The bridge: memory manager
#
# > *The Intel Gaudi PyTorch bridge has a memory manager that optimally serves the allocation and free requests from the device memory.*
#
# Allocate 4 MB on the device, then free it:

# %%
# claim T10
torch.hpu.synchronize()
before = torch.hpu.memory_allocated()
big = torch.empty(1024, 1024, device="hpu")        # 4 MiB of float32
during = torch.hpu.memory_allocated()
del big
after = torch.hpu.memory_allocated()
print(f"allocated: +{(during - before) / 2**20:.0f} MiB, after del: +{(after - before) / 2**20:.0f} MiB")
stats = torch.hpu.memory_stats()
print(f"Limit {stats['Limit'] / 2**30:.0f} GiB (a Gaudi 2's HBM); memory_stats() also has:", ", ".join(sorted(stats)))
assert during - before == 4 * 2**20 and after == before
assert torch.hpu.max_memory_allocated() >= during

# %% [markdown]
# > *It additionally provides the capability to create tensors with pinned memory, which reduces the time required for doing a DMA by avoiding a copy on the host side.*

# %% [markdown]
# `pin_memory()` gives a page-locked host tensor. Its copy to the device goes straight from it; a pageable tensor is first copied by the host into a pinned staging buffer (`staging_bytes` of the copy event):

# %%
# claim T10
pageable_batch = torch.randn(200, 784)
pinned_batch = pageable_batch.pin_memory()
with ev.Collector(kinds=(ev.HostToDevice,)) as c:
    on_device = pinned_batch.to("hpu", non_blocking=True)
    from_pageable = pageable_batch.to("hpu")
    torch.hpu.synchronize()
# the queued copy's event is emitted when the device stream runs it, so pick each by its kind, not arrival order
(fast,), (slow,) = [e for e in c.events if e.pinned], [e for e in c.events if not e.pinned]
print(f"pinned: is_pinned() {pinned_batch.is_pinned()}, {fast.nbytes} bytes copied, {fast.staging_bytes} staged on the host")
print(f"pageable: is_pinned() {pageable_batch.is_pinned()}, {slow.nbytes} bytes copied, {slow.staging_bytes} staged on the host")
assert pinned_batch.is_pinned() and not pageable_batch.is_pinned()
assert fast.pinned and fast.staging_bytes == 0 and not slow.pinned and slow.staging_bytes == slow.nbytes == 200 * 784 * 4
assert torch.equal(on_device.cpu(), pageable_batch) and torch.equal(from_pageable.cpu(), pageable_batch)

# %% [markdown]
# Those fields say how the runtime made each copy; what the learner cares about is what it costs the host. *Fidelity: host time on the Gaudi clock (Gaudi 2), modeled: a DMA over the host link, plus, for a pageable source, the host's memcpy into a pinned bounce buffer (`docs/gaudi_clock.md`, "Copies").* Time each copy on its own with `lab.step_times_of`, as one step:

# %%
# claim T10
from hpu_lab import lab
def copy_step(batch, **how):
    with ev.Collector() as c:
        batch.to("hpu", **how)
        torch.hpu.synchronize()
    return lab.step_times_of(c.events, steps=1, card=CARD, name=f"copy {how or 'blocking'}")
pinned_t, pageable_t = copy_step(pinned_batch, non_blocking=True), copy_step(pageable_batch)
print(f"{CARD}, host time of one {200 * 784 * 4 / 2**20:.1f} MiB batch copy: pinned + non_blocking "
      f"{pinned_t.host_ms * 1e3:.0f} us, pageable {pageable_t.host_ms * 1e3:.0f} us "
      f"(wall {pinned_t.wall_ms * 1e3:.0f} us and {pageable_t.wall_ms * 1e3:.0f} us)")
assert pinned_t.host_ms < pageable_t.host_ms / 2 and pinned_t.wall_ms < pageable_t.wall_ms

# %% [markdown]
# The pageable copy keeps the host busy for the staging memcpy and then for the DMA it waits on; the pinned, non-blocking one only queues a DMA and returns. In a training loop that host time is per batch, and it is exactly the host time a host-bound step cannot spare.

# %% [markdown]
# ## 9. Mixed precision
#
# > *Gaudi supports mixed precision training using PyTorch autocast … It executes operations registered to autocast using lower precision floating datatype.*

# %%
# %%hpu_section "Autocast to bfloat16" --as amp
with torch.autocast(device_type="hpu", dtype=torch.bfloat16):
    logits = x @ w1                      # mm: on the lower-precision list
    probs = torch.softmax(logits, dim=1) # softmax: also on Gaudi's bf16 list
    total = logits.float().sum()
htcore.mark_step()

# %% [markdown]
# The dtype of each op's result, and the casts autocast inserted into the graph:

# %%
# claim T11
print("mm ->", logits.dtype, " softmax ->", probs.dtype, " sum of float ->", total.dtype)
graph = amp.of(ev.Compile)[-1].graph if amp.of(ev.Compile) else amp.of(ev.Launch)[-1].graph
casts = [n for n in graph.nodes if n.is_cast]
print("cast nodes in the recipe:", len(casts), [n.dtype for n in casts])
assert logits.dtype == torch.bfloat16 and total.dtype == torch.float32
assert casts and {"bfloat16"} <= {n.dtype for n in casts}

# %% [markdown]
# ## 10. Distributed training and the media loader
#
# > *Intel Gaudi PyTorch implements HCCL communication backend to support scale-up and scale-out.*
#
# The `hccl` backend, DDP and fast_ddp are the subject of notebook 08. The media loader (`habana_dataloader`) "falls back to the native torch data loader if the provided parameters are not supported"; in this lab the native `torch.utils.data.DataLoader` is what you use:

# %%
from hpu_lab.lab.data import MNISTLike
loader = torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200, num_workers=0, drop_last=True)
data, target = next(iter(loader))
print(tuple(data.shape), data.dtype, tuple(target.shape), target.dtype)
assert data.shape == (200, 1, 28, 28)

# %% [markdown]
# ## Summary
# - The mode is an environment variable the bridge reads once, before import: one process per mode.
# - Eager mode launches one graph per op; `PT_HPU_MAX_COMPOUND_OP_SIZE=1` makes lazy mode do the same (eager as a
#   subset of lazy mode is deprecated; torch.compile is to replace lazy mode).
# - `torch.compile` compiles the wrapped part once and then only calls it; the rest runs op by op.
# - Lazy mode accumulates ops and runs them only when a value is needed or at `mark_step`; it re-traces the
#   graph every iteration, which is host time, but the recipe comes from the cache after the first steps.
# - The recipe cache answers per op in eager mode and per graph in lazy mode.
# - A recipe is the result of the bridge's passes: fused clusters, MME/TPC engines, persistent vs
#   non-persistent tensors and a memory plan, permutes placed around channels-last convolutions. It is launched
#   asynchronously.
#
# ## Exercises
#
# Each exercise has a check cell holding the section's code as a function: change it as the exercise asks, give your answer, run the cell. The check says *right*, *wrong* or *not yet*, and why, from what the emulator recorded (never from a time). Run as they are, the checks say "not yet".

# %%
from hpu_lab import lab

# %% [markdown]
# **1.** In section 4, replace `y.item()` with `print(y)`. What is the host sync reason now?

# %%
def my_run_1():
    y = forward(x, w1, w2)
    return y.item()                    # exercise 1: print(y) instead

answer_1 = None                        # the sync reason, a string
lab.check("01.1", my_run_1, answer_1)

# %% [markdown]
# **2.** In section 5, make `y` a temporary (`z = torch.sigmoid(torch.relu(x @ w1 + b) * 2 - 1).sum(dim=1)`). Which tensor class does the sub node get now, and why?

# %%
def my_run_2():
    b = torch.randn(16, device="hpu")
    y = torch.relu(x @ w1 + b) * 2 - 1          # exercise 2: fold y into z's line
    z = torch.sigmoid(y).sum(dim=1)
    htcore.mark_step()

answer_2 = None                        # the sub node's tensor class, a string
lab.check("01.2", my_run_2, answer_2)

# %% [markdown]
# **3.** In section 7, change the learning rate between two steps (`optimizer.param_groups[0]["lr"] = 0.05`). Does the optimizer graph recompile? Read the reason.

# %%
def my_run_3():
    for i in range(3):
        # exercise 3: here, when i == 2, set optimizer.param_groups[0]["lr"] = 0.05
        train_step()

answer_3 = None                        # True or False
lab.check("01.3", my_run_3, answer_3)

# %% [markdown]
# **4.** In section 7 (async), make the matrices 1500x1500. How does the Timeline change, and how many of the small ops does the host trace while the device runs `heavy()`, on the Gaudi clock of this notebook's card?

# %%
def my_run_4(size=700):                # exercise 4: 1500
    a = torch.randn(size, size, device="hpu") / 30
    htcore.mark_step()
    h = a
    for _ in range(8):                 # heavy(), on this a
        h = torch.tanh(h @ a)
    htcore.mark_step()
    more = torch.ones(4, device="hpu")
    for i in range(100):
        more = more * 1.01 + 0.1
    htcore.mark_step()
    torch.hpu.synchronize()

answer_4 = None                        # ops traced while the device runs heavy()
lab.check("01.4", my_run_4, answer_4)

# %% [markdown]
# ## Further reading
# - [PyTorch Gaudi Theory of Operations](https://docs.habana.ai/en/latest/PyTorch/PyTorch_Gaudi_Theory_of_Operations.html) (seed 004): this notebook's page, section by section.
# - [Intel Gaudi PyTorch Python API (habana_frameworks.torch)](https://docs.habana.ai/en/latest/PyTorch/Python_Packages.html): `core`, `hpu` (memory stats, streams), `hpex`.
# - [PyTorch Operators](https://docs.habana.ai/en/latest/Pytorch_Operators/Pytorch_Operators.html): which ops and dtypes have HPU kernels (the rest fall back to the CPU, section 2).
# - [PyTorch CustomOp API](https://docs.habana.ai/en/latest/PyTorch_CustomOp_API/page_index.html): writing your own op for Gaudi, a TPC kernel and its `UserCustomOpDescriptor` (section 6).
# - [Mixed Precision Training with PyTorch Autocast](https://docs.habana.ai/en/latest/PyTorch/PyTorch_Mixed_Precision/index.html): Gaudi's bf16 and fp32 op lists (section 9).
