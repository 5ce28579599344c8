"""A foreach op CPU refuses partway (``torch._foreach_add_(xs, ys)`` with ``xs[1]`` a long tensor and
``ys[1]`` a float one, or ``ys[1]`` of another shape).

CPU has no fast path for foreach ops: its kernel applies the op tensor after tensor
(``foreach_tensor_*_slow_``), after checking only that the lists have one length. So when it refuses
tensor ``k``, tensors ``0..k-1`` are already written, and the error is tensor ``k``'s (checked
against torch 2.13 on CPU: ``_foreach_add_``, ``_mul_``, ``_div_``, ``_sqrt_``, ``_addcmul_``,
``_lerp_``). The lazy path validated the whole list on meta tensors first, so hpu wrote nothing and
raised the meta kernel's message ("Promotion of int.add/sub_(float) in in-place ops are not possible
..."), or, where the meta kernel let a cast CPU refuses through (``_foreach_mul_(longs, 1.5)``), failed
later on the device. Here CPU's own kernel decides, on stand-ins laid out as the hpu tensors (zeros:
its checks read layouts, dtypes and numbers, not values): the tensors before the refused one are
written on hpu as CPU writes them, and CPU's error is raised.
"""
from __future__ import annotations

from . import aliasing


def raise_like_cpu(func, args, kwargs, written) -> None:
    """Return if CPU's kernel accepts this call of the in-place op ``func`` writing the lists
    ``args[i]`` (``i`` in ``written``); else write what CPU writes before refusing, and raise its error."""
    try:
        aliasing.check_storages_like_cpu(func, args, kwargs, {}, [])
        return
    except Exception as e:   # noqa: BLE001 - CPU's own error, whatever its type
        err = e
    k = _written_before(func, args, kwargs, written)
    if k:
        pa, pk = _prefix(args, kwargs, len(args[written[0]]), k)
        func(*pa, **pk)                  # the tensors CPU wrote before refusing one, on hpu
    raise err


def _written_before(func, args, kwargs, written) -> int:
    """How many tensors of the list CPU's kernel writes before it refuses one: 0 unless ``func`` is a
    foreach op whose list arguments all have one length (CPU refuses any other before writing)."""
    if not func._schema.name.startswith("aten::_foreach_") or len(written) != 1:
        return 0
    target = args[written[0]]
    if not isinstance(target, (list, tuple)):
        return 0
    n = len(target)
    lists = [a for a in list(args) + list(kwargs.values()) if isinstance(a, (list, tuple))]
    if any(len(a) != n for a in lists):
        return 0

    def refused(j):
        try:
            aliasing.check_storages_like_cpu(func, *_prefix(args, kwargs, n, j), {}, [])
            return False
        except Exception:   # noqa: BLE001
            return True
    ok, bad = 0, n                        # the first j tensors pass, j = ok; they fail by j = bad
    while bad - ok > 1:                   # a refused tensor refuses every longer prefix
        mid = (ok + bad) // 2
        if refused(mid):
            bad = mid
        else:
            ok = mid
    return ok


def _prefix(args, kwargs, n, k):
    """The call with every list argument (of length ``n``) cut to its first ``k`` items."""
    cut = lambda a: type(a)(a[:k]) if isinstance(a, (list, tuple)) and len(a) == n else a   # noqa: E731
    return [cut(a) for a in args], {key: cut(a) for key, a in kwargs.items()}


def needs_cpu_checks(func, targets) -> bool:
    """Whether the meta kernels may let through a foreach call CPU refuses: one writing a tensor that
    is not floating point (``_foreach_mul_(longs, 1.5)``: a cast CPU refuses). Float lists are left to
    the meta kernels (a refusal there comes back here), so an optimizer's step runs no stand-ins."""
    return func._schema.name.startswith("aten::_foreach_") and any(
        not x.is_floating_point() for x in aliasing.flat_targets(targets))
