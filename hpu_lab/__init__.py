"""hpu_lab: the Intel Gaudi ("hpu") PyTorch execution model, emulated on a CPU.

``import hpu_lab`` registers the "hpu" device with stock PyTorch; ``torch.hpu`` is then hpu_lab's
device module and ``import hpu_lab.core as htcore`` gives ``mark_step``. Nothing here imports
Jupyter, matplotlib, ipywidgets or networkx: views live in the separate ``widgets`` package.
"""
from __future__ import annotations

import torch as _torch

# First of all: "hpu" must name PrivateUse1 before any torch.device("hpu") is made (torch also
# knows a built-in HPU device type, for Intel's own C++ bridge; hpu_lab is the Python one).
if _torch._C._get_privateuse1_backend_name() != "hpu":
    _torch.utils.rename_privateuse1_backend("hpu")

from . import config, events, metrics  # noqa: F401
from . import device as _device
from . import lazy as _lazy

_device.register()
_lazy.S.reload()

from . import core, hpu  # noqa: E402,F401
from . import amp as _amp  # noqa: E402

_amp.install()      # torch.autocast("hpu"): fallthrough, bf16 default, the op lists
from . import fallback as _fallback  # noqa: E402

_fallback.install()  # ops/dtypes that do not run on HPU go to the CPU (seed 003)
from . import compile_backend as _compile_backend  # noqa: E402

_compile_backend.install()  # torch.compile(backend="hpu_backend"), registered when dynamo loads
from . import module_apply as _module_apply  # noqa: E402

_module_apply.install()     # Module.to("hpu") keeps shared parameters shared (claim M12)
from . import sdpa as _sdpa  # noqa: E402

_sdpa.install()             # F.scaled_dot_product_attention: one node, CPU's kernel
from . import formulas as _formulas  # noqa: E402

_formulas.install()         # prod's backward: the formula CPU picks
from . import distributed as _distributed  # noqa: E402,F401  # init_process_group("hccl") (REFERENCE 7)


def _disk_lookup(key, nodes, externals, outs, site):
    # PT_HPU_RECIPE_CACHE_CONFIG: recipes shared across processes (seed 003, disk_cache.py);
    # imported on first use so that `python -m hpu_lab.disk_cache` runs a fresh module
    from .disk_cache import lookup
    return lookup(key, nodes, externals, outs, site)


def _disk_store(recipe):
    from .disk_cache import store
    store(recipe)


_lazy._lookup_hooks.append(_disk_lookup)
_lazy._compile_hooks.append(_disk_store)

from .tensor import HPUTensor  # noqa: E402,F401

__version__ = "0.1.0"
