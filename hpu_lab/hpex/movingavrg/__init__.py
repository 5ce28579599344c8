"""hpex.movingavrg.FusedEMA: an exponential moving average of a model's weights, updated by one fused
``torch.ops.hpu.optimizer_ema`` node over the whole state dict (hpu_lab/kernels/custom_ops.py):
``ema = d * ema + (1 - d) * model`` for floating-point entries, with the decay ramp
``d = decay * (1 - exp(-updates / 2000))`` of YOLO-style EMA, which the bridge's FusedEMA uses."""
from __future__ import annotations

import math
from copy import deepcopy

import torch
from torch import nn

from ... import config
from ... import core as _core

__all__ = ["FusedEMA"]


def _unwrap(model):
    return model.module if isinstance(model, (nn.parallel.DataParallel, nn.parallel.DistributedDataParallel)) \
        else model


class FusedEMA:
    def __init__(self, model: nn.Module, decay: float = 0.9999, updates: float = 0):
        if not 0.0 <= decay:
            raise ValueError(f"Invalid decay value: {decay}")
        self.ema = deepcopy(_unwrap(model)).eval()
        self.decay = lambda x: decay * (1 - math.exp(-x / 2000))
        self.updates = updates
        self.updated_ema = list(self.ema.state_dict().values())

    def update(self, model):
        lazy = config.lazy_mode()
        if lazy:
            _core.mark_step()           # the EMA update is a graph of its own, as in the bridge
        with torch.no_grad():
            self.updates += 1
            d = torch.tensor([self.decay(self.updates)]).to(self.updated_ema[0].device)
            torch.ops.hpu.optimizer_ema(list(_unwrap(model).state_dict().values()), self.updated_ema, d)
        if lazy:
            _core.mark_step()

    def update_attr(self, model, include=(), exclude=("process_group", "reducer")):
        for k, v in model.__dict__.items():
            if (include and k not in include) or k.startswith("_") or k in exclude:
                continue
            setattr(self.ema, k, v)
