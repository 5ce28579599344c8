"""The mutation audit: which aten ops' CPU kernels write arguments their schema does not mark as
written (``Tensor(a!)``)?

hpu_lab records an op as a graph node that writes exactly what its schema declares. An op whose
kernel writes more (``native_batch_norm`` updates ``running_mean``/``running_var``) loses that write
in a graph: dead code removal drops it with an unused output, a read before the output is needed
sees the old values. So every such op must be listed in ``hpu_lab.ops.HIDDEN_WRITES``.

How: every sample of every op of PyTorch's OpInfo database (several dtypes, forward and backward)
every sample of every module of its ModuleInfo database (train and eval mode, forward and
backward) and every input of every optimizer of its OptimizerInfo database (single-tensor, foreach,
fused: two steps) runs on the CPU under a dispatch mode that, for each aten op called, copies the memory of
each tensor argument not declared written (and not sharing memory with one that is), runs the op,
and compares. Then each aten op with a CPU kernel that no sample reached is called on arguments
made from its schema's types (a few shapes and dtypes; in child processes, as made-up arguments
can crash a kernel). The ops that wrote anyway, and the arguments, are the findings; ``main``
prints them, how many of the aten ops with a CPU kernel were reached, and fails if a finding is
missing from the table.

    python tests/mutation_audit.py            # everything (~15 minutes on 2 idle cores)
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


# a schema's argument types -> the values tried for them (profiles: every tensor of one shape)
SHAPES = [(4,), (3, 4), (2, 3, 4), (2, 3, 4, 4)]
SKIP_SCHEMA = ("from_file", "_foobar", "_test_", "_make_dep_token", "pin_memory", "is_pinned", "_nested", "mkldnn",
               "quantize", "sparse", "_assert", "fbgemm", "_fused_sdp_choice", "_copy_from", "set_", "resize",
               "_local_scalar_dense", "empty", "record_stream")


def _schema_args(func, shape, dtype, flag):
    """Arguments for ``func`` made from its schema's types alone (None where it cannot): every
    tensor of ``shape`` and ``dtype``; ints 1, int lists ``shape`` (or [1]), bools and optional
    tensors by ``flag`` (an optional tensor given or None). ``flag="channels"``: optional tensors
    given, one value per channel (``shape[1]``), as per-channel statistics, weights and biases are
    (``batch_norm_update_stats`` writes its statistics only when given ones of that shape)."""
    args = []
    for a in func._schema.arguments:
        t = str(a.type)
        if a.kwarg_only and a.has_default_value():
            continue
        if t == "Tensor" or (t == "Optional[Tensor]" and flag):
            s = (shape[1],) if t == "Optional[Tensor]" and flag == "channels" else shape
            v = torch.randn(s) if dtype.is_floating_point else torch.randint(0, 3, s, dtype=dtype)
        elif t in ("List[Tensor]", "List[Optional[Tensor]]"):
            v = [torch.randn(shape) for _ in range(2)]
        elif t == "int":
            v = 1
        elif t == "List[int]":
            v = list(shape) if flag else [1]
        elif t in ("float", "number"):
            v = 0.5
        elif t == "bool":
            v = flag
        elif t == "List[bool]":
            v = [flag] * 3
        elif t.startswith("Optional["):
            v = a.default_value if a.has_default_value() else None
        elif a.has_default_value():
            v = a.default_value
        else:
            return None
        args.append(v)
    return args


def audit_schemas(names, found):
    """Each op of ``names`` ("aten.add.Tensor") on arguments made from its schema (a few shapes and
    dtypes): reaches ops no sample reaches, where its schema alone gives it valid arguments."""
    for name in names:
        _, op, overload = name.split(".")
        if any(k in op for k in SKIP_SCHEMA):
            continue
        func = getattr(getattr(torch.ops.aten, op), overload)
        for shape in SHAPES:
            for dtype in (torch.float32, torch.int64):
                for flag in (False, True) + (("channels",) if len(shape) > 1 else ()):
                    args = _schema_args(func, shape, dtype, flag)
                    if args is None:
                        continue
                    try:
                        with Audit(found):
                            func(*args)
                    except Exception:
                        pass
    return found


def _schemas_isolated(names, found):
    """audit_schemas in child processes: an op that crashes the interpreter on made-up arguments
    is skipped (named in the report), the rest go on."""
    import json
    import subprocess
    crashed, todo = [], list(names)
    while todo:
        p = subprocess.run([sys.executable, __file__, "--schemas-child"], input="\n".join(todo), text=True,
                           capture_output=True)
        done = []
        for line in p.stdout.splitlines():
            rec = json.loads(line)
            if rec["kind"] == "start":
                done.append(rec["op"])
            elif rec["kind"] == "seen":
                SEEN.update(rec["ops"])
            else:
                found[rec["op"]].update(rec["args"])
        if p.returncode == 0:
            break
        crashed.append(done[-1] if done else todo[0])
        todo = todo[todo.index(crashed[-1]) + 1:]
    return crashed


def _schemas_child():
    import json
    for name in sys.stdin.read().split():
        print(json.dumps({"kind": "start", "op": name}), flush=True)
        found = collections.defaultdict(set)
        before = set(SEEN)
        audit_schemas([name], found)
        print(json.dumps({"kind": "seen", "ops": sorted(SEEN - before)}), flush=True)
        for op, args in found.items():
            print(json.dumps({"kind": "found", "op": op, "args": sorted(args)}), flush=True)


def audit_optimizers(found=None):
    """Every input of every OptimizerInfo optimizer (single-tensor, foreach and fused where CPU has
    them), two steps over a weight and a bias with gradients."""
    from torch.testing._internal.common_optimizers import optim_db
    found = collections.defaultdict(set) if found is None else found
    for info in optim_db:
        if info.only_supports_sparse_grads:
            continue
        impls = [{}] + [{impl: True} for impl in ("foreach", "fused") if impl in info.supported_impls and
                        (impl != "fused" or "cpu" in info.supports_fused_on)]
        for oi in info.optim_inputs_func(device="cpu"):
            for impl in impls:
                g = torch.Generator().manual_seed(0)
                params = [torch.randn(3, 4, generator=g, requires_grad=True),
                          torch.randn(4, generator=g, requires_grad=True)]
                try:
                    with Audit(found):
                        opt = info.optim_cls(params, **{**oi.kwargs, **impl})
                        for _ in range(2):
                            for p in params:
                                p.grad = torch.randn(p.shape, generator=g)
                            opt.step((lambda: params[0].sum()) if info.step_requires_closure else None)
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
    p.add_argument("--schemas-child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    if a.schemas_child:
        _schemas_child()
        return 0
    t0 = time.time()
    found = audit_opinfo()
    audit_modules(found=found)
    audit_optimizers(found=found)
    kernels = cpu_kernel_ops()
    by_samples = SEEN & kernels
    crashed = _schemas_isolated(sorted(kernels - SEEN), found)
    from hpu_lab import ops
    table = {str(f): set(v[0]) for f, v in ops.HIDDEN_WRITES.items()}
    reached = SEEN & kernels
    print(f"mutation audit: {len(SEEN)} aten ops reached; of the {len(kernels)} with a CPU kernel, "
          f"{len(by_samples)} by OpInfo/ModuleInfo/OptimizerInfo samples, {len(reached) - len(by_samples)} more by "
          f"arguments made from their schema; {time.time() - t0:.0f} s")
    if crashed:
        print(f"  crashed on made-up arguments (skipped): {', '.join(crashed)}")
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
