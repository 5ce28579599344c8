"""``torch.hpu.setDeterministic`` / ``getDeterministic``: the bridge's own deterministic switch.

On Gaudi it is a flag of the HPU runtime, OR'd with ``torch.are_deterministic_algorithms_enabled()``
where a kernel has a deterministic variant (scatter-add, index_put with accumulate, ...). Both calls
are deprecated there in favour of ``torch.use_deterministic_algorithms``, with these warnings.
In hpu_lab the device runs the CPU's kernels, which give the same result run after run whatever the
flag: the flag is kept (set, read back) and changes nothing.
"""
from __future__ import annotations

import warnings

_deterministic = [False]


def setDeterministic(val: bool) -> None:  # noqa: N802 - the bridge's name
    warnings.warn("torch.hpu.setDeterministic is deprecated and will be removed in next release. "
                  "Please use torch.use_deterministic_algorithms instead.")
    if not isinstance(val, bool):
        raise TypeError(f"setDeterministic(): expected a bool, got {type(val).__name__}")
    _deterministic[0] = val


def getDeterministic() -> bool:  # noqa: N802
    warnings.warn("torch.hpu.getDeterministic is deprecated and will be removed in next release. "
                  "Please use torch.are_deterministic_algorithms_enabled instead.")
    return _deterministic[0]
