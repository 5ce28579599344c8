"""Write (and run) the lab's notebooks from the cell sources below.

    .venv/bin/python notebooks/build_notebooks.py                 # write + execute every notebook
    .venv/bin/python notebooks/build_notebooks.py 00 02           # only these (by number prefix)
    .venv/bin/python notebooks/build_notebooks.py --no-exec 01    # write only (no outputs)
    .venv/bin/python notebooks/build_notebooks.py --worktree 01   # run against the working tree, not HEAD

Each notebook is a function returning its cells. ``md`` is a markdown cell, ``code`` a code cell,
``panel`` an experiment shown in the live panel (``%%hpu_section "title" --as name``; the recorded
events are then ``name.events`` / ``name.of(kind)``). Executing runs ``jupyter nbconvert --execute
--inplace`` so that the committed notebooks carry their outputs and read well without running.

Runtime features land one by one. A cell that needs a feature not yet committed to the repository
is written as a clearly marked TODO cell that still runs (``todo``); rebuild when it lands. A
feature counts as landed when its files are tracked in git (``landed``).

House rules (STYLE.md): one-line markdown lead-in before each code cell; asserts on counts, dtypes,
errors and memory, never on wall-clock; ``# NBVAL_IGNORE_OUTPUT`` only on cells that print times;
every CLAIMS.md id demonstrated in a cell carrying ``# claim <id>``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ----------------------------------------------------------------------------- feature gates

def _tracked(path: str) -> bool:
    r = subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


def _in_head(pattern: str, path: str) -> bool:
    r = subprocess.run(["git", "grep", "-q", "-F", pattern, "HEAD", "--", path], cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


def _probe(snippet: str) -> bool:
    """For a capability with no file of its own: does ``snippet`` run against the committed code?"""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", "HEAD", "hpu_lab"], cwd=ROOT, capture_output=True)
        if archive.returncode != 0:
            return False
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        r = subprocess.run([sys.executable, "-c", snippet], cwd=tmp, env={**os.environ, "PYTHONPATH": tmp},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return r.returncode == 0


FEATURES = {
    # name: (what it is, test)
    "widgets": ("the live panel (widgets/)", lambda: _tracked("widgets/__init__.py")),
    "eager": ("eager mode (hpu_lab/eager.py)", lambda: _tracked("hpu_lab/eager.py")),
    "fallback": ("CPU fallback (hpu_lab/fallback.py)", lambda: _tracked("hpu_lab/fallback.py")),
    "compile": ('torch.compile(backend="hpu_backend") (hpu_lab/compile_backend.py)',
                lambda: _tracked("hpu_lab/compile_backend.py")),
    "graphs": ("HPU Graphs (hpu_lab/graphs/)", lambda: _tracked("hpu_lab/graphs/__init__.py")),
    "compat": ("habana_frameworks imports (hpu_lab/compat/)", lambda: _tracked("hpu_lab/compat/__init__.py")),
    "amp": ('torch.autocast("hpu") (hpu_lab/amp.py)', lambda: _tracked("hpu_lab/amp.py")),
    "oom": ("memory Limit and OOM error (hpu_lab/runtime/memory.py)",
            lambda: _in_head("HPUOutOfMemoryError", "hpu_lab/runtime/memory.py")),
    "pinned": ("pinned host memory (tensor.pin_memory() with hpu_lab imported)", lambda: _probe(
        "import torch, hpu_lab; assert torch.ones(2).pin_memory().is_pinned()")),
    "fused": ("FusedAdamW / FusedSGD / FusedClipNorm (hpu_lab/hpex/)",
              lambda: _tracked("hpu_lab/hpex/optimizers/__init__.py")),
    "sdpa": ("FusedSDPA (hpu_lab/hpex/kernels/)", lambda: _tracked("hpu_lab/hpex/kernels/__init__.py")),
    "disk_cache": ("disk recipe cache (hpu_lab/disk_cache.py)", lambda: _tracked("hpu_lab/disk_cache.py")),
    "weight_sharing": ("parameters shared before module.to('hpu') staying shared", lambda: _probe(
        "import torch, hpu_lab\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.a = torch.nn.Parameter(torch.ones(2)); self.b = torch.nn.Parameter(torch.ones(2))\n"
        "m = M(); m.a = m.b; m.to('hpu'); assert m.a is m.b")),
    "distributed": ('the "hccl" backend (hpu_lab/distributed/)', lambda: _tracked("hpu_lab/distributed/__init__.py")),
}
_have: dict = {}


def have(name: str) -> bool:
    if name not in _have:
        _have[name] = bool(FEATURES[name][1]())
    return _have[name]


# ----------------------------------------------------------------------------- cells

def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def md(text: str):
    return nbformat.v4.new_markdown_cell(_src(text))


def code(text: str):
    return nbformat.v4.new_code_cell(_src(text))


def panel(title: str, name: str, body: str, live: bool = True):
    """An experiment recorded as a section: the live panel (widgets) or, before widgets landed, a
    plain event Collector. Either way ``name.events`` and ``name.of(kind)`` hold what happened.
    ``live=False`` draws the panel only at the end: for experiments that measure time, since a live
    redraw holds the interpreter and delays the device thread's bookkeeping."""
    body = _src(body)
    if have("widgets"):
        return code(f'%%hpu_section "{title}" --as {name}{"" if live else " --no-live"}\n{body}')
    return code(f"# {title}  (TODO: shown in the live panel once widgets/ lands)\n"
                f"with ev.Collector() as {name}:\n{textwrap.indent(body, '    ')}")


def todo(feature: str, claims: str, what: str):
    """A runnable placeholder for an experiment whose runtime feature has not landed yet."""
    desc = FEATURES[feature][0]
    return code(f"# TODO({claims}): {what}\n"
                f"# Needs {desc}, which is not in the repository yet; this cell will be rebuilt when it lands.\n"
                f"print({('TODO: needs ' + desc)!r})")


def when(feature: str, cells, claims: str, what: str):
    """``cells`` if ``feature`` has landed, else one TODO cell."""
    if have(feature):
        return list(cells)
    return [todo(feature, claims, what)]


def flatten(cells):
    out = []
    for c in cells:
        if isinstance(c, list):
            out.extend(flatten(c))
        elif c is not None:
            out.append(c)
    return out


IMPORTS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
import hpu_lab                        # registers the "hpu" device with PyTorch
import hpu_lab.core as htcore         # mark_step(), as habana_frameworks.torch.core
from hpu_lab import events as ev      # what the emulated device did, as events
from hpu_lab.metrics import metric_global
from collections import Counter"""


def setup_cell(extra: str = ""):
    lines = IMPORTS
    if extra:
        lines += "\n" + _src(extra)
    if have("widgets"):
        lines += "\nimport widgets                        # the panel and other views (reads the events)\n%load_ext widgets"
    lines += "\ntorch.manual_seed(0)                  # every run of the notebook draws the same numbers\nprint(\"torch\", torch.__version__, \"| hpu_lab\", hpu_lab.__version__)"
    return code(lines)


NET = '''\
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
        return output'''


# ============================================================================= 00 start here

def nb00():
    return [
        md("""
        # Start here: train on a Gaudi that isn't there

        This lab runs code written for Intel Gaudi's PyTorch stack (the `hpu` device) on an ordinary CPU,
        and shows you what the real stack does with it: ops piling up into graphs, graphs compiling into
        *recipes*, recipes being reused, the host and the device working at the same time. Every number and
        picture comes from what the emulator (`hpu_lab`) really did while your cell ran.

        **What you'll do**
        - move the MNIST model of the Gaudi documents to the `hpu` device and train it for one epoch;
        - do it three ways — eager, lazy (the default) and HPU Graph replay — and compare them;
        - read the live panel that records each experiment.

        **What you'll learn**
        - how to open any experiment's *Graph*, *Timeline*, *Recompiles*, *Metrics* and *Advice*;
        - the vocabulary of the other notebooks: op, graph, `mark_step`, recipe, compile, launch, sync.

        **What you'll need**
        - this repository set up with `make lab` (no Gaudi, no GPU, no download: the digits ship with scikit-learn);
        - about a minute of CPU time for the whole notebook.
        """),
        md("## 1. Import hpu_lab and find the `hpu` device\n\n"
           "Importing `hpu_lab` registers the device; `hpu_lab.core` plays `habana_frameworks.torch.core`."),
        setup_cell("import matplotlib.pyplot as plt\nfrom hpu_lab.data import MNISTLike"),
        md("The device answers like the real one would:"),
        code("""
        print(torch.hpu.is_available(), torch.hpu.device_count(), torch.hpu.get_device_name())
        """),
        md("A tensor on `hpu` behaves like any PyTorch tensor; printing it brings its values back to the host."),
        code("""
        x = torch.arange(6.0, device="hpu").reshape(2, 3)
        y = x * 2 + 1
        print(y)
        assert y.device.type == "hpu"
        assert torch.equal(y.cpu(), torch.arange(6.0).reshape(2, 3) * 2 + 1)   # same numbers as plain CPU PyTorch
        """),
        *when("compat", [
            md("The Gaudi documents import `habana_frameworks`; one call makes those imports resolve to hpu_lab, "
               "so their code runs unchanged (`python -m hpu_lab run script.py` does the same for a script)."),
            code("""
            import hpu_lab.compat
            hpu_lab.compat.enable_habana_imports()
            import habana_frameworks.torch.core as htcore_real_name
            assert htcore_real_name is htcore
            """),
        ], "compat tour", "show `import habana_frameworks.torch.core as htcore` resolving to hpu_lab"),
        md("## 2. Get MNIST-shaped data without downloading\n\n"
           "`MNISTLike` gives 28x28 handwritten digits normalised like torchvision's MNIST: 1600 for training."),
        code("""
        train_set = MNISTLike(train=True)
        image, label = train_set[0]
        print(len(train_set), tuple(image.shape), image.dtype, type(label).__name__)
        assert len(train_set) % 200 == 0          # batch 200 divides it: every batch has the same shape
        """),
        md("Eight of them, as a learner should always look at the data first:"),
        code("""
        fig, axes = plt.subplots(1, 8, figsize=(8, 1.3))
        for ax, i in zip(axes, range(8)):
            img, lab = train_set[i]
            ax.imshow(img[0], cmap="gray"); ax.set_title(int(lab)); ax.axis("off")
        plt.show()
        """),
        md("## 3. Build the documents' model and move it to `hpu`\n\n"
           "This is seed 000's `Net`, a two-layer MLP; `.to(\"hpu\")` puts its weights in (emulated) device memory."),
        code(NET + """

device = torch.device("hpu")
train_loader = torch.utils.data.DataLoader(train_set, batch_size=200)
print(len(train_loader), "batches of 200")"""),
        md("The training loop of seed 000, with the two `mark_step` calls lazy mode needs (more on them in notebook 02):"),
        code("""
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
        """),
        md("## 4. Train one epoch in lazy mode, the default\n\n"
           "The cell runs inside `%%hpu_section`: a panel appears above the output and fills in as the cell runs."
           if have("widgets") else
           "## 4. Train one epoch in lazy mode, the default\n\nThe cell records every event the runtime emits."),
        code("""
        torch.manual_seed(0)
        model = Net().to(device)
        optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
        """),
        panel("Lazy mode: one epoch, 8 steps", "lazy", """
        loss = train(model, device, train_loader, optimizer)
        print(f"loss after one epoch: {loss.item():.3f}")
        """),
        md("""
        **How to read the panel** (every experiment in the lab has one):
        - **Graph**: the graph each recipe runs, one node per op. Colours are engines (MME = matrix unit,
          TPC = vector cores); boxes group the ops the compiler fused.
        - **Timeline**: two lanes, the host (Python tracing ops, building graphs, compiling) and the device
          `hpu:0` (running recipes). Dotted lines are `mark_step`s; red bars are the host *waiting* for the device.
        - **Recompiles**: every compile with its *reason*, e.g. `input 0 shape changed (200, 1, 28, 28) -> (96, 1, 28, 28)`.
        - **Metrics**: counts for this section only — ops, graphs, compiles, cache hits, launches, syncs, memory.
        - **Advice**: what the real stack's documents would tell you to change, given these events.
        """),
        md("What the panel counted can be checked in code. Each step builds two graphs (forward+backward, "
           "then the optimizer), so 8 steps make 16 launches; only the first steps compile:"),
        code("""
        first = lazy.of(ev.MarkStep)[0].step             # two mark_steps per training step
        compiles_per_step = Counter((e.step - first) // 2 for e in lazy.of(ev.Compile))
        print("launches:", len(lazy.of(ev.Launch)))
        print("compiles per training step:", [compiles_per_step.get(i, 0) for i in range(8)])
        for e in lazy.of(ev.Compile):
            print(f"  {e.node_count:3d} nodes, because: {e.reason}")
        assert len(lazy.of(ev.Launch)) == 16
        assert max(compiles_per_step) <= 2        # after the first steps, every graph is a cache hit
        """),
        md("## 5. The same epoch, two other ways\n\n"
           "Eager mode runs op by op; HPU Graphs record one step and replay it. Same model, same data."),
        *when("eager", [
            md("**Eager mode** (`PT_HPU_LAZY_MODE=0`): every op is its own tiny graph, launched at once. "
               "`mark_step` then has no effect (it says so, once)."),
            code("""
            torch.manual_seed(0)
            model = Net().to(device)
            optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
            hpu_lab.config.set(PT_HPU_LAZY_MODE="0")
            """),
            panel("Eager mode: one epoch, 8 steps", "eager", """
            loss = train(model, device, train_loader, optimizer)
            print(f"loss after one epoch: {loss.item():.3f}")
            """),
            code("""
            hpu_lab.config.set(PT_HPU_LAZY_MODE="1")      # back to the default
            ops, launches = len(eager.of(ev.OpAccumulated)), len(eager.of(ev.Launch))
            print(f"eager: {launches} launches for {ops} ops; lazy: {len(lazy.of(ev.Launch))} launches")
            assert launches > 10 * len(lazy.of(ev.Launch))
            """),
        ], "tour: eager", "train the same epoch in eager mode"),
        *when("graphs", [
            md("**HPU Graphs**: warm up, capture one whole training step into a graph, then for each batch copy "
               "the data into the captured input tensors and `replay()` (seed 000, *Training Loop with Capture and Replay*)."),
            code("""
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
            """),
            panel("HPU Graph: capture once, replay 8 steps", "replay", """
            loss = train_with_capturereplay(model, device, train_loader, optimizer, 200)
            print(f"loss after one epoch: {loss.item():.3f}")
            """),
            md("During replay nothing is traced: no op events at all after the capture ends."),
            code("""
            end = replay.of(ev.CaptureEnd)[0].t_end
            traced_after = [e for e in replay.of(ev.OpAccumulated) if e.t_start > end]
            print("replays:", len(replay.of(ev.Replay)), " ops traced during the replays:", len(traced_after))
            assert len(replay.of(ev.Replay)) == 8 and traced_after == []
            """),
        ], "tour: graphs", "train the same epoch with capture and replay"),
        *([md("The three side by side: the table counts, the stacked timelines show where the host's time goes."),
           code("""
           # NBVAL_IGNORE_OUTPUT
           sections = [s for s in (globals().get("eager"), lazy, globals().get("replay")) if s is not None]
           widgets.compare(sections)
           """)] if have("widgets") else []),
        md("## 6. The bridge's own counters\n\n"
           "`metric_global` reads process-wide metrics, as `habana_frameworks.torch.hpu.metrics` does on a real Gaudi."),
        code("""
        for name in ("graph_compilation", "recipe_cache", "graph_launch", "host_sync"):
            stats = dict(metric_global(name).stats())
            print(f"{name:18s}", {k: v for k, v in stats.items() if k in ("TotalNumber", "TotalHit", "TotalMiss", "Reasons")})
        assert metric_global("recipe_cache")["TotalHit"] > metric_global("recipe_cache")["TotalMiss"]
        """),
        md("""
        ## 7. Where to go next

        | notebook | Gaudi document (seed) | you will see |
        |---|---|---|
        | `01_theory_of_operations` | PyTorch Gaudi Theory of Operations | eager, torch.compile and lazy mode; the bridge's passes, recipe cache, async launch, memory, autocast |
        | `02_lazy_mode_and_mark_step` | HPU Graphs for Training; General Model Optimizations | what triggers execution, where `mark_step` goes, host-bound steps, mark_step against OOM |
        | `03_hpu_graphs_for_training` | HPU Graphs for Training | the MNIST example four ways, with the host-time table |
        | `04_dynamicity` | HPU Graphs for Training | shapes, last batches, control flow and dynamic ops, each recompile with its reason |
        | `05_hpu_graphs_for_inference` | Run Inference Using HPU Graphs | capture/replay on a stream, `wrap_in_hpu_graph`, each limitation's real error |
        | `06_accelerating_training` | Optimum Habana: Accelerating Training | warm-up, padding vs drop_last, HMP, fused Adam, pipelining, memory stats |
        | `07_general_optimizations` | General Model Optimizations | CPU fallback, batch size, fused ops, disk cache, print frequency, loop constants, weight sharing |
        | `08_distributed` | (all four, their distributed parts) | HCCL under torchrun, DDP gradient buckets, fast_ddp, multi-card inference in HPU Graphs |
        """),
        md("""
        ## Summary
        - `import hpu_lab` gives PyTorch an `hpu` device; Gaudi code runs unchanged on a CPU.
        - In lazy mode (the default) ops become graphs at each `mark_step`; a graph compiles once into a recipe and
          the next steps reuse it from the cache.
        - Every experiment records events; the panel and the metrics are views of them, and the asserts check them.

        ## Exercises
        1. Remove the first `htcore.mark_step()` from `train` and rerun sections 3–4. How many launches per step now, and how many nodes in each graph?
        2. Train with `batch_size=256` (1600 is not a multiple of 256). Which step recompiles, and what reason does the Recompiles tab give?
        3. Add `print(loss.item())` inside the loop. What does the Timeline show at each print?
        """),
    ]


# ============================================================================= 01 theory of operations

def nb01():
    return [
        md("""
        # Theory of operations: take the Gaudi bridge apart

        Seed document: *PyTorch Gaudi Theory of Operations*. The Gaudi PyTorch bridge sits between PyTorch and
        the device: it receives every op, decides when and how to run it, compiles graphs into *recipes*,
        caches them and launches them. This notebook runs one small computation through each of its execution
        modes and then opens each part of the bridge.

        **What you'll do**
        - run the same ops in eager mode, eager with `torch.compile`, and lazy mode, and count what each launches;
        - look inside a compiled recipe: fused clusters, engines (MME/TPC), persistent tensors, memory plan;
        - watch the recipe cache, the asynchronous launch, the memory manager and autocast at work.

        **What you'll learn**
        - why lazy mode is the default, and what it costs the host every iteration;
        - what "compiled once, reused every iteration unless the ops change" looks like in numbers.

        **What you'll need**
        - notebook 00 (the panel); about a minute of CPU time.
        """),
        md("## 1. Three modes of execution\n\n"
           "> *Eager mode — op-by-op execution … Eager mode extended with torch.compile … Lazy mode — deferred "
           "execution of graphs … Lazy mode is the default mode.*\n\nSet up, and check the default:"),
        setup_cell(),
        code("""
        print("lazy mode:", hpu_lab.config.lazy_mode())
        assert hpu_lab.config.lazy_mode()          # PT_HPU_LAZY_MODE=1 is the default
        """),
        md("One small computation used in every mode: a two-layer forward pass, 5 ops."),
        code("""
        def forward(x, w1, w2):
            h = torch.relu(x @ w1)
            return torch.softmax(h @ w2, dim=1).sum()

        x, w1, w2 = (torch.randn(64, 32, device="hpu"), torch.randn(32, 16, device="hpu"),
                     torch.randn(16, 8, device="hpu"))
        htcore.mark_step()                        # launch the three random inputs first
        """),
        md("## 2. Eager mode\n\n> *During Eager mode execution, the framework executes one op at a time from Python.*"),
        *when("eager", [
            md("Switch to eager mode (`PT_HPU_LAZY_MODE=0`; hpu_lab lets you switch from Python), run, and count:"),
            panel("Eager mode: one op at a time", "eager", """
            hpu_lab.config.set(PT_HPU_LAZY_MODE="0")
            y = forward(x, w1, w2)
            hpu_lab.config.set(PT_HPU_LAZY_MODE="1")
            """),
            md("Each op was its own graph and its own launch:"),
            code("""
            # claim T1
            ops, launches = len(eager.of(ev.OpAccumulated)), len(eager.of(ev.Launch))
            print(f"{ops} ops, {launches} launches")
            assert launches == ops == 5
            """),
        ], "claim T1", "eager mode: one launch per op"),
        md("> *For any op that is not supported by the Gaudi device, the Intel Gaudi PyTorch bridge falls back to CPU "
           "to execute the op and continue execution on the device for further supported ops thereafter.*"),
        *when("fallback", [
            md("`digamma` has no bfloat16 kernel on HPU (seed 003's own example). Use it between two device ops:"),
            panel("CPU fallback in the middle of device ops", "fb", """
            a = torch.linspace(1, 4, 8, device="hpu").to(torch.bfloat16)
            b = torch.digamma(a) * 2          # digamma falls back to the CPU; * 2 runs on the device again
            htcore.mark_step()
            b_host = b.float().cpu()
            """),
            md("One fallback event, the right numbers, and the result back on `hpu` for the next ops:"),
            code("""
            # claim T2
            (f,) = fb.of(ev.CPUFallback)
            print(f.op, f.dtypes, "->", b.device)
            expected = torch.digamma(torch.linspace(1, 4, 8).to(torch.bfloat16)) * 2
            assert f.op == "aten::digamma" and b.device.type == "hpu"
            assert torch.equal(b_host, expected.float())
            launched_after = [e for e in fb.of(ev.Launch) if e.t_start > f.t_end]
            assert launched_after                  # the '* 2' ran on the device, after the fallback
            """),
        ], "claim T2", "CPU fallback of digamma(bf16), result correct, later ops on hpu"),
        md("> *Eager mode … can be emulated by using `PT_HPU_MAX_COMPOUND_OP_SIZE` … limiting cluster sizes to 1. "
           "This results in a small graph (1 element) compilation after each op.*"),
        panel("Lazy mode with PT_HPU_MAX_COMPOUND_OP_SIZE=1", "compound1", """
        hpu_lab.config.set(PT_HPU_MAX_COMPOUND_OP_SIZE="1")
        y = forward(x, w1, w2)
        hpu_lab.config.set(PT_HPU_MAX_COMPOUND_OP_SIZE="-1")     # back to unlimited
        """),
        md("Five ops, five one-node graphs:"),
        code("""
        # claim T3
        sizes = [g.node_count for g in compound1.of(ev.GraphBuilt)]
        print("ops:", len(compound1.of(ev.OpAccumulated)), " graphs:", len(sizes), " nodes per graph:", sizes)
        assert len(sizes) == len(compound1.of(ev.OpAccumulated)) == 5 and set(sizes) == {1}
        """),
        md("## 3. Eager mode with torch.compile\n\n"
           "> *Model parts wrapped with torch.compile are compiled once at the beginning and later such compiled part "
           "is called. Model parts without such wrapping run in pure Eager mode, each op separately.*"),
        *when("compile", [
            md("The seed's MNIST `train_function` pattern: the model is compiled with `backend=\"hpu_backend\"`, "
               "the loss (`F.nll_loss`) outside it runs eagerly."),
            code(NET + """

torch.manual_seed(0)
model = Net().to("hpu").eval()            # eval: no dropout noise
compiled = torch.compile(model, backend="hpu_backend")

def train_function(data, target):
    output = compiled(data)
    loss = F.nll_loss(output, target)     # not wrapped: eager
    return loss

batches = [(torch.randn(32, 1, 28, 28).to("hpu"), torch.randint(0, 10, (32,)).to("hpu")) for _ in range(5)]
hpu_lab.config.set(PT_HPU_LAZY_MODE="0")"""),
            panel("torch.compile: 5 calls", "tc", """
            for data, target in batches:
                loss = train_function(data, target)
            print(f"loss {loss.item():.3f}")
            hpu_lab.config.set(PT_HPU_LAZY_MODE="1")
            """),
            md("One compile of the wrapped model on the first call; later calls only launch its recipe. "
               "The loss ops outside it run as eager one-op launches:"),
            code("""
            # claim T4
            model_compiles = [e for e in tc.of(ev.Compile) if e.node_count > 1]
            print("compiles of the wrapped model:", len(model_compiles), " launches:", len(tc.of(ev.Launch)),
                  " eager ops:", len(tc.of(ev.OpAccumulated)))
            assert len(model_compiles) == 1
            assert len(tc.of(ev.Launch)) > 5           # 5 calls of the compiled part + the eager ops around it
            assert len(tc.of(ev.OpAccumulated)) > 0     # the unwrapped part ran op by op
            """),
        ], "claim T4", "torch.compile: one compile then hits, eager launches for the rest"),
        md("## 4. Lazy mode\n\n> *The execution of the ops in the accumulated graph is triggered in a lazy manner, "
           "only when a tensor value is required by the user.*\n\n"
           "Run the forward pass and look at the device *before* asking for the value:"),
        panel("Lazy mode: accumulate", "lz", """
        y = forward(x, w1, w2)
        """),
        md("Five ops were recorded and nothing was launched: the device has not done any work yet."),
        code("""
        # claim T5
        print(f"ops accumulated: {len(lz.of(ev.OpAccumulated))}, graphs built: {len(lz.of(ev.GraphBuilt))}, "
              f"launches: {len(lz.of(ev.Launch))}")
        assert len(lz.of(ev.OpAccumulated)) == 5 and lz.of(ev.Launch) == []
        """),
        md("Now the value is required:"),
        panel("Lazy mode: .item()", "lz_item", """
        value = y.item()
        """),
        md("`.item()` built one graph of all five ops, launched it and made the host wait for the result:"),
        code("""
        # claim T5
        (g,) = lz_item.of(ev.GraphBuilt)
        (sync,) = lz_item.of(ev.HostSync)
        print(f"one graph of {g.node_count} nodes (trigger {g.trigger!r}), {len(lz_item.of(ev.Launch))} launch, "
              f"host sync reason {sync.reason!r}")
        assert len(lz_item.of(ev.Launch)) == 1 and g.node_count == 5 and sync.reason == ".item()"
        """),
        md("> *Unlike Eager Mode with torch.compile, graph is analyzed in each iteration leading to a higher CPU usage.*"),
        *when("compile", [
            md("Ten iterations of a 20-layer chain, lazy vs compiled. Lazy mode traces every op and hashes the graph "
               "every time, even when the recipe comes from the cache; the compiled function is just called:"),
            code("""
            import time, statistics

            def chain(x, ws):                       # 20 matmul + tanh layers, then a sum: 41 ops
                for w in ws:
                    x = torch.tanh(x @ w)
                return x.sum()

            ws = [torch.randn(32, 32, device="hpu") / 6 for _ in range(20)]
            compiled_chain = torch.compile(chain, backend="hpu_backend")
            hpu_lab.config.set(PT_HPU_LAZY_MODE="0")
            compiled_chain(x, ws); torch.hpu.synchronize()          # compile outside the measurement
            hpu_lab.config.set(PT_HPU_LAZY_MODE="1")
            y = chain(x, ws); htcore.mark_step(); torch.hpu.synchronize()   # and cache the lazy recipe too
            """),
            panel("Lazy mode: 10 iterations", "lazy10", live=False, body="""
            lazy_host = []
            for i in range(10):
                t0 = time.perf_counter()
                y = chain(x, ws)
                htcore.mark_step()
                lazy_host.append(time.perf_counter() - t0)
            torch.hpu.synchronize()
            """),
            panel("torch.compile: 10 iterations", "comp10", live=False, body="""
            hpu_lab.config.set(PT_HPU_LAZY_MODE="0")
            compiled_host = []
            for i in range(10):
                t0 = time.perf_counter()
                y = compiled_chain(x, ws)
                compiled_host.append(time.perf_counter() - t0)
            torch.hpu.synchronize()
            hpu_lab.config.set(PT_HPU_LAZY_MODE="1")
            """),
            md("Every iteration, lazy mode traced the 41 ops again and built a graph; the compiled function traced nothing:"),
            code("""
            # claim T6
            for s in (lazy10, comp10):
                print(f"{s.title:28s} ops traced: {len(s.of(ev.OpAccumulated)):3d}  graphs built: "
                      f"{len(s.of(ev.GraphBuilt)):2d}  compiles: {len(s.of(ev.Compile))}  launches: {len(s.of(ev.Launch))}")
            assert len(lazy10.of(ev.OpAccumulated)) == 410 and len(lazy10.of(ev.GraphBuilt)) == 10
            assert len(comp10.of(ev.OpAccumulated)) == 0 and len(comp10.of(ev.GraphBuilt)) == 0
            assert len(comp10.of(ev.Launch)) == 10 and comp10.of(ev.Compile) == []
            """),
            md("That work is host time. The median per iteration on this machine (it varies, so the numbers are not "
               "checked; the order is, and it is usually several times):"),
            code("""
            # NBVAL_IGNORE_OUTPUT
            # claim T6
            lazy_ms, compiled_ms = statistics.median(lazy_host) * 1e3, statistics.median(compiled_host) * 1e3
            print(f"host time per iteration: lazy {lazy_ms:.2f} ms, torch.compile {compiled_ms:.2f} ms")
            assert lazy_ms > compiled_ms
            """),
        ], "claim T6", "lazy mode re-traces every iteration vs torch.compile"),
        md("## 5. The bridge: lowering\n\n"
           "> *Various optimization passes are applied to the graph, such as: fusion of ops … identification of "
           "persistent, non-persistent and tensors with duplicate or aliased memory.*\n\n"
           "Compile a slightly longer chain and open the recipe:"),
        panel("One recipe, opened up", "low", """
        b = torch.randn(16, device="hpu")
        y = torch.relu(x @ w1 + b) * 2 - 1          # an elementwise chain after a matmul
        z = torch.sigmoid(y).sum(dim=1)
        htcore.mark_step()
        """),
        md("The recipe is a `torch.fx` graph; `recipe.code` is what the device runs:"),
        code("""
        compile_event = low.of(ev.Compile)[-1]
        recipe = next(r for r in hpu_lab.compiler.recipes() if r.id == compile_event.recipe_id)
        print(recipe.code.strip())
        """),
        md("Each node carries what the passes decided: its engine, its fusion cluster, and its tensor class:"),
        code("""
        # claim T7
        for n in compile_event.graph.nodes:
            if n.op != "output":
                print(f"{n.index:2d} {n.op:14s} {str(n.shape):9s} engine={n.engine or '-':4s} "
                      f"cluster={n.cluster:2d} {n.tensor_class}")
        nodes = compile_event.graph.nodes
        assert compile_event.clusters >= 1                                       # add/relu/mul/sub fused
        assert {n.tensor_class for n in nodes if n.op == "input"} == {"persistent"}
        assert "non-persistent" in {n.tensor_class for n in nodes}              # intermediates never leave the device
        """),
        md("Outputs that the program still holds (`y`, `z`) are persistent; everything in between is non-persistent "
           "and needs only the recipe's working memory (its *memory plan*):"),
        code("""
        print("recipe working memory (peak of non-persistent tensors):", compile_event.peak_bytes, "bytes")
        assert compile_event.peak_bytes > 0
        """),
        md("## 6. The bridge: PyTorch kernels\n\n"
           "> *The PyTorch op could be implemented with a single or multiple TPC/MME ops.*\n\n"
           "In one training step of seed 000's MLP, matrix products go to the MME, everything else to the TPC:"),
        code(NET),
        code("""
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
        """),
        panel("Ten training steps", "ten", """
        for step in range(10):
            loss = train_step()
        """),
        md("The first recipe of the run is the forward+backward graph. Its engines:"),
        code("""
        fwd_bwd = ten.of(ev.Compile)[0].graph
        engines = Counter(n.engine for n in fwd_bwd.nodes if n.engine)
        mme_ops = sorted({n.op for n in fwd_bwd.nodes if n.engine == "MME"})
        print(dict(engines), "MME ops:", mme_ops)
        assert engines["MME"] >= 3 and engines["TPC"] > engines["MME"]
        """),
        md("## 7. The bridge: execution module and recipe cache\n\n"
           "> *During training, the graph compilation is only required for the initial iteration, thereafter, the same "
           "compiled recipe is re-executed every iteration (with new inputs) unless there is a change in the ops being executed.*\n\n"
           "Count the compiles in each of the ten steps above, and the cache's answers:"),
        code("""
        # claim T8
        first = ten.of(ev.MarkStep)[0].step                    # two mark_steps per training step
        per_step = Counter((e.step - first) // 2 for e in ten.of(ev.Compile))
        hits = sum(e.hit for e in ten.of(ev.CacheLookup))
        print("compiles per training step:", [per_step.get(i, 0) for i in range(10)])
        print(f"cache lookups: {len(ten.of(ev.CacheLookup))}, hits: {hits}")
        assert per_step.get(0, 0) >= 2                                  # the first step compiles its graphs
        assert sum(per_step.get(i, 0) for i in range(2, 10)) == 0     # then flat
        assert hits >= 16
        """),
        md("Now change the ops — add an L2 penalty to the loss for one step:"),
        panel("A step whose ops changed", "changed", """
        loss = train_step(penalty=True)
        """),
        md("The forward+backward graph compiles again; the reason is a diff against the graph compiled before at the "
           "same `mark_step`:"),
        code("""
        fwd_bwd_compiles = [e for e in changed.of(ev.Compile) if e.node_count > 20]
        for e in fwd_bwd_compiles:
            print("recompiled because:", e.reason)
        assert len(fwd_bwd_compiles) == 1 and "new op" in fwd_bwd_compiles[0].reason
        """),
        md("> *… launch the resulting recipe in an asynchronous method.*\n\n"
           "`mark_step` queues the recipe and returns; the device (a worker thread here) runs it while Python "
           "goes on. Launch a graph that takes the device a while, then trace more ops at once:"),
        code("""
        a = torch.randn(700, 700, device="hpu") / 30
        htcore.mark_step()
        def heavy(h):
            for _ in range(8):
                h = torch.tanh(h @ a)
            return h
        h = heavy(a); htcore.mark_step(); torch.hpu.synchronize()     # compile it first
        """),
        panel("Asynchronous launch", "asyn", """
        h = heavy(a)
        htcore.mark_step()                 # returns as soon as the recipe is queued
        more = torch.ones(4, device="hpu")
        for i in range(100):               # the host traces the next ops while the device is busy
            more = more * 1.01 + 0.1
        htcore.mark_step()
        torch.hpu.synchronize()
        """),
        md("`mark_step` returned before the device finished, and ops were traced while the device ran:"),
        code("""
        # claim T9
        ms = asyn.of(ev.MarkStep)[0]                     # the mark_step that launched heavy()
        run = next(e for e in asyn.of(ev.DeviceExecution) if e.node_count >= 16)
        overlapped = [e for e in asyn.of(ev.OpAccumulated) if run.t_start < e.t_start < run.t_end]
        print(f"mark_step returned before the device finished: {ms.t_end < run.t_end}; "
              f"ops traced while the device ran: {'yes' if overlapped else 'none'}")
        assert ms.t_end < run.t_end and len(overlapped) >= 1
        """),
        md("## 8. The bridge: memory manager\n\n"
           "> *The Intel Gaudi PyTorch bridge has a memory manager that optimally serves the allocation and free requests "
           "from the device memory.*\n\nAllocate 4 MB on the device, then free it:"),
        code("""
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
        """),
        md("> *It additionally provides the capability to create tensors with pinned memory, which reduces the time "
           "required for doing a DMA by avoiding a copy on the host side.*"),
        *when("pinned", [
            code("""
            # claim T10
            host = torch.randn(200, 784).pin_memory()
            with ev.Collector() as pin:
                dev = host.to("hpu", non_blocking=True)
            print(host.is_pinned(), [e.kind for e in pin.events])
            assert host.is_pinned()
            """),
        ], "claim T10 (pinned part)", "pinned host memory and its copy path"),
        md("## 9. Mixed precision\n\n> *Gaudi supports mixed precision training using PyTorch autocast … It executes "
           "operations registered to autocast using lower precision floating datatype.*"),
        *when("amp", [
            panel("Autocast to bfloat16", "amp", """
            with torch.autocast(device_type="hpu", dtype=torch.bfloat16):
                logits = x @ w1                      # mm: on the lower-precision list
                probs = torch.softmax(logits, dim=1) # softmax: also on Gaudi's bf16 list
                total = logits.float().sum()
            htcore.mark_step()
            """),
            md("The dtype of each op's result, and the casts autocast inserted into the graph:"),
            code("""
            # claim T11
            print("mm ->", logits.dtype, " softmax ->", probs.dtype, " sum of float ->", total.dtype)
            graph = amp.of(ev.Compile)[-1].graph if amp.of(ev.Compile) else amp.of(ev.Launch)[-1].graph
            casts = [n for n in graph.nodes if n.is_cast]
            print("cast nodes in the recipe:", len(casts), [n.dtype for n in casts])
            assert logits.dtype == torch.bfloat16 and total.dtype == torch.float32
            assert casts and {"bfloat16"} <= {n.dtype for n in casts}
            """),
        ], "claim T11", "autocast dtypes per op"),
        md("## 10. Distributed training and the media loader\n\n"
           "> *Intel Gaudi PyTorch implements HCCL communication backend to support scale-up and scale-out.*\n\n"
           "The `hccl` backend, DDP and fast_ddp are the subject of notebook 08. The media loader (`habana_dataloader`) "
           "\"falls back to the native torch data loader if the provided parameters are not supported\"; in this lab "
           "the native `torch.utils.data.DataLoader` is what you use:"),
        code("""
        from hpu_lab.data import MNISTLike
        loader = torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200, num_workers=0, drop_last=True)
        data, target = next(iter(loader))
        print(tuple(data.shape), data.dtype, tuple(target.shape), target.dtype)
        assert data.shape == (200, 1, 28, 28)
        """),
        md("""
        ## Summary
        - Eager mode launches one graph per op; `PT_HPU_MAX_COMPOUND_OP_SIZE=1` makes lazy mode do the same.
        - `torch.compile` compiles the wrapped part once and then only calls it; the rest runs op by op.
        - Lazy mode accumulates ops and runs them only when a value is needed or at `mark_step`; it re-traces the
          graph every iteration, which is host time, but the recipe comes from the cache after the first steps.
        - A recipe is the result of the bridge's passes: fused clusters, MME/TPC engines, persistent vs
          non-persistent tensors and a memory plan. It is launched asynchronously.

        ## Exercises
        1. In section 4, replace `y.item()` with `print(y)`. What is the host sync reason now?
        2. In section 5, make `y` a temporary (`z = torch.sigmoid(torch.relu(x @ w1 + b) * 2 - 1).sum(dim=1)`). Which tensor class does the sub node get now, and why?
        3. In section 7, change the learning rate between two steps (`optimizer.param_groups[0]["lr"] = 0.05`). Does the optimizer graph recompile? Read the reason.
        4. In section 7 (async), make the matrices 1500x1500. How does the Timeline change?
        """),
    ]


# ============================================================================= 02 lazy mode and mark_step

def nb02():
    return [
        md("""
        # Lazy mode and mark_step: decide where your graphs begin and end

        Seed documents: *HPU Graphs for Training* (its opening on lazy mode), *General Model Optimizations*
        (*Usage of mark_step*) and *Theory of Operations* (*Lazy mode*).

        > *Lazy mode … accumulates and flushes ops only when mark_step is triggered. In large models, the
        > accumulation time for the ops (host time) can be significantly greater than for devices.*

        **What you'll do**
        - watch ops pile up in the pending graph, and find every way to make it run;
        - place `mark_step` in a training loop and see the graphs one step builds;
        - find out whether a model is host-bound, and use `mark_step` against out-of-memory and recompiles.

        **What you'll learn**
        - what a host sync is, and what causes one (`.item()`, `print`, `.cpu()`, data-dependent ops);
        - where `mark_step` belongs and what happens without it.

        **What you'll need**
        - notebooks 00 and 01; about a minute of CPU time.
        """),
        setup_cell(),
        code(NET + """

from hpu_lab.data import MNISTLike
train_loader = torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200)
torch.manual_seed(0)
model = Net().to("hpu")
optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
data, target = next(iter(train_loader))
data, target = data.to("hpu"), target.to("hpu")
htcore.mark_step()"""),
        md("## 1. Ops accumulate until mark_step\n\nRun the forward pass and the loss, and stop before `mark_step`:"),
        panel("Forward pass, no mark_step yet", "acc", """
        output = model(data)
        loss = F.nll_loss(output, target)
        """),
        md("Every op was recorded (with the line that issued it), and nothing ran:"),
        code("""
        ops = acc.of(ev.OpAccumulated)
        print(len(ops), "ops accumulated:", ", ".join(e.op.replace("aten::", "") for e in ops))
        assert len(ops) >= 6 and acc.of(ev.Launch) == [] and acc.of(ev.GraphBuilt) == []
        """),
        md("Now `mark_step`: the pending ops become one graph, which compiles and launches."),
        panel("mark_step", "ms", """
        htcore.mark_step()
        """),
        code("""
        (g,) = ms.of(ev.GraphBuilt)
        print(f"one graph of {g.node_count} nodes, {g.input_count} inputs, {g.output_count} outputs; "
              f"launches: {len(ms.of(ev.Launch))}")
        assert len(ms.of(ev.Launch)) == 1 and ms.of(ev.HostSync) == []    # mark_step does not wait
        """),
        md("## 2. What else makes the graph run\n\n"
           "> *The execution … is triggered in a lazy manner, only when a tensor value is required by the user.*\n\n"
           "Each of these needs a value on the host, so the host must wait for the device (a *host sync*). "
           "Try them one by one:"),
        code("""
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
            "y[y > 0] (boolean mask)": lambda: y[y > -2.3],
            "torch.nonzero":        lambda: torch.nonzero(y > -2.3),
        }
        reasons = {}
        for name, fn in triggers.items():
            reasons[name], launches = sync_reasons(fn)
            print(f"{name:26s} -> launches {launches}, host sync: {reasons[name]}")
        """),
        md("Each one launched what it needed and made the host wait, and the reason names the cause. "
           "Boolean masks and `nonzero` are *data-dependent*: their output shape depends on the values, "
           "so the bridge cannot even build the rest of the graph before running it:"),
        code("""
        assert reasons["loss.item()"] == [".item()"]
        assert reasons["tensor.cpu()"] == [".cpu()"]
        assert all(r for r in reasons.values())                       # every trigger waited
        assert any("nonzero" in r for r in reasons["torch.nonzero"])   # 'data-dependent op aten::nonzero'
        """),
        md("`torch.hpu.synchronize()` waits for launched work but does *not* launch what is still pending:"),
        code("""
        with ev.Collector() as c:
            pending = model(data).sum()
            torch.hpu.synchronize()
        print("launches:", len(c.of(ev.Launch)))
        assert c.of(ev.Launch) == []
        htcore.mark_step()
        """),
        md("## 3. The graphs of one training step\n\n"
           "Seed 000's loop calls `mark_step` after `loss.backward()` and after `optimizer.step()` "
           "(*mark step is needed for HPU Lazy mode before and after the optimizer step*):"),
        code("""
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
        """),
        panel("One training step, two mark_steps", "two", """
        loss = train_step(data, target)
        """),
        md("Two graphs per step: forward + backward, then the optimizer update. The Graph tab draws them; "
           "here are their sizes and the first lines of the forward+backward recipe:"),
        code("""
        launches = two.of(ev.Launch)
        print("graphs launched:", [len(l.graph.nodes) for l in launches], "nodes (inputs and output included)")
        recipe = next(r for r in hpu_lab.compiler.recipes() if r.id == launches[0].recipe_id)
        print("\\n".join(recipe.code.strip().splitlines()[:8]), "\\n    ...")
        assert len(launches) == 2 and two.of(ev.Compile) == []        # warm: both recipes from the cache
        """),
        md("With a single `mark_step` at the end of the step, forward, backward and optimizer are one bigger graph. "
           "With none, the graph keeps growing across steps until something needs a value:"),
        code("""
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
        """),
        md("A graph that spans several steps is compiled for exactly that number of steps: change the count and it "
           "compiles again. `mark_step` gives every step the same graph, so the cache serves it."),
        md("## 4. Is the model host-bound?\n\n"
           "> *In large models, the accumulation time for the ops (host time) can be significantly greater than for "
           "devices. This could decrease the model's performance by making it host-bound.*\n\n"
           "Host time grows with the number of ops; device time with the amount of arithmetic. A model made of many "
           "small layers is the extreme case: 24 narrow blocks, each a `Linear` and a `Tanh`."),
        code("""
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
        """),
        md("How much CPU time does each side spend per step? The host's threads (Python tracing, autograd) and the "
           "device's thread (running the recipes) each keep a count of the time they spent running:"),
        code("""
        import threading
        from hpu_lab.bench_graphs import host_cpu_ns      # CPU time of the host's threads (main + autograd)

        def device_cpu_ns():                              # CPU time of the device's thread
            device = next(t for t in threading.enumerate() if t.name == "hpu_lab-hpu:0")
            with open(f"/proc/self/task/{device.native_id}/schedstat") as f:   # Linux: time spent on a CPU
                return int(f.read().split()[0])
        """),
        md("Eight steps. Look at the Timeline: the device lane is mostly idle, waiting for the host to trace the next graph."),
        panel("Many small ops: 8 steps", "host_bound", live=False, body="""
        h0, d0 = host_cpu_ns(), device_cpu_ns()
        for d, t in small_batches:
            loss = deep_step(d, t)
        torch.hpu.synchronize()
        host_ms, device_ms = (host_cpu_ns() - h0) / 8e6, (device_cpu_ns() - d0) / 8e6
        """),
        md("The host needs several times the device's time for each step, so the device must wait: the model is "
           "host-bound. (The times vary by machine; the check leaves a wide margin.)"),
        code("""
        # claim G1
        print(f"ops traced per step: {len(host_bound.of(ev.OpAccumulated)) // 8}; "
              f"host time per step {'over twice' if host_ms > 2 * device_ms else 'under twice'} the device's")
        assert host_ms > 2 * device_ms
        """),
        md("The numbers on this machine, and the share of the window the device lane was busy in the Timeline:"),
        code("""
        # NBVAL_IGNORE_OUTPUT
        window = max(e.t_end for e in host_bound.events) - min(e.t_start for e in host_bound.events)
        busy = sum(e.duration_ns for e in host_bound.of(ev.DeviceExecution)) / window
        print(f"CPU time per step: host {host_ms:.1f} ms, device {device_ms:.1f} ms; device lane busy {100 * busy:.0f}%")
        """),
        md("HPU Graphs (notebook 03) remove exactly this host work. Whether seed 000's two-layer MLP is host-bound "
           "depends on the machine: run it in the exercises."),
        md("## 5. mark_step against out-of-memory\n\n"
           "> *mark_step is added to avoid out of memory (OOM) issues. In cases where the size of the graph exceeds "
           "memory usage, the graph is broken using mark_step.*\n\n"
           "Give the device a small memory Limit (a lab-only setting) and stream 30 batches of 4 MB through it:"),
        *when("oom", [
            code("""
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
            """),
            md("With a `mark_step` per batch, each batch's graph runs and its input is freed:"),
            code("""
            # claim M2
            torch.hpu.reset_peak_memory_stats()
            accumulate(mark_each_batch=True)
            peak = torch.hpu.max_memory_allocated()
            print(f"fits: peak {'under' if peak < 64 * 2**20 else 'over'} the 64 MiB Limit")
            assert peak < 64 * 2**20
            """),
            md("Without it, all 30 batches are inputs of one graph and must be on the device together:"),
            code("""
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
            """),
            md("The refused graph was not lost: it is still pending. Give the device its memory back and it runs:"),
            code("""
            hpu_lab.config.set(HPU_LAB_MEMORY_LIMIT="96GiB")
            with ev.Collector() as recovered:
                htcore.mark_step()
            print("pending nodes launched:", recovered.of(ev.MarkStep)[0].pending_nodes)
            assert len(recovered.of(ev.Launch)) == 1
            """),
        ], "claim M2", "OOM without mark_step, fits with"),
        md("## 6. mark_step between static and dynamic parts\n\n"
           "> *mark_step can also be used when the graph has static and dynamic shapes … Adding mark_step after static "
           "graph may reduce recompilations or recompile with small dynamic graphs.*\n\n"
           "A static part (forward and backward on a full batch) followed by a dynamic part (the accuracy of the first "
           "`n` predictions, `n` changing every step):"),
        code("""
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
        """),
        code("""
        # claim M3
        without, with_mark = compiles(mark_between=False), compiles(mark_between=True)
        print("without mark_step:", len(without), "compiles, nodes per compile:", without)
        print("with mark_step:   ", len(with_mark), "compiles, nodes per compile:", with_mark)
        big = lambda nodes: sum(1 for n in nodes if n >= 20)
        assert big(without) == 4                 # the whole step recompiled for every n
        assert big(with_mark) <= 1               # the static graph compiled at most once (it may be cached)
        assert sum(1 for n in with_mark if n < 20) == 4    # only the small dynamic graph recompiles
        """),
        md("## 7. Logging without breaking the step\n\n"
           "`htcore.add_step_closure(fn, args)` runs `fn` right after the next `mark_step`, when the values exist, "
           "instead of forcing a sync in the middle of the step:"),
        code("""
        losses = []
        with ev.Collector() as clo:
            for data_b, target_b in list(train_loader)[:4]:
                loss = train_step(data_b.to("hpu"), target_b.to("hpu"), marks=(True, False))
                htcore.add_step_closure(lambda l: losses.append(round(l.item(), 3)), (loss,))
                htcore.mark_step()
        print("losses logged:", len(losses), " host syncs:", [e.reason for e in clo.of(ev.HostSync)])
        assert len(losses) == 4
        """),
        md("""
        ## Summary
        - In lazy mode, ops accumulate into a pending graph; nothing runs until `mark_step` or until a value is needed.
        - `.item()`, `print`, `.cpu()`, Python conditions on tensors and data-dependent ops are host syncs: the host
          waits for the device. They are the ones to keep out of the hot loop.
        - `mark_step` after `backward()` and after `optimizer.step()` gives every step the same graphs, so the recipe cache serves them.
        - A small model is host-bound: the device idles while Python traces ops.
        - `mark_step` can cut a graph that would not fit in memory, and separate static from dynamic parts so only small graphs recompile.

        ## Exercises
        1. In section 3, move the first `mark_step` to just after `model(data)`. How many graphs per step, and which recipe is the biggest?
        2. In section 4, measure host and device CPU time per step for seed 000's `Net` with batches of 200. Is it host-bound on this machine? And with batches of 800?
        3. In section 5, `mark_step` every 5 batches instead of every batch. What peak memory do you get?
        4. In section 6, remove the `mark_step` at the end of `static_then_dynamic`. What triggers the graphs now?
        """),
    ]


# ============================================================================= 03 HPU Graphs for training

SEED_TRAIN = """\
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
    return loss"""


def nb03():
    return [
        md("""
        # HPU Graphs for training: record a step once, replay it

        Seed document: *HPU Graphs for Training*.

        > *HPU Graphs feature overcomes this bottleneck by bypassing all the op accumulations by recording a
        > static version of the entire graph, and then replaying it. These static graphs use fixed memory
        > locations for its inputs, outputs, and the underlying graph.*

        **What you'll do**
        - capture a computation with the basic API (`capture_begin` / `capture_end` / `replay`) and replay it;
        - train the seed's MNIST example the four ways of the document and put their timelines side by side;
        - measure host time per step and set it next to the seed's table (4.8 / 3.9 / 1.3 ms);
        - hit each documented limitation and read its error.

        **What you'll learn**
        - what a replay skips, and why that only pays off when the model is host-bound;
        - when to use capture/replay, `make_graphed_callables` or `ModuleCacher`.

        **What you'll need**
        - notebooks 00 and 02 (host-bound models); about a minute of CPU time.
        """),
        setup_cell("from hpu_lab.data import MNISTLike\nfrom hpu_lab.bench_graphs import host_cpu_ns    # CPU time of the host's threads"),
        md("## 1. Record once, replay many times\n\n"
           "The basic API, on a tiny computation: capture it once on fixed (\"static\") tensors ..."),
        code("""
        static_x = torch.randn(4, 8, device="hpu")
        w = torch.randn(8, 3, device="hpu")

        g = htcore.hpu.HPUGraph()
        g.capture_begin()
        static_y = torch.tanh(static_x @ w) * 2
        g.capture_end()
        import re
        print(re.sub(r"recipe [0-9a-f]{12}", "recipe <key>", g.describe()))   # (keys are hashes, new every run)
        """),
        md("... then, for each new input, copy it into the static input and `replay()`:"),
        panel("Five replays", "rep", """
        inputs = [torch.randn(4, 8) for _ in range(5)]
        results = []
        for x_host in inputs:
            static_x.copy_(x_host)
            g.replay()
            results.append(static_y.cpu())
        """),
        md("The replays ran the recorded recipe five times and traced no op at all; the results are those of "
           "plain PyTorch on the CPU:"),
        code("""
        # claim G2
        print("replays:", len(rep.of(ev.Replay)), " ops traced:", len(rep.of(ev.OpAccumulated)),
              " graphs built:", len(rep.of(ev.GraphBuilt)), " compiles:", len(rep.of(ev.Compile)))
        assert len(rep.of(ev.Replay)) == 5
        assert rep.of(ev.OpAccumulated) == [] and rep.of(ev.GraphBuilt) == [] and rep.of(ev.Compile) == []
        w_cpu = w.cpu()
        assert all(torch.allclose(r, torch.tanh(x @ w_cpu) * 2) for r, x in zip(results, inputs))
        """),
        md("Fixed memory locations: the output is always the same tensor, overwritten by each replay. A reference "
           "kept from before a replay sees the new values; in lazy mode every step makes a new output tensor:"),
        code("""
        # claim G3
        kept = static_y
        static_x.copy_(torch.ones(4, 8)); g.replay()
        after_one = kept.cpu()
        static_x.copy_(torch.zeros(4, 8)); g.replay()
        after_two = kept.cpu()
        print("same tensor object:", kept is static_y, "| values changed under the same reference:",
              not torch.equal(after_one, after_two))
        assert kept is static_y and torch.equal(after_two, torch.zeros(4, 3))

        lazy_outputs = [torch.tanh(x_.to("hpu") @ w) * 2 for x_ in inputs[:2]]
        assert lazy_outputs[0] is not lazy_outputs[1]        # lazy mode: a new tensor per step
        """),
        md("## 2. Theory of operations: only the input shapes are checked\n\n"
           "> *For each iteration, the entire graph is parsed. HPU Graphs speeds up this process as subsequent "
           "iterations check the input shapes only … [and rely] on input shapes only to determine whether the "
           "precompiled recipe can be used or if a recompilation is required.*\n\n"
           "`ModuleCacher` (section 4) keeps one graph per input shape. Feed it batches of 200, then one of 96:"),
        code(NET + """

device = torch.device("hpu")
torch.manual_seed(0)
model = Net().to(device)
optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)
batches = [(torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))) for n in (200, 200, 200, 96, 96)]"""),
        panel("ModuleCacher: shapes 200, 200, 200, 96, 96", "shapes", """
        for data, target in batches:
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.nll_loss(model(data), target)
            loss.backward()
            htcore.mark_step()
            optimizer.step()
            htcore.mark_step()
        """),
        md("A capture for the first shape, replays while it stays the same, a new capture when the shape changes "
           "(each capture records a forward and a backward graph):"),
        code("""
        # claim G4
        captures = shapes.of(ev.CaptureEnd)
        print("captures:", len(captures), " replays:", len(shapes.of(ev.Replay)),
              " graphs cached:", model.module_cacher.num_graphs)
        assert model.module_cacher.num_graphs == 2 and len(captures) == 4    # 2 shapes x (forward, backward)
        """),
        md("## 3. Limitations of the basic APIs\n\n"
           "> *Running HPU Graphs is supported with Lazy mode. Eager mode is currently not supported.*"),
        code("""
        # claim G5
        hpu_lab.config.set(PT_HPU_LAZY_MODE="0")
        try:
            htcore.hpu.HPUGraph()
            raise AssertionError("expected an error in eager mode")
        except RuntimeError as e:
            print(type(e).__name__ + ":", e)
            assert "lazy mode only" in str(e)
        finally:
            hpu_lab.config.set(PT_HPU_LAZY_MODE="1")
        """),
        md("> *HPU Graphs training API mandates the use of only tensors as inputs and outputs. The inputs can only be "
           "provided as positional args.*\n\nA `Linear` layer graphed with `make_graphed_callables`, called three wrong ways:"),
        code("""
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
        """),
        md("`ModuleCacher` lifts both limits: keyword and non-tensor arguments are part of its cache key, and it "
           "keeps one graph per distinct call, up to `max_graphs`; beyond that, calls run uncached (plain lazy mode):"),
        code("""
        class Scaled(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(784, 10)

            def forward(self, x, *, temperature=1.0):          # a keyword-only, non-tensor argument
                return F.log_softmax(self.fc(torch.flatten(x, 1)) / temperature, dim=1)

        torch.manual_seed(0)
        scaled = Scaled().to(device)
        scaled = htcore.hpu.ModuleCacher(max_graphs=3)(model=scaled, inplace=True)
        """),
        panel("ModuleCacher: keyword args, 5 distinct calls, max_graphs=3", "mc", """
        for n, temperature in [(200, 1.0), (200, 1.0), (200, 2.0), (96, 1.0), (64, 1.0), (32, 1.0), (200, 2.0)]:
            out = scaled(torch.randn(n, 1, 28, 28, device=device), temperature=temperature)
            out.sum().backward()
            htcore.mark_step()
        """),
        code("""
        # claim G7
        stats = scaled.module_cacher.stats()
        print(stats)
        assert stats["graphs"] == 3                       # (200, 1.0), (200, 2.0), (96, 1.0): capped at max_graphs
        assert stats["uncached_train_hits"] == 2          # (64, 1.0) and (32, 1.0) ran without a graph
        assert stats["cached_hits"] == 5
        """),
        md("## 4. The MNIST example, four ways\n\n"
           "The seed's common code: the model, Adadelta, batches of 200. `MNISTLike` stands in for torchvision's "
           "MNIST (no download); 1600 images make 8 batches per epoch."),
        code("""
        train_loader = torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200)

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
        """),
        md("### Training loop without HPU Graphs"),
        code(SEED_TRAIN),
        code("""
        model, optimizer = fresh()
        train(model, device, train_loader, optimizer)          # first epoch: compiles
        torch.hpu.synchronize()
        """),
        panel("No HPU Graphs (lazy mode)", "lazy", """
        train(model, device, train_loader, optimizer)
        torch.hpu.synchronize()
        """),
        md("### Training loop with capture and replay\n\n"
           "> *The capture phase involves recording all the forward and backward passes, then, replaying it again and "
           "again in the actual training phase.* Here the optimizer step is captured too, so one replay is one whole step."),
        code("""
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
        replay_epoch = train_with_capturereplay(model, device, train_loader, optimizer, 200)
        replay_epoch()                                          # first epoch
        torch.hpu.synchronize()
        """),
        panel("Capture and replay", "replay", """
        replay_epoch()
        torch.hpu.synchronize()
        """),
        code("""
        # claim G2
        print("replays:", len(replay.of(ev.Replay)), " ops traced:", len(replay.of(ev.OpAccumulated)),
              " graphs built:", len(replay.of(ev.GraphBuilt)))
        assert len(replay.of(ev.Replay)) == 8 and replay.of(ev.OpAccumulated) == []
        """),
        md("### Training loop with make_graphed_callables\n\n"
           "> *A model wrapped in this API creates separate graphs for forward and backward passes.*"),
        code("""
        model, optimizer = fresh()
        with ev.Collector() as wrapping:
            x = torch.randn(200, 1, 28, 28, device='hpu')
            model = htcore.hpu.make_graphed_callables(model, (x,))
        train(model, device, train_loader, optimizer)           # first epoch
        torch.hpu.synchronize()
        """),
        md("Wrapping captured two graphs, a forward and a backward:"),
        code("""
        # claim G8
        captured = wrapping.of(ev.CaptureEnd)
        print(len(captured), "graphs captured, with", [c.node_count for c in captured], "nodes")
        assert len(captured) == 2
        """),
        panel("make_graphed_callables", "mgc", """
        train(model, device, train_loader, optimizer)
        torch.hpu.synchronize()
        """),
        md("Forward and backward replay; the loss and the optimizer (outside the graphed module) are still traced:"),
        code("""
        # claim G8
        print("replays per step:", len(mgc.of(ev.Replay)) // 8, " ops traced per step:", len(mgc.of(ev.OpAccumulated)) // 8)
        assert len(mgc.of(ev.Replay)) == 2 * 8
        """),
        md("### Training loop with ModuleCacher\n\n"
           "> *ModuleCacher handles dynamic inputs automatically and is the recommended method for using HPU Graphs in training models.*"),
        code("""
        model, optimizer = fresh()
        htcore.hpu.ModuleCacher(max_graphs=10)(model=model, inplace=True)
        train(model, device, train_loader, optimizer)            # first epoch: captures
        torch.hpu.synchronize()
        """),
        panel("ModuleCacher", "cacher", """
        train(model, device, train_loader, optimizer)
        torch.hpu.synchronize()
        """),
        code("""
        print("graphs:", model.module_cacher.num_graphs, " replays:", len(cacher.of(ev.Replay)),
              " ops traced per step:", len(cacher.of(ev.OpAccumulated)) // 8)
        assert model.module_cacher.num_graphs == 1 and len(cacher.of(ev.Replay)) == 16
        """),
        md("And the seed's `test`, on the model trained with ModuleCacher:"),
        code("""
        model.eval()
        accuracy = test(model, device, train_loader)
        assert accuracy > 0.5
        """),
        md("### The four timelines side by side\n\nSame steps, same data. Compare the host lanes:"),
        code("""
        # NBVAL_IGNORE_OUTPUT
        widgets.compare([lazy, mgc, cacher, replay])
        """),
        md("## 5. Host time per step, next to the seed's table\n\n"
           "> *The base case with no HPU Graphs has a CPU processing time of 4.8ms … make_graphed_callables … 3.9 ms … "
           "capture and replay mode, with a host time of around 1.3ms.*\n\n"
           "`hpu_lab.bench_graphs.measure` runs the same four loops interleaved for a few rounds and takes the median "
           "CPU time of the host's threads per step (the device thread excluded):"),
        code("""
        # NBVAL_IGNORE_OUTPUT
        from hpu_lab import bench_graphs
        r = bench_graphs.measure(steps=12, rounds=3, warmup=3)
        print(f"{'mode':26s} {'host ms here':>12s} {'seed (Gaudi)':>13s}")
        for m in ("lazy", "make_graphed_callables", "ModuleCacher", "capture/replay"):
            seed = bench_graphs.SEED_HOST_MS.get(m)
            print(f"{bench_graphs.LABELS[m]:26s} {r[m]['host_ms']:12.2f} {(f'{seed:.1f}' if seed else '-'):>13s}")
        """),
        md("The numbers depend on the machine; the order does not. It comes from how much each mode traces per step:"),
        code("""
        # claim G9
        for m in ("lazy", "make_graphed_callables", "capture/replay"):
            c = r[m]["counts"]
            print(f"{bench_graphs.LABELS[m]:26s} ops traced {c['OpAccumulated']:3.0f}, graphs built {c['GraphBuilt']:.0f}, "
                  f"replays {c['Replay']:.0f} per step")
        traced = [r[m]["counts"]["OpAccumulated"] for m in ("lazy", "make_graphed_callables", "capture/replay")]
        assert traced[0] > traced[1] > traced[2] == 0
        """),
        code("""
        # NBVAL_IGNORE_OUTPUT
        # claim G9
        host = [r[m]["host_ms"] for m in ("lazy", "make_graphed_callables", "capture/replay")]
        print("host time: no graphs > make_graphed_callables > capture/replay:", host[0] > host[1] > host[2])
        assert host[0] > host[1] > host[2]
        """),
        md("## 6. When HPU Graphs do not help\n\n"
           "> *Run a host profile to make sure the model is host-bound. If it is device-bound, using HPU Graphs is not "
           "beneficial.*\n\nA wide MLP on a big batch keeps the device busy much longer than the host needs to trace it:"),
        code("""
        import time

        def wide_step_fns():
            torch.manual_seed(0)
            xb, tb = torch.randn(256, 784), torch.randint(0, 10, (256,))
            fns = {}
            for mode in ("lazy", "replay"):
                wide = nn.Sequential(nn.Linear(784, 1536), nn.ReLU(), nn.Linear(1536, 1536), nn.ReLU(),
                                     nn.Linear(1536, 10)).to(device)
                opt = torch.optim.SGD(wide.parameters(), lr=0.01)
                if mode == "lazy":
                    def step(wide=wide, opt=opt):
                        opt.zero_grad(set_to_none=True)
                        F.cross_entropy(wide(xb.to(device)), tb.to(device)).backward()
                        htcore.mark_step()
                        opt.step()
                        htcore.mark_step()
                else:
                    sx, st = xb.to(device), tb.to(device)
                    g = htcore.hpu.HPUGraph()
                    opt.zero_grad(set_to_none=True)
                    with htcore.hpu.graph(g):
                        F.cross_entropy(wide(sx), st).backward()
                        opt.step()
                    def step(g=g, sx=sx, st=st):
                        sx.copy_(xb)
                        st.copy_(tb)
                        g.replay()
                step(); step(); torch.hpu.synchronize()          # warm up
                fns[mode] = step
            return fns

        wide_steps = wide_step_fns()

        import threading

        def device_cpu_ns():                   # CPU time of the device's thread (Linux), as in notebook 02
            device = next(t for t in threading.enumerate() if t.name == "hpu_lab-hpu:0")
            with open(f"/proc/self/task/{device.native_id}/schedstat") as f:
                return int(f.read().split()[0])

        def timed(step, n=5):                  # per step: median wall time, host and device CPU time (ms)
            walls = []
            h0, d0 = host_cpu_ns(), device_cpu_ns()
            for _ in range(n):
                torch.hpu.synchronize()
                t0 = time.perf_counter()
                step()
                torch.hpu.synchronize()
                walls.append(time.perf_counter() - t0)
            return {"wall": 1e3 * sorted(walls)[n // 2], "host": (host_cpu_ns() - h0) / n / 1e6,
                    "device": (device_cpu_ns() - d0) / n / 1e6}
        """),
        panel("Device-bound: wide MLP, lazy mode", "wide_lazy", live=False, body="""
        lazy_ms = timed(wide_steps["lazy"])
        """),
        panel("Device-bound: wide MLP, replay", "wide_replay", live=False, body="""
        replay_ms = timed(wide_steps["replay"])
        """),
        md("Even in lazy mode the host needs a small fraction of the device's time per step, so removing the host's work "
           "can only save that fraction; replay leaves the device's work as it was:"),
        code("""
        # claim G10
        share = lazy_ms["host"] / lazy_ms["device"]
        print(f"lazy mode: host CPU time per step is {'under' if share < 0.3 else 'over'} 30% of the device's")
        assert share < 0.3                                        # device-bound
        assert replay_ms["device"] > 0.7 * lazy_ms["device"]      # same device work with HPU Graphs
        """),
        md("So the time per step barely changes (compare with the small MLP above, where replay was several times faster). "
           "Measured here (machine-dependent):"),
        code("""
        # NBVAL_IGNORE_OUTPUT
        # claim G10
        for name, m in (("lazy", lazy_ms), ("replay", replay_ms)):
            print(f"{name:7s} wall {m['wall']:6.1f} ms/step   CPU: host {m['host']:5.1f} ms, device {m['device']:6.1f} ms")
        print(f"replay / lazy wall time: {replay_ms['wall'] / lazy_ms['wall']:.2f}")
        """),
        md("## 7. Profiling\n\nThe seed profiles the host with the Synapse logger; hpu_lab writes the same kind of "
           "trace from its events, for https://ui.perfetto.dev or `chrome://tracing`:"),
        code("""
        import json, os, tempfile
        from hpu_lab import profiler
        path = profiler.export_chrome_trace(os.path.join(tempfile.mkdtemp(), "lazy_epoch.json"), lazy.events)
        trace = json.load(open(path))["traceEvents"]
        lanes = sorted({e["args"]["name"] for e in trace if e.get("name") == "thread_name"})
        print(len(trace), "trace events; lanes:", lanes)
        assert any(l.startswith("hpu:0") for l in lanes) and any(l.startswith("host") for l in lanes)
        """),
        md("""
        ## Summary
        - An HPU Graph records the device work of a step once; `replay()` launches it again with no tracing, no graph
          building and no cache lookup. Inputs and outputs live at fixed places: copy data in, read results out.
        - Only input shapes are checked: a new shape needs a new graph (ModuleCacher keeps one per shape, up to `max_graphs`).
        - The basic APIs take tensors only, positionally, and exist in lazy mode only.
        - Host time per step: no graphs > `make_graphed_callables` (forward and backward graphs, the rest traced) > capture
          and replay (the whole step), as in the seed's table.
        - If the device is the bottleneck, HPU Graphs change little: profile first.

        ## Exercises
        1. In section 1, capture `torch.tanh(static_x @ w) * step` with a Python variable `step`. Replay after changing `step`. What do you get, and why?
        2. Wrap only `model.fc1` with `make_graphed_callables`. How many ops are traced per step now?
        3. Run section 4's ModuleCacher loop with `batch_size=256`. How many graphs does the cacher hold after one epoch?
        4. In section 6, halve the width of the MLP until replay is clearly faster again. Where is the boundary on this machine?
        """),
    ]

# ============================================================================= 04 dynamicity

def nb04():
    return [
        md("""
        # Dynamicity: when shapes, paths and values change

        Seed document: *HPU Graphs for Training* (its limitations and *Dynamicity in Models*).

        > *HPU Graphs assumes there is no dynamic op or dynamic flow in the graph, and relies on input shapes
        > only to determine whether the precompiled recipe can be used or if a recompilation is required.*

        A graph is compiled for fixed shapes, a fixed sequence of ops and fixed constants. Anything that changes one
        of them — a batch of another size, an `if` on a tensor, an op whose output size depends on the data — is
        *dynamicity*, and costs a recompile, a new graph, or a host sync.

        **What you'll do**
        - change input shapes in lazy mode and read each recompile's reason;
        - meet the last-batch problem and fix it two ways (`ModuleCacher`, `drop_last=True`);
        - run the seed's two examples: dynamic control flow (one graph per path) and a dynamic op kept outside the cached modules;
        - see what `ModuleCacher` refuses to capture.

        **What you'll learn**
        - how to recognise each kind of dynamicity in the panel (Recompiles tab, host syncs);
        - how to split a model so that its static parts still run as graphs.

        **What you'll need**
        - notebooks 02 and 03; about a minute of CPU time.
        """),
        setup_cell("import random\nimport itertools\nfrom hpu_lab.data import MNISTLike"),
        code(NET + """

device = torch.device("hpu")"""),
        md("## 1. Dynamic inputs in lazy mode\n\n"
           "Batches of 200, 200, then 96, then 200 again. Every graph is compiled for its input shapes:"),
        code("""
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
        """),
        panel("Lazy mode: batch sizes 200, 200, 96, 200, 96", "dyn", """
        for data, target in batches:
            loss = train_step(data, target)
        """),
        md("The Recompiles tab lists every compile with its reason. The batch of 96 compiled the step's graph again; "
           "when 200 and 96 come back, both recipes are in the cache:"),
        code("""
        first = dyn.of(ev.MarkStep)[0].step                 # two mark_steps per training step
        for e in dyn.of(ev.Compile):
            print(f"training step {(e.step - first) // 2}: {e.node_count:3d} nodes, {e.reason}")
        shape_changes = [e for e in dyn.of(ev.Compile) if "shape changed" in e.reason]
        assert shape_changes and "(200, 1, 28, 28) -> (96, 1, 28, 28)" in shape_changes[0].reason
        hits_after = [e.hit for e in dyn.of(ev.CacheLookup) if e.step >= dyn.of(ev.MarkStep)[6].step]
        assert all(hits_after)                     # steps 4 and 5: every graph from the cache
        """),
        md("## 2. The last batch\n\n"
           "> *Even simple models with static inputs might exhibit dynamicity. For example, if the batch size does not "
           "divide the dataset evenly, one gets a batch at the end that is a different shape … This can handled by using "
           "ModuleCacher or by using drop_last=True in the dataloader.*\n\n"
           "1600 images in batches of 256: six full batches and a last one of 64."),
        code("""
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
        """),
        md("The basic APIs replay static shapes only: a graph captured for 256 refuses the last batch."),
        code("""
        graphed = htcore.hpu.make_graphed_callables(Net().to(device), (torch.randn(256, 1, 28, 28, device=device),))
        last_data, _ = list(loader)[-1]
        try:
            graphed(last_data.to(device))
            raise AssertionError("expected an error")
        except ValueError as e:
            print("ValueError:", e)
        """),
        md("`ModuleCacher` captures a second graph for the last shape; `drop_last=True` never produces it:"),
        panel("Last batch: ModuleCacher vs drop_last", "last", """
        graphs_cacher = epoch_with_cacher(loader)
        graphs_drop_last = epoch_with_cacher(torch.utils.data.DataLoader(train_set, batch_size=256, drop_last=True))
        print("ModuleCacher, all batches:", graphs_cacher, "graphs;  drop_last=True:", graphs_drop_last, "graph")
        """),
        code("""
        # claim G11
        assert graphs_cacher == 2 and graphs_drop_last == 1
        """),
        md("## 3. Dynamic control flow: one graph per path\n\n"
           "> *When the dynamic control flow is present, the model needs to be separated into different HPU Graphs. In the "
           "example below, the output of module1 feeds module2 or module3 depending on the dynamic control flow.*\n\n"
           "The seed's example, with 20 iterations instead of 200 (and the backward pass and optimizer step it elides):"),
        code("""
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
        """),
        panel("Dynamic control flow: 20 iterations", "flow", """
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
        """),
        md("No graph was captured during the loop: each path replayed the graphs of its own module, forward and backward:"),
        code("""
        # claim G12
        replays = Counter(graph_of[e.graph_id] for e in flow.of(ev.Replay) if e.graph_id in graph_of)
        print("replays per module:", dict(sorted(replays.items())))
        assert flow.of(ev.CaptureEnd) == []
        assert replays["module1"] == 2 * 20
        assert replays["module2"] == 2 * paths.count(1) and replays["module3"] == 2 * paths.count(2)
        """),
        md("## 4. Dynamic ops: keep them outside the cached modules\n\n"
           "> *This example shows module1 -> dynamic boolean indexing -> module2. Thus, the static modules are placed into "
           "separate ModuleCacher and the dynamic op part is left out.*"),
        code("""
        torch.manual_seed(0)
        module1 = nn.Linear(10, 3).to(device)
        module2 = nn.ReLU().to(device)
        all_params = itertools.chain(module1.parameters(), module2.parameters())
        optimizer = torch.optim.Adadelta(all_params, lr=0.1)

        htcore.hpu.ModuleCacher(max_graphs=10)(model=module1, inplace=True)
        htcore.hpu.ModuleCacher(max_graphs=10)(model=module2, inplace=True)

        real_inputs = [torch.randn(5, 10) for _ in range(20)]
        real_targets = [real_inputs[i].mean() for i in range(20)]
        """),
        panel("Dynamic op between two cached modules", "dynop", """
        for data, target in zip(real_inputs, real_targets):
            data = data.to(device)
            target = target.to(device)
            tmp = module1(data)

            # dynamic op
            tmp = tmp[torch.where(tmp > 0)]

            tmp = module2(tmp)
            loss = torch.abs(tmp.mean() - target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            htcore.mark_step()
        """),
        md("`torch.where(tmp > 0)` is `nonzero`: its output size depends on the values, so the host waits for the "
           "device at every iteration. `module1` (static) has one graph; `module2` sees a new shape whenever the number "
           "of positive values changes, and gets one graph per shape:"),
        code("""
        # claim G13
        syncs = Counter(e.reason for e in dynop.of(ev.HostSync))
        print("host syncs:", dict(syncs))
        print("module1:", module1.module_cacher.num_graphs, "graph;  module2:", module2.module_cacher.num_graphs,
              "graphs (one per output size seen)")
        assert syncs["data-dependent op aten::nonzero"] == 20
        assert module1.module_cacher.num_graphs == 1 and module1.module_cacher.stats()["cached_hits"] == 20
        """),
        md("## 5. What ModuleCacher does not handle\n\n"
           "> *ModuleCacher does not handle dynamic control flow or dynamic ops.*\n\n"
           "Put the dynamic parts *inside* a cached module, and its capture fails with the bridge's message:"),
        code("""
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
        """),
        code("""
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
        """),
        md("The runtime is still usable after the refused captures:"),
        code("""
        y = (torch.ones(3, device=device) * 2).sum()
        print(y.item())
        assert y.item() == 6.0
        """),
        md("""
        ## Summary
        - A new input shape means a new graph: lazy mode recompiles (the reason names the input and both shapes) and caches
          one recipe per shape; HPU Graphs need one graph per shape, which `ModuleCacher` keeps for you.
        - A last batch of another size is the most common dynamicity: `ModuleCacher` captures one more graph; `drop_last=True`
          (or padding, notebook 06) avoids it.
        - Dynamic control flow: give each path its own graphs (one graphed callable per branch) and choose in Python.
        - Dynamic ops (`nonzero`, boolean masks) need the values on the host: keep them between cached modules, never inside.

        ## Exercises
        1. In section 1, add a batch of 97. How many recipes does the cache hold for the forward+backward graph now?
        2. In section 3, make `module2` and `module3` one module with an argument `path` and wrap it with `ModuleCacher`. Does it keep one graph per path?
        3. In section 4, replace the boolean indexing with `torch.relu(tmp)` (same values where positive, zeros elsewhere). What happens to the host syncs and to `module2`'s graphs?
        """),
    ]

# ============================================================================= 05 HPU Graphs for inference

def nb05():
    return [
        md("""
        # HPU Graphs for inference: capture the forward pass, replay it per request

        Seed document: *Run Inference Using HPU Graphs*.

        > *HPU Graphs can capture a series of operations using HPU stream and replay them. They mandate the
        > device-side input while output addresses remain constant between invocations.*

        **What you'll do**
        - run the seed's `GraphTest` (capture on a stream, then replay) and a real model's forward the same way;
        - wrap a model with `wrap_in_hpu_graph` and serve the MNIST test set with it;
        - trigger each documented limitation and read the error it raises.

        **What you'll learn**
        - what "output addresses remain constant" means for your code (copy results out before the next replay);
        - why `mark_step` is not needed around a replay;
        - which model code cannot be captured, and what to do instead.

        **What you'll need**
        - notebook 03; under a minute of CPU time.
        """),
        md("The seed's code imports `habana_frameworks.torch as ht`; with the compatibility layer it runs unchanged:"),
        setup_cell("""
        import hpu_lab.compat
        hpu_lab.compat.enable_habana_imports()
        import habana_frameworks.torch as ht          # ht.hpu is torch.hpu
        from hpu_lab.data import MNISTLike"""),
        md("## 1. Capture and replay on a stream\n\nThe seed's `GraphTest`, completed: the first call captures on "
           "the stream, every later call replays."),
        code("""
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
        """),
        panel("GraphTest: capture, then 3 replays", "gtest", """
        gt.wrap_func(True)
        out = gt.b
        for _ in range(3):
            gt.wrap_func(False)
        print(gt.b[:5].cpu())
        """),
        md("One capture on the stream, three replays, and the output is the same tensor every time:"),
        code("""
        # claim I1
        (cap,) = gtest.of(ev.CaptureEnd)
        print("captures:", len(gtest.of(ev.CaptureEnd)), " replays:", len(gtest.of(ev.Replay)),
              " output is the same tensor:", out is gt.b)
        assert len(gtest.of(ev.Replay)) == 3 and out is gt.b
        assert torch.equal(gt.b.cpu(), torch.full((1000,), 2.0))
        """),
        md("The same with a real model: seed 000's `Net`, in eval mode. The input must live on the device (a static "
           "tensor the graph reads); new requests are copied into it:"),
        code(NET + """

torch.manual_seed(0)
model = Net().to(device).eval()
test_set = MNISTLike(train=False)
requests = [test_set[i][0].unsqueeze(0) for i in range(6)]      # six single-image requests

static_in = torch.zeros(1, 1, 28, 28, device=device)
g, s = ht.hpu.HPUGraph(), ht.hpu.Stream()
with torch.no_grad(), ht.hpu.stream(s):
    g.capture_begin()
    static_out = model(static_in)
    g.capture_end()"""),
        md("Serve the six requests: copy in, replay, copy the result out — no `mark_step` anywhere:"),
        panel("Six requests, replayed, no mark_step", "serve", """
        answers = []
        for image in requests:
            static_in.copy_(image)
            g.replay()
            answers.append(static_out.cpu())       # copy out before the next replay overwrites it
        """),
        md("> *Adding mark_step is not required with HPU Graphs as it is handled implicitly.*\n\n"
           "No `mark_step`, no op traced, and the answers equal the same model on the CPU:"),
        code("""
        # claim I8
        cpu_model = Net().eval()
        cpu_model.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
        with torch.no_grad():
            expected = [cpu_model(image) for image in requests]
        print("mark_steps:", len(serve.of(ev.MarkStep)), " ops traced:", len(serve.of(ev.OpAccumulated)),
              " replays:", len(serve.of(ev.Replay)))
        assert serve.of(ev.MarkStep) == [] and serve.of(ev.OpAccumulated) == []
        assert all(torch.allclose(a, e, atol=1e-5) for a, e in zip(answers, expected))
        """),
        md("## 2. wrap_in_hpu_graph\n\n"
           "> *Or, use htorch.hpu.wrap_in_hpu_graph to wrap module forward function with HPU Graphs. This wrapper captures, "
           "caches and replays the graph.*\n\nServe the whole test set (197 images) in batches of 64:"),
        code("""
        torch.manual_seed(0)
        model = Net().to(device).eval()
        model = ht.hpu.wrap_in_hpu_graph(model)
        test_loader = torch.utils.data.DataLoader(test_set, batch_size=64)
        print([len(t) for _, t in test_loader], "images per batch")
        """),
        panel("wrap_in_hpu_graph: the test set in batches of 64", "wrapped", """
        outputs = []
        with torch.no_grad():
            for data, target in test_loader:
                out = model(data.to(device))
                outputs.append(out.cpu())
        """),
        md("The first batch of 64 captured a graph; the next ones replayed it. The last batch (5 images) has another "
           "shape: a second capture, not a wrong answer:"),
        code("""
        # claim I2
        print("captures:", len(wrapped.of(ev.CaptureEnd)), " replays:", len(wrapped.of(ev.Replay)))
        assert len(wrapped.of(ev.CaptureEnd)) == 2          # shapes (64, ...) and (5, ...)
        assert len(wrapped.of(ev.Replay)) == 2               # batches 2 and 3 of 64 replayed
        """),
        md("> *HPU Graphs can be only used to capture and replay static graphs. Dynamic shapes are not supported.*\n\n"
           "Each shape got its own graph, and every answer equals the CPU's:"),
        code("""
        # claim I4
        cpu_model = Net().eval()
        cpu_model.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
        with torch.no_grad():
            expected = [cpu_model(data) for data, _ in test_loader]
        assert [o.shape[0] for o in outputs] == [64, 64, 64, 5]
        assert all(torch.allclose(o, e, atol=1e-5) for o, e in zip(outputs, expected))
        print("all", sum(o.shape[0] for o in outputs), "answers equal the CPU model's")
        """),
        md("The returned output is the graph's static output tensor, so it is overwritten by the next call — that is what "
           "*output addresses remain constant* means for your code:"),
        code("""
        # claim I1
        with torch.no_grad():
            first = model(torch.zeros(64, 1, 28, 28, device=device))
            first_values = first.cpu()
            second = model(torch.ones(64, 1, 28, 28, device=device))
        print("same tensor object:", first is second, "| first's values changed:", not torch.equal(first.cpu(), first_values))
        assert first is second
        """),
        md("## 3. Limitations, each with its error\n\n"
           "> *Models that contain CPU Ops are not supported. During HPU Graphs capturing, in case the Op is not supported, "
           "the following message will appear: “… is not supported during HPU Graph capturing”.*\n\n"
           "Five small modules, each breaking one rule:"),
        code("""
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
        """),
        code("""
        # claim I3
        for cls in (ReadsAValue, FallsBack):
            msg = capture_error(cls())
            print(f"{cls.__name__:18s} {msg}")
            assert "not supported during hpu graph capturing" in msg.lower()
        assert "is not supported during HPU Graph capturing" in capture_error(ReadsAValue())
        """),
        md("> *Data Dependent dynamic flow is not supported with HPU Graphs.*"),
        code("""
        # claim I5
        msg = capture_error(DataDependentFlow())
        print(msg)
        assert "data-dependent control flow is not supported during HPU Graph capturing" in msg
        """),
        md("> *Capturing HPU Graphs on models containing in-place view updates is not supported.*"),
        code("""
        # claim I6
        msg = capture_error(InPlaceViewUpdate())
        print(msg)
        assert "in-place update of a view" in msg and "not supported during HPU Graph capturing" in msg
        """),
        md("The same modules run fine without graphs (lazy mode), and the runtime is still usable after the refused captures:"),
        code("""
        x = torch.rand(4, 4) + 1
        for cls in (ReadsAValue, FallsBack, DataDependentFlow, InPlaceViewUpdate):
            with torch.no_grad():
                got = cls().to(device)(x.to(device)).float().cpu()
                want = cls()(x).float()
            assert torch.allclose(got, want, rtol=1e-2), cls.__name__
        print("all four equal the CPU without HPU Graphs")
        """),
        md("> *Multi-card support for inference (DeepSpeed) using HPU Graphs is applicable only with "
           "`PT_HPU_ENABLE_LAZY_COLLECTIVES=true`.*"),
        *([md("Two emulated cards are needed for that one: notebook 08, section 4, runs it.")] if have("distributed") else
          [todo("distributed", "claim I7", "collectives during HPU Graph capture fail without PT_HPU_ENABLE_LAZY_COLLECTIVES and work with it")]),
        md("""
        ## Summary
        - For inference, capture the forward pass once (on a stream, or with `wrap_in_hpu_graph`) and replay it per request:
          no tracing, no `mark_step`, answers equal to the CPU's.
        - Inputs must be device tensors; outputs are fixed tensors overwritten by the next replay — copy out what you keep.
        - `wrap_in_hpu_graph` keeps one graph per input shape; a new shape captures again rather than computing a wrong answer.
        - Capture refuses what a static graph cannot hold, with the bridge's message: CPU ops and fallbacks, data-dependent
          Python control flow, in-place updates through views.

        ## Exercises
        1. In section 1, append `static_out` itself (not `.cpu()`) to `answers`. What do the six answers look like, and why?
        2. Serve the test set with `batch_size=197`. How many captures? With `batch_size=1`?
        3. Rewrite `InPlaceViewUpdate` without the in-place view update (hint: `torch.cat` or a mask) and capture it.
        4. Give `wrap_in_hpu_graph` `max_graphs=1` and serve the test set in batches of 64 again. What happens to the last batch?
        """),
    ]

# ============================================================================= 06 accelerating training

def nb06():
    return [
        md("""
        # Accelerating training: measure each switch of Optimum Habana

        Seed document: *Optimum Habana: Accelerating Training*. Optimum Habana's `GaudiTrainer` exposes the
        stack's optimisations as training arguments: `use_lazy_mode`, `dataloader_drop_last`,
        `throughput_warmup_steps`, HMP and autocast, `use_hpu_graphs_for_training`, `distribution_strategy="fast_ddp"`,
        `pipelining_fwd_bwd`, `dataloader_num_workers`, `non_blocking_data_copy`, `use_fused_adam`,
        `use_fused_clip_norm`. Each is a few lines of plain PyTorch; this notebook writes those lines and measures
        what each changes.

        **What you'll do**
        - for each switch, run the same small training loop with and without it, and compare the events;
        - read the counts that explain each gain: compiles, clusters, dtypes, graphs, launch order, ops per update.

        **What you'll learn**
        - which switches remove compilations, which remove host work, and which only help a host-bound model.

        **What you'll need**
        - notebooks 01–04; about a minute of CPU time.
        """),
        setup_cell("import time, os, tempfile\nfrom hpu_lab.data import MNISTLike"),
        code(NET + """

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
    return loss"""),
        md("## 1. Lazy mode\n\n"
           "> *In lazy mode, the graph compiler generates optimized binary code that implements the given model topology "
           "on Gaudi. It performs operator fusion, data layout management, parallelization, pipelining and memory "
           "management, as well as graph-level optimizations.*\n\n"
           "Two steps in eager mode (`use_lazy_mode=False`), then two in lazy mode:"),
        code("""
        loader = torch.utils.data.DataLoader(train_set, batch_size=200)
        two_batches = list(loader)[:2]
        """),
        panel("Eager mode: 2 steps", "eager", """
        hpu_lab.config.set(PT_HPU_LAZY_MODE="0")
        model, optimizer = fresh()
        train_epoch(model, optimizer, two_batches)
        hpu_lab.config.set(PT_HPU_LAZY_MODE="1")
        """),
        panel("Lazy mode: 2 steps", "lazy", """
        model, optimizer = fresh()
        train_epoch(model, optimizer, two_batches)
        """),
        md("In eager mode every graph is one op, so there is nothing to fuse; lazy mode's graphs hold whole chains of "
           "elementwise ops, which the compiler fuses into clusters:"),
        code("""
        # claim O1
        def clusters(s):
            return sum(e.graph is not None and len({n.cluster for n in e.graph.nodes if n.cluster >= 0})
                       for e in s.of(ev.Launch))
        print(f"eager: {len(eager.of(ev.Launch))} launches, {clusters(eager)} fused clusters launched")
        print(f"lazy:  {len(lazy.of(ev.Launch))} launches, {clusters(lazy)} fused clusters launched")
        assert clusters(eager) == 0 and clusters(lazy) >= 2
        """),
        md("## 2. The last batch: padding or drop_last\n\n"
           "> *In lazy mode, the last batch is filled with extra samples by default so that it has the same dimensions as "
           "previous batches. This enables to avoid extra graph compilations during training. You can also discard the last "
           "batch with `dataloader_drop_last=True`.*\n\n"
           "1600 images in batches of 256 leave 64 for the last batch. Padding, as Optimum does it: repeat samples from "
           "the start until the last batch is full."),
        code("""
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
        """),
        code("""
        # claim O2
        hpu_lab.compiler.clear()                   # forget every recipe: count this section's compiles from zero
        fwd_bwd_compiles = {}
        for name, l in loaders.items():
            model, optimizer = fresh()
            with ev.Collector() as c:
                train_epoch(model, optimizer, l)
            fwd_bwd_compiles[name] = sorted({e.reason for e in c.of(ev.Compile) if e.node_count > 10})
            print(f"{name:15s} forward+backward compiles: {len(fwd_bwd_compiles[name])}  {fwd_bwd_compiles[name]}")
        assert len(fwd_bwd_compiles["no padding"]) == 2
        assert fwd_bwd_compiles["padded"] == [] and fwd_bwd_compiles["drop_last=True"] == []   # served from the cache
        """),
        md("(The first loader compiled the forward+backward graph for 256 — and once more for the last 64; the other two "
           "never met a new shape, so the cache served everything.)"),
        md("## 3. Warm-up steps\n\n"
           "> *In lazy mode, the first two or three training iterations may be slower due to graph compilations. To not "
           "take them into account in the computation of the throughput at the end of the training, you can add the "
           "following training argument: `throughput_warmup_steps=3`.*\n\nTen steps of batch 160, a shape not compiled yet, with Adadelta:"),
        code("""
        loader160 = torch.utils.data.DataLoader(train_set, batch_size=160)
        model, optimizer = fresh(torch.optim.Adadelta)
        step_times = []

        def timed_epoch():
            for data, target in loader160:
                t0 = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                loss = F.nll_loss(model(data.to(device)), target.to(device))
                loss.backward()
                htcore.mark_step()
                optimizer.step()
                htcore.mark_step()
                step_times.append(time.perf_counter() - t0)
        """),
        panel("Ten steps from a cold cache", "warm", live=False, body="""
        timed_epoch()
        torch.hpu.synchronize()
        """),
        md("Compiles happen in the first steps only:"),
        code("""
        # claim O3
        first = warm.of(ev.MarkStep)[0].step
        per_step = Counter((e.step - first) // 2 for e in warm.of(ev.Compile))
        print("compiles per step:", [per_step.get(i, 0) for i in range(10)])
        assert set(per_step) <= {0, 1, 2} and sum(per_step.values()) >= 2
        """),
        md("and they make those steps slow, so a throughput that includes them understates the steady state:"),
        code("""
        # NBVAL_IGNORE_OUTPUT
        # claim O3
        warmup = 3
        print("step times (ms):", [round(1e3 * t, 1) for t in step_times])
        all_steps = 160 * len(step_times) / sum(step_times)
        after_warmup = 160 * (len(step_times) - warmup) / sum(step_times[warmup:])
        print(f"throughput: {all_steps:.0f} samples/s over all steps, {after_warmup:.0f} samples/s with throughput_warmup_steps={warmup}")
        assert max(step_times[:warmup]) > 2 * sorted(step_times[warmup:])[len(step_times[warmup:]) // 2]
        assert after_warmup > all_steps
        """),
        md("## 4. Mixed-precision training: HMP\n\n"
           "> *Habana Mixed Precision (HMP) proposes to mix fp32 and bf16 operations … you can specify which operators to "
           "compute in bf16 with `hmp_bf16_ops` and which operators to compute in fp32 with `hmp_fp32_ops`.*\n\n"
           "Optimum's default lists, written to the files HMP reads:"),
        *when("amp", [
            code("""
            import logging, warnings
            from hpu_lab.hpex import hmp
            lists = tempfile.mkdtemp()
            with open(os.path.join(lists, "bf16.txt"), "w") as f:
                f.write("\\n".join(hmp.hmp_bf16_ops))
            with open(os.path.join(lists, "fp32.txt"), "w") as f:
                f.write("\\n".join(hmp.hmp_fp32_ops))
            print("bf16:", hmp.hmp_bf16_ops)
            print("fp32:", hmp.hmp_fp32_ops)
            """),
            code("""
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)     # HMP is deprecated in favour of autocast, and says so
                hmp.convert(opt_level="O1", bf16_file_path=os.path.join(lists, "bf16.txt"),
                            fp32_file_path=os.path.join(lists, "fp32.txt"))
            model, optimizer = fresh()
            data, target = two_batches[0]
            """),
            panel("One step with HMP", "hmp_step", """
            optimizer.zero_grad(set_to_none=True)
            output = model(data.to(device))
            loss = F.nll_loss(output, target.to(device))
            loss.backward()
            htcore.mark_step()
            with hmp.disable_casts():          # the optimizer keeps fp32 weights
                optimizer.step()
            htcore.mark_step()
            """),
            md("Each op of the forward graph runs in the dtype its list gives it; the casts are nodes of the graph:"),
            code("""
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
            """),
        ], "claim O4", "HMP op lists decide each op's dtype"),
        md("`torch.autocast` (`--bf16` in Optimum) does the same with the bridge's autocast lists: see notebook 01, section 9."),
        md("## 5. HPU Graphs for training\n\n"
           "> *To do so, specify `--use_hpu_graphs_for_training True`. This option will wrap the model in "
           "`habana_frameworks.torch.hpu.ModuleCacher`, which automatically records HPU Graphs on the model's usage.*\n\n"
           "That is, `ht.hpu.ModuleCacher()(model=model, inplace=True)`:"),
        code("""
        model, optimizer = fresh()
        model = htcore.hpu.ModuleCacher()(model=model, inplace=True)      # use_hpu_graphs_for_training=True
        """),
        panel("use_hpu_graphs_for_training: one epoch", "graphs", """
        train_epoch(model, optimizer, loader)
        """),
        code("""
        # claim O5
        print("graphs captured:", len(graphs.of(ev.CaptureEnd)), "(forward and backward), replays:", len(graphs.of(ev.Replay)))
        assert model.module_cacher.num_graphs == 1 and len(graphs.of(ev.CaptureEnd)) == 2
        assert len(graphs.of(ev.Replay)) == 2 * len(loader)
        """),
        md("## 6. Fast DDP\n\n"
           "> *`--distribution_strategy fast_ddp` … replaces the usage of `torch.nn.parallel.DistributedDataParallel` "
           "with much simpler and usually faster `optimum.habana.distributed.all_reduce_gradients`.*"),
        *([md("It needs two emulated cards: notebook 08, section 3, compares it with DDP.")] if have("distributed") else
          [todo("distributed", "claim O6", "fast_ddp: one all_reduce of a fused gradient buffer vs DDP's buckets")]),
        md("## 7. Pipelining forward and backward\n\n"
           "> *One potential optimization … is to trigger the HPU forward computation right after the CPU forward "
           "interpretation and before the CPU backward interpretation.* (`--pipelining_fwd_bwd True`)\n\n"
           "Optimum does it with one more `mark_step`, after the loss:"),
        code("""
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
        """),
        panel("One step, no pipelining", "plain", """
        step(data, target, pipelining=False)
        torch.hpu.synchronize()
        """),
        panel("One step, pipelining_fwd_bwd", "piped", """
        step(data, target, pipelining=True)
        torch.hpu.synchronize()
        """),
        md("With pipelining the forward graph is launched before the first backward op is traced; without it, the device "
           "gets nothing until the backward pass has been traced too:"),
        code("""
        # claim O7
        def first_launch_vs_backward(s):
            backward_ops = [e for e in s.of(ev.OpAccumulated) if "backward" in e.op or e.op.endswith("_bwd")]
            return s.of(ev.Launch)[0].t_start < backward_ops[0].t_start
        print("forward launched before backward traced — no pipelining:", first_launch_vs_backward(plain),
              "| pipelining:", first_launch_vs_backward(piped))
        assert not first_launch_vs_backward(plain) and first_launch_vs_backward(piped)
        assert len(piped.of(ev.Launch)) == len(plain.of(ev.Launch)) + 1
        """),
        md("> *When training models that require large device memory, we suggest disabling this optimization because it "
           "will increase the HPU memory usage.* (The forward's activations become graph outputs held until backward.)"),
        md("## 8. More data-loader workers\n\n"
           "> *If the workload of the data loader is heavy, you can increase the number of workers to make your run faster.*\n\n"
           "A dataset whose items take 3 ms each to prepare (decoding, augmenting ... here, a sleep):"),
        code("""
        class HeavyDataset(torch.utils.data.Dataset):
            def __len__(self):
                return 256
            def __getitem__(self, i):
                time.sleep(0.004)                        # expensive preprocessing
                g = torch.Generator().manual_seed(i)
                return torch.randn(1, 28, 28, generator=g), i % 10

        model, optimizer = fresh()
        heavy_loaders = {n: torch.utils.data.DataLoader(HeavyDataset(), batch_size=64, num_workers=n,
                                                        persistent_workers=n > 0) for n in (0, 2)}

        def epoch_seconds(num_workers):
            t0 = time.perf_counter()
            train_epoch(model, optimizer, heavy_loaders[num_workers])
            torch.hpu.synchronize()
            return time.perf_counter() - t0

        _ = epoch_seconds(0), epoch_seconds(2)      # warm up: compile, start the workers
        """),
        code("""
        # NBVAL_IGNORE_OUTPUT
        # claim O8
        t0, t2 = epoch_seconds(0), epoch_seconds(2)
        print(f"dataloader_num_workers=0: {t0:.2f} s per epoch;  =2: {t2:.2f} s per epoch")
        assert t2 < 0.85 * t0
        """),
        md("## 9. Non-blocking data copy\n\n"
           "> *`--non_blocking_data_copy True` … the host can continue to execute other tasks (e.g. graph building) to get a "
           "better pipelining between the host and the device.*"),
        *when("pinned", [
            code("""
            # claim O9
            assert False, "write the O9 experiment: host time per step with non_blocking=True vs False"
            """),
        ], "claim O9", "non_blocking host-to-device copies let the host go on (needs an asynchronous copy path)"),
        md("## 10. Fused ADAM and fused gradient-norm clipping\n\n"
           "> *Habana provides a custom fused ADAM implementation … The default value of epsilon is 1e-6 for the Habana fused "
           "ADAM optimizer, while it is 1e-8 for `torch.optim.AdamW`.*"),
        *when("fused", [
            code("""
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
            """),
            code("""
            # claim O10
            torch_sizes = update_graph(lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=False),
                                       lambda p: torch.nn.utils.clip_grad_norm_(p, 1.0))
            fused_sizes = update_graph(lambda p: FusedAdamW(p, lr=1e-3),
                                       lambda p: FusedClipNorm(p, 1.0).clip_norm(p))
            print("graph nodes of the clip + update, torch:", torch_sizes, " fused:", fused_sizes)
            assert sum(fused_sizes) < sum(torch_sizes) / 5
            """),
            code("""
            # claim O10
            torch_eps = torch.optim.AdamW([torch.zeros(1)]).defaults["eps"]
            fused_eps = FusedAdamW([torch.zeros(1, device=device)]).defaults["eps"]
            print(f"default eps: torch.optim.AdamW {torch_eps:g}, FusedAdamW {fused_eps:g}")
            assert (torch_eps, fused_eps) == (1e-8, 1e-6)
            """),
        ], "claim O10", "fused Adam / clip-norm node counts and default eps"),
        md("## 11. Tracking memory usage\n\n"
           "> *`memory_allocated (GB)` refers to the current memory consumption in GB, `max_memory_allocated (GB)` … the "
           "maximum memory consumption reached during the run, `total_memory_available (GB)` … the total memory available on the device.*\n\n"
           "The three numbers Optimum logs every `logging_steps`, taken after an epoch with batch 800:"),
        code("""
        torch.hpu.reset_peak_memory_stats()
        model, optimizer = fresh(torch.optim.Adadelta)
        train_epoch(model, optimizer, torch.utils.data.DataLoader(train_set, batch_size=800))
        import gc
        _ = gc.collect()                           # free what Python no longer references ...
        torch.hpu.synchronize()                    # ... and let the device thread finish its frees
        """),
        code("""
        # claim O11
        def to_gb(b):
            return round(b / 1024 ** 3, 4)
        stats = {
            "memory_allocated (GB)": to_gb(torch.hpu.memory_allocated()),
            "max_memory_allocated (GB)": to_gb(torch.hpu.max_memory_allocated()),
            "total_memory_available (GB)": to_gb(torch.hpu.mem_get_info()[1]),
        }
        print(stats)
        assert 0 < torch.hpu.memory_allocated() <= torch.hpu.max_memory_allocated() < torch.hpu.mem_get_info()[1]
        assert stats["total_memory_available (GB)"] == 96.0          # a Gaudi 2's HBM (HPU_LAB_MEMORY_LIMIT)
        """),
        md("""
        ## Summary
        - Lazy mode gives the compiler whole graphs to fuse; eager mode gives it one op at a time.
        - A last batch of another size costs a compile: pad it (Optimum's default) or drop it.
        - The first steps compile; exclude them from throughput (`throughput_warmup_steps`).
        - HMP's lists (or autocast's) decide each op's dtype; the casts are visible nodes.
        - `use_hpu_graphs_for_training` is `ModuleCacher`; `pipelining_fwd_bwd` is one more `mark_step` that lets the device
          start the forward while the host traces the backward; workers take data preparation off the main thread.
        - Fused AdamW and clip-norm replace hundreds of small ops by one node (note the different default eps).

        ## Exercises
        1. In section 2, use `batch_size=200`. Which loaders differ now?
        2. In section 4, move `optimizer.step()` out of `hmp.disable_casts()`. What happens to the parameters' dtype?
        3. In section 7, measure one epoch with and without pipelining on the small MLP. Does it help here? (Notebook 02's host-bound model is a better candidate.)
        4. In section 10, compare `torch.optim.AdamW(foreach=True)` with `FusedAdamW`: how many graph nodes each?
        """),
    ]

# ============================================================================= 07 general model optimizations

DISK_CACHE_SCRIPT = """\
import json, sys
import torch, torch.nn as nn, torch.nn.functional as F
import hpu_lab, hpu_lab.core as htcore
from hpu_lab import disk_cache
from hpu_lab.metrics import metric_global

width = int(sys.argv[1])
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(784, width), nn.ReLU(), nn.Linear(width, 10)).to("hpu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, t = torch.randn(64, 1, 28, 28).to("hpu"), torch.randint(0, 10, (64,)).to("hpu")
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), t)
    loss.backward()
    htcore.mark_step()
    opt.step()
    htcore.mark_step()
print(json.dumps({"compiles": metric_global("graph_compilation")["TotalNumber"],
                  "disk": dict(metric_global("disk_cache").stats()), "loss": round(loss.item(), 4)}))
disk_cache.flush_writes()
"""


def nb07():
    return [
        md("""
        # General model optimizations: the checklist, one experiment each

        Seed document: *General Model Optimizations*. A list of things to check in any model that runs on Gaudi:
        ops that fall back to the CPU, where `mark_step` goes, batch size, fused ops, fused attention, the disk recipe
        cache, how often you print, pinned memory, constants in loops, weight sharing.

        **What you'll do**
        - read the CPU-fallback log and its frequency table;
        - measure what batch size, fused optimizers and FusedSDPA change;
        - use the disk recipe cache across two runs of a script, and watch it evict;
        - count the host syncs that printing causes, and the recompiles a loop variable causes.

        **What you'll learn**
        - how to spot each of these problems in the panel, and the one-line fix for each.

        **What you'll need**
        - notebooks 01–04; about a minute of CPU time.
        """),
        setup_cell("import time, os, sys, json, subprocess, tempfile\nfrom hpu_lab.data import MNISTLike\nfrom hpu_lab.bench_graphs import host_cpu_ns"),
        code(NET + """

device = torch.device("hpu")
train_set = MNISTLike(train=True)"""),
        md("## 1. Placement of ops on HPU: CPU fallback\n\n"
           "> *Execution of an op automatically falls back to CPU if the op is not registered with its backend as HPU or "
           "if op is registered but the requested datatype is not supported on HPU.*\n\n"
           "Turn the fallback log on (`ENABLE_CONSOLE=true LOG_LEVEL_PT_FALLBACK=1`) and call `digamma` on bfloat16:"),
        *when("fallback", [
            code("""
            # claim M1
            hpu_lab.config.set(ENABLE_CONSOLE="true", LOG_LEVEL_PT_FALLBACK="1")
            x = torch.linspace(1, 3, 6, device=device).to(torch.bfloat16)
            with ev.Collector() as fb:
                y = torch.digamma(x)
                z = torch.digamma(x * 2)
            htcore.mark_step()
            assert [e.op for e in fb.of(ev.CPUFallback)] == ["aten::digamma"] * 2
            """),
            md("At exit the bridge prints how often each op ran on the CPU; `hpu_lab.fallback.frequency_table()` gives the "
               "table now, and the `cpu_fallback` metric counts the same:"),
            code("""
            # claim M1
            from hpu_lab import fallback
            print(fallback.frequency_table())
            print(dict(metric_global("cpu_fallback").stats()))
            assert "aten::digamma" in fallback.frequency_table()
            assert metric_global("cpu_fallback")["FallbackOps"]["aten::digamma"] >= 2
            hpu_lab.config.set(ENABLE_CONSOLE="false", LOG_LEVEL_PT_FALLBACK="5")
            """),
            md("Each fallback is a host sync and two copies; in float32, where HPU has the kernel, there is none:"),
            code("""
            with ev.Collector() as fp32:
                y32 = torch.digamma(torch.linspace(1, 3, 6, device=device))
                htcore.mark_step()
            print("fallbacks in float32:", len(fp32.of(ev.CPUFallback)))
            assert fp32.of(ev.CPUFallback) == []
            """),
        ], "claim M1", "CPU fallback log lines and frequency table"),
        md("## 2. Usage of mark_step\n\nBoth uses the seed lists — breaking a graph that does not fit in memory (claim M2), "
           "and separating static from dynamic parts (claim M3) — are demonstrated in notebook 02, sections 5 and 6."),
        md("## 3. Batch size\n\n"
           "> *A large batch size is, in general, beneficial for throughput … Batch size is limited by Gaudi's device memory "
           "(HBM) size. Usually, larger batch size means more memory consumption in device.*\n\n"
           "One epoch of seed 000's model at batch sizes 100, 400 and 800:"),
        code("""
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
            t0 = time.perf_counter()
            for data, target in batches:
                optimizer.zero_grad(set_to_none=True)
                F.nll_loss(model(data), target).backward()
                htcore.mark_step()
                optimizer.step()
                htcore.mark_step()
            torch.hpu.synchronize()
            return len(train_set) / (time.perf_counter() - t0), torch.hpu.max_memory_allocated() - base

        for b in (100, 400, 800):
            epoch(b)                                   # compile each shape first
        results = {b: epoch(b) for b in (100, 400, 800)}
        """),
        md("Device memory at the peak grows with the batch:"),
        code("""
        # claim M4
        peaks = [results[b][1] for b in (100, 400, 800)]
        print("peak device memory above the inputs:", {b: f"{results[b][1] / 2**20:.2f} MiB" for b in results})
        assert peaks[0] < peaks[1] < peaks[2]
        """),
        md("and so does throughput, as the per-step host cost is spread over more samples (times vary by machine):"),
        code("""
        # NBVAL_IGNORE_OUTPUT
        # claim M4
        print({b: f"{results[b][0]:.0f} samples/s" for b in results})
        assert results[800][0] > results[100][0]
        """),
        md("## 4. PyTorch mixed precision\n\nSee notebook 01 (autocast, claim T11) and notebook 06 (HMP lists, claim O4)."),
        md("## 5. Usage of fused operators\n\n"
           "> *Create a custom op for optimizers (E.g. FusedSGD, FusedAdamW) and other complex ops (e.g FusedClipNorm) to "
           "minimize host performance overheads of running many small ops.*\n\n"
           "A deep model has many parameter tensors, and `torch.optim.SGD` traces a few ops for each of them, every step:"),
        *when("fused", [
            code("""
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
                    with ev.Collector(kinds=[ev.Launch]) as c:
                        h0 = host_cpu_ns()
                        opt.step()
                        htcore.mark_step()
                        host.append((host_cpu_ns() - h0) / 1e6)
                    nodes.append(sum(1 for l in c.events for n in l.graph.nodes    # ops (not inputs, outputs, views)
                                     if n.op not in ("input", "output", "view")))
                return nodes[-1], sorted(host[2:])[len(host[2:]) // 2]

            torch_nodes, torch_ms = update(lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, foreach=False))
            fused_nodes, fused_ms = update(lambda p: FusedSGD(p, lr=0.01, momentum=0.9))
            """),
            code("""
            # claim M5
            print(f"{len(list(deep().parameters()))} parameter tensors; nodes in the update graph: "
                  f"torch.optim.SGD {torch_nodes}, FusedSGD {fused_nodes}")
            assert fused_nodes <= 3 and torch_nodes > 20 * fused_nodes
            """),
            md("Fewer ops traced is less host time per update (CPU time of the host threads; varies by machine):"),
            code("""
            # NBVAL_IGNORE_OUTPUT
            # claim M5
            print(f"host time of one update: torch.optim.SGD {torch_ms:.2f} ms, FusedSGD {fused_ms:.2f} ms")
            assert fused_ms < torch_ms
            """),
        ], "claim M5", "fused optimizers: node counts and host time"),
        md("## 6. Fused scaled dot product attention (FusedSDPA)\n\n"
           "> *FusedSDPA … maintains the same functionality and interface as the original function but with reduced memory "
           "usage … Recompute mode … necessary parts of the forward pass are recomputed during backward pass to reduce memory "
           "usage … No-recompute mode … can have larger memory needs compared to recompute mode. This mode still has memory "
           "benefits compared to non-fused attention implementations.*"),
        *when("sdpa", [
            code("""
            from hpu_lab.hpex.kernels import FusedSDPA

            def attention(kind, q, k, v):
                if kind == "unfused":
                    return F.scaled_dot_product_attention(q, k, v)
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
            """),
            md("Same results as PyTorch's own attention (on the CPU), forward and gradient:"),
            code("""
            # claim M6
            torch.manual_seed(0)
            qc, kc, vc = [torch.randn(2, 4, 256, 32).requires_grad_() for _ in range(3)]
            ref = F.scaled_dot_product_attention(qc, kc, vc)
            ref.sum().backward()
            for kind, (out, dq, _) in runs.items():
                assert torch.allclose(out, ref.detach(), atol=1e-5) and torch.allclose(dq, qc.grad, atol=1e-4), kind
            print("outputs and gradients equal F.scaled_dot_product_attention on CPU for", list(runs))
            """),
            md("and the peak device memory of forward + backward, in the order the seed gives:"),
            code("""
            # claim M6
            peak = {kind: r[2] for kind, r in runs.items()}
            print({kind: f"{b / 2**20:.1f} MiB" for kind, b in peak.items()})
            assert peak["recompute"] < peak["no-recompute"] < peak["unfused"]
            """),
        ], "claim M6", "FusedSDPA: same result, less memory, recompute least"),
        md("## 7. Perf tool\n\n"
           "> *The habana_perf_tool scans and provides guidance on existing log files … such as increasing batch size or MME "
           "and TPC usages and timings.*\n\n"
           "The panel's Advice tab does the same from the events. The batch-100 epoch of section 3, once more:"),
        panel("Batch 100, for the advisor", "small_batch", """
        _ = epoch(100)
        """),
        code("""
        for line in widgets.advise(small_batch.events):
            print("-", line.split(":")[0])
        """),
        md("## 8. Disk caching eviction policy\n\n"
           "> *Disk Caching is a mechanism that can limit the number of graph compilations for both training and inference "
           "workloads … the PyTorch bridge iterates over recipes in cache and removes the oldest recipes (by creation date on "
           "file system) first until the total size is under the limit.*\n\n"
           "A training script, run as separate processes with `PT_HPU_RECIPE_CACHE_CONFIG=<folder>,false,<max MB>`:"),
        *when("disk_cache", [
            code("""
            workdir = tempfile.mkdtemp()
            cache_dir = os.path.join(workdir, "recipes")
            with open(os.path.join(workdir, "train_script.py"), "w") as f:
                f.write(DISK_CACHE_SCRIPT)

            def run_script(width, max_mb=1024, log=False):
                env = dict(os.environ, PT_HPU_RECIPE_CACHE_CONFIG=f"{cache_dir},false,{max_mb}")
                if log:
                    env.update(ENABLE_CONSOLE="true", LOG_LEVEL_PT_HABHELPER="2")
                p = subprocess.run([sys.executable, "train_script.py", str(width)], cwd=workdir, env=env,
                                   capture_output=True, text=True, check=True)
                return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr

            def folder_mb():
                return sum(os.path.getsize(os.path.join(cache_dir, n)) for n in os.listdir(cache_dir)) / 2**20
            """.replace("DISK_CACHE_SCRIPT", repr(DISK_CACHE_SCRIPT))),
            md("The first run compiles and stores its recipes; the second, a new process, finds them on disk:"),
            code("""
            # claim M7
            cold, _ = run_script(128)
            warm, _ = run_script(128)
            print("first run: ", cold)
            print("second run:", warm)
            assert cold["compiles"] >= 2 and warm["compiles"] == 0
            assert warm["disk"]["TotalHit"] == cold["compiles"] and warm["loss"] == cold["loss"]
            """),
            md("Now cap the folder below what two more models need, and log the evictions:"),
            code("""
            # claim M7
            cap_mb = round(1.2 * folder_mb(), 3)                 # room for about one model's recipes
            logs = [run_script(w, max_mb=cap_mb, log=True)[1] for w in (96, 64)]
            removed = [l for log in logs for l in log.splitlines() if l.startswith("Removed ")]
            print(f"cap {cap_mb} MB; evictions logged: {len(removed) > 0}; folder within cap: {folder_mb() <= cap_mb}")
            print(removed[0].split(" successfully")[0][:15] + "... successfully. Disk cache size after removal: ...")
            assert removed and folder_mb() <= cap_mb
            """),
        ], "claim M7", "disk recipe cache across runs, and eviction under the cap"),
        md("## 9. Gradient buckets in multi-card training\n\n"
           "> *Based on the size of the model, the size of the gradient bucket can be adjusted to minimize the number of "
           "invocations of all-reduce in the backward pass.*"),
        *([md("Notebook 08, section 2, launches DDP on two emulated cards with two bucket sizes and counts the all-reduces.")]
          if have("distributed") else [todo("distributed", "claim M8", "all-reduce count vs DDP bucket_cap_mb")]),
        md("## 10. Reducing the frequency of printing quantities\n\n"
           "> *Printing these tensors in the training script requires these device tensors to be pulled to the host CPU and "
           "therefore needs the device execution to finish. This can result in non-overlapped execution between host and "
           "device.*\n\nThe same 8 steps, printing the loss every step, then only at the end:"),
        code("""
        torch.manual_seed(0)
        model = Net().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        batches = [(d.to(device), t.to(device)) for d, t in torch.utils.data.DataLoader(train_set, batch_size=200)]

        def train(print_freq):
            for i, (data, target) in enumerate(batches):
                optimizer.zero_grad(set_to_none=True)
                loss = F.nll_loss(model(data), target)
                loss.backward()
                htcore.mark_step()
                optimizer.step()
                htcore.mark_step()
                if print_freq and i % print_freq == 0:
                    print(f"step {i}: loss {loss.item():.3f}")
            return loss

        train(0); torch.hpu.synchronize()           # warm up
        """),
        panel("print(loss.item()) every step", "chatty", """
        train(print_freq=1)
        torch.hpu.synchronize()
        """),
        panel("print only at the end", "quiet", """
        loss = train(print_freq=0)
        print(f"final loss {loss.item():.3f}")
        """),
        md("Every print made the host wait for the device; the quiet run waited once. The Timeline shows the red waits:"),
        code("""
        # claim M9
        reads = {s.title: Counter(e.reason for e in s.of(ev.HostSync))[".item()"] for s in (chatty, quiet)}
        print("host syncs to read the loss:", reads)
        assert list(reads.values()) == [8, 1]
        """),
        code("""
        # NBVAL_IGNORE_OUTPUT
        # claim M9
        def waited_ms(s):
            return sum(e.duration_ns for e in s.of(ev.HostSync)) / 1e6
        print(f"host time spent waiting: every step {waited_ms(chatty):.1f} ms, at the end {waited_ms(quiet):.1f} ms")
        """),
        md("## 11. Pinning memory for the data loader\n\n"
           "> *Pinning the memory while instantiating the dataloader avoids a redundant copy in host during the training iteration.*"),
        *when("pinned", [
            code("""
            # claim M10
            assert False, "write the M10 experiment: pin_memory=True copy path"
            """),
        ], "claim M10", "pinned memory avoids a host copy (DataLoader(pin_memory=True) does not work yet)"),
        md("## 12. Avoiding constant variables in loops\n\n"
           "> *Such a loop iterator variable may cause a creation of different constant operators in the execution graph "
           "every iteration.*\n\nThe seed's V-Diffusion loop, before and after:"),
        code("""
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
        """),
        panel("Loop variable in the graph", "loopvar", """
        sample(use_roll=False)
        """),
        panel("torch.roll instead", "rolled", """
        sample(use_roll=True)
        """),
        md("With `steps[i]`, `i` is a constant of the graph, so every iteration compiles a new graph — the Recompiles tab "
           "names it; with `torch.roll`, the graph is the same every iteration:"),
        code("""
        # claim M11
        def loop_compiles(s):                      # leave out the graph that made `steps` (linspace)
            return [e for e in s.of(ev.Compile) if not any(n.op == "aten::linspace" for n in e.graph.nodes)]
        for e in loop_compiles(loopvar):
            print(e.reason)
        print("compiles in the loop — steps[i]:", len(loop_compiles(loopvar)), "  torch.roll:", len(loop_compiles(rolled)))
        assert len(loop_compiles(loopvar)) == num_steps - 4 and len(loop_compiles(rolled)) == 1
        assert sum("loop variable?" in e.reason for e in loop_compiles(loopvar)) == num_steps - 5
        """),
        md("## 13. Weight sharing\n\n"
           "> *Weights can be shared using PyTorch with Gaudi only if they are created inside the module.*\n\nThe seed's example:"),
        *when("weight_sharing", [
            code("""
            # Example module
            class WeightShareModule(torch.nn.Module):
                def __init__(self):
                    super(WeightShareModule, self).__init__()
                    self.a = torch.nn.Parameter(torch.ones([2]))
                    self.b = torch.nn.Parameter(torch.ones([2]))

                def forward(self, input):
                    c = self.a * input + self.b * input
                    return c

            def one_step(device):
                module = WeightShareModule()
                # module.a and module.b are shared
                module.a = module.b
                # Move the module to HPU device
                module.to(device)
                opt = torch.optim.SGD(module.parameters(), lr=0.1)
                module(torch.tensor([1.0, 2.0], device=device)).sum().backward()
                opt.step()
                return module
            """),
            code("""
            # claim M12
            hpu_module, cpu_module = one_step("hpu"), one_step("cpu")
            print("still shared on hpu:", hpu_module.a is hpu_module.b, "| a after one step:", hpu_module.a.detach().cpu())
            assert hpu_module.a is hpu_module.b
            assert torch.equal(hpu_module.a.detach().cpu(), cpu_module.a.detach())   # updated once, with both gradients
            """),
        ], "claim M12", "the seed's weight-sharing example: shared parameter updated once (today `module.to(\"hpu\")` unties shared parameters)"),
        md("""
        ## Summary
        - Check the CPU-fallback log: every fallback is a sync and two copies; change the dtype or the op.
        - Bigger batches use more device memory and give more throughput, until memory runs out.
        - Fused optimizers and FusedSDPA replace many small ops by one: less host time, less memory.
        - The disk recipe cache carries compiled recipes across runs and keeps its folder under the cap.
        - Print rarely: every `.item()` is a host sync. Keep loop variables out of the graph (`torch.roll`).

        ## Exercises
        1. In section 1, call `torch.lgamma` on bfloat16. What does the log say?
        2. In section 3, try batch 1600 with `HPU_LAB_MEMORY_LIMIT` set so that 800 fits but 1600 does not (`hpu_lab.config.set`). What error do you get?
        3. In section 10, print every 4 steps. How many syncs, and how does the Timeline change?
        4. In section 12, replace `steps[i]` by `steps[i].item()` (a Python float). Does that avoid the recompiles? What does it cost?
        """),
    ]

# ============================================================================= 08 distributed

MULTICARD = """\
%%writefile {workdir}/multicard.py
import json, sys
import torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist
import hpu_lab.compat
hpu_lab.compat.enable_habana_imports()                 # the Gaudi spelling of the imports below
import habana_frameworks.torch.core as htcore
from habana_frameworks.torch.distributed.hccl import initialize_distributed_hpu
from hpu_lab.distributed.fast_ddp import all_reduce_gradients
from hpu_lab.metrics import metric_localcontext
from hpu_lab import config

world_size, rank, local_rank = initialize_distributed_hpu()   # reads torchrun's variables
dist.init_process_group("hccl", rank=rank, world_size=world_size)


def report(**results):                                 # one line per rank, read by the notebook
    sys.stdout.write(f"RESULT {rank} {json.dumps(results)}\\n")   # one write: the ranks share the pipe
    sys.stdout.flush()


def hello():
    t = torch.full((4,), float(rank + 1), device="hpu")
    dist.all_reduce(t)                                 # 1 + 2 on every card
    report(backend=dist.get_backend(), world_size=world_size, sum=t.cpu().tolist())


def mlp():
    torch.manual_seed(0)                               # the same initial weights on every card
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                         nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def train(mode, steps=3, **kw):
    model = mlp().to("hpu")
    net = nn.parallel.DistributedDataParallel(model, **kw) if mode == "ddp" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1234 + rank)     # each card its own data
    all_reduces = []
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
        all_reduces.append(m.ops.get("all_reduce", 0))
    checksum = sum(p.detach().cpu().double().sum().item() for p in model.parameters())
    return {"all_reduce_per_step": all_reduces, "checksum": round(checksum, 5)}


def buckets():
    report(ddp_25MB=train("ddp", bucket_cap_mb=25),
           ddp_50KB=train("ddp", bucket_cap_mb=0.05),
           ddp_50KB_grad_view=train("ddp", bucket_cap_mb=0.05, gradient_as_bucket_view=True),
           fast_ddp=train("fast_ddp", fusion_buffer_dtype=torch.float32))


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


def inference():
    torch.manual_seed(0)
    full = nn.Linear(16, 8)
    model = htcore.hpu.wrap_in_hpu_graph(RowParallelLinear(full).to("hpu").eval())
    x = torch.randn(4, 16)
    try:
        with torch.no_grad():
            model(x.to("hpu"))
        without = "no error"
    except RuntimeError as e:
        without = f"{type(e).__name__}: {e}"
    config.set(PT_HPU_ENABLE_LAZY_COLLECTIVES="true")   # as the environment variable would
    model = htcore.hpu.wrap_in_hpu_graph(RowParallelLinear(full).to("hpu").eval())
    hpu_graph = metric_localcontext("hpu_graph")
    with hpu_graph as hg, torch.no_grad():
        answers = [model(xi.to("hpu")).cpu() for xi in (x, x * 2, x * 3, x * 4)]
    correct = all(torch.allclose(a, full(xi), atol=1e-5) for a, xi in zip(answers, (x, x * 2, x * 3, x * 4)))
    report(without=without, captures=hg.captures, replays=hg.replays, correct=correct)


globals()[sys.argv[1]]()
dist.destroy_process_group()
"""


def nb08():
    return [
        md("""
        # Distributed training: HCCL, gradient buckets, fast_ddp, multi-card inference

        Seed documents: *Theory of Operations* (*Distributed Training*), *General Model Optimizations* (gradient buckets),
        *Optimum Habana: Accelerating Training* (fast_ddp) and *Run Inference Using HPU Graphs* (lazy collectives).

        > *Intel Gaudi PyTorch implements HCCL communication backend to support scale-up and scale-out.*

        hpu_lab emulates several cards on one machine: `torchrun` starts one process per card, and the `"hccl"` backend
        (gloo underneath) carries the collectives between them.

        **What you'll do**
        - write one training script and launch it on two emulated cards with `torchrun`;
        - count the all-reduces of DDP for two bucket sizes, and of Optimum Habana's `fast_ddp`;
        - run tensor-parallel inference in an HPU Graph, without and with `PT_HPU_ENABLE_LAZY_COLLECTIVES`.

        **What you'll learn**
        - what `bucket_cap_mb` trades, what `fast_ddp` does differently, and why graphs need lazy collectives.

        **What you'll need**
        - notebooks 03 and 05; about half a minute (each launch starts two Python processes).
        """),
        setup_cell("import os, sys, json, socket, subprocess, tempfile\nworkdir = tempfile.mkdtemp()"),
        md("## 1. The script, and a launcher\n\nEvery card runs the same script; it prints one `RESULT` line per card:"),
        code(MULTICARD),
        md("`launch` starts it on two cards with `torchrun`, as you would on a Gaudi server, and collects the results:"),
        code("""
        def launch(scenario, cards=2):
            with socket.socket() as s:                      # a free port for the rendezvous
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={cards}",
                   "--master_addr=127.0.0.1", f"--master_port={port}", "multicard.py", scenario]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
            lines = [l.split(" ", 2) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            results = {int(rank): json.loads(payload) for _, rank, payload in lines}
            assert sorted(results) == list(range(cards)), p.stdout[-3000:] + p.stderr[-3000:]
            return results
        """),
        md("## 2. HCCL\n\n`dist.init_process_group(\"hccl\")`, then an all-reduce of `rank + 1` on each card:"),
        code("""
        hello = launch("hello")
        for rank, r in sorted(hello.items()):
            print(rank, r)
        assert all(r["backend"] == "hccl" and r["sum"] == [3.0] * 4 for r in hello.values())
        """),
        md("## 3. Gradient buckets and fast_ddp\n\n"
           "> *Based on the size of the model, the size of the gradient bucket can be adjusted to minimize the number of "
           "invocations of all-reduce in the backward pass of every training iteration.*\n\n"
           "Three steps of a 4-layer MLP (~38k parameters, 150 KB of gradients) under DDP with 25 MB buckets and with 50 KB "
           "buckets, with `gradient_as_bucket_view=True`, and with Optimum Habana's `fast_ddp`:"),
        code("""
        runs = launch("buckets")
        for name, r in runs[0].items():
            print(f"{name:20s} all-reduces per step: {r['all_reduce_per_step']}")
        """),
        md("DDP's first iteration uses one bucket (it learns the order of the gradients); after that, small buckets mean "
           "more all-reduces per step. Every card ends with the same weights:"),
        code("""
        # claim M8
        r0, r1 = runs[0], runs[1]
        big, small = r0["ddp_25MB"]["all_reduce_per_step"], r0["ddp_50KB"]["all_reduce_per_step"]
        assert big == [1, 1, 1] and small[1] == small[2] >= 3
        assert r0["ddp_50KB_grad_view"]["all_reduce_per_step"] == small      # views of the buckets: same traffic
        assert all(r0[k]["checksum"] == r1[k]["checksum"] for k in r0)       # the cards agree
        """),
        md("> *This option replaces the usage of `torch.nn.parallel.DistributedDataParallel` with much simpler and usually "
           "faster `optimum.habana.distributed.all_reduce_gradients`.*\n\n"
           "`fast_ddp` packs all gradients into one buffer and makes exactly one all-reduce per step, whatever the model:"),
        code("""
        # claim O6
        print("fast_ddp all-reduces per step:", r0["fast_ddp"]["all_reduce_per_step"])
        assert r0["fast_ddp"]["all_reduce_per_step"] == [1, 1, 1]
        assert abs(r0["fast_ddp"]["checksum"] - r0["ddp_25MB"]["checksum"]) < 1e-3      # the same training
        """),
        md("## 4. Multi-card inference with HPU Graphs\n\n"
           "> *Multi-card support for inference (DeepSpeed) using HPU Graphs is applicable only with "
           "`PT_HPU_ENABLE_LAZY_COLLECTIVES=true`.*\n\n"
           "A row-parallel linear layer (each card multiplies half of the inputs, an all-reduce sums the halves), wrapped "
           "with `wrap_in_hpu_graph`, first without the variable, then with it:"),
        code("""
        # claim I7
        inference = launch("inference")
        for rank, r in sorted(inference.items()):
            print(rank, r["without"])
            print(rank, f"with lazy collectives: {r['captures']} capture, {r['replays']} replays, answers correct: {r['correct']}")
        assert all("PT_HPU_ENABLE_LAZY_COLLECTIVES=true" in r["without"] for r in inference.values())
        assert all(r["captures"] == 1 and r["replays"] == 3 and r["correct"] for r in inference.values())
        """),
        md("""
        ## Summary
        - `dist.init_process_group("hccl")` under `torchrun` gives one process per card; DDP runs unchanged on top.
        - DDP all-reduces gradients bucket by bucket: `bucket_cap_mb` sets how many all-reduces a step makes.
        - `fast_ddp` makes one all-reduce of one fused buffer per step.
        - A collective inside an HPU Graph must be part of the graph: that is what `PT_HPU_ENABLE_LAZY_COLLECTIVES=true` does.

        ## Exercises
        1. Launch `buckets` on 3 cards. Do the all-reduce counts change? Should they?
        2. Give `fast_ddp` its default `fusion_buffer_dtype=torch.bfloat16`. Do the cards still agree with DDP's weights? How closely?
        3. Make the row-parallel layer column-parallel (split the outputs, then `all_gather`). Does it capture with lazy collectives?
        """),
    ]

NOTEBOOKS = {
    "00_start_here": nb00,
    "01_theory_of_operations": nb01,
    "02_lazy_mode_and_mark_step": nb02,
    "03_hpu_graphs_for_training": nb03,
    "04_dynamicity": nb04,
    "05_hpu_graphs_for_inference": nb05,
    "06_accelerating_training": nb06,
    "07_general_optimizations": nb07,
    "08_distributed": nb08,
}


# ----------------------------------------------------------------------------- write and execute

def build(name: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = flatten(NOTEBOOKS[name]())
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    path = os.path.join(HERE, f"{name}.ipynb")
    nbformat.write(nb, path)
    return path


def execute(path: str) -> bool:
    """Run the notebook in a fresh kernel and store its outputs (also when a cell fails, so the
    failure can be read in the file). The same as ``jupyter nbconvert --execute --inplace``."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    venv_bin = os.path.join(ROOT, ".venv", "bin")
    os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": HERE}})
    ok = True
    try:
        client.execute()
    except CellExecutionError as e:
        ok = False
        print(f"FAILED {os.path.basename(path)}:\n{str(e)[-3000:]}")
    nbformat.write(nb, path)
    return ok


def use_committed_code(tmp: str) -> None:
    """Make the kernels import hpu_lab and widgets as committed (HEAD), not as the working tree has
    them: others edit the runtime in this checkout while the notebooks are built."""
    archive = subprocess.run(["git", "archive", "HEAD", "hpu_lab", "widgets"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
    os.environ["PYTHONPATH"] = tmp + os.pathsep + os.environ.get("PYTHONPATH", "")
    head = subprocess.run(["git", "log", "-1", "--format=%h %s"], cwd=ROOT, capture_output=True, text=True).stdout
    print("running against HEAD:", head.strip()[:100])


def main(argv) -> None:
    if "--worktree" not in argv and "--no-exec" not in argv:
        import tempfile
        use_committed_code(tempfile.mkdtemp(prefix="hpu_lab_head_"))
    run = "--no-exec" not in argv
    wanted = [a for a in argv if not a.startswith("--")]
    names = [n for n in NOTEBOOKS if not wanted or any(n.startswith(w) for w in wanted)]
    missing = [f"{k}: {v[0]}" for k, v in FEATURES.items() if not have(k)]
    if missing:
        print("features not landed yet (TODO cells):\n  " + "\n  ".join(missing))
    failed = []
    for name in names:
        path = build(name)
        print("wrote", os.path.relpath(path, ROOT))
        if run and not execute(path):
            failed.append(name)
    if failed:
        sys.exit(f"notebooks with a failing cell: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
