"""``habana_frameworks.torch.hpu._utils``: device-index parsing, as the real package's.

torch's own code asks a device module for it (``torch.serialization`` validates a location with
``torch.hpu._utils._get_device_index(location, True)``).
"""
from __future__ import annotations

from typing import Any

import torch


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The index of ``device``: a torch.device, a string ("hpu", "hpu:0"), an int, or None (the
    current device, if ``optional``); -1 for a CPU device when ``allow_cpu``. The bridge's rules and
    messages."""
    if isinstance(device, str):
        device = torch.device(device)
    idx = None
    if isinstance(device, torch.device):
        if allow_cpu:
            if device.type not in ("hpu", "cpu"):
                raise ValueError(f"Expected a hpu or cpu device, but got: {device}")
        elif device.type != "hpu":
            raise ValueError(f"Expected a hpu device, but got: {device}")
        idx = -1 if device.type == "cpu" else device.index
    elif isinstance(device, int):
        idx = device
    if idx is None:
        if not optional:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        idx = torch.hpu.current_device()      # (torch.hpu is the package above: no import cycle)
    return idx
