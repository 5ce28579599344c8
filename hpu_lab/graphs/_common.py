"""Small helpers shared by the HPU Graph APIs: the lazy-mode rule, static copies, env overrides."""
from __future__ import annotations

import os

import torch

from .. import config
from .. import lazy
from ..tensor import HPUTensor


class HPUGraphError(RuntimeError):
    """Something an HPU Graph cannot do; the message names the op and the user's line."""


def require_lazy(api: str) -> None:
    """Graph APIs exist in lazy mode only (seed 000; claim G5): fail at once, naming the API."""
    if not config.lazy_mode():
        raise HPUGraphError(
            f"{api}: HPU Graphs are supported in lazy mode only (PT_HPU_LAZY_MODE=1); eager mode is "
            "not supported. Run with PT_HPU_LAZY_MODE=1, or use torch.compile(backend='hpu_backend') "
            "in eager mode.")


def _full(t) -> bool:
    st = t._st
    return t._offset == 0 and t._size == st.size and t._stride == st.stride


def static_copy(dst, src) -> None:
    """``dst.copy_(src)`` for a static input buffer of a graph.

    Device values are immutable in hpu_lab (in-place ops rebind a storage to a new value), so when
    both tensors cover their whole storage with the same shape and dtype, the static buffer can
    simply take ``src``'s value: no copy node, no device work. Otherwise a real ``copy_``.
    """
    if dst is src:
        return
    with torch.no_grad():
        if type(src) is HPUTensor and type(dst) is HPUTensor and src.dtype == dst.dtype and \
                src._size == dst._size and _full(src) and _full(dst):
            lazy.write(dst, lazy.read_ref(src), "aten::copy_")
        else:
            dst.copy_(src)


def snapshot(t):
    """A new tensor holding ``t``'s current value, unaffected by later replays into ``t``.

    Zero-copy: the new storage shares the (immutable) device value. make_graphed_callables returns
    these rather than views of its static buffers, so an output kept from an earlier call, or a
    gradient autograd stored in ``.grad`` (and later accumulates into), never changes behind the
    program's back. (On CUDA and Gaudi they alias the static buffers: with
    ``zero_grad(set_to_none=False)`` the accumulated gradient would come out doubled.)
    """
    if type(t) is HPUTensor and _full(t):
        return lazy.wrap_new((t._size, t._stride, t.dtype), t._st.value)
    return t.detach().clone()


def env_override(name: str, arg):
    """The bridge's rule: when the env var is set, it wins over the argument."""
    if name in os.environ or name in config._overrides:   # set, not merely defaulted
        return config.get(name)
    return arg


def describe_tensor(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
    return type(t).__name__


def check_replay_inputs(api: str, given, static) -> None:
    """Basic APIs take tensors only, positionally, with the captured shapes and dtypes (G4, G6)."""
    if len(given) != len(static):
        raise TypeError(f"{api}: expected {len(static)} positional tensor argument(s) (as captured), "
                        f"got {len(given)}")
    for i, (g, s) in enumerate(zip(given, static)):
        shape, dtype = (s.shape, s.dtype) if isinstance(s, torch.Tensor) else s
        if not isinstance(g, torch.Tensor):
            raise TypeError(
                f"{api}: argument {i} is {type(g).__name__}; the basic HPU Graph APIs take only tensors, "
                "positionally (seed 000). Use ModuleCacher for non-tensor or keyword arguments.")
        if g.shape != shape or g.dtype != dtype:
            raise ValueError(
                f"{api}: argument {i} is {describe_tensor(g)} but the graph was captured with "
                f"tensor{tuple(shape)} {str(dtype).replace('torch.', '')}. An HPU Graph replays static shapes only (seed 000); capture one "
                "graph per shape (ModuleCacher does) or use drop_last=True for the last batch.")
