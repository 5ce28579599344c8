"""``HPUGraph`` and the ``graph`` context manager (REFERENCE.md section 1; seed 000, seed 001).

Capture is lazy mode with a recorder attached: the ops of the captured code accumulate, compile and
(unless ``dry_run``) run once, as any lazy step would. Replay then skips all of that: for each
recorded recipe it binds the current values of the graph's input storages, launches, and rebinds
the output storages. It emits ``Replay`` and ``Launch`` events, never ``OpAccumulated``,
``GraphBuilt``, ``CacheLookup`` or ``Compile`` (claim G2; DESIGN.md "Replay really skips tracing").

.. warning::
    As on the device, a graph replays exactly what was captured: Python control flow, Python
    scalars and tensors created from host data inside the capture are frozen. Copy new data into
    the static inputs with ``copy_``; outputs are overwritten by the next replay.
"""
from __future__ import annotations

import gc
import itertools

from .. import events as ev
from .. import lazy
from ..util._source import user_src
from . import host_state, recording
from ..tensor import HPUTensor
from ._common import HPUGraphError, _full, check_replay_inputs, require_lazy, static_copy

_ids = itertools.count(1)


class HPUGraph:
    """A captured sequence of recipes, replayable with no tracing."""

    def __init__(self):
        require_lazy("HPUGraph()")
        self.id = next(_ids)
        self._rec = None             # the Recording, once captured
        self._capture = None         # the Capture while one is underway
        self._why_empty = "nothing was captured yet (call capture_begin() / capture_end())"
        self._failed = None          # why the last capture failed: such a graph is never replayed
        self._user_inputs = []       # mark_user_inputs (until capture_end)
        self._user_meta = []         # (shape, dtype, storage layout) of each marked user input
        self._user_outputs = []      # mark_user_outputs (kept for API parity)
        self.replays = 0
        # names this graph's captures for the recompile log: a capture is compared with the last
        # one of the same label at the same line ("input 0 shape changed (4, 12) -> (5, 12)")
        self.label = None
        # where a ``graph`` context entered (before its synchronize and gc.collect): the capture's
        # host time starts there, so the timeline labels that work as the capture's
        self._capture_from = None

    # ---- capture
    def capture_begin(self, dry_run: bool = False) -> None:
        """Begin capturing the work issued from now on (on the current stream)."""
        t0, self._capture_from = self._capture_from or ev.now(), None
        require_lazy("HPUGraph.capture_begin")
        cur = lazy.S.capture
        if cur is not None:
            raise HPUGraphError(f"HPUGraph.capture_begin: graph {cur.graph.id} is being captured; "
                                "captures cannot nest or overlap")
        src = user_src(2)
        host_state.drop_finished()
        # work issued before the capture is not part of it: launch it now
        lazy.flush("HPUGraph.capture_begin", f"{src} (before a capture)")
        self.reset()
        cap = recording.Capture(self, bool(dry_run), src)
        self._capture = cap
        lazy.begin_capture(cap)
        cap.mode = host_state.start(cap)      # watches host state the replay could not repeat
        ev.emit(ev.CaptureBegin(t0, ev.now(), "host", ev.recorder.step, graph_id=self.id, src=src))

    def capture_end(self) -> None:
        """End the capture; after this, ``replay()`` may be called."""
        cap = self._capture
        if cap is None:
            raise HPUGraphError(f"HPUGraph.capture_end: no capture underway for graph {self.id}: "
                                f"{self._why_empty}")
        src = user_src(2)
        t0 = ev.now()
        try:
            lazy.flush("HPUGraph.capture_end", f"{src} (capture of {self.label or 'an HPU Graph'})")
        except BaseException:
            lazy.end_capture(cap)
            self._capture = None
            host_state.stop(cap.mode)
            self._why_empty = self._failed = "the capture failed while compiling its last graph"
            raise
        lazy.end_capture(cap)
        self._capture = None
        host_state.stop(cap.mode)
        self._rec = cap.finish()
        if self._user_inputs:
            self._rec.bind_user_inputs([t._st for t in self._user_inputs])
            self._user_meta = [(t.shape, t.dtype, (t._st.size, t._st.stride)) for t in self._user_inputs]
            self._user_inputs = []          # held weakly from now on (not cached by the graph)
        ev.emit(ev.CaptureEnd(t0, ev.now(), "host", ev.recorder.step, graph_id=self.id,
                              recipes=len(self._rec.steps), node_count=self._rec.node_count, src=src))

    def _abandoned(self, cap, message: str) -> None:
        """Called when a capture is refused (a sync, a fallback, a view write) or the code raised."""
        if self._capture is cap:
            self._capture = None
            self._rec = None
            self._why_empty = self._failed = f"the capture was abandoned: {message}"
        if cap.mode is not None:
            host_state.stop(cap.mode)

    def _abandon_on_error(self, exc) -> None:
        cap = self._capture
        if cap is not None:
            lazy.end_capture(cap)
            self._abandoned(cap, f"{type(exc).__name__}: {exc}")

    # ---- replay
    def replay(self, asynchronous: bool = False) -> None:
        """Launch the captured recipes on the current contents of the static inputs.

        Returns once the work is queued (device execution is always asynchronous in hpu_lab, as on
        Gaudi; ``asynchronous`` is accepted for API parity). Pending lazy work (e.g. a ``copy_`` into
        a static input) is launched first.
        """
        self._replay(None)

    def _replay(self, user) -> None:
        """Launch the recording. A graph with nothing captured (never captured, or reset) replays as
        the bridge's does: ``HPUGraph::replay`` marks a step, then replays each of its captured
        graphs, of which there are none (backend/habana_device/HPUGraph.cpp). A graph whose
        capture failed is refused: it holds nothing, and its outputs were never computed."""
        src = user_src(3)
        if lazy.S.capture is not None:
            lazy.S.capture.refuse("HPUGraph.replay", src)
        rec = self._rec
        if rec is None and self._failed is not None:
            raise HPUGraphError(f"HPUGraph.replay: graph {self.id} cannot replay: {self._why_empty}")
        host_state.drop_finished()
        t0 = ev.now()
        with lazy.S.lock:
            if lazy.S.pg.nodes:
                lazy.flush("HPUGraph.replay", f"{src} (before a replay)")
            if rec is not None:
                recording.run(rec, user)
        if rec is not None:
            self.replays += 1
        ev.emit(ev.Replay(t0, ev.now(), "host", ev.recorder.step, graph_id=self.id,
                          recipes=0 if rec is None else len(rec.steps), src=src))

    def replayV2(self, static_tlist, tlist, asynchronous: bool = False) -> None:
        """Replay with ``tlist[i]`` in place of the static input ``static_tlist[i]``."""
        if self._rec is None:
            self._replay(None)             # nothing captured: a step marker, as the bridge's (or refused)
            return
        check_replay_inputs("HPUGraph.replayV2", list(tlist), list(static_tlist))
        for s, t in zip(static_tlist, tlist):
            static_copy(s, t)
        self.replay(asynchronous)

    def replayV3(self, tlistI, asynchronous: bool = False) -> None:
        """Replay reading ``tlistI`` directly where the graph read the ``mark_user_inputs`` tensors."""
        if self._rec is None:
            self._replay(None)             # nothing captured: a step marker, as the bridge's (or refused)
            return
        if not self._user_meta:
            raise HPUGraphError("HPUGraph.replayV3: call mark_user_inputs(tensors) during the capture first")
        tlist = list(tlistI)
        check_replay_inputs("HPUGraph.replayV3", tlist, [(m[0], m[1]) for m in self._user_meta])
        user = []
        for t, (shape, dtype, layout) in zip(tlist, self._user_meta):
            if not (type(t) is HPUTensor and _full(t) and (t._st.size, t._st.stride) == layout):
                t = t.to("hpu").contiguous()          # the recipe reads this layout: lay it out so
                if not (_full(t) and (t._st.size, t._st.stride) == layout):
                    raise HPUGraphError(f"HPUGraph.replayV3: input layout {t.stride()} differs from the "
                                        f"captured {layout[1]}; pass a contiguous tensor")
            user.append(t)
        self._replay(user)

    # ---- the rest of the bridge's API
    def mark_user_inputs(self, static_tlist) -> None:
        """The user's input tensors of this capture (for replayV3 and the inference wrappers): the
        graph does not keep them; replayV3 reads the tensors it is given in their place."""
        self._user_inputs = [t for t in static_tlist if isinstance(t, HPUTensor)]

    def mark_user_outputs(self, static_tlist) -> None:
        self._user_outputs = [t for t in static_tlist]

    def get_user_input_match_indices(self):
        """Indices of the marked user inputs that the graph reads directly as inputs."""
        if self._rec is None:
            return []
        return sorted({p[0] for s in self._rec.steps for k, p in s.binds if k == recording.USER})

    def clear_inputs(self) -> None:
        """Stop holding the graph's input tensors: replay then needs them alive in the program."""
        import weakref
        if self._rec is None:
            return
        for step in self._rec.steps:
            step.binds = [(recording.WEAK, weakref.ref(p)) if k == recording.STORAGE else (k, p)
                          for k, p in step.binds]

    def reset(self) -> None:
        """Free the captured graph (its recipes stay in the recipe cache)."""
        self._rec = None
        self._failed = None
        self._why_empty = "the graph was reset"

    def __del__(self):
        try:
            self.reset()
        except Exception:  # interpreter shutdown
            pass

    # ---- for the lab: what was captured
    @property
    def recipes(self) -> list:
        return [] if self._rec is None else [s.recipe for s in self._rec.steps]

    @property
    def node_count(self) -> int:
        return 0 if self._rec is None else self._rec.node_count

    def describe(self) -> str:
        """One line per recipe: nodes, where its inputs come from at replay, how many outputs."""
        if self._rec is None:
            return f"HPUGraph {self.id}: {self._why_empty}"
        lines = [f"HPUGraph {self.id}: {len(self._rec.steps)} recipe(s), {self.node_count} nodes, "
                 f"{self.replays} replay(s)"]
        for s in self._rec.steps:
            counts = {}
            for k, _ in s.binds:
                counts[recording.KIND_NAMES[k]] = counts.get(recording.KIND_NAMES[k], 0) + 1
            srcs = ", ".join(f"{n} {name}" for name, n in counts.items()) or "none"
            lines.append(f"  recipe {s.recipe.short_key} ({s.recipe.node_count} nodes): inputs: {srcs}; "
                         f"{len(s.out_metas)} outputs into {len(s.rebinds)} tensors")
        return "\n".join(lines)

    def __repr__(self):
        return f"<HPUGraph {self.id}: {'captured' if self._rec is not None else 'empty'}>"


class graph:
    """Context manager capturing the work of its body into ``hpu_graph`` (as torch.cuda.graph).

    On enter: ``torch.hpu.synchronize()``, ``gc.collect()``, switch to ``stream`` (default: one side
    stream shared by all ``graph`` objects), ``capture_begin(dry_run)``. On exit: ``capture_end()``
    and back to the previous stream. If the body raises, the capture is abandoned.
    """
    default_capture_stream = None

    def __init__(self, hpu_graph, stream=None, dry_run: bool = False):
        require_lazy("hpu.graph")
        from .streams import Stream, stream as stream_ctx
        if graph.default_capture_stream is None:
            graph.default_capture_stream = Stream()
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        self.stream_ctx = stream_ctx(self.capture_stream)
        self.hpu_graph = hpu_graph
        self.dry_run = dry_run

    def __enter__(self):
        t0 = ev.now()
        lazy.synchronize("hpu.graph(): synchronize before capture")
        gc.collect()                    # free what we can before the graph takes its buffers
        self.stream_ctx.__enter__()
        self.capture_stream.is_capture = True
        try:
            self.hpu_graph._capture_from = t0
            self.hpu_graph.capture_begin(self.dry_run)
        except BaseException:
            self.capture_stream.is_capture = False
            self.stream_ctx.__exit__(None, None, None)
            raise
        return self.hpu_graph

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.hpu_graph.capture_end()
            else:
                self.hpu_graph._abandon_on_error(exc)
        finally:
            self.capture_stream.is_capture = False
            self.stream_ctx.__exit__(exc_type, exc, tb)
            host_state.drop_finished()
        return False
