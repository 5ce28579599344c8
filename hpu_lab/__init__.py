"""hpu_lab: the Intel Gaudi ("hpu") PyTorch execution model, emulated on a CPU.

``import hpu_lab`` registers the "hpu" device with stock PyTorch; ``torch.hpu`` is then hpu_lab's
device module and ``import hpu_lab.core as htcore`` gives ``mark_step``. Nothing here imports
Jupyter, matplotlib, ipywidgets or networkx: views live in the separate ``widgets`` package.
"""
from __future__ import annotations

import gc as _gc

from .util import omp as _omp

_omp.prefer_passive_wait()   # before torch loads OpenMP: idle workers sleep, not spin (util/omp.py)

import torch as _torch  # noqa: E402

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

    from . import core, hpu  # noqa: E402,F401
    from .kernels import amp as _amp  # noqa: E402

    _amp.install()      # torch.autocast("hpu"): fallthrough, bf16 default, the op lists
    from .dispatch import route as _route  # noqa: E402

    _route.install_fallback()  # ops/dtypes that do not run on HPU go to the CPU (seed 003)
    from .integration import compile_backend as _compile_backend  # noqa: E402

    _compile_backend.install()  # torch.compile(backend="hpu_backend"), registered when dynamo loads
    from .dispatch import objmodel as _objmodel  # noqa: E402

    _objmodel.install()         # hpu is a dense device: Module.to("hpu") keeps Parameters, .data = rebinds
    from .integration import run_settings as _run_settings  # noqa: E402

    _run_settings.install()     # set_default_dtype & co. leave what was traced as it was (integration/run_settings.py)
    from .runtime import pinned as _pinned  # noqa: E402

    _pinned.install()           # tensor.pin_memory() / is_pinned() for the hpu device (runtime/pinned.py)
    from .kernels import sdpa as _sdpa  # noqa: E402

    _sdpa.install()             # F.scaled_dot_product_attention: one node, CPU's kernel
    from .kernels import dropout_ops as _dropout_ops  # noqa: E402

    _dropout_ops.install()      # dropout arriving whole (inference_mode): a node, capturable
    from .kernels import mixed_matmul as _mixed_matmul  # noqa: E402

    _mixed_matmul.install()     # addmm / mm of two float dtypes: the bridge's promote / refusal
    from .kernels import linear_ce as _linear_ce  # noqa: E402

    _linear_ce.install()        # F.linear_cross_entropy(options=...): the chunked op with CPU's picks
    from .kernels import lstsq as _lstsq  # noqa: E402

    _lstsq.install()            # linalg.lstsq: the solution in CPU's column-major layout
    from .kernels import zerotensor as _zerotensor  # noqa: E402

    _zerotensor.install()       # _efficientzerotensor (zero gradients of sgn & co.): a zeros node
    from .observe import torch_profiler as _torch_profiler  # noqa: E402

    _torch_profiler.install()   # torch.profiler traces show the emulated HPU (observe/torch_profiler.py)
    from .kernels import hidden_writes as _hidden_writes  # noqa: E402

    _hidden_writes.install()    # batch norm's running stats & co.: writes the schema does not declare
    from .kernels import rnn as _rnn  # noqa: E402

    _rnn.install()              # nn.LSTM/GRU/RNN and cells: the op sequence CPU runs (kernels/rnn.py)
    from .integration import serialization as _serialization  # noqa: E402

    _serialization.install()    # torch.save/load of hpu tensors: storages and views kept (integration/serialization.py)
    from .integration import generator as _generator  # noqa: E402

    _generator.install()        # torch.Generator(device="hpu"): hpu's (the host's) generator
    from .kernels import formulas as _formulas  # noqa: E402

    _formulas.install()         # prod's backward: the formula CPU picks
    from .kernels import composite_outs as _composite_outs  # noqa: E402

    _composite_outs.install()   # matrix_rank(out=) writes out (torch's subclass branch did not)
    from . import distributed as _distributed  # noqa: E402,F401  # init_process_group("hccl") (REFERENCE 7)

    from .compiler import _disk_hooks  # noqa: E402

    from .compiler import find as _find  # noqa: E402
    _find.add_lookup(_disk_hooks.lookup)      # recipes shared across processes (seed 003)
    _find.on_compile(_disk_hooks.store)

    from .tensor import HPUTensor  # noqa: E402,F401
    from .kernels import custom_ops  # noqa: E402,F401  # torch.ops.hpu.* (the bridge's custom ops; issue 16)
    from .ops import meta_fixes  # noqa: E402,F401  # Meta kernels corrected to the CPU's shapes (issue 16)
    from .kernels import optimizer_ops  # noqa: E402,F401  # torch.ops.hpu.optimizer_adamw (DeepSpeed's FusedAdam; issue 35)
    from .kernels import fp8_ops  # noqa: E402,F401  # torch.ops.hpu.cast_to_fp8_v2 / fp8_gemm_v2 (Transformer Engine; issue 35)
    from .kernels import backward_errors as _backward_errors  # noqa: E402

    from .kernels import native_ops as _native_ops  # noqa: E402
    from .kernels import quant_ops as _quant_ops  # noqa: E402
    from .kernels import scaled_mm as _scaled_mm  # noqa: E402

    _native_ops.install()       # convolution_overrideable: the backend's own aten ops (issue 16)
    _scaled_mm.install()        # torch._scaled_mm as Gaudi's fp8_gemm: any layout, scale_result multiplies (issue 16)
    _quant_ops.install()        # quantized_decomposed ops as Gaudi's kernels compute them (fp8 unrounded; issue 16)
    _backward_errors.install()  # an hpu op's error inside backward() is raised, not a process abort (issue 16)

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
