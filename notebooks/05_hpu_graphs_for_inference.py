# %% [markdown]
# # HPU Graphs for inference: capture the forward pass, replay it per request
#
# Seed document: *Run Inference Using HPU Graphs*.
#
# > *HPU Graphs can capture a series of operations using HPU stream and replay them. They mandate the
# > device-side input while output addresses remain constant between invocations.*
#
# **What you'll do**
# - run the seed's `GraphTest` (capture on a stream, then replay) and a real model's forward the same way;
# - wrap a model with `wrap_in_hpu_graph` and serve the MNIST test set with it;
# - trigger each documented limitation and read the error it raises.
#
# **What you'll learn**
# - what "output addresses remain constant" means for your code (copy results out before the next replay);
# - why `mark_step` is not needed around a replay;
# - which model code cannot be captured, and what to do instead.
#
# **What you'll need**
# - notebook 03; under a minute of CPU time.

# %% [markdown]
# The seed's code imports `habana_frameworks.torch as ht`; with the compatibility layer it runs unchanged:

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.observe.metrics import metric_global
from collections import Counter
import hpu_lab.compat
hpu_lab.compat.enable_habana_imports()
import habana_frameworks.torch as ht          # ht.hpu is torch.hpu
from hpu_lab.lab.data import MNISTLike
from hpu_lab import lab               # checkable exercises (docs/lab.md)
import widgets                        # the panel and other views (reads the events)
# %load_ext widgets
torch.manual_seed(0)                  # every run of the notebook draws the same numbers
print("torch", torch.__version__, "| hpu_lab", hpu_lab.__version__)
CARD = "gaudi2"                       # this notebook's card, for its timelines, tables and asserts (the Gaudi clock)
widgets.set_clock("gaudi", CARD)

# %% [markdown]
# ## 1. Capture and replay on a stream
#
# The seed's `GraphTest`, completed: the first call captures on the stream, every later call replays.

# %%
device = torch.device('hpu')

class GraphTest(object):
    def __init__(self, size: int) -> None:
        self.g = ht.hpu.HPUGraph()
        self.s = ht.hpu.Stream()
        self.size = size

    # The following function shows the steps to implement the capture and replay on HPU Graphs
    def wrap_func(self, first: bool) -> None:
        if first:
            with ht.hpu.stream(self.s):
                self.g.capture_begin()
                # the following code snippet is for demonstration
                a = torch.full((self.size,), 1, device=device)
                b = a
                b = b + 1
                self.g.capture_end()
            self.b = b                      # the graph's output: a fixed device tensor
        else:
            self.g.replay()

gt = GraphTest(size=1000)

# %%
# %%hpu_section "GraphTest: capture, then 3 replays" --as gtest
gt.wrap_func(True)
out = gt.b
for _ in range(3):
    gt.wrap_func(False)
print(gt.b[:5].cpu())

# %% [markdown]
# One capture on the stream, three replays. The output lives at a fixed place: clear it, replay, and the replay writes its result into that same tensor again:

# %%
# claim I1
(cap,) = gtest.of(ev.CaptureEnd)
print("captures:", len(gtest.of(ev.CaptureEnd)), " replays:", len(gtest.of(ev.Replay)))
assert len(gtest.of(ev.Replay)) == 3 and bool((out.cpu() == 2).all())
out.zero_(); htcore.mark_step()
cleared = out.cpu()
gt.wrap_func(False)                                     # one more replay, no new output tensor
refilled = out.cpu()
print("after zero_():", cleared[:3].tolist(), " after a replay:", refilled[:3].tolist())
assert bool((cleared == 0).all()) and bool((refilled == 2).all())


# %% [markdown]
# The same with a real model: seed 000's `Net`, in eval mode. The input must live on the device (a static tensor the graph reads); new requests are copied into it:

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

torch.manual_seed(0)
model = Net().to(device).eval()
test_set = MNISTLike(train=False)
requests = [test_set[i][0].unsqueeze(0) for i in range(6)]      # six single-image requests

static_in = torch.zeros(1, 1, 28, 28, device=device)
g, s = ht.hpu.HPUGraph(), ht.hpu.Stream()
with torch.no_grad(), ht.hpu.stream(s):
    g.capture_begin()
    static_out = model(static_in)
    g.capture_end()

# %% [markdown]
# Serve the six requests: copy in, replay, copy the result out — no `mark_step` anywhere:

# %%
# %%hpu_section "Six requests, replayed, no mark_step" --as serve
answers = []
for image in requests:
    static_in.copy_(image)
    g.replay()
    answers.append(static_out.cpu())       # copy out before the next replay overwrites it

# %% [markdown]
# > *Adding mark_step is not required with HPU Graphs as it is handled implicitly.*
#
# No `mark_step`, no op traced, and the answers equal the same model on the CPU:

# %%
# claim I8
cpu_model = Net().eval()
cpu_model.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
with torch.no_grad():
    expected = [cpu_model(image) for image in requests]
print("mark_steps:", len(serve.of(ev.MarkStep)), " ops traced:", len(serve.of(ev.OpAccumulated)),
      " replays:", len(serve.of(ev.Replay)))
assert serve.of(ev.MarkStep) == [] and serve.of(ev.OpAccumulated) == [] and len(serve.of(ev.Replay)) == len(requests)
assert all(torch.allclose(a, e, atol=1e-5) for a, e in zip(answers, expected))

# %% [markdown]
# ### Streams: events and `wait_stream`
#
# > *HPU Graphs can capture a series of operations using HPU stream and replay them … For further details, see Stream APIs.*
#
# The stream API is CUDA's: work queued on one stream runs in order; work on two streams may overlap; `Event.record()` marks a point of a stream, and `wait_event` / `wait_stream` make another stream wait for it (the host does not wait). Two independent matrix products, one on a side stream and one on the current stream, recorded without and with a wait:
#
# **Fidelity.** Both lanes on the Gaudi clock of Gaudi 2 (modeled: the host per event, each stream as its own device lane, the products at the card's FP32 rate, which is assumed); nothing measured.

# %%
import hpu_lab.perfmodel as pm
side = ht.hpu.Stream()
torch.manual_seed(0)
a, b = torch.randn(2048, 2048).to(device), torch.randn(2048, 2048).to(device)

def two_products(wait):
    with ht.hpu.stream(side):
        a2 = a @ a
        done = side.record_event()             # a marker after the product on `side` (launches it)
    if wait:
        ht.hpu.current_stream().wait_event(done)   # the current stream waits for the marker
    b2 = b @ b
    htcore.mark_step()
    ht.hpu.synchronize()
    return a2, b2

two_products(False); two_products(True)        # warm-up: both recipes compiled
recorded = {}
for wait in (False, True):
    with ev.Collector() as recorded[wait]:
        a2, b2 = two_products(wait)

# %% [markdown]
# On the clock, the side stream's product and the current stream's overlap without the wait; with it, the current stream's starts when the side stream's ends. The results are the same either way (the products are independent):

# %%
def lanes(events):
    r = pm.retime(events, CARD)
    return {lane: spans[0] for lane, spans in r.spans.items() if lane.startswith("hpu") and spans}, r
for wait in (False, True):
    spans, r = lanes(recorded[wait].events)
    print(f"{'with' if wait else 'without'} wait_event: " + ", ".join(
        f"{lane} {sp.start_ns / 1e3:.0f}-{sp.end_ns / 1e3:.0f} us" for lane, sp in sorted(spans.items())),
        f"| wall {r.wall_ns / 1e3:.0f} us")
free, _ = lanes(recorded[False].events)
ordered, _ = lanes(recorded[True].events)
side_lane = f"hpu:{side.stream_id}"
assert free["hpu:0"].start_ns < free[side_lane].end_ns                 # overlap
assert ordered["hpu:0"].start_ns >= ordered[side_lane].end_ns          # ordered by the event
assert [type(e).__name__ for e in recorded[True].of(ev.StreamWait)] == ["StreamWait"]
assert recorded[False].of(ev.StreamWait) == []
assert torch.allclose(a2.cpu(), a.cpu() @ a.cpu(), rtol=1e-4) and torch.allclose(b2.cpu(), b.cpu() @ b.cpu(), rtol=1e-4)

# %% [markdown]
# `wait_stream(side)` is the same as recording an event on `side` and waiting for it:

# %%
with ev.Collector() as ws:
    with ht.hpu.stream(side):
        a2 = a @ a
        htcore.mark_step()
    ht.hpu.current_stream().wait_stream(side)
    b2 = b @ b
    htcore.mark_step()
    ht.hpu.synchronize()
spans, _ = lanes(ws.events)
print("wait_stream:", ", ".join(f"{lane} {sp.start_ns / 1e3:.0f}-{sp.end_ns / 1e3:.0f} us" for lane, sp in sorted(spans.items())))
assert len(ws.of(ev.StreamRecord)) == 1 and len(ws.of(ev.StreamWait)) == 1
assert spans["hpu:0"].start_ns >= spans[side_lane].end_ns

# %% [markdown]
# **In practice.** In the emulator a recipe that reads an output of a launch on another stream is queued behind that launch even without an event (`docs/gaudi_clock.md`, "Cross-stream order"), so a forgotten wait does not give a wrong answer here. Events order what shares no tensor, and let the host wait for one stream only (`done.synchronize()`), not for the whole device.

# %% [markdown]
# ## 2. wrap_in_hpu_graph
#
# > *Or, use htorch.hpu.wrap_in_hpu_graph to wrap module forward function with HPU Graphs. This wrapper captures, caches and replays the graph.*
#
# Serve the whole test set (197 images) in batches of 64:

# %%
torch.manual_seed(0)
model = Net().to(device).eval()
model = ht.hpu.wrap_in_hpu_graph(model)
test_loader = torch.utils.data.DataLoader(test_set, batch_size=64)
print([len(t) for _, t in test_loader], "images per batch")

# %%
# %%hpu_section "wrap_in_hpu_graph: the test set in batches of 64" --as wrapped
outputs = []
with torch.no_grad():
    for data, target in test_loader:
        out = model(data.to(device))
        outputs.append(out.cpu())

# %% [markdown]
# The first batch of 64 captured a graph; the next ones replayed it. The last batch (5 images) has another shape: a second capture, not a wrong answer. In the panel the two captures are almost the whole window, each a compile of a new shape; the two replays are the thin marks between them (on the clock, a replay's host work is tens of microseconds, a compile 20 ms plus 1 ms a node: assumed figures, `docs/gaudi_clock.md`):

# %%
# claim I2
print("captures:", len(wrapped.of(ev.CaptureEnd)), " replays:", len(wrapped.of(ev.Replay)))
assert len(wrapped.of(ev.CaptureEnd)) == 2          # shapes (64, ...) and (5, ...)
assert len(wrapped.of(ev.Replay)) == 2               # batches 2 and 3 of 64 replayed

# %% [markdown]
# > *HPU Graphs can be only used to capture and replay static graphs. Dynamic shapes are not supported.*
#
# Each shape got its own graph, and every answer equals the CPU's:

# %%
# claim I4
cpu_model = Net().eval()
cpu_model.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
with torch.no_grad():
    expected = [cpu_model(data) for data, _ in test_loader]
assert [o.shape[0] for o in outputs] == [64, 64, 64, 5]
assert all(torch.allclose(o, e, atol=1e-5) for o, e in zip(outputs, expected))
print("all", sum(o.shape[0] for o in outputs), "answers equal the CPU model's")

# %% [markdown]
# The returned output is the graph's static output tensor, so it is overwritten by the next call — that is what *output addresses remain constant* means for your code:

# %%
# claim I1
with torch.no_grad():
    first = model(torch.zeros(64, 1, 28, 28, device=device))
    first_values = first.cpu()
    second = model(torch.ones(64, 1, 28, 28, device=device))
changed = not torch.equal(first.cpu(), first_values)
print("same tensor object:", first is second, "| first's values changed:", changed)
assert first is second and changed                    # one output tensor, overwritten by the second call
with torch.no_grad():
    assert torch.allclose(first.cpu(), cpu_model(torch.ones(64, 1, 28, 28)), atol=1e-5)   # the second call's answer

# %% [markdown]
# ### How much a replay saves, in time
#
# > *However, the potential performance gain could be dramatic!* (seed 002, of HPU Graphs in optimum-habana)
#
# optimum-habana's inference scripts turn HPU Graphs on with `--use_hpu_graphs`, which runs exactly this wrapper (`examples/text-generation/utils.py`: `if args.use_hpu_graphs: model = wrap_in_hpu_graph(model)`). optimum-habana is not installed here (an extra: it pulls transformers, about 1 GB), so this is the same switch on this notebook's model: one batch of 64 served, its answer copied back to the host, with and without the wrapper, the batch already on the device.
#
# *Fidelity: host and device lanes are the Gaudi clock's, modeled from the events (ops traced, graphs built and looked up, launches, replays, copies; `docs/gaudi_clock.md`), on Gaudi 2; the other cards are the same recordings re-timed (what-ifs). Nothing is measured on this CPU. `lab.step_times` warms each loop up (3 steps: captures and compiles) before timing 8 steps.*

# %%
torch.manual_seed(0)
batch = torch.randn(64, 1, 28, 28).to(device)
plain_model = Net().to(device).eval()
graphed_model = ht.hpu.wrap_in_hpu_graph(Net().to(device).eval())
graphed_model.load_state_dict(plain_model.state_dict())

def serve(model):
    def step():
        with torch.no_grad():
            return model(batch).cpu()       # the answer, back on the host
    return step

served = {"lazy": lab.step_times(serve(plain_model), steps=8, warmup=3, card=CARD, name="lazy"),
          "wrap_in_hpu_graph": lab.step_times(serve(graphed_model), steps=8, warmup=3, card=CARD, name="wrap_in_hpu_graph")}
serving = lab.compare(served)
print(serving)
what_if = {card: served["lazy"].on(card).wall_ms / served["wrap_in_hpu_graph"].on(card).wall_ms for card in ("gaudi", "gaudi2", "gaudi3")}
print("speed-up of the wrapper on each card (what-if re-timings of the same recordings):",
      {card: f"{x:.1f}x" for card, x in what_if.items()})
print("host waiting for the device a step: lazy", f"{served['lazy'].sync_wait_ms:.3f} ms,",
      "wrap_in_hpu_graph", f"{served['wrap_in_hpu_graph'].sync_wait_ms:.3f} ms")

# %% [markdown]
# The wrapper serves a batch about 5.7 times faster on Gaudi 2, and by a similar factor on every card. The device's work is the same (0.026 ms: the same recipe); the whole gain is the host's: lazy mode traces the forward's ops, builds the graph and looks its recipe up every batch (0.365 ms), a replay only launches the recorded recipe (0.066 ms). Both loops are host-bound: the step is the host's time, plus, in lazy mode, 0.016 ms of waiting. Lazy mode launches the graph only when `.cpu()` asks for the value, so the host then waits for the device; a replay is launched when the model is called, and the device is done before the host reaches the copy. That is where "dramatic" comes from, and its condition: a model whose device time is small next to the host's. A device-bound model gains little (notebook 03, section 6).

# %%
assert torch.equal(serve(plain_model)(), serve(graphed_model)())           # the same answer, bit for bit
assert served["lazy"].device_ms == served["wrap_in_hpu_graph"].device_ms     # the same device work
assert served["lazy"].verdict == "host-bound"
assert serving.speedup("wrap_in_hpu_graph") > 3 and min(what_if.values()) > 3


# %% [markdown]
# ## 3. Limitations, each with its error
#
# > *Models that contain CPU Ops are not supported. During HPU Graphs capturing, in case the Op is not supported, the following message will appear: “… is not supported during HPU Graph capturing”.*
#
# Four small modules, each breaking one rule:

# %%
class ReadsAValue(nn.Module):          # a CPU op: the value goes to the host
    def forward(self, x):
        return x * x.sum().item()

class FallsBack(nn.Module):            # an op without an HPU kernel for bf16: CPU fallback
    def forward(self, x):
        return torch.digamma(x.to(torch.bfloat16))

class DataDependentFlow(nn.Module):    # a Python branch on a device value
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x

class InPlaceViewUpdate(nn.Module):    # writes through a view
    def forward(self, x):
        y = x * 2
        y[:, 0] += 1
        return y

def capture_error(module):
    wrapped = ht.hpu.wrap_in_hpu_graph(module.to(device))
    try:
        with torch.no_grad():
            wrapped(torch.rand(4, 4, device=device) + 1)
    except RuntimeError as e:
        return f"{type(e).__name__}: {e}"
    return None


# %%
# claim I3
for cls in (ReadsAValue, FallsBack):
    msg = capture_error(cls())
    print(f"{cls.__name__:18s} {msg}")
    assert "not supported during hpu graph capturing" in msg.lower()
assert "is not supported during HPU Graph capturing" in capture_error(ReadsAValue())

# %% [markdown]
# > *Data Dependent dynamic flow is not supported with HPU Graphs.*

# %%
# claim I5
msg = capture_error(DataDependentFlow())
print(msg)
assert "data-dependent control flow is not supported during HPU Graph capturing" in msg

# %% [markdown]
# > *Capturing HPU Graphs on models containing in-place view updates is not supported.*

# %%
# claim I6
msg = capture_error(InPlaceViewUpdate())
print(msg)
assert "in-place update of a view" in msg and "not supported during HPU Graph capturing" in msg

# %% [markdown]
# The same modules run fine without graphs (lazy mode), and the runtime is still usable after the refused captures:

# %%
x = torch.rand(4, 4) + 1
for cls in (ReadsAValue, FallsBack, DataDependentFlow, InPlaceViewUpdate):
    with torch.no_grad():
        got = cls().to(device)(x.to(device)).float().cpu()
        want = cls()(x).float()
    assert torch.allclose(got, want, rtol=1e-2), cls.__name__
print("all four equal the CPU without HPU Graphs")

# %% [markdown]
# > *Multi-card support for inference (DeepSpeed) using HPU Graphs is applicable only with `PT_HPU_ENABLE_LAZY_COLLECTIVES=true`.*

# %% [markdown]
# Two emulated cards are needed for that one: notebook 08, section 4, runs it.

# %% [markdown]
# ## Summary
# - For inference, capture the forward pass once (on a stream, or with `wrap_in_hpu_graph`) and replay it per request:
#   no tracing, no `mark_step`, answers equal to the CPU's.
# - Inputs must be device tensors; outputs are fixed tensors overwritten by the next replay — copy out what you keep.
# - `wrap_in_hpu_graph` keeps one graph per input shape; a new shape captures again rather than computing a wrong answer.
# - Capture refuses what a static graph cannot hold, with the bridge's message: CPU ops and fallbacks, data-dependent
#   Python control flow, in-place updates through views.
#
# ## Exercises
# 1. In section 1, append `static_out` itself (not `.cpu()`) to `answers`. What do the six answers look like, and why?
# 2. Serve the test set with `batch_size=197`. How many captures? With `batch_size=1`?
# 3. Rewrite `InPlaceViewUpdate` without the in-place view update (hint: `torch.cat` or a mask) and capture it.
# 4. Give `wrap_in_hpu_graph` `max_graphs=1` and serve the test set in batches of 64 again. What happens to the last batch?

# %% [markdown]
# ### Check your answers
#
# Each exercise has a check cell. Its function starts as the section's code: change it as the exercise asks, set `answer`, and run the cell. The check records your run and reads what it did from the event stream (replays, captures, ops traced), never the wall time: it says **right**, **wrong** (and why) or **not yet**. Reference answers: `hpu_lab.lab.answers` (`docs/lab.md`).


# %%
# Exercise 1: append static_out itself, not static_out.cpu(); answer: how many different answers
def exercise_1():
    torch.manual_seed(0)
    model = Net().to(device).eval()
    static_in = torch.randn(4, 1, 28, 28, device=device)
    g = ht.hpu.HPUGraph()
    with torch.no_grad():
        g.capture_begin()
        static_out = model(static_in)
        g.capture_end()
    answers = []
    for _ in range(6):
        static_in.copy_(torch.randn(4, 1, 28, 28))
        g.replay()
        answers.append(static_out.cpu())
    return answers

answer_1 = None
print(lab.check("05.1", exercise_1, answer_1))

# %%
# Exercise 2: serve the 197 images with batch_size=197 (then try 1); answer: captures
def exercise_2():
    torch.manual_seed(0)
    model = ht.hpu.wrap_in_hpu_graph(Net().to(device).eval())
    with torch.no_grad():
        return [model(data.to(device)).cpu() for data, _ in torch.utils.data.DataLoader(test_set, batch_size=64)]

answer_2 = None
print(lab.check("05.2", exercise_2, answer_2))

# %% [markdown]
# Exercise 3 is checked here directly: `capture_error` (section 3) returns `None` when the capture succeeds. Right when your rewrite captures and gives `InPlaceViewUpdate`'s answer on the CPU:

# %%
class MyRewrite(nn.Module):            # exercise 3: the same result as InPlaceViewUpdate, no in-place view update
    def forward(self, x):
        y = x * 2
        y[:, 0] += 1
        return y

def check_exercise_3():
    x = torch.rand(4, 4) + 1
    error = capture_error(MyRewrite())
    if error is not None:
        return f"[not yet] exercise 05.3: the capture still fails: {error}"
    graphed = ht.hpu.wrap_in_hpu_graph(MyRewrite().to(device))
    with torch.no_grad():
        got, want = graphed(x.to(device)).cpu(), InPlaceViewUpdate()(x)
    if not torch.allclose(got, want):
        return "[wrong] exercise 05.3: it captures, but its answer differs from InPlaceViewUpdate's"
    return "[right] exercise 05.3: captured and replayed, the same answer as InPlaceViewUpdate on the CPU"

print(check_exercise_3())

# %%
# Exercise 4: wrap_in_hpu_graph(..., max_graphs=1), batches of 64; answer: captures
def exercise_4():
    torch.manual_seed(0)
    model = ht.hpu.wrap_in_hpu_graph(Net().to(device).eval())
    with torch.no_grad():
        return [model(data.to(device)).cpu() for data, _ in torch.utils.data.DataLoader(test_set, batch_size=64)]

answer_4 = None
print(lab.check("05.4", exercise_4, answer_4))

# %% [markdown]
# ## Further reading
# - Intel Gaudi docs, *Run Inference Using HPU Graphs* (this notebook's seed): https://docs.habana.ai/en/latest/PyTorch/Inference_on_PyTorch/Inference_Using_HPU_Graphs.html
# - Intel Gaudi docs, *HPU Graphs for Training* (notebook 03; the same APIs for a training step): https://docs.habana.ai/en/latest/PyTorch/PyTorch_Model_Porting/HPU_Graphs_Training.html
# - PyTorch, *CUDA semantics*, streams and events (the stream API `ht.hpu` mirrors): https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams
# - Hugging Face, *Optimum Habana: Accelerating Training*, HPU Graphs (the "dramatic" gain; section 2): https://huggingface.co/docs/optimum/habana/usage_guides/accelerate_training
# - optimum-habana's text-generation example, whose `--use_hpu_graphs` is `wrap_in_hpu_graph` (section 2): https://github.com/huggingface/optimum-habana/tree/main/examples/text-generation
