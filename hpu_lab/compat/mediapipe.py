"""``habana_frameworks.mediapipe``: importable, and a clear error as soon as it is used.

Intel's media pipe decodes and augments images on the Gaudi's own media engine (a hardware JPEG
decoder and the TPCs), fed by ``habana_dataloader`` for ImageNet-style folders. hpu_lab emulates no
media engine, so nothing of it can run here. Libraries import it at module level all the same
(lightning-habana's ``resnet_media_pipe`` defines a ``MediaPipe`` subclass when habana_frameworks
is present), so every name under ``habana_frameworks.mediapipe`` imports: a module here gives, for
any attribute, a ``NotEmulated`` placeholder. A placeholder may be named, looked into and
subclassed (``class ResnetMediaPipe(MediaPipe)``), which is what importing does; calling it or
creating an instance raises ``MediaPipeNotEmulated`` with the way out: torch's DataLoader, which is
what ``habana_dataloader.HabanaDataLoader`` falls back to (and says so).
"""
from __future__ import annotations

import types

WHY = ("habana_frameworks.mediapipe runs on the Gaudi media engine (hardware decoders), which hpu_lab "
       "does not emulate; use torch.utils.data.DataLoader (habana_dataloader.HabanaDataLoader falls back "
       "to it)")


class MediaPipeNotEmulated(RuntimeError):
    """A media pipe object was used (called or instantiated)."""


class _Meta(type):
    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return NotEmulated(f"{cls.__qualname__}.{attr}")


class NotEmulated(metaclass=_Meta):
    """Stands for one name of the media pipe: a class to subclass, an enum to look into, a function."""

    _name = "habana_frameworks.mediapipe"

    def __new__(cls, *args, **kwargs):
        if cls is NotEmulated and len(args) == 1 and isinstance(args[0], str) and not kwargs:
            # made by a module's or a placeholder's __getattr__: a named placeholder class
            return _Meta(args[0].rsplit(".", 1)[-1], (NotEmulated,), {"_name": args[0],
                                                                      "__qualname__": args[0]})
        raise MediaPipeNotEmulated(f"{cls._name}: {WHY}")


def module(name: str) -> types.ModuleType:
    """The module standing for ``name`` (``habana_frameworks.mediapipe`` or any module under it)."""
    m = types.ModuleType(name, f"hpu_lab stand-in for {name}: {WHY}")

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return NotEmulated(f"{name}.{attr}")

    m.__getattr__ = __getattr__
    m.__path__ = []
    return m
