"""``habana_frameworks.torch.core.quantization``: the inference set-up calls of the bridge.

``htcore.hpu_set_inference_env(model=None)`` turns on the graph compiler's inference mode and, given a
model, folds each BatchNorm into the convolution before it (torch.fx's fuser: the same arithmetic the
bridge's ``fuse_conv_bn`` does, results equal to the unfused eval-mode model up to rounding).
``htcore.hpu_inference_initialize(model)`` marks the model's parameters and buffers as *constants*:
Gaudi's compiler then puts them in the recipe's const section (uploaded once, folded into the graph).

In hpu_lab the marks are kept (``is_const(t)``, ``const_id(t)``, ``_get_marked_const_count()``) and the
inference mode is a flag (``torch.hpu.is_inference_mode_enabled()``), but recipes still take the
weights as ordinary inputs: the values computed are the same; only the real compiler's const folding
(and its memory and upload savings) is not modelled.
"""
from __future__ import annotations

import os
import weakref

import torch

# keyed by the device storage: ``state_dict()`` hands out fresh detached tensors on each call, and the
# mark belongs to the memory they share (the bridge keeps it in the tensor's backend metadata)
_CONST: "weakref.WeakKeyDictionary[object, int]" = weakref.WeakKeyDictionary()
_next_id = [0]
_state = {"inference": False, "matmul3d_2d_reshape": False, "quantization": False, "set_env": True}


def _flag(name: str, default: str = "") -> bool:
    return os.environ.get(name, default).upper() in ("ON", "1", "YES", "TRUE", "Y")


def _key(t: torch.Tensor, name: str = "tensor"):
    st = getattr(t, "_st", None)
    if st is None:
        raise RuntimeError(f"{name} is on {t.device}, not hpu: only device tensors can be marked as const; "
                           f"call htcore.hpu_inference_initialize(model) after model.to('hpu')")
    return st


def is_const(t: torch.Tensor) -> bool:
    """Whether ``t`` was marked as a constant of the inference graphs."""
    return getattr(t, "_st", None) in _CONST


def const_id(t: torch.Tensor) -> int:
    """The const id the mark gave ``t`` (-1 if unmarked), counted from 0 per process as in the bridge."""
    return _CONST.get(getattr(t, "_st", None), -1) if is_const(t) else -1


def _mark_params_as_const(model=None, only_scales: bool = False, console_prints: bool = False) -> None:
    """Mark every tensor of ``model.state_dict()`` (only those named ``*scale*`` if ``only_scales``)."""
    if model is None:
        return
    for name, t in model.state_dict().items():
        if only_scales and "scale" not in name:
            continue
        k = _key(t, name)
        if k not in _CONST:
            _CONST[k] = _next_id[0]
            _next_id[0] += 1
        if console_prints:
            print(f"Tensor '{name}' is_const 'True' id '{_CONST[k]}'")


def _check_params_as_const(model=None, only_scales: bool = False) -> None:
    """Raise if a tensor of ``model.state_dict()`` that should be marked is not."""
    if model is None:
        return
    missing = [n for n, t in model.state_dict().items() if (not only_scales or "scale" in n) and not is_const(t)]
    if missing:
        raise RuntimeError(f"parameters not marked as const: {', '.join(missing)}; "
                           f"call htcore.hpu_inference_initialize(model) after model.to('hpu')")


def _get_marked_const_count() -> int:
    return _next_id[0]


def _enable_inference() -> None:
    _state["inference"] = True
    _state["matmul3d_2d_reshape"] = True


def hpu_set_inference_env(model=None):
    """Enable inference mode; given a model, return it with Conv+BatchNorm pairs fused (eval mode)."""
    _enable_inference()
    _state["set_env"] = False
    if model is not None:
        from torch.fx.experimental.optimization import fuse
        return fuse(model)
    return None


hpu_set_env = hpu_set_inference_env     # the bridge's older name


def hpu_inference_initialize(model=None, mark_only_scales_as_const: bool = False, optimizer=None, args=None):
    """Mark ``model``'s parameters and buffers (on hpu) as constants; enables inference mode if
    hpu_set_inference_env was not called."""
    if _state["set_env"]:
        _enable_inference()
    if model is not None:
        if os.environ.get("PT_HPU_LAZY_MODE", "1") != "0":
            _mark_params_as_const(model, only_scales=mark_only_scales_as_const)
            _check_params_as_const(model, only_scales=mark_only_scales_as_const)
        buffers = getattr(model, "_buffers", {})
        q = buffers.get("HB_QUANTIZATION")
        if isinstance(q, dict) and q.get("quantization") is True:
            _state["quantization"] = True


def hpu_teardown_inference_env() -> None:
    """Disable inference mode (after the model ran)."""
    _state["inference"] = False
    _state["matmul3d_2d_reshape"] = False


def hpu_reset_env() -> None:
    hpu_teardown_inference_env()
    _state["set_env"] = True
