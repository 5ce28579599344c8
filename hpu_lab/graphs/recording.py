"""What a capture records, and how a replay runs it: no dispatch, no graph build, no hashing.

During a capture the lazy runtime works as usual (ops accumulate, flushes compile recipes), and
``lazy.S.capture`` is a ``Capture`` that it reports to:

- ``saw(inp, storage)``: an op read the device buffer ``inp`` through ``storage``;
- ``created(inp)``: the host made a buffer during the capture (an H2D copy, or a random draw that
  carries a ``regen`` callable to draw again);
- ``launch`` / ``on_flush``: one recipe of the captured work was compiled (and launched, unless
  dry run) and its outputs went to these storages;
- ``refuse`` / ``refuse_view_write``: something a graph cannot hold (a sync, a CPU fallback, an
  in-place update of a view): the capture is abandoned with the documented message.

``finish()`` turns that into a ``Recording``: per recipe, where each input comes from at replay time
and which storages receive each output. ``run()`` replays it: it reads the *current* value of each
input storage (static inputs the user copied into, parameters an optimizer updated outside the
graph), launches the recipe, and rebinds the output storages, so the outputs are the same tensor
objects after every replay (claims G3, I1).
"""
from __future__ import annotations

import itertools
import warnings
import weakref

import torch

from .. import events as ev
from .. import lazy
from ..lazy.capture import GraphCapture
from ..runtime import executor
from ..lazy.launch import launch_recipe
from ..util._source import user_src
from ..tensor import Inp, Out
from ._common import HPUGraphError

# where a recipe input comes from at replay time
STORAGE = 0     # the current value of a storage that existed before the capture (held by the graph)
WEAK = 1        # the same, through a weak reference (after clear_inputs / disable_tensor_cache)
PRODUCED = 2    # output k of an earlier recipe of this same replay
REGEN = 3       # a random buffer drawn during the capture: drawn again at each replay
CONST = 4       # a buffer the host made during the capture (an H2D copy in the captured code)
USER = 5        # a marked user input (mark_user_inputs): the tensor given to replayV3, else the same storage

KIND_NAMES = {STORAGE: "storage", WEAK: "storage", PRODUCED: "produced", REGEN: "random, redrawn",
              CONST: "constant", USER: "user input"}


class Step:
    """One recipe of a recording: its input bindings and where its outputs go."""
    __slots__ = ("recipe", "binds", "out_metas", "rebinds")

    def __init__(self, recipe, binds, out_metas, rebinds):
        self.recipe = recipe
        self.binds = binds            # [(kind, payload)] in the recipe's input order
        self.out_metas = out_metas    # (size, stride, dtype) of each output
        self.rebinds = rebinds        # [(storage, output index)]


class Recording:
    __slots__ = ("steps", "regens", "random_ops", "host_sources")

    def __init__(self, steps, regens, random_ops, host_sources=()):
        self.steps = steps
        self.regens = regens          # [(draw, meta)] in the order the capture drew them
        self.random_ops = random_ops
        # [(CPU tensor, the device copy the graph holds, user line)]: checked before each replay
        self.host_sources = list(host_sources)

    @property
    def node_count(self) -> int:
        return sum(s.recipe.node_count for s in self.steps)

    def input_storages(self):
        return [p for s in self.steps for k, p in s.binds if k == STORAGE] + \
            [p[1]() for s in self.steps for k, p in s.binds if k == USER]

    def bind_user_inputs(self, storages) -> None:
        """Storage inputs that are marked user inputs become USER bindings (held weakly)."""
        pos = {id(st): i for i, st in enumerate(storages)}
        for step in self.steps:
            step.binds = [(USER, (pos[id(p)], weakref.ref(p))) if k == STORAGE and id(p) in pos else (k, p)
                          for k, p in step.binds]


class HPUGraphWarning(UserWarning):
    """Something a capture froze that the program may expect to change at each replay."""


class DryRunValue(executor.DeviceError):
    """Reading an output of a dry-run capture before the first replay."""


_dry_ids = itertools.count(1)


class Capture(GraphCapture):
    """The object ``lazy.S.capture`` points to while an HPUGraph captures (the ``GraphCapture``
    protocol of lazy/capture.py: what the op path calls)."""

    def __init__(self, graph, dry_run: bool, src: str):
        self.graph = graph
        self.dry_run = dry_run
        self.src = src
        self.seen = {}          # id(inp) -> (inp, storage): the storage an input was read through
        self.made = {}          # id(inp) -> inp: host buffers made during the capture
        self.regen_index = {}   # id(inp) -> position in draw order
        self.regens = []        # [(draw, meta)]
        self.produced = {}      # id(inp) -> (step index, output index)
        self.keep = []          # keeps reported Inps alive, so their ids stay unique
        self.steps = []
        self.random_ops = 0
        self.host_copies = {}   # id(inp) -> user line: host data copied to the device in the capture
        self.host_sources = {}  # id(inp) -> CPU tensor (an alias of it) that inp was copied from
        self.mode = None        # host_state.HostStateMode while capturing

    # ---- reports from the lazy runtime
    def saw(self, inp, storage) -> None:
        i = id(inp)
        if i not in self.seen:
            self.seen[i] = (inp, storage)

    def created(self, inp, source=None) -> None:
        i = id(inp)
        self.made[i] = inp
        if inp.regen is not None:
            self.regen_index[i] = len(self.regens)
            self.regens.append((inp.regen, inp.meta))
        else:
            self.host_copies[i] = user_src(2)
            if source is not None:
                # an alias (same storage and version counter), not the caller's object: a write into
                # the CPU tensor, or into a tensor it views, is seen through it at replay time
                self.host_sources[i] = source.detach()

    def note_random(self) -> None:
        self.random_ops += 1

    def launch(self, recipe, externals):
        if not self.dry_run:
            return launch_recipe(recipe, externals, lazy.S.stream)
        # dry run: compile and record, run nothing; reading an output before replay() fails loudly
        launch = executor.Launch(recipe, None, lazy.S.stream)
        launch.error = DryRunValue(
            f"this value comes from a dry-run HPU Graph capture (graph {self.graph.id}, at {self.src}): "
            "nothing ran yet; call replay() before reading it")
        launch.done.set()
        return launch

    def on_flush(self, recipe, externals, produced, written) -> None:
        k = len(self.steps)
        binds = []
        for inp in externals:
            i = id(inp)
            if i in self.made:
                binds.append((REGEN, self.regen_index[i]) if inp.regen is not None else (CONST, inp))
            elif i in self.produced:
                binds.append((PRODUCED, self.produced[i]))
            elif i in self.seen:
                binds.append((STORAGE, self.seen[i][1]))
            else:
                binds.append((CONST, inp))      # e.g. a CPU scalar tensor turned into a graph input
        out_idx = {}
        metas = [None] * len(produced)
        for inp in produced.values():
            metas[inp.idx] = inp.meta
            out_idx[id(inp)] = inp.idx
            self.produced[id(inp)] = (k, inp.idx)
            self.keep.append(inp)
        rebinds, done = [], set()
        for w in written:
            st = w()
            if st is not None and id(st) not in done and id(st.value) in out_idx:
                done.add(id(st))
                rebinds.append((st, out_idx[id(st.value)]))
        self.steps.append(Step(recipe, binds, metas, rebinds))

    # ---- refusals: the capture is abandoned, the runtime stays usable (pending ops stay pending)
    def abandon(self, message: str, op: str, src: str) -> None:
        lazy.end_capture(self)
        self.graph._abandoned(self, message)
        t = ev.now()
        ev.emit(ev.Error(t, t, "host", ev.recorder.step, message=message, op=op, src=src))

    def refuse(self, op: str, src: str, fallback: bool = False):
        if fallback:
            msg = f"cpu fallback is not supported during hpu graph capturing: {op} (at {src})"
        else:
            msg = f"{op} is not supported during HPU Graph capturing (at {src})"
        self.abandon(msg, op, src)
        raise HPUGraphError(msg)

    def refuse_view_write(self, t, op: str, src: str):
        st = t._st
        msg = (f"{op} is not supported during HPU Graph capturing: in-place update of a view "
               f"(a {tuple(t._size)} view of a {tuple(st.size)} tensor) at {src}. Capturing HPU Graphs "
               "on models containing in-place view updates is not supported (seed 001).")
        self.abandon(msg, op, src)
        raise HPUGraphError(msg)

    # ---- end
    def finish(self) -> Recording:
        if self.dry_run:
            self._undo_dry_writes()
        consts = {id(p): p for s in self.steps for k, p in s.binds if k == CONST and id(p) in self.host_copies}
        frozen = sorted({self.host_copies[i] for i in consts})
        if frozen:
            warnings.warn(HPUGraphWarning(
                f"HPU Graph {self.graph.id}: host data copied to the device during the capture (at "
                f"{', '.join(frozen)}) is a constant of the graph (a CPU tensor copied, or read by an hpu op): "
                "every replay reuses the captured values, as on a Gaudi, where the graph keeps the device "
                "copy the capture made. If they change from step to step (e.g. an optimizer's host-computed "
                "step size), compute them on the device or copy them into a static hpu tensor before each "
                "replay; a replay after such a CPU tensor changed raises HPUGraphError."), stacklevel=3)
        sources = [(self.host_sources[i], p.tensor, self.host_copies[i]) for i, p in consts.items()
                   if i in self.host_sources and p.tensor is not None]
        return Recording(self.steps, self.regens, self.random_ops, sources)

    def _undo_dry_writes(self) -> None:
        """Dry run executes nothing: storages the capture read and overwrote get their old value."""
        before = {}
        for inp, st in self.seen.values():
            if id(inp) not in self.made and id(inp) not in self.produced:
                before.setdefault(id(st), (st, inp))
        for step in self.steps:
            for st, _ in step.rebinds:
                old = before.get(id(st))
                if old is not None:
                    st.value = old[1]


def _check_default_dtype(rec: Recording) -> None:
    """Refuse a replay under another default dtype than the capture's. hpu_lab's device reads torch's
    default dtype when a recipe runs (a factory's dtype, an integer tensor's true division), so a
    replay after ``torch.set_default_dtype`` would give other dtypes (the sync after it raised an
    OutputMismatch, and the outputs stayed unreadable until a replay under the old default); on a
    Gaudi the graph keeps the dtypes it was captured with."""
    now = torch.get_default_dtype()
    for step in rec.steps:
        built = getattr(step.recipe.key, "default_dtype", None)
        if built is not None and built is not now:
            built, now = str(built).replace("torch.", ""), str(now).replace("torch.", "")
            raise HPUGraphError(
                f"HPUGraph.replay(): the graph was captured while torch's default dtype was {built}, and it is now "
                f"{now} (torch.set_default_dtype). hpu_lab's device reads the default when a graph runs, so the "
                f"replay would give other dtypes: set the default back to {built} around the replay "
                f"(nothing was launched; on a Gaudi the graph keeps the dtypes it was captured with)")


def _same_bits(a, b) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


def _check_host_sources(rec: Recording) -> None:
    """Refuse a replay that would compute with a stale copy of a CPU tensor. The bridge copies a CPU
    operand to the device when the op is recorded (LazyOp::set_inputs: ``tensor.to(kHPU)``; an H2D
    ``copy_`` likewise makes an input node holding the data), and ``SingleHPUGraph::replayGraph``
    launches on the inputs the capture saved: every replay reuses that copy. hpu_lab keeps that copy
    too, and, rather than give the old values in silence, refuses the replay once the CPU tensor
    no longer holds them (nothing is launched)."""
    for src, baked, line in rec.host_sources:
        if not _same_bits(src, baked):
            raise HPUGraphError(
                f"HPUGraph.replay(): the CPU tensor {tuple(src.shape)} {str(src.dtype).replace('torch.', '')} "
                f"read during the capture at {line} has changed since. The graph holds the copy the capture made "
                "(as on a Gaudi, where the replay reuses the device copy of a CPU tensor without a word), so this "
                "replay would compute with the old values. Keep the tensor on the device (or copy_ the new values "
                "into a static hpu tensor the graph reads) and capture again (nothing was launched)")


def run(rec: Recording, user=None) -> None:
    """Launch each recorded recipe on the current values of its input storages; rebind outputs.

    ``user``: tensors standing for the marked user inputs (replayV3), already checked to have their
    layouts. The caller holds ``lazy.S.lock`` and has flushed pending lazy work.
    """
    _check_default_dtype(rec)                                     # before anything is drawn or launched
    _check_host_sources(rec)
    draws = [Inp(draw(), meta) for draw, meta in rec.regens]    # host draws, in capture order
    made = []
    stream = lazy.S.stream
    for step in rec.steps:
        inputs = []
        for kind, p in step.binds:
            if kind == STORAGE:
                v = p.value
            elif kind == PRODUCED:
                v = made[p[0]][p[1]]
            elif kind == REGEN:
                v = draws[p]
            elif kind == WEAK or kind == USER:
                if kind == USER and user is not None:
                    st = user[p[0]]._st
                else:
                    st = p() if kind == WEAK else p[1]()
                if st is None:
                    raise HPUGraphError("HPUGraph.replay(): an input tensor of the graph was freed after "
                                        "clear_inputs() (or with disable_tensor_cache); keep it alive, or "
                                        "pass the inputs with replayV3")
                v = st.value
            else:
                v = p
            if type(v) is Out:     # cannot happen after the flush; never run on a stale value
                raise HPUGraphError("HPUGraph.replay(): an input still has pending lazy work")
            inputs.append(v)
        launch = launch_recipe(step.recipe, inputs, stream)
        outs = [Inp(None, m, launch=launch, idx=k) for k, m in enumerate(step.out_metas)]
        for st, k in step.rebinds:
            st.value = outs[k]
        made.append(outs)
