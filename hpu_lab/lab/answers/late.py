"""Reference answers and starting code of the exercises (hpu_lab.lab.answers), part 3: notebooks 06
and 08 (exercises_more.py)."""
from __future__ import annotations

import os
import tempfile
import warnings

import torch
import torch.nn.functional as F

from ... import core as htcore
from ._common import DEVICE, Net, _batches


# -- notebook 06 section 2: the loader without padding ----------------------------------------------
def _unpadded_epoch(batch_size: int):
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for data, target in _batches(1600, batch_size):
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data.to(DEVICE)), target.to(DEVICE)).backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()


def start_06_1():
    _unpadded_epoch(256)


def reference_06_1():
    _unpadded_epoch(200)


# -- notebook 06 section 4: one step with HMP -----------------------------------------------------------
def _hmp_step(step_in_fp32: bool):
    from ...hpex import hmp
    lists = tempfile.mkdtemp()
    for name, ops in (("bf16.txt", hmp.hmp_bf16_ops), ("fp32.txt", hmp.hmp_fp32_ops)):
        with open(os.path.join(lists, name), "w") as f:
            f.write("\n".join(ops))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # HMP's deprecation warning
        hmp.convert(opt_level="O1", bf16_file_path=os.path.join(lists, "bf16.txt"),
                    fp32_file_path=os.path.join(lists, "fp32.txt"))
    try:
        torch.manual_seed(0)
        model = Net().to(DEVICE)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        data, target = torch.randn(64, 1, 28, 28).to(DEVICE), torch.randint(0, 10, (64,)).to(DEVICE)
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(data), target).backward()
        htcore.mark_step()
        if step_in_fp32:
            with hmp.disable_casts():
                optimizer.step()
        else:
            optimizer.step()
        htcore.mark_step()
        return model
    finally:
        hmp._restore()


def start_06_2():
    return _hmp_step(step_in_fp32=True)


def reference_06_2():
    return _hmp_step(step_in_fp32=False)


# -- notebook 08: launches on emulated cards (cards.py is the script each card runs) -----------------------
def start_08_1():
    from .cards import launch
    return launch("buckets", cards=2)


def reference_08_1():
    from .cards import launch
    return launch("buckets", cards=3)


def start_08_2():
    from .cards import launch
    return launch("buckets", "float32")


def reference_08_2():
    from .cards import launch
    return launch("buckets", "bfloat16")


def start_08_3():
    from .cards import launch
    return launch("inference", "row", PT_HPU_ENABLE_LAZY_COLLECTIVES="true")


def reference_08_3():
    from .cards import launch
    return launch("inference", "column", PT_HPU_ENABLE_LAZY_COLLECTIVES="true")
