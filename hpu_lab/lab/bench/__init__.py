"""The project's benchmark: ``python -m hpu_lab.lab.bench`` (or ``make bench``).

Everything is measured in this one run and printed as ratios, so the figures compare like with
like on whatever machine runs it. One module a section, each runnable alone
(``python -m hpu_lab.lab.bench lazy graphs``, or ``python -m hpu_lab.lab.bench.graphs --steps 10``):

- imports (imports.py): fresh-process time of ``import torch`` and of ``import hpu_lab`` on top.
- recorder (recorder.py): the event recorder's cost per event on a lazy loop of small ops, the fast
  recorder and the reference one, against the same loop with nobody listening.
- host_clock (host_clock.py): the Gaudi clock's modeled host lane on seed 000's three modes (the
  seed's host times as ratios) and the end-to-end rows (whole HF Trainer runs, the whole clock).
- lazy (accumulation.py): host cost per op of a 40-op elementwise chain, hpu lazy mode (recording
  on and off) vs plain eager CPU vs PyTorch's own lazy tensor core (``torch._lazy``, TorchScript
  backend), measured in one run.
- graphs (graphs.py): the HPU Graphs payoff on seed 000's training step.
- fused (fused.py): the hpex fused optimizers, clipping and attention.
- panel (panel.py): a live panel's overhead on a 600-step seed-style loop in a Jupyter kernel.
- disk_cache: cold vs warm start with the disk recipe cache (lives beside the feature).
- gaudi_clock (perfmodel/validation.py): the Gaudi clock's modeled throughput vs published Gaudi
  figures (docs/gaudi_clock.md, "Validation") and the seed-000 what-if table; nothing runs on a device.
"""
from __future__ import annotations

import argparse
import importlib

import torch

SECTIONS = {
    "imports": ("hpu_lab.lab.bench.imports", "main"),
    "recorder": ("hpu_lab.lab.bench.recorder", "main"),
    "host_clock": ("hpu_lab.lab.bench.host_clock", "main"),
    "lazy": ("hpu_lab.lab.bench.accumulation", "main"),
    "graphs": ("hpu_lab.lab.bench.graphs", "main"),
    "fused": ("hpu_lab.lab.bench.fused", "main"),
    "panel": ("hpu_lab.lab.bench.panel", "main"),
    "disk_cache": ("hpu_lab.compiler.disk_cache", "report"),
    "gaudi_clock": ("hpu_lab.perfmodel.validation", "main"),
}
ONLY_WHEN_NAMED: tuple = ()


def main(argv=None) -> None:
    import hpu_lab  # noqa: F401  (registers the device)
    p = argparse.ArgumentParser(prog="python -m hpu_lab.lab.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sections", nargs="*", default=[s for s in SECTIONS if s not in ONLY_WHEN_NAMED],
                   help=f"any of {', '.join(SECTIONS)} (default: all)")
    args = p.parse_args(argv)
    print(f"hpu_lab benchmark — torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in args.sections:
        mod_name, fn_name = SECTIONS[name]
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as e:
            print(f"\n== {name}: not available ({e}) ==")
            continue
        getattr(mod, fn_name)()

