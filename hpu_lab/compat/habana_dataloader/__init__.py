"""``habana_dataloader``: Intel's ``HabanaDataLoader``, as it behaves on a host without a media pipe.

The real ``HabanaDataLoader`` picks an accelerated loader by dataset: an ImageNet-style folder
(``torchvision.datasets.ImageFolder`` or ``habana_dataset.ImageFolderWithManifest``) goes to the
media-pipe ResNet loader (Gaudi 2/3's media engine) or the aeon loader (first-gen Gaudi), a COCO
dataset to the SSD loaders; any other dataset has no accelerated loader. When the chosen loader
cannot be built, it prints ``Failed to initialize Habana Dataloader, error: ...`` and runs with
torch's DataLoader, the documented fallback (unless ``DATALOADER_FALLBACK_EN`` is set empty, the one
value the real package reads as false: then it prints ``Habana dataloader configuration failed`` and
raises).

hpu_lab has no media engine and no aeon, so the accelerated loaders never build: every
HabanaDataLoader is torch's DataLoader with the same arguments, and it says so once, with the reason.
``aeon`` is None (no aeon loader: lightning-habana checks it). Batches come out of torch's DataLoader
exactly as they would with ``torch.utils.data.DataLoader(*args, **kwargs)``.
"""
from __future__ import annotations

import os

import torch.utils.data

from . import habana_dataset  # noqa: F401  (habana_dataloader.habana_dataset.ImageFolderWithManifest)
from .habana_dataset import ImageFolderWithManifest

__all__ = ["HabanaDataLoader"]


def _accelerated_loader(dataset) -> str:
    """Which of the real package's loaders would take ``dataset``, and why none can run here."""
    try:
        import torchvision.datasets
        folder = isinstance(dataset, (torchvision.datasets.ImageFolder, ImageFolderWithManifest))
    except ImportError:
        folder = isinstance(dataset, ImageFolderWithManifest)
    if folder:
        return ("the ImageFolder loader decodes on the Gaudi media engine (habana_frameworks.mediapipe) "
                "or with aeon, neither of which hpu_lab emulates")
    return f"no Habana dataloader handles a {type(dataset).__name__} dataset"


def _fallback_enabled() -> bool:
    # the real package tests ``os.getenv("DATALOADER_FALLBACK_EN", True)`` for truth: any non-empty
    # value (even "0" or "false") keeps the fallback on; only an empty one turns it off
    return os.environ.get("DATALOADER_FALLBACK_EN", "1") != ""


class HabanaDataLoader:
    """``HabanaDataLoader(dataset, batch_size=..., ...)``: the arguments of torch's DataLoader."""

    aeon = None

    def __init__(self, *args, **kwargs):
        dataset = kwargs.get("dataset", args[0] if args else None)
        reason = _accelerated_loader(dataset)
        if not _fallback_enabled():
            print(f"Habana dataloader configuration failed: {reason}")
            raise RuntimeError(f"HabanaDataLoader: {reason} (DATALOADER_FALLBACK_EN is empty, so it does "
                               f"not fall back to torch's DataLoader)")
        print(f"Failed to initialize Habana Dataloader, error: {reason}\nRunning with PyTorch Dataloader")
        self.fallback_reason = reason
        self.dataloader = torch.utils.data.DataLoader(*args, **kwargs)

    def __iter__(self):
        self.iter = iter(self.dataloader)
        return self

    def __next__(self):
        return next(self.iter)

    def __len__(self):
        return len(self.dataloader)

    def __getattr__(self, attr):          # batch_size, dataset, sampler...: the DataLoader's
        if attr in ("dataloader", "iter") or attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.dataloader, attr)
