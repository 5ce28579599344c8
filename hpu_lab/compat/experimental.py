"""``habana_frameworks.torch.utils.experimental`` (``import ... as htexp``): the device type, and
Intel's dynamic-shape detection tools, on hpu_lab's runtime.

- ``_get_device_type()`` / ``synDeviceType``: the Synapse device type (the card HPU_LAB_DEVICE chooses, Gaudi 2 by default);
  optimum-habana's ``get_device_name()`` reads it.
- ``detect_recompilation_auto_model(model)``: wraps every submodule's forward so that each call is
  its own graph (a ``mark_step`` before and after) and counts the compiles it caused, with whether
  the call's input and output signatures were new. ``model.analyse_dynamicity()`` then prints, per
  step, which modules recompiled and why ("new input shape", or "already processed input shape
  still recompiled", i.e. a dynamic op inside), and which modules recompile most.
- ``data_dynamicity(loader)``: a histogram of the batch shapes a loader yields;
  ``const_shape_dataloader(loader, maxlen)``: a loader of up to ``maxlen`` batches of one shape.

The real tool sleeps ``waittime`` seconds after each ``mark_step`` so that the asynchronous compile
counters have settled; hpu_lab compiles inside ``mark_step`` itself, so the count is exact at once
and ``waittime`` is accepted but not used.
"""
from __future__ import annotations

import enum
import inspect

import torch
from torch.utils.data import DataLoader

from .. import core as _htcore
from .. import events as _ev
from .. import hpu  # noqa: F401  (htexp.hpu, as in the real module)

TAG = "[DETECT_RECOMPILE_AUTO]"


class synDeviceType(enum.IntEnum):   # noqa: N801 - Synapse's name
    synDeviceGoya2 = 1
    synDeviceGaudi = 2
    synDeviceGaudi2 = 4
    synDeviceGaudi3 = 5
    synDeviceEmulator = 6
    synDeviceTypeInvalid = 7


def _get_device_type() -> synDeviceType:
    """The card hpu_lab emulates (HPU_LAB_DEVICE: gaudi, gaudi2 or gaudi3)."""
    from .. import config
    return {"gaudi": synDeviceType.synDeviceGaudi, "gaudi2": synDeviceType.synDeviceGaudi2,
            "gaudi3": synDeviceType.synDeviceGaudi3}[config.get("HPU_LAB_DEVICE")]


def _is_fp16_supported() -> bool:
    return _get_device_type() != synDeviceType.synDeviceGaudi


def _compute_stream() -> int:
    return torch.hpu.current_stream().stream_id


# ---------------------------------------------------------------- detect_recompilation_auto_model

def _signature(x):
    """What decides a recompile: tensor shapes and dtypes, and every other value as it is."""
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), str(x.dtype))
    if isinstance(x, (list, tuple)):
        return tuple(_signature(v) for v in x)
    if isinstance(x, dict):
        return tuple((k, _signature(v)) for k, v in x.items())
    try:
        hash(x)
        return x
    except TypeError:
        return repr(x)


class _Call:
    __slots__ = ("step", "name", "new_in", "new_out", "compiles", "cls", "where")

    def __init__(self, step, name, new_in, new_out, compiles, cls, where):
        self.step, self.name, self.new_in, self.new_out = step, name, new_in, new_out
        self.compiles, self.cls, self.where = compiles, cls, where

    def comment(self) -> str:
        if self.new_in:
            return "Recompiled due to new input shape"
        if self.new_out:
            return "Already processed input shape still recompiled and has new output shape. Maybe dyn ops"
        return "Already processed input shape still recompiled. Maybe dyn ops"


class _Detector:
    def __init__(self, top: str, csv_out: str):
        self.top, self.csv_out = top, csv_out
        self.step = -1
        self.calls: list = []
        self.lines: list = []
        self.seen_in: dict = {}
        self.seen_out: dict = {}
        self.children: dict = {}

    def wrap(self, module, name, level, done):
        if id(module) in done:            # one module reachable twice: wrapped once
            return
        done.add(id(module))
        self.seen_in[name], self.seen_out[name] = set(), set()
        where = inspect.getsourcefile(type(module)) or "?"
        self.lines.append(f"{'  ' * level}{TAG} Registering hooks for {name} of type {type(module)} "
                          f"probably defined here {where}")
        old = module.forward

        def forward(*args, **kwargs):
            if level == 0:
                self.step += 1
            sig_in = _signature((args, kwargs))
            _htcore.mark_step()
            with _ev.Collector(kinds=(_ev.Compile,)) as c:
                out = old(*args, **kwargs)
                _htcore.mark_step()
            n = len(c.of(_ev.Compile))
            sig_out = _signature(out)
            new_in, new_out = sig_in not in self.seen_in[name], sig_out not in self.seen_out[name]
            self.seen_in[name].add(sig_in)
            self.seen_out[name].add(sig_out)
            self.lines.append(f"{'  ' * level}{TAG}[{name}]{f'step:{self.step}' if level == 0 else ''} "
                              f"{'Found new input signature ' if new_in else ''}"
                              f"{'Found new output signature ' if new_out else ''}num_graphs:{n} "
                              f"{'Recompilation!' if n else ''}")
            if n:
                self.calls.append(_Call(self.step, name, new_in, new_out, n, type(module).__name__, where))
            return out

        module.forward = forward
        kids = self.children.setdefault(name, [])
        for child_name, child in module.named_children():
            kids.append(f"{name}/{child_name}")
            self.wrap(child, f"{name}/{child_name}", level + 1, done)

    def rows(self):
        """(step, module, new in, new out, class, location, comment) per recompiling call, and the
        recompile count per module, most first."""
        dyn = {c.name for c in self.calls if not c.new_in}
        rows = []
        for c in self.calls:
            comment = c.comment()
            if not c.new_in and any(k in dyn for k in self._descendants(c.name)):
                comment += ". Could be due to dynamic child"
            rows.append((c.step, c.name, c.new_in, c.new_out, c.cls, c.where, comment))
        counts: dict = {}
        for c in self.calls:
            counts[c.name] = counts.get(c.name, 0) + 1
        return rows, sorted(counts.items(), key=lambda kv: -kv[1])

    def _descendants(self, name):
        for k in self.children.get(name, ()):
            yield k
            yield from self._descendants(k)

    def analyse(self):
        rows, counts = self.rows()
        head1 = ("Step", "Recompiling modules", "New in", "New out", "Class", "Location", "Comment")
        head2 = ("Module name", "Recompile count")
        print(_table(head1, rows))
        print(_table(head2, counts))
        if self.csv_out is not None:
            for suffix, head, body in (("_1.csv", head1, rows), ("_2.csv", head2, counts)):
                with open(self.csv_out + suffix, "w") as f:
                    for r in (head, *body):
                        f.write(",".join(str(v) for v in r) + "\n")
        return rows, counts


def _table(head, rows) -> str:
    cells = [[str(v) for v in r] for r in (head, *rows)]
    width = [max(len(r[i]) for r in cells) for i in range(len(head))]
    line = "+" + "+".join("-" * (w + 2) for w in width) + "+"
    out = [line]
    for j, r in enumerate(cells):
        out.append("| " + " | ".join(v.ljust(w) for v, w in zip(r, width)) + " |")
        if j == 0:
            out.append(line.replace("-", "="))
    out.append(line)
    return "\n".join(out)


def detect_recompilation_auto_model(model, mdlname: str = "Net", waittime=1, csv_out: str = "out"):
    """Return ``model`` with every submodule's forward instrumented, and ``model.raw_logs()`` (the log
    lines) and ``model.analyse_dynamicity()`` (the report; it also writes ``<csv_out>_1.csv`` and
    ``<csv_out>_2.csv``; returns the rows) added. Lazy mode only, one process."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise AssertionError("Expected 1x run, but torch being used in distributed fashion")
    if hasattr(model, "analyse_dynamicity"):
        raise AssertionError("The model already has field analyse_dynamicity")
    d = _Detector(mdlname, csv_out)
    d.wrap(model, mdlname, 0, set())
    model.raw_logs = lambda: list(d.lines)
    model.analyse_dynamicity = d.analyse
    return model


# ---------------------------------------------------------------- data dynamicity

def _shape(x):
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    if isinstance(x, (list, tuple)):
        return tuple(_shape(v) for v in x)
    if isinstance(x, dict):
        return tuple((_shape(k), _shape(v)) for k, v in x.items())
    return hash(x)


def data_dynamicity(dl) -> dict:
    """Histogram {batch shape: count} of what ``dl`` yields, printed with a verdict."""
    hist: dict = {}
    for batch in dl:
        k = _shape(batch)
        hist[k] = hist.get(k, 0) + 1
    print(_table(("Shape", "Count"), sorted(hist.items(), key=lambda kv: -kv[1])))
    n = len(hist)
    print("Number of unique shapes: ", n)
    if n == 0:
        print("Dataset looks empty")
    else:
        amount = "no" if n == 1 else "a little" if n <= 5 else "some" if n <= 20 else "a lot of"
        print(f"There is {amount} dynamicity in input data shapes")
    return hist


def const_shape_dataloader(dl, maxlen: int) -> DataLoader:
    """A loader over up to ``maxlen`` batches of ``dl`` that all have one shape (the first shape to
    reach ``maxlen`` batches, else the most frequent one)."""
    by_shape: dict = {}
    for batch in dl:
        lst = by_shape.setdefault(_shape(batch), [])
        lst.append(batch)
        if len(lst) == maxlen:
            return DataLoader(lst, batch_size=None, collate_fn=None)
    if not by_shape:
        raise ValueError("const_shape_dataloader: the dataloader yielded nothing")
    return DataLoader(max(by_shape.values(), key=len), batch_size=None, collate_fn=None)


_EMULATED = ("synDeviceType", "_get_device_type", "_is_fp16_supported", "_compute_stream",
             "detect_recompilation_auto_model", "data_dynamicity", "const_shape_dataloader", "hpu")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"hpu_lab does not emulate habana_frameworks.torch.utils.experimental.{name} "
                         f"(emulated: {', '.join(_EMULATED)})")
