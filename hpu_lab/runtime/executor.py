"""The device executor: a worker thread per stream runs launched recipes, asynchronously.

``launch()`` returns at once; the host goes on tracing the next step while the worker runs this
one on the backing CPU tensors (torch kernels release the GIL, so the two really overlap). A
failure on the device is kept and raised in the user's thread at the next sync, naming the op
and the user's line; the runtime stays usable.
"""
from __future__ import annotations

import atexit
import itertools
import queue
import threading

import torch

from .. import events as ev


class DeviceError(RuntimeError):
    """An op failed while the device ran a recipe (raised at the next sync)."""


class DeviceMode:
    """Floating-point modes of the device's kernels that torch sets per thread, on the user's thread
    only (so the device's worker must be told): ``flush_denormal``, as torch.set_flush_denormal last
    set it (integration/run_settings.py keeps it). A worker thread starts with the floating-point state of the
    thread that created it, whatever it was then."""
    flush_denormal = False


def set_flush_denormal(mode: bool) -> None:
    """The device's kernels flush denormals from the next launch on (torch.set_flush_denormal)."""
    DeviceMode.flush_denormal = mode


class Launch:
    __slots__ = ("id", "recipe", "inputs", "outputs", "done", "error", "stream", "srcs", "threads", "flush",
                 "__weakref__")

    def __init__(self, recipe, inputs, stream, srcs=None):
        self.id = next(_launch_ids)
        self.recipe, self.inputs, self.stream = recipe, inputs, stream
        self.srcs = srcs      # the user lines of this launch's ops (a cached recipe keeps its first)
        # the launching thread's intra-op thread count, which the worker runs it with: a CPU
        # reduction's partial sums depend on it, and torch.set_num_threads(n) sets it for the
        # calling thread only (OpenMP's per-thread setting), so a worker started before kept the
        # old count and a 4M-element sum on "hpu" differed from CPU's in the last bits (Stream._run)
        self.threads = torch.get_num_threads()
        self.flush = DeviceMode.flush_denormal     # likewise torch.set_flush_denormal (DeviceMode)
        self.outputs = None
        self.error = None
        self.done = threading.Event()

    def wait(self, reason: str = "synchronize", src: str = "") -> None:
        """Host sync: block until this launch has finished; raise its device error, if any."""
        t0 = ev.now()
        self.done.wait()
        if ev.wants(ev.HostSync):
            ev.emit(ev.HostSync(t0, ev.now(), "host", ev.recorder.step, reason=reason, src=src,
                                launch_id=self.sync_id()))
        if self.error is not None:
            _errors.discard(self.error)
            raise self.error

    def sync_id(self) -> int:
        """The id a host sync on this launch names: a recipe's, a copy's or a marker's; 0 for a
        plain host function (a stream wait), which is no work of the user's."""
        return self.id if self.recipe is not None or type(self) is not Launch else 0


class _Settled:
    """A finished launch as its stream remembers it for the next sync: its id, its error and its
    done flag, not its outputs. The outputs belong to the tensors that read them; held by the
    stream, the last launch of a stream no longer used (a side stream's one copy) kept its whole
    buffer alive after every tensor of it was gone."""
    __slots__ = ("id", "error", "done", "_sync_id")

    def __init__(self, launch: Launch):
        self.id, self.error, self.done, self._sync_id = launch.id, launch.error, launch.done, launch.sync_id()

    wait = Launch.wait

    def sync_id(self) -> int:
        return self._sync_id


class Copy(Launch):
    """A host-to-device copy queued on a stream (runtime/transfers.py): a host function in stream order
    whose output is a device buffer; a sync or a recipe that reads it waits for it by its id
    (``HostSync.launch_id``, ``Launch.waits_for``), as for a recipe's launch."""
    __slots__ = ()

    def __init__(self, fn, stream):
        super().__init__(None, fn, stream)


class Marker(Launch):
    """A recorded event's marker (graphs/streams.py): a host function in stream order that completes
    when the work queued before it on its stream has. Its id names it in the event stream
    (``StreamRecord.marker``), and a sync on it (``Event.synchronize()``) names that id."""
    __slots__ = ()

    def __init__(self, fn, stream):
        super().__init__(None, fn, stream)


_launch_ids = itertools.count(1)
# device errors not yet reported to the user. Only the launch where an op failed adds its error;
# a launch that reads a failed value carries the same error object, so one fault is reported
# once by synchronize(), and again only to a sync that waits for a value it spoiled.
_errors: set = set()


class _FailedInput(Exception):
    def __init__(self, error):
        self.error = error


def _resolve(inp):
    """The tensor behind a device buffer; a buffer spoiled by a failed launch raises its error."""
    t = inp.tensor
    if t is not None:
        return t
    src = inp.launch
    if src is None:                      # empty memory never written before: allocate it now
        return inp.get()
    if src.error is not None:
        raise src.error
    return src.outputs[inp.idx]


_NOTHING = torch.empty(0)


def _args(launch):
    """The recipe's inputs. A failed value that the recipe does not read (the ops that read it
    were dead code: the program dropped their results) is not needed: it fails nothing."""
    unused = _unused_inputs(launch.recipe)
    out = []
    for k, inp in enumerate(launch.inputs):
        src = inp.launch if inp.tensor is None else None
        if src is not None and src.error is not None:
            if k not in unused:
                raise _FailedInput(src.error)
            out.append(_NOTHING)
        else:
            out.append(_resolve(inp))
    return out


def _unused_inputs(recipe) -> frozenset:
    u = getattr(recipe, "_unused_inputs", None)
    if u is None:
        u = frozenset()
        gm = getattr(recipe, "gm", None)
        if gm is not None:
            ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
            u = frozenset(k for k, n in enumerate(ph) if not n.users)
        recipe._unused_inputs = u
    return u


class OutputMismatch(DeviceError):
    """A launched recipe produced an output other than the one its graph predicted."""


def _predicted(recipe):
    """Per graph output: (size, stride, dtype, fx node) as the recipe's graph predicts it, or None
    where it predicts nothing checkable (a number, a symbolic size). Cached on the recipe."""
    want = recipe.__dict__.get("_predicted")
    if want is None:
        want = ()
        gm = getattr(recipe, "gm", None)
        graph = getattr(gm, "graph", None)
        out = None
        if graph is not None and hasattr(graph, "nodes"):
            out = next((n for n in reversed(graph.nodes) if n.op == "output"), None)
        if out is not None and isinstance(out.args[0], (tuple, list)):
            want = tuple(_expect(n) for n in out.args[0])
        recipe._predicted = want
    return want


def _expect(n):
    m = n.meta.get("hpu_meta") if hasattr(n, "meta") else None
    if type(m) is not tuple or len(m) != 3 or not isinstance(m[2], torch.dtype):
        return None
    size, stride, dtype = m
    if not all(type(s) is int for s in size) or not all(type(s) is int for s in stride):
        return None
    # the strides that address memory: a dimension of size 1 addresses nothing, an empty tensor
    # nothing. A permute the layout pass placed (compiler/layouts.py) keeps the value's logical
    # meta but not its strides (NHWC memory seen as NCHW): the host lays it out on reading, so
    # its strides are not a prediction.
    live = None if 0 in size or n.meta.get("layout_change") else \
        tuple((d, st) for d, (sz, st) in enumerate(zip(size, stride)) if sz != 1)
    return tuple(size), live, dtype, n


restrided = [0]     # outputs laid out again because their strides were not the predicted ones


def check_outputs(recipe, outputs, srcs=None):
    """Each output's shape and dtype must be the ones the graph predicted: the host already handed
    out tensors of that shape and dtype and reads the buffer as them; a kernel that disagrees with
    its shape inference would otherwise be a silent wrong answer (``OutputMismatch``).

    Strides (where they address memory) that differ from the prediction are not wrong values:
    every reader lays a buffer out as its storage says (``lazy.build_layout``, ``graph.view``), so
    a layout the Meta kernel mispredicted used to be repaired at each read. The output is laid out
    as predicted here, once (a copy; ``restrided`` counts them), so the buffer always matches its
    meta. Returns the outputs (a new tuple if one was laid out again)."""
    want = _predicted(recipe)
    if not want:
        return outputs
    if len(outputs) != len(want):
        raise OutputMismatch(f"recipe {recipe.short_key} returned {len(outputs)} outputs where its graph "
                             f"has {len(want)}")
    fixed = None
    for k, w in enumerate(want):
        if w is None:
            continue
        t = outputs[k]
        size, live, dtype, _ = w
        if not isinstance(t, torch.Tensor) or t.dtype is not dtype or t.shape != size:
            _mismatch(recipe, k, t, w, srcs)
        if live:
            st = t.stride()
            for d, s in live:
                if st[d] != s:
                    if fixed is None:
                        fixed = list(outputs)
                    fixed[k] = _restride(t, w)
                    break
    return outputs if fixed is None else type(outputs)(fixed) if isinstance(outputs, tuple) else fixed


def _restride(t, w):
    stride = w[3].meta["hpu_meta"][1]
    out = torch.empty_strided(w[0], stride, dtype=t.dtype)
    if torch._debug_has_internal_overlap(out) == 1:        # an overlapping prediction: leave it be
        return t
    restrided[0] += 1
    return out.copy_(t)


def _mismatch(recipe, k, t, w, srcs):
    size, _, dtype, n = w
    src_node = n
    while src_node.meta.get("op_name") == "getitem" and src_node.args:     # the op of a tuple output
        src_node = src_node.args[0]
    op = src_node.meta.get("op_name", str(getattr(src_node, "target", "?")))
    src = src_node.meta.get("src", "?")
    i = src_node.meta.get("node_index")
    if srcs is not None and i is not None and i < len(srcs) and srcs[i]:
        src = srcs[i]
    got = (f"{type(t).__name__}" if not isinstance(t, torch.Tensor) else
           f"{str(t.dtype).replace('torch.', '')} {tuple(t.shape)}")
    built = getattr(recipe.key, "default_dtype", None)
    now = torch.get_default_dtype()
    if built is not None and now is not built:
        # not the shape inference: the kernels read torch's default dtype (a factory's, an integer
        # tensor's true division) when they run, and it changed after the graph was built. torch's
        # setters first run what was traced (integration/run_settings.py) and a replay under another default is
        # refused (graphs/recording.py): only a change behind their backs (torch._C) gets here
        built, now = str(built).replace("torch.", ""), str(now).replace("torch.", "")
        why = (f"the graph was built while torch's default dtype was {built}, and it ran after the default "
               f"became {now} without torch.set_default_dtype. hpu_lab's device reads the default when it "
               f"runs: set it with torch.set_default_dtype, which first runs what was traced")
    else:
        why = "the kernel disagrees with hpu_lab's shape inference; refused rather than read as the predicted shape and dtype"
    raise OutputMismatch(
        f"{op} (op created at {src}) returned {got} on the device where recipe {recipe.short_key} predicted "
        f"{str(dtype).replace('torch.', '')} {size} (output {k}): {why}")


class Stream:
    """One device queue and its worker thread."""

    def __init__(self, index: int):
        self.index = index
        self.lane = f"hpu:{index}"
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._last = None
        self._last_lock = threading.Lock()     # submit and settle replace _last: never a newer launch
        self._thread = threading.Thread(target=self._run, name=f"hpu_lab-{self.lane}", daemon=True)
        self._thread.start()

    def submit(self, launch: Launch) -> None:
        with self._last_lock:
            self._last = launch
        self._q.put(launch)

    def _settle(self, launch: Launch) -> None:
        """The worker is done with ``launch``: if it is still the stream's last, keep only what a
        sync needs (_Settled)."""
        with self._last_lock:
            if self._last is launch:
                self._last = _Settled(launch)

    def submit_fn(self, fn) -> Launch:
        """Run a host function in stream order (used for events and stream waits)."""
        launch = Launch(None, fn, self.index)
        self.submit(launch)
        return launch

    def last(self):
        return self._last

    def synchronize(self, reason="synchronize", src="") -> None:
        last = self._last
        if last is not None:
            last.wait(reason, src)

    def _run(self) -> None:
        # run recipes' TorchScript exactly as traced: no fusion passes that would reorder float math
        # (the device must give CPU's numbers); the flag is per thread
        torch._C._set_graph_executor_optimize(False)
        threads = torch.get_num_threads()
        flush = None                         # this thread's denormal mode is set by the first launch
        while True:
            launch = None                    # not kept while the queue is empty (see _settle)
            launch = self._q.get()
            if launch.threads != threads:    # the launching thread's count (see Launch)
                threads = launch.threads
                torch.set_num_threads(threads)
            if launch.flush is not flush:    # as torch.set_flush_denormal last set it (DeviceMode)
                flush = launch.flush
                # torch's own function, not the user-facing one run_settings wraps: that one would
                # flush the user's pending graph and wait for the device, from the device's thread
                torch._C.set_flush_denormal(flush)
            if launch.recipe is None:        # a host function in stream order
                fn = launch.inputs
                try:
                    launch.outputs = fn()
                except BaseException as e:   # noqa: BLE001 - reported at the next sync
                    launch.error = e
                # drop the function: a copy's closure names its own launch, so launch -> fn -> launch
                # was a cycle holding the buffer the copy made until a cyclic collection, which then
                # freed (munmapped) every such buffer at once, wherever the user's thread was
                launch.inputs = fn = None
                launch.done.set()
                self._settle(launch)
                continue
            t0 = ev.now()
            ok = True
            args = None
            try:
                args = _args(launch)
                out = launch.recipe.run(args)
                launch.outputs = check_outputs(launch.recipe, out, launch.srcs)
            except _FailedInput as e:       # an input is spoiled: its error, not a new one
                ok = False
                launch.error = e.error
            except BaseException as e:  # noqa: BLE001 - reported at the next sync
                ok = False
                launch.error = launch.recipe.explain_failure(e, args, launch.srcs)
                _errors.add(launch.error)
            # drop references: the buffers may be freed now (this loop's own names too: they kept the
            # last launch's inputs and outputs alive until the next launch, a whole buffer each)
            launch.inputs = args = out = None
            t1 = ev.now()
            # reported before the launch is marked done: a host sync that waits for it then always
            # finds its execution in the event stream (a Collector closed right after the sync saw
            # the execution only sometimes)
            try:
                if ev.wants(ev.DeviceExecution):
                    r = launch.recipe
                    # the fields only: built when a recording reads the op run it goes into (emit_device)
                    ev.emit_device(ev.DeviceExecution, (t0, t1, self.lane, ev.recorder.step, launch.id, r.id,
                                                        r.short_key, r.node_count, ok))
            finally:
                launch.done.set()
                self._settle(launch)


_streams: dict = {}
_lock = threading.Lock()


def stream(index: int = 0) -> Stream:
    s = _streams.get(index)
    if s is None:
        with _lock:
            s = _streams.get(index)
            if s is None:
                s = _streams[index] = Stream(index)
    return s


def synchronize_all(reason="synchronize", src="") -> None:
    """Wait for every stream; raise the first unreported device error."""
    t0 = ev.now()
    wait_all_quietly()
    if ev.wants(ev.HostSync):
        ev.emit(ev.HostSync(t0, ev.now(), "host", ev.recorder.step, reason=reason, src=src))
    raise_pending_error()


def wait_all_quietly() -> None:
    """Wait until every stream has run what was launched, with no event and no error raised (an
    error stays for the next sync): the emulator's own wait, not a sync the user's code made (and
    the wait of synchronize_all, which adds both)."""
    for s in list(_streams.values()):
        last = s.last()
        if last is not None:
            last.done.wait()


def raise_pending_error() -> None:
    if _errors:
        err = _errors.pop()
        _errors.clear()
        raise err


@atexit.register
def _drain() -> None:
    """At exit, let queued device work finish: a worker killed inside a torch kernel aborts."""
    for s in list(_streams.values()):
        last = s.last()
        if last is not None:
            last.done.wait(timeout=60)
