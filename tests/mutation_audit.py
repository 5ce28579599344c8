"""The mutation audit: which aten ops' CPU kernels write arguments their schema does not mark as
written (``Tensor(a!)``)?

hpu_lab records an op as a graph node that writes exactly what its schema declares. An op whose
kernel writes more (``native_batch_norm`` updates ``running_mean``/``running_var``) loses that write
in a graph: dead code removal drops it with an unused output, a read before the output is needed
sees the old values. So every such op must be listed in ``hpu_lab.ops.HIDDEN_WRITES``.

How: every sample of every op of PyTorch's OpInfo database (several dtypes, forward and backward)
and every sample of every module of its ModuleInfo database (train and eval mode, forward and
backward) runs on the CPU under a dispatch mode that, for each aten op called, copies the memory of
each tensor argument not declared written (and not sharing memory with one that is), runs the op,
and compares. The ops that wrote anyway, and the arguments, are the findings; ``main`` prints them,
how many of the aten ops with a CPU kernel the samples reached, and fails if a finding is missing
from the table.

    python tests/mutation_audit.py            # everything (~10 minutes on 2 cores)
    python tests/mutation_audit.py --list     # also the aten ops with a CPU kernel never reached
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.uint8, torch.bool, torch.complex64)

SEEN: set = set()        # overload names of the aten ops the samples reached


def _memory(t):
    """A copy of every byte of ``t``'s storage (not only its view's elements)."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).clone()


def _bound(func, args, kwargs):
    out = []
    arguments = func._schema.arguments
    for i, v in enumerate(args):
        if i < len(arguments):
            out.append((arguments[i], v))
    names = {a.name: a for a in arguments}
    out += [(names[k], v) for k, v in kwargs.items() if k in names]
    return out


def _tensors(v):
    return [t for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor) and t.layout == torch.strided
            and t.device.type == "cpu" and not t.is_quantized]


class Audit(TorchDispatchMode):
    """Records {op: {argument names}} of the writes an op's schema does not declare."""

    def __init__(self, found):
        super().__init__()
        self.found = found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        SEEN.add(str(func))
        bound = _bound(func, args, kwargs)
        declared = {t.untyped_storage().data_ptr() for a, v in bound
                    if a.alias_info is not None and a.alias_info.is_write for t in _tensors(v)}
        before = []
        for a, v in bound:
            if a.alias_info is not None and a.alias_info.is_write:
                continue
            for t in _tensors(v):
                ptr = t.untyped_storage().data_ptr()
                if ptr and ptr not in declared:
                    before.append((a.name, t, _memory(t)))
        out = func(*args, **kwargs)
        for name, t, mem in before:
            if not torch.equal(mem, _memory(t)):
                self.found[str(func)].add(name)
        return out


def _backward(out):
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    if outs:
        torch.autograd.backward([o.float().sum() if not o.is_complex() else o.abs().sum() for o in outs])


def audit_opinfo(names=None, dtypes=DTYPES, found=None):
    """Every sample of every OpInfo op (``names``: only these ``op.name``s), in ``dtypes``."""
    from torch.testing._internal.common_methods_invocations import op_db
    found = collections.defaultdict(set) if found is None else found
    for op in op_db:
        if names is not None and op.name not in names:
            continue
        supported = op.supported_dtypes("cpu")
        for dt in dtypes:
            if dt not in supported:
                continue
            grad = op.supports_autograd and dt in (torch.float32, torch.complex64)
            try:
                samples = list(op.sample_inputs("cpu", dt, requires_grad=grad))
            except Exception:
                continue
            for s in samples:
                try:
                    with Audit(found):
                        out = op(s.input, *s.args, **s.kwargs)
                        if grad:
                            _backward(out)
                except Exception:      # samples CPU itself refuses, and backward of non-differentiable outputs
                    pass
    return found


def audit_modules(names=None, found=None):
    """Every sample of every ModuleInfo module (``names``: only these, e.g. "nn.LSTM"), float32, in
    train and eval mode, forward and backward."""
    from torch.testing._internal.common_modules import module_db
    found = collections.defaultdict(set) if found is None else found
    for info in module_db:
        if names is not None and info.name not in names:
            continue
        for training in (True, False):
            try:
                inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                                 training=training)
            except Exception:
                continue
            for mi in inputs:
                try:
                    with Audit(found):
                        m = info.module_cls(*mi.constructor_input.args, **mi.constructor_input.kwargs)
                        m.train(training)
                        _backward(m(*mi.forward_input.args, **mi.forward_input.kwargs))
                except Exception:
                    pass
    return found


def cpu_kernel_ops() -> set:
    """Overload names ("aten.add.Tensor") of the aten ops with a CPU kernel of their own."""
    out = set()
    for name in torch._C._dispatch_get_registrations_for_dispatch_key("CPU"):
        if not name.startswith("aten::"):
            continue
        base, _, overload = name[len("aten::"):].partition(".")
        out.add(f"aten.{base}.{overload or 'default'}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--list", action="store_true", help="list the CPU-kernel ops no sample reached")
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    t0 = time.time()
    found = audit_opinfo()
    audit_modules(found=found)
    from hpu_lab import ops
    table = {str(f): set(v[0]) for f, v in ops.HIDDEN_WRITES.items()}
    kernels = cpu_kernel_ops()
    reached = SEEN & kernels
    print(f"mutation audit: {len(SEEN)} aten ops reached ({len(reached)} of the {len(kernels)} with a CPU "
          f"kernel), {time.time() - t0:.0f} s")
    missing = 0
    for op in sorted(found):
        listed = table.get(op) == found[op]
        missing += not listed
        print(f"  {op}: writes {', '.join(sorted(found[op]))} "
              f"({'in ops.HIDDEN_WRITES' if listed else 'NOT in ops.HIDDEN_WRITES'})")
    for op in sorted(set(table) - set(found)):
        print(f"  {op}: in ops.HIDDEN_WRITES, no sample wrote it this run")
    if a.list:
        print("aten ops with a CPU kernel that no sample reached:")
        for op in sorted(kernels - SEEN):
            print("  " + op)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
