"""Global metrics, as ``habana_frameworks.torch.hpu.metrics``: counts read off the event stream.

    from hpu_lab.observe.metrics import metric_global
    metric_global("graph_compilation").stats()  # [('TotalNumber', 3), ('TotalTime', 5120), ('AvgTime', ...)]

Times are in microseconds, as the bridge reports them. The bridge's metrics are
``graph_compilation``, ``cpu_fallback``, ``memory_defragmentation`` and ``recipe_cache``; the lab
adds ``mark_step``, ``graph_launch``, ``host_sync``, ``hpu_graph``, ``disk_cache`` and ``collective``
(collectives run: TotalNumber, TotalBytes, Ops by name; hpu_lab/distributed). Each metric
is an observer of the event stream, so metrics never change what the runtime does.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import threading
import warnings
from collections import Counter
from datetime import datetime
from typing import Dict, List, Optional, Tuple

from .. import config
from .. import events as ev


class MetricNotFound(Exception):
    pass


def _handed_over_first(method):
    """Reading or resetting a metric hands the ops the recorder keeps over first (events.flush), so
    that it counts every event emitted before the read."""
    @functools.wraps(method)
    def read(self, *args, **kwargs):
        ev.flush()
        return method(self, *args, **kwargs)
    return read


class Metric:
    kinds: tuple = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("stats", "reset"):
            if name in cls.__dict__:
                setattr(cls, name, _handed_over_first(cls.__dict__[name]))

    def __init__(self, name: str):
        self._name = name
        self._lock = threading.Lock()
        self.reset()

    def name(self) -> str:
        return self._name

    def reset(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def stats(self) -> List[Tuple[str, object]]:  # pragma: no cover - overridden
        raise NotImplementedError

    def on_event(self, e: ev.Event) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __getitem__(self, tag: str):
        return dict(self.stats())[tag]

    def __repr__(self) -> str:
        return f"{self._name}: {self.stats()}"


class GraphCompilation(Metric):
    kinds = (ev.Compile,)

    def reset(self):
        self.total, self.time_us = 0, 0.0

    def on_event(self, e):
        with self._lock:
            self.total += 1
            self.time_us += e.duration_ns / 1000

    def stats(self):
        avg = self.time_us / self.total if self.total else 0.0
        return [("TotalNumber", self.total), ("TotalTime", round(self.time_us)), ("AvgTime", avg)]


class RecipeCache(Metric):
    kinds = (ev.CacheLookup,)

    def reset(self):
        self.hit = self.miss = 0

    def on_event(self, e):
        # one count per recipe request: a disk hit served the recipe (a hit); a disk miss is followed
        # by the memory miss of the same request, counted once there
        if e.source == "disk" and not e.hit:
            return
        with self._lock:
            if e.hit:
                self.hit += 1
            else:
                self.miss += 1

    def stats(self):
        return [("TotalHit", self.hit), ("RecipeHit", self.hit), ("TotalMiss", self.miss), ("RecipeMiss", self.miss)]


class CpuFallback(Metric):
    kinds = (ev.CPUFallback,)

    def reset(self):
        self.ops: Counter = Counter()

    def on_event(self, e):
        with self._lock:
            self.ops[e.op] += 1

    def stats(self):
        return [("TotalNumber", sum(self.ops.values())), ("FallbackOps", dict(self.ops))]


class MemoryDefragmentation(Metric):
    """The emulated allocator never fragments, so this stays at zero; it exists for API parity."""
    kinds = ()

    def reset(self):
        pass

    def on_event(self, e):
        pass

    def stats(self):
        return [("TotalNumber", 0), ("TotalSuccessful", 0), ("AvgTime", 0.0), ("MaxTime", 0)]


class Counting(Metric):
    """TotalNumber of one event kind (plus per-reason counts for host syncs)."""

    def __init__(self, name, kind, reason_attr=None):
        self.kinds = (kind,)
        self._reason_attr = reason_attr
        super().__init__(name)

    def reset(self):
        self.total = 0
        self.reasons: Counter = Counter()

    def on_event(self, e):
        with self._lock:
            self.total += 1
            if self._reason_attr:
                self.reasons[getattr(e, self._reason_attr)] += 1

    def stats(self):
        out = [("TotalNumber", self.total)]
        if self._reason_attr:
            out.append(("Reasons", dict(self.reasons)))
        return out


class HpuGraph(Metric):
    kinds = (ev.CaptureEnd, ev.Replay)

    def reset(self):
        self.captures = self.replays = 0

    def on_event(self, e):
        with self._lock:
            if isinstance(e, ev.CaptureEnd):
                self.captures += 1
            else:
                self.replays += 1

    def stats(self):
        return [("Captures", self.captures), ("Replays", self.replays)]


class DiskCache(Metric):
    kinds = (ev.CacheLookup,)

    def reset(self):
        self.hit = self.miss = 0

    def on_event(self, e):
        if e.source != "disk":
            return
        with self._lock:
            if e.hit:
                self.hit += 1
            else:
                self.miss += 1

    def stats(self):
        return [("TotalHit", self.hit), ("TotalMiss", self.miss)]


class Collectives(Metric):
    """Collectives that ran (eager ones on the host, lazy ones when the device ran them)."""
    kinds = (ev.Collective,)

    def reset(self):
        self.total = self.nbytes = 0
        self.ops: Counter = Counter()

    def on_event(self, e):
        with self._lock:
            self.total += 1
            self.nbytes += e.nbytes
            self.ops[e.op] += 1

    def stats(self):
        return [("TotalNumber", self.total), ("TotalBytes", self.nbytes), ("Ops", dict(self.ops))]


def _make_all() -> Dict[str, Metric]:
    return {
        "graph_compilation": GraphCompilation("graph_compilation"),
        "recipe_cache": RecipeCache("recipe_cache"),
        "cpu_fallback": CpuFallback("cpu_fallback"),
        "memory_defragmentation": MemoryDefragmentation("memory_defragmentation"),
        "mark_step": Counting("mark_step", ev.MarkStep),
        "graph_launch": Counting("graph_launch", ev.Launch),
        "host_sync": Counting("host_sync", ev.HostSync, reason_attr="reason"),
        "hpu_graph": HpuGraph("hpu_graph"),
        "disk_cache": DiskCache("disk_cache"),
        "collective": Collectives("collective"),
    }


_GLOBAL = _make_all()
for _m in _GLOBAL.values():
    if _m.kinds:
        ev.subscribe(_m.on_event, _m.kinds)


def metric_global(name: str) -> Optional[Metric]:
    """The process-wide metric ``name``, or None if there is no such metric (as the bridge)."""
    return _GLOBAL.get(name)


def names() -> List[str]:
    return list(_GLOBAL)


def reset_all() -> None:
    for m in _GLOBAL.values():
        m.reset()


@contextlib.contextmanager
def metric_localcontext(name: str):
    """A fresh metric counting only what happens inside the ``with`` block."""
    if name not in _GLOBAL:
        raise MetricNotFound(f"metric {name!r} not found; known metrics: {', '.join(_GLOBAL)}")
    local = _make_all()[name]
    handle = ev.subscribe(local.on_event, local.kinds) if local.kinds else None
    try:
        yield local
    finally:
        if handle is not None:
            handle.remove()


def metrics_dump(file: str, format: str = "json") -> None:  # noqa: A002 - bridge's name
    """Write every global metric to ``file`` as json or text."""
    data = {n: dict(m.stats()) for n, m in _GLOBAL.items()}
    if format == "json":
        with open(file, "w") as f:
            json.dump(data, f, indent=2, default=str)
    elif format == "text":
        with open(file, "w") as f:
            for n, stats in data.items():
                f.write(f"{n}: {stats}\n")
    else:
        raise ValueError(f"metrics_dump: format must be 'json' or 'text', got {format!r}")


# ---------------------------------------------------------------- PT_HPU_METRICS_FILE

class MetricsFileWarning(RuntimeWarning):
    pass


class _Saver:
    """The global metrics written to ``PT_HPU_METRICS_FILE`` at ``PT_HPU_METRICS_DUMP_TRIGGERS``,
    in the bridge's format (``PT_HPU_METRICS_FILE_FORMAT``):

    - json: one array of ``{"metric_name", "triggered_by", "generated_on", "statistics"}``
      objects, appended as they are written and closed (``]``) when the process exits;
    - text: per record ``Metric name:``, ``Triggered by:``, ``Generated on:``, ``Statistics:``
      and one tab-indented ``<tag>: <value>`` line per statistic, then a blank line.

    Triggers: ``process_exit`` (every metric, at exit), ``mark_step`` (every metric, after each
    mark_step) and ``metric_change`` (a metric, each time its statistics change). The file is
    created at the first write under a name no other process holds (``<file>``, else
    ``<file>.1``, ...), with ``-rank<RANK>`` before the extension when RANK is set (torchrun).
    A file that cannot be written warns once, naming the variable, and the program runs on."""

    def __init__(self):
        self._lock = threading.RLock()
        self._handles: list = []
        self._fh = None
        self.path = None           # the file written, once created
        self.base = ""
        self.triggers = frozenset()
        self.format = "json"
        self._first = True
        self._last: dict = {}

    def configure(self) -> None:
        with self._lock:
            self.close()
            for h in self._handles:
                h.remove()
            self._handles = []
            self.base = config.get("PT_HPU_METRICS_FILE").strip()
            self.triggers = config.get("PT_HPU_METRICS_DUMP_TRIGGERS") if self.base else frozenset()
            self.format = config.get("PT_HPU_METRICS_FILE_FORMAT")
            if "mark_step" in self.triggers:
                self._handles.append(ev.subscribe(self._on_mark_step, (ev.MarkStep,)))
            if "metric_change" in self.triggers:
                self._last = {n: m.stats() for n, m in _GLOBAL.items()}
                kinds = {k for m in _GLOBAL.values() for k in m.kinds}
                self._handles.append(ev.subscribe(self._on_event, tuple(kinds)))

    # ---- triggers
    def _on_mark_step(self, e) -> None:
        self.write_all("mark_step")

    def _on_event(self, e) -> None:
        with self._lock:
            for name, m in _GLOBAL.items():
                if type(e) in m.kinds:
                    stats = m.stats()
                    if stats != self._last.get(name):
                        self._last[name] = stats
                        self._write(name, stats, "metric_change")

    def at_exit(self) -> None:
        with self._lock:
            if "process_exit" in self.triggers:
                self.write_all("process_exit")
            self.close()

    # ---- the file
    def write_all(self, trigger: str) -> None:
        with self._lock:
            for name, m in _GLOBAL.items():
                self._write(name, m.stats(), trigger)

    def _write(self, name, stats, trigger) -> None:
        if not self.base:
            return
        now = datetime.now()
        try:
            if self._fh is None:
                self._open()
            if self.format == "json":
                rec = {"metric_name": name, "triggered_by": trigger, "generated_on": now.isoformat(),
                       "statistics": dict(stats)}
                self._fh.write(("" if self._first else ",\n") + json.dumps(rec, default=str))
            else:
                self._fh.writelines([f"Metric name: {name}\n", f"Triggered by: {trigger}\n",
                                     f"Generated on: {now}\n", "Statistics:\n",
                                     *[f"\t{k}: {v}\n" for k, v in stats], "\n"])
            self._fh.flush()
            self._first = False
        except OSError as err:
            warnings.warn(f"PT_HPU_METRICS_FILE={self.base!r}: cannot write the metrics file "
                          f"({type(err).__name__}: {err}); metrics are not dumped, the program runs on",
                          MetricsFileWarning, stacklevel=2)
            self.base = ""
            self._fh = None

    def _open(self) -> None:
        name = os.path.expanduser(self.base)
        for var in ("RANK", "OMPI_COMM_WORLD_RANK"):
            if var in os.environ:
                root, ext = os.path.splitext(name)
                name = f"{root}-rank{os.environ[var]}{ext}"
                break
        folder = os.path.dirname(name)
        if folder:
            os.makedirs(folder, exist_ok=True)
        candidate, i = name, 0
        while True:
            try:
                self._fh = open(candidate, "x")
                break
            except FileExistsError:
                i += 1
                candidate = f"{name}.{i}"
        self.path = candidate
        self._first = True
        if self.format == "json":
            self._fh.write("[")

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                try:
                    if self.format == "json":
                        self._fh.write("]\n")
                    self._fh.close()
                except OSError:
                    pass
                self._fh = None


saver = _Saver()
saver.configure()
config.on_change(saver.configure)
atexit.register(saver.at_exit)
