"""hpu_lab: the Intel Gaudi ("hpu") PyTorch execution model, emulated on a CPU.

``import hpu_lab`` registers the "hpu" device with stock PyTorch; ``torch.hpu`` is then hpu_lab's
device module and ``import hpu_lab.core as htcore`` gives ``mark_step``. Nothing here imports
Jupyter, matplotlib, ipywidgets or networkx: views live in the separate ``widgets`` package.
"""
from __future__ import annotations

import gc as _gc
import importlib as _importlib

from .util import omp as _omp

_omp.prefer_passive_wait()   # before torch loads OpenMP: idle workers sleep, not spin (util/omp.py)

import torch as _torch  # noqa: E402

# The plug-ins, in the order they register: (module, the function that installs it, or None when
# importing the module registers what it defines). Each comment says what the plug-in adds.
_PLUGINS = (
    ("kernels.amp", "install"),                 # torch.autocast("hpu"): fallthrough, bf16 default, the op lists
    ("dispatch.route", "install_fallback"),     # ops/dtypes that do not run on HPU go to the CPU (seed 003)
    ("integration.compile_backend", "install"),  # torch.compile(backend="hpu_backend"), registered when dynamo loads
    ("dispatch.objmodel", "install"),           # a dense device: Module.to("hpu") keeps Parameters, .data = rebinds
    ("integration.run_settings", "install"),    # set_default_dtype & co. leave what was traced as it was
    ("runtime.pinned", "install"),              # tensor.pin_memory() / is_pinned() for the hpu device
    ("kernels.sdpa", "install"),                # F.scaled_dot_product_attention: one node, CPU's kernel
    ("kernels.dropout_ops", "install"),         # dropout arriving whole (inference_mode): a node, capturable
    ("kernels.mixed_matmul", "install"),        # addmm / mm of two float dtypes: the bridge's promote / refusal
    ("kernels.linear_ce", "install"),           # F.linear_cross_entropy(options=...): the chunked op, CPU's picks
    ("kernels.lstsq", "install"),               # linalg.lstsq: the solution in CPU's column-major layout
    ("kernels.zerotensor", "install"),          # _efficientzerotensor (zero gradients of sgn & co.): a zeros node
    ("observe.torch_profiler", "install"),      # torch.profiler traces show the emulated HPU
    ("kernels.hidden_writes", "install"),       # batch norm's running stats & co.: writes the schema does not declare
    ("kernels.rnn", "install"),                 # nn.LSTM/GRU/RNN and cells: the op sequence CPU runs
    ("integration.serialization", "install"),   # torch.save/load of hpu tensors: storages and views kept
    ("integration.generator", "install"),       # torch.Generator(device="hpu"): hpu's (the host's) generator
    ("kernels.formulas", "install"),            # prod's backward: the formula CPU picks
    ("kernels.composite_outs", "install"),      # matrix_rank(out=) writes out (torch's subclass branch did not)
    ("distributed", None),                      # init_process_group("hccl") (REFERENCE 7)
    ("compiler._disk_hooks", "install"),        # recipes shared across processes (seed 003)
    ("kernels.custom_ops", None),               # torch.ops.hpu.*: the bridge's custom ops
    ("ops.meta_fixes", None),                   # Meta kernels corrected to the CPU's shapes
    ("kernels.optimizer_ops", None),            # torch.ops.hpu.optimizer_adamw (DeepSpeed's FusedAdam)
    ("kernels.fp8_ops", None),                  # torch.ops.hpu.cast_to_fp8_v2 / fp8_gemm_v2 (Transformer Engine)
    ("kernels.native_ops", "install"),          # convolution_overrideable: the backend's own aten ops
    ("kernels.scaled_mm", "install"),           # torch._scaled_mm as Gaudi's fp8_gemm: any layout
    ("kernels.quant_ops", "install"),           # quantized_decomposed ops as Gaudi's kernels compute them
    ("kernels.backward_errors", "install"),     # an hpu op's error inside backward() is raised, not an abort
)

# Each full collection of the cyclic garbage collector that hpu_lab's own allocations trigger during
# this import would walk every object torch made (~0.1 s of the import's 0.14 s of CPU here). They
# are frozen meanwhile (alive, just not scanned) and unfrozen at the end of the import, failed or
# not; a process that froze objects itself is left as it was.
_gc_frozen_here = _gc.get_freeze_count() == 0
if _gc_frozen_here:
    _gc.freeze()

try:
    # First of all: "hpu" must name PrivateUse1 before any torch.device("hpu") is made (torch also
    # knows a built-in HPU device type, for Intel's own C++ bridge; hpu_lab is the Python one).
    if _torch._C._get_privateuse1_backend_name() != "hpu":
        _torch.utils.rename_privateuse1_backend("hpu")

    from . import config, events
    from .observe import metrics  # noqa: F401

    config.validate_all()   # every setting is read now, as the bridge reads its flags at init: a
                            # malformed one is refused here, naming it, not where its feature first runs
    from .integration import device as _device
    from . import lazy as _lazy

    _device.register()
    _lazy.S.reload()

    from . import core, hpu  # noqa: F401
    from .tensor import HPUTensor  # noqa: F401

    for _module, _install in _PLUGINS:
        _plugin = _importlib.import_module(f".{_module}", __name__)
        if _install is not None:
            getattr(_plugin, _install)()
    del _module, _install, _plugin

    __version__ = "0.1.0"

    from .util import warmup as _warmup  # noqa: E402
finally:
    if _gc_frozen_here:     # a failed import too: the collector is back as it was
        _gc.unfreeze()


_warmup.start()     # torch's modules the first op needs, imported in the background (util/warmup.py)

# Subpackages not imported by ``import hpu_lab`` (they stay out of its cost) are loaded on first
# attribute access, so ``import hpu_lab; hpu_lab.compat.enable_habana_imports()``, the README's
# spelling, works without importing ``hpu_lab.compat`` first (PEP 562).
_LAZY_SUBPACKAGES = frozenset({"compat", "tools", "bench", "dynamo", "internal", "bridge_api"})


def __getattr__(name):
    if name in _LAZY_SUBPACKAGES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
