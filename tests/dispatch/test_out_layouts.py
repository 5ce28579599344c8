"""``op(..., out=t)`` on hpu writes ``t`` as CPU does: values, shape and layout (special_ops.out_variant).

Every OpInfo op that takes ``out=`` runs its first samples into empty out tensors on CPU and on hpu.
What this found (each failed before): ``kron(out=)`` left ``out`` unwritten (its composite writes
through ``_unsafe_view(out)``, which hpu copied instead of viewing); ``linalg.matrix_rank(out=)``
too (torch's composite rebinds instead of writing for a tensor subclass: kernels/composite_outs.py); a
resized out stayed row-major where CPU's linalg kernels lay it out column-major (qr, lu_factor,
cholesky_ex, eigh, lstsq, solve, ...), while CPU's fft and cholesky out kernels copy into a
contiguous one; ``torch.lu(out=)`` failed at the read (``resize_as_`` left the wrapper's shape
behind); list outs (``split_with_sizes_copy``, ``unbind_copy``) raised AttributeError.

Not compared: version counters (torch's composite out kernels resize a non-CPU out through
``resize_``, which bumps it, where CPU calls its native resize: one more bump on hpu, as on CUDA),
and the values of ``empty(out=)`` (uninitialised memory).
"""
import warnings

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab import config

try:
    from torch.testing._internal.common_methods_invocations import op_db
except Exception:            # a torch without its testing package
    op_db = []

OUT_OPS = [op for op in op_db if op.supports_out]
UNINITIALISED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


def _to(x, dev):
    return tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor)
                    else torch.device(dev) if isinstance(t, torch.device) or t == "cpu" else t, x)


def _samples(op):
    out = []
    for si in list(op.sample_inputs("cpu", torch.float32))[:2]:
        leaves = tree_flatten((si.input, si.args, si.kwargs))[0]
        if any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in leaves):
            continue
        try:
            torch.manual_seed(0)
            exp = op(si.input, *si.args, **si.kwargs)
        except Exception:
            continue
        flat = tree_flatten(exp)[0]
        if flat and all(isinstance(t, torch.Tensor) for t in flat):
            out.append((si, exp, flat))
    return out


def _run(op, si, exp, flat, dev):
    outs = [torch.empty(0, dtype=t.dtype, device=dev) for t in flat]
    torch.manual_seed(0)
    try:
        op(_to(si.input, dev), *_to(si.args, dev), **_to(si.kwargs, dev),
           out=outs[0] if isinstance(exp, torch.Tensor) else tuple(outs))
        if dev == "hpu" and config.get("PT_HPU_LAZY_MODE"):
            htcore.mark_step()
        return [(t.cpu(), tuple(t.shape), t.stride()) for t in outs]
    except Exception as e:               # noqa: BLE001 - compared with CPU's
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def _differences(op, cpu, hpu):
    if isinstance(cpu, str) or isinstance(hpu, str):
        return [] if isinstance(cpu, str) else [hpu]
    why = []
    for (ct, cs, cst), (ht, hs, hst) in zip(cpu, hpu):
        if cs != hs:
            why.append(f"shape {hs} vs CPU {cs}")
            continue
        if op.name not in UNINITIALISED and not (torch.equal(ct, ht) or (
                ct.is_floating_point() or ct.is_complex()) and torch.allclose(ct, ht, rtol=1e-4, atol=1e-4, equal_nan=True)):
            why.append("values")
        if ct.numel() > 1 and cst != hst:
            why.append(f"strides {hst} vs CPU {cst}")
    return why


# CPU accepts an out= that hpu refuses, loudly: a private op whose functional form writes too
REFUSED = {"_native_batch_norm_legit": "NotImplementedError: aten::_native_batch_norm_legit with out= is not "
                                       "supported on hpu"}


@pytest.mark.skipif(not OUT_OPS, reason="torch's OpInfo database is not installed")
def test_every_opinfo_out_variant_writes_cpus_values_shape_and_layout():
    # lazy mode only: eager runs the same handler (out_variant), one op a graph
    bad, checked = {}, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in OUT_OPS:
            for si, exp, flat in _samples(op):
                cpu, hpu = _run(op, si, exp, flat, "cpu"), _run(op, si, exp, flat, "hpu")
                why = _differences(op, cpu, hpu)
                if why and REFUSED.get(op.name) != hpu:
                    bad.setdefault(op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""), why)
                checked += 1
    assert checked > 500
    assert bad == {}


@pytest.mark.parametrize("lazy", ["1", "0"])
def test_writes_through_an_unsafe_view_reach_the_out(lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    a, b = torch.randn(2, 3), torch.randn(2, 2)
    o = torch.full((3,), 7.0).to("hpu")          # non-empty: resized, with torch's warning
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.kron(a.to("hpu"), b.to("hpu"), out=o)
    assert torch.equal(o.cpu(), torch.kron(a, b))
    x = torch.arange(6.0).to("hpu")              # and a plain one: the view shares x's memory
    v = torch.ops.aten._unsafe_view(x, (2, 3))
    v.mul_(2)
    if lazy == "1":
        htcore.mark_step()
    assert torch.equal(x.cpu(), torch.arange(6.0) * 2)


@pytest.mark.parametrize("kw", [{}, {"hermitian": True}, {"atol": 0.5}, {"tol": 0.1}])
def test_matrix_rank_writes_its_out(kw):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 5, generator=g)
    x = x @ x.T if kw.get("hermitian") else x
    got, want = (torch.empty(0, dtype=torch.long, device=d) for d in ("hpu", "cpu"))
    torch.linalg.matrix_rank(x, out=want, **kw)
    assert torch.linalg.matrix_rank(x.to("hpu"), out=got, **kw) is got
    assert torch.equal(got.cpu(), want) and got._version == want._version


def test_resize_as_and_resize_with_a_memory_format_as_on_cpu():
    for dev in ("cpu", "hpu"):
        t = torch.empty(0, device=dev)
        t.resize_as_(torch.ones(2, 3, 4, 5, device=dev).to(memory_format=torch.channels_last),
                     memory_format=torch.preserve_format)
        t.copy_(torch.arange(120.0).reshape(2, 3, 4, 5))
        u = torch.arange(6.0).to(dev)
        u.resize_(1, 2, 1, 3, memory_format=torch.channels_last)
        htcore.mark_step()
        if dev == "cpu":
            ct, cu = (t, t.stride()), (u, u.stride())
        else:
            assert t.stride() == ct[1] and torch.equal(t.cpu(), ct[0])
            assert u.stride() == cu[1] and torch.equal(u.cpu(), cu[0])
