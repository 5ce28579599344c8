"""``nn.LSTM``, ``nn.GRU``, ``nn.RNN`` and their cells on hpu: the op sequence CPU runs.

ATen's recurrent layers are composite: ``aten::lstm`` & co. are written in C++ on top of other ops,
and pick those ops by device. For a PrivateUse1 input (hpu) they take the fused-cell path
(``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell``), which has kernels for CUDA and XPU only: hpu
failed. The real bridge does not implement those cells either (its op table lists them "NO"): on
Gaudi (device type HPU, not PrivateUse1) ATen takes its generic path.

Here hpu's autograd kernels of those ops run what ATen runs for a CPU input, op for op, so every
number (forward and gradients, fp32 and bf16) is CPU's, bit for bit:
- an LSTM in float32 (and bf16/fp16 where oneDNN takes them on this CPU) goes through oneDNN, one
  ``mkldnn_rnn_layer`` per layer and direction (CPU's ``lstm_mkldnn``); its backward is
  ``mkldnn_rnn_layer_backward``, which also writes the workspace (ops.HIDDEN_WRITES);
- everything else runs CPU's generic layers: the input projection of the whole sequence first
  (``linear``), then the cell per step, with CPU's in-place gate ops; packed sequences by
  ``batch_sizes`` (read on the host, as CPU reads them);
- dropout between layers is CPU's ``at::dropout`` (not the fused ``native_dropout`` ATen picks for
  PrivateUse1): noise drawn by ``bernoulli_`` (on the host, hpu_lab's random ops), divided by 1 - p,
  multiplied in.
``tests/kernels/test_rnn.py`` checks the op sequence against CPU's own, and the results bit for bit.

``mkldnn_rnn_layer`` itself is one graph node (``MkldnnLayer``): its CPU kernel returns the
backward's workspace only when autograd is on (a size only oneDNN knows: taken from a run of
CPU's kernel on zeros of the same shapes, once per signature), so the node carries that mode.
``_pack_padded_sequence`` (``pack_padded_sequence``) keeps CPU's ``lengths`` on the host, as CPU
and CUDA do, and returns ``batch_sizes`` on the host.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

aten = torch.ops.aten
_lib = None
_LSTM_MODE = 2      # ideep::rnn_kind::LSTM (the mode CPU passes to mkldnn_rnn_layer)


# ---------------------------------------------------------------- parameters and checks

class _Params:
    __slots__ = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")

    def __init__(self, w_ih, w_hh, b_ih=None, b_hh=None, w_hr=None):
        self.w_ih, self.w_hh, self.b_ih, self.b_hh, self.w_hr = w_ih, w_hh, b_ih, b_hh, w_hr


def _gather_params(params, has_biases, has_projections=False):
    """ATen's gather_params: the flat parameter list, grouped per layer and direction."""
    n = (5 if has_projections else 4) if has_biases else (3 if has_projections else 2)
    if len(params) % n:
        raise RuntimeError("got an incorrect number of RNN parameters")
    out = []
    for i in range(0, len(params), n):
        p = params[i:i + n]
        if has_biases:
            out.append(_Params(p[0], p[1], p[2], p[3], p[4] if has_projections else None))
        else:
            out.append(_Params(p[0], p[1], None, None, p[2] if has_projections else None))
    return out


def _check_attributes(inp, params, hiddens):
    for name, ts in (("hidden", hiddens), ("parameter", params)):
        for t in ts:
            if t is not None and t.device != inp.device:
                raise RuntimeError(f"Input and {name} tensors are not at the same device, found input tensor "
                                   f"at {inp.device} and {name} tensor at {t.device}")


def _use_mkldnn(inp, params, hx) -> bool:
    """ATen's use_mkldnn, with hpu where it asks for the CPU (hpu's kernels are CPU's)."""
    if not (torch.backends.mkldnn.is_available() and torch._C._get_mkldnn_enabled()):
        return False
    if not all(t.device.type == "hpu" for t in [inp, *params, *hx]):
        return False
    dt = inp.dtype
    ok = dt == torch.float32 or \
        (dt == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()) or \
        (dt == torch.float16 and not torch.is_grad_enabled() and torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return ok and inp.numel() != 0


def _cpu_dropout(x, p, train=True):
    """CPU's ``at::dropout`` (``_dropout_impl``): ``empty_like`` noise, ``bernoulli_(1 - p)`` (drawn on
    the host), divided in place by ``1 - p``, multiplied in (MulBackward: the gradient is CPU's)."""
    if p == 0 or not train or x.numel() == 0:
        return x
    if p == 1:
        return x * torch.zeros((), dtype=x.dtype, device=x.device)
    noise = torch.empty_like(x)
    noise.bernoulli_(1 - p)
    aten.div_.Scalar(noise, 1 - p)          # (Python's noise.div_(q) would be div_.Tensor)
    return x * noise


_WARNED: set = set()


def _warn_once(msg):
    """ATen's TORCH_WARN_ONCE: once per process."""
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, UserWarning, stacklevel=3)


# ---------------------------------------------------------------- cells (ATen's CPU branch)

def _lstm_cell(x, hidden, p, pre):
    hx, cx = hidden
    gates = F.linear(hx, p.w_hh, p.b_hh).add_(x if pre else F.linear(x, p.w_ih, p.b_ih))
    g = gates.unsafe_chunk(4, 1)
    i, f, c, o = g[0].sigmoid_(), g[1].sigmoid_(), g[2].tanh_(), g[3].sigmoid_()
    cy = (f * cx).add_(i * c)
    hy = o * cy.tanh()
    if p.w_hr is not None:
        hy = torch.matmul(hy, p.w_hr.t())
    return hy, cy


def _gru_cell(x, h, p, pre):
    ig = x.unsafe_chunk(3, 1) if pre else F.linear(x, p.w_ih, p.b_ih).unsafe_chunk(3, 1)
    hg = F.linear(h, p.w_hh, p.b_hh).unsafe_chunk(3, 1)
    r = hg[0].add_(ig[0]).sigmoid_()
    z = hg[1].add_(ig[1]).sigmoid_()
    n = ig[2].add(hg[2].mul_(r)).tanh_()
    return (h - n).mul_(z).add_(n)


def _simple_cell(nonlinearity):
    def cell(x, h, p, pre):
        return nonlinearity(F.linear(h, p.w_hh, p.b_hh).add_(x if pre else F.linear(x, p.w_ih, p.b_ih)))
    return cell


_tanh_cell, _relu_cell = _simple_cell(torch.tanh), _simple_cell(torch.relu)


def _output(hidden):
    return hidden[0] if isinstance(hidden, tuple) else hidden


def _slice(hidden, start, end):
    if isinstance(hidden, tuple):
        return tuple(t.narrow(0, start, end - start) for t in hidden)
    return hidden.narrow(0, start, end - start)


def _concat(hiddens):
    if isinstance(hiddens[0], tuple):
        return tuple(torch.cat([h[k] for h in hiddens], 0) for k in range(len(hiddens[0])))
    return torch.cat(hiddens, 0)


# ---------------------------------------------------------------- layers (ATen's CPU branch)

def _steps(cell, steps, hidden, p):
    outs = []
    for x in steps:
        hidden = cell(x, hidden, p, True)
        outs.append(_output(hidden))
    if not outs:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    return outs, hidden


def _full_layer(cell, inp, hidden, p):
    outs, hidden = _steps(cell, F.linear(inp, p.w_ih, p.b_ih).unbind(0), hidden, p)
    return torch.stack(outs, 0), hidden


def _full_bidir_layer(cell, inp, hidden, p):
    fw, fw_h = _steps(cell, F.linear(inp, p[0].w_ih, p[0].b_ih).unbind(0), hidden[0], p[0])
    fw_out = torch.stack(fw, 0)
    rev, rev_h = _steps(cell, F.linear(inp, p[1].w_ih, p[1].b_ih).unbind(0)[::-1], hidden[1], p[1])
    rev_out = torch.stack(rev[::-1], 0)
    return torch.cat([fw_out, rev_out], fw_out.dim() - 1), (fw_h, rev_h)


def _packed_layer(cell, packed, hidden, p):
    data, bs = packed
    inp = F.linear(data, p.w_ih, p.b_ih)
    outs, hiddens, offset, last = [], [], 0, bs[0]
    for b in bs:
        step = inp.narrow(0, offset, b)
        offset += b
        dec = last - b
        if dec > 0:
            hiddens.append(_slice(hidden, last - dec, last))
            hidden = _slice(hidden, 0, last - dec)
        last = b
        hidden = cell(step, hidden, p, True)
        outs.append(_output(hidden))
    hiddens.append(hidden)
    return (torch.cat(outs, 0), bs), _concat(hiddens[::-1])


def _reversed_packed_layer(cell, packed, input_hidden, p):
    data, bs = packed
    inp = F.linear(data, p.w_ih, p.b_ih)
    outs, offset, last = [], data.size(0), bs[-1]
    hidden = _slice(input_hidden, 0, bs[-1])
    for b in reversed(bs):
        if b - last > 0:
            hidden = _concat([hidden, _slice(input_hidden, last, b)])
        step = inp.narrow(0, offset - b, b)
        offset -= b
        last = b
        hidden = cell(step, hidden, p, True)
        outs.append(_output(hidden))
    return (torch.cat(outs[::-1], 0), bs), hidden


def _packed_bidir_layer(cell, packed, hidden, p):
    fw, fw_h = _packed_layer(cell, packed, hidden[0], p[0])
    rev, rev_h = _reversed_packed_layer(cell, packed, hidden[1], p[1])
    return (torch.cat([fw[0], rev[0]], -1), packed[1]), (fw_h, rev_h)


def _rnn_impl(cell, packed, inp, params, hiddens, num_layers, dropout_p, train, bidirectional):
    """ATen's _rnn_impl / apply_layer_stack: the layers in turn, dropout between them."""
    if bidirectional:
        layer = _packed_bidir_layer if packed else _full_bidir_layer
        hiddens = [(hiddens[i], hiddens[i + 1]) for i in range(0, len(hiddens), 2)]
        params = [(params[i], params[i + 1]) for i in range(0, len(params), 2)]
    else:
        layer = _packed_layer if packed else _full_layer
    if len(hiddens) != num_layers:
        raise RuntimeError("Expected more hidden states in stacked_rnn")
    if len(params) != num_layers:
        raise RuntimeError("Expected more weights in stacked_rnn")
    finals = []
    for l in range(num_layers):
        inp, final = layer(cell, inp, hiddens[l], params[l])
        finals.append(final)
        if dropout_p != 0 and train and l < num_layers - 1:
            inp = (_cpu_dropout(inp[0], dropout_p, True), inp[1]) if packed else _cpu_dropout(inp, dropout_p, True)
    if bidirectional:
        finals = [h for pair in finals for h in pair]
    return inp, finals


def _batch_sizes(t):
    return [int(b) for b in t.tolist()]


# ---------------------------------------------------------------- the aten ops

def _one_hidden(cell):
    def on_input(inp, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        _check_attributes(inp, params, [hx])
        x = inp.transpose(0, 1) if batch_first else inp
        out, finals = _rnn_impl(cell, False, x, _gather_params(params, has_biases), list(hx.unbind(0)),
                                num_layers, dropout, train, bidirectional)
        hy = torch.stack(finals, 0)
        if batch_first:
            out.transpose_(0, 1)
        return out, hy

    def on_data(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
        (out, _), finals = _rnn_impl(cell, True, (data, _batch_sizes(batch_sizes)),
                                     _gather_params(params, has_biases), list(hx.unbind(0)), num_layers,
                                     dropout, train, bidirectional)
        return out, torch.stack(finals, 0)
    return on_input, on_data


gru_input, gru_data = _one_hidden(_gru_cell)
rnn_tanh_input, rnn_tanh_data = _one_hidden(_tanh_cell)
rnn_relu_input, rnn_relu_data = _one_hidden(_relu_cell)


def _lstm_hidden(hx, cx):
    return [(h, c) for h, c in zip(hx.unbind(0), cx.unbind(0))]


def _lstm_impl(packed, inp, params, hx, cx, num_layers, dropout, train, bidirectional):
    out, finals = _rnn_impl(_lstm_cell, packed, inp, params, _lstm_hidden(hx, cx), num_layers,
                            dropout, train, bidirectional)
    return out, torch.stack([h for h, _ in finals], 0), torch.stack([c for _, c in finals], 0)


def lstm_input(inp, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    if len(hx) != 2:
        raise RuntimeError("lstm expects two hidden states")
    has_projections = hx[0].size(2) != hx[1].size(2)
    if _use_mkldnn(inp, params, hx):
        if not has_projections:
            return _mkldnn_lstm(inp, params, hx, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        _warn_once("LSTM with projections is not supported with oneDNN. Using default implementation.")
    _check_attributes(inp, params, hx)
    x = inp.transpose(0, 1) if batch_first else inp
    out, hy, cy = _lstm_impl(False, x, _gather_params(params, has_biases, has_projections), hx[0], hx[1],
                             num_layers, dropout, train, bidirectional)
    return (out.transpose(0, 1) if batch_first else out), hy, cy


def lstm_data(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    if len(hx) != 2:
        raise RuntimeError("lstm expects two hidden states")
    has_projections = hx[0].size(2) != hx[1].size(2)
    (out, _), hy, cy = _lstm_impl(True, (data, _batch_sizes(batch_sizes)),
                                  _gather_params(params, has_biases, has_projections), hx[0], hx[1],
                                  num_layers, dropout, train, bidirectional)
    return out, hy, cy


def _mkldnn_lstm(inp, params, hx, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """CPU's lstm_mkldnn (mkldnn_rnn): one oneDNN layer per layer and direction."""
    x = (inp.transpose(0, 1) if batch_first else inp).contiguous()
    h0, c0 = hx[0].contiguous(), hx[1].contiguous()
    stride = 4 if has_biases else 2
    dirs = 2 if bidirectional else 1
    hidden_size = h0.size(2)
    hy, cy = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            w = params[k * stride:(k + 1) * stride]
            b_ih = w[2] if has_biases else torch.zeros(w[0].shape, dtype=w[0].dtype, device=w[0].device)
            b_hh = w[3] if has_biases else torch.zeros(w[1].shape, dtype=w[1].dtype, device=w[1].device)
            o, h, c, _ = aten.mkldnn_rnn_layer(x, w[0], w[1], b_ih, b_hh, h0[k], c0[k], d > 0, [], _LSTM_MODE,
                                               hidden_size, num_layers, has_biases, bidirectional, batch_first,
                                               train)
            outs.append(o)
            hy.append(h)
            cy.append(c)
        x = outs[0] if dirs == 1 else torch.cat(outs, -1)
        if dropout != 0 and train and layer < num_layers - 1:
            x = _cpu_dropout(x, dropout, True)
    hy, cy = torch.stack(hy, 0), torch.stack(cy, 0)
    return (x.transpose(0, 1) if batch_first else x), hy, cy


def lstm_cell(inp, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    if len(hx) != 2:
        raise RuntimeError("lstm_cell expects two hidden states")
    _check_cell(inp, hx[0], w_ih, w_hh, 4, 0)
    _check_cell(inp, hx[1], w_ih, w_hh, 4, 1)
    return _lstm_cell(inp, (hx[0], hx[1]), _Params(w_ih, w_hh, b_ih, b_hh), False)


def gru_cell(inp, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    _check_cell(inp, hx, w_ih, w_hh, 3, 0)
    return _gru_cell(inp, hx, _Params(w_ih, w_hh, b_ih, b_hh), False)


def _check_cell(inp, hx, w_ih, w_hh, gates, label):
    """ATen's check_rnn_cell_forward_{input,weights,hidden}, with its messages."""
    hidden_size = w_hh.size(1)
    if inp.size(1) != w_ih.size(1):
        raise RuntimeError(f"input has inconsistent input_size: got {inp.size(1)} expected {w_ih.size(1)}")
    for name, w in (("weight_ih", w_ih), ("weight_hh", w_hh)):
        if w.size(0) != gates * hidden_size:
            raise RuntimeError(f"{name} first dim must be {gates} * hidden_size = {gates * hidden_size}, "
                               f"but got {w.size(0)}")
    if inp.size(0) != hx.size(0):
        raise RuntimeError(f"Input batch size {inp.size(0)} doesn't match hidden{label} batch size {hx.size(0)}")
    if hx.size(1) != hidden_size:
        raise RuntimeError(f"hidden{label} has inconsistent hidden_size: got {hx.size(1)}, expected {hidden_size}")


KERNELS = {"lstm.input": lstm_input, "lstm.data": lstm_data, "gru.input": gru_input, "gru.data": gru_data,
           "rnn_tanh.input": rnn_tanh_input, "rnn_tanh.data": rnn_tanh_data, "rnn_relu.input": rnn_relu_input,
           "rnn_relu.data": rnn_relu_data, "lstm_cell": lstm_cell, "gru_cell": gru_cell}


def install() -> None:
    global _lib
    if _lib is None:
        from . import rnn_ops
        rnn_ops.install()
        _lib = torch.library.Library("aten", "IMPL")
        for name, fn in KERNELS.items():
            _lib.impl(name, fn, "AutogradPrivateUse1")
