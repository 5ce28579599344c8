"""nn.LSTM, nn.GRU, nn.RNN, their cells and packed sequences on hpu equal CPU bit for bit, forward and
backward, lazy and eager (hpu_lab/kernels/rnn.py runs ATen's CPU op sequence; kernels/rnn_ops.py the two ops the
lazy path needs help with). Before, ATen took its fused-cell path for a PrivateUse1 input
(``_thnn_fused_lstm_cell``), which has no kernel here."""
import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils._python_dispatch import TorchDispatchMode

import hpu_lab.core as htcore
from hpu_lab import config
from hpu_lab.observe import metrics

nn = torch.nn

MODELS = {
    "lstm": (lambda: nn.LSTM(3, 4), (5, 2, 3)),
    "lstm-2-layers-bidirectional-batch-first": (
        lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True), (2, 5, 3)),
    "lstm-projections": (lambda: nn.LSTM(3, 4, proj_size=2, num_layers=2), (5, 2, 3)),
    "lstm-no-bias": (lambda: nn.LSTM(3, 4, bias=False, num_layers=2), (5, 2, 3)),
    "lstm-dropout": (lambda: nn.LSTM(3, 4, num_layers=3, dropout=0.5), (5, 2, 3)),
    "lstm-unbatched": (lambda: nn.LSTM(3, 4), (5, 3)),
    "lstm-bfloat16": (lambda: nn.LSTM(3, 4, num_layers=2).bfloat16(), (5, 2, 3)),
    "gru-2-layers-bidirectional": (lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True), (5, 2, 3)),
    "gru-dropout-batch-first": (lambda: nn.GRU(3, 4, num_layers=2, dropout=0.3, batch_first=True), (2, 5, 3)),
    "gru-bfloat16": (lambda: nn.GRU(3, 4).bfloat16(), (5, 2, 3)),
    "rnn-relu-2-layers": (lambda: nn.RNN(3, 4, num_layers=2, nonlinearity="relu"), (5, 2, 3)),
    "rnn-tanh-bidirectional-batch-first": (lambda: nn.RNN(3, 4, bidirectional=True, batch_first=True), (2, 5, 3)),
    "lstm-cell": (lambda: nn.LSTMCell(3, 4), (2, 3)),
    "gru-cell": (lambda: nn.GRUCell(3, 4), (2, 3)),
    "rnn-cell": (lambda: nn.RNNCell(3, 4, nonlinearity="relu"), (2, 3)),
    "gru-cell-unbatched": (lambda: nn.GRUCell(3, 4), (3,)),
}
PACKED = {
    "lstm-2-layers-bidirectional": (lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True), [4, 6, 2]),
    "gru-dropout": (lambda: nn.GRU(3, 4, num_layers=2, dropout=0.4), [6, 3, 3]),
    "rnn-bidirectional": (lambda: nn.RNN(3, 4, bidirectional=True), [6, 6, 1]),
    "lstm-batch-first-sorted": (lambda: nn.LSTM(3, 4, batch_first=True), [6, 4, 1]),
}


@pytest.fixture(params=["lazy", "eager"])
def mode(request):
    config.set(PT_HPU_LAZY_MODE="1" if request.param == "lazy" else "0")
    yield request.param
    config.reload()


def _loss(out):
    o, h = (out[0], out[1]) if isinstance(out, tuple) else (out, None)
    hs = h if isinstance(h, tuple) else (h,) if h is not None else ()
    return o, o.float().pow(2).sum() + sum((k + 2) * t.float().sum() for k, t in enumerate(hs))


def _run(model, shape, dev, lengths=None, batch_first=False):
    torch.manual_seed(7)                       # the same dropout noise on both devices
    x = torch.randn(shape).to(model.weight_hh_l0.dtype if hasattr(model, "weight_hh_l0") else
                              model.weight_hh.dtype)
    m = model.to(dev)
    xx = x.to(dev).requires_grad_()
    inp = xx if lengths is None else pack_padded_sequence(xx, lengths, batch_first=batch_first,
                                                          enforce_sorted=False)
    out = m(inp)
    if lengths is not None:
        out = (pad_packed_sequence(out[0], batch_first=batch_first)[0], out[1])
    o, loss = _loss(out)
    loss.backward()
    if dev == "hpu" and config.get("PT_HPU_LAZY_MODE"):
        htcore.mark_step()
    return [o.detach().cpu(), xx.grad.cpu()] + [p.grad.cpu() for p in m.parameters()]


def _assert_equal(got, want):
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and torch.equal(g, w), f"tensor {k}: max diff {(g.float() - w.float()).abs().max()}"


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_and_gradients_equal_cpu(name, mode):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    _assert_equal(_run(copy.deepcopy(model), shape, "hpu"), _run(copy.deepcopy(model), shape, "cpu"))


@pytest.mark.parametrize("name", list(PACKED))
def test_packed_sequences_equal_cpu(name, mode):
    make, lengths = PACKED[name]
    torch.manual_seed(0)
    model = make()
    bf = model.batch_first
    shape = (3, 6, 3) if bf else (6, 3, 3)
    _assert_equal(_run(copy.deepcopy(model), shape, "hpu", lengths, bf),
                  _run(copy.deepcopy(model), shape, "cpu", lengths, bf))


def test_packing_keeps_lengths_and_batch_sizes_on_the_host():
    x = torch.randn(6, 3, 2)
    packed = pack_padded_sequence(x.to("hpu"), torch.tensor([6, 4, 1]))
    want = pack_padded_sequence(x, torch.tensor([6, 4, 1]))
    assert packed.batch_sizes.device.type == "cpu" and torch.equal(packed.batch_sizes, want.batch_sizes)
    assert packed.data.device.type == "hpu" and torch.equal(packed.data.cpu(), want.data)


@pytest.mark.parametrize("call", [
    lambda x: pack_padded_sequence(x, [4, 6, 2]),                              # not sorted
    lambda x: pack_padded_sequence(x, [6, 4, 0]),                              # a zero length
    lambda x: pack_padded_sequence(x, [6, 4]),                                 # wrong count
    lambda x: torch._VF._pack_padded_sequence(x, torch.tensor([6., 4., 2.]), False),   # not int64
], ids=["unsorted", "zero", "count", "float-lengths"])
def test_packing_refuses_as_cpu(call):
    x = torch.randn(6, 3, 2)
    with pytest.raises(RuntimeError) as cpu:
        call(x)
    with pytest.raises(RuntimeError) as hpu:
        call(x.to("hpu"))
    assert str(hpu.value) == str(cpu.value)


def test_hidden_state_on_another_device_is_refused_as_cpu_refuses_it():
    m = nn.GRU(3, 4).to("hpu")
    with pytest.raises(RuntimeError, match="Input and hidden tensors are not at the same device, found input "
                                           "tensor at hpu:0 and hidden tensor at cpu"):
        torch._VF.gru(torch.randn(5, 2, 3).to("hpu"), torch.zeros(1, 2, 4), m._flat_weights, True, 1, 0.0,
                      False, False, False)


def test_cell_size_checks_are_cpus():
    cell = nn.LSTMCell(3, 4)
    for x, hx in [(torch.randn(2, 5), None), (torch.randn(2, 3), (torch.zeros(3, 4), torch.zeros(3, 4)))]:
        with pytest.raises(RuntimeError) as cpu:
            torch.lstm_cell(x, hx or (torch.zeros(2, 4), torch.zeros(2, 4)), cell.weight_ih, cell.weight_hh)
        h = cell.to("hpu")
        with pytest.raises(RuntimeError) as hpu:
            torch.lstm_cell(x.to("hpu"), tuple(t.to("hpu") for t in (hx or (torch.zeros(2, 4), torch.zeros(2, 4)))),
                            h.weight_ih, h.weight_hh)
        cell = cell.cpu()
        assert str(hpu.value) == str(cpu.value)


def test_inference_without_autograd_equals_cpu():
    """Under no_grad CPU's oneDNN layer returns no workspace; the hpu node runs it the same way."""
    torch.manual_seed(0)
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True).eval()
    x = torch.randn(5, 2, 3)
    with torch.no_grad():
        want = m(x)
        got = copy.deepcopy(m).to("hpu")(x.to("hpu"))
    _assert_equal([got[0].cpu(), got[1][0].cpu(), got[1][1].cpu()], [want[0], want[1][0], want[1][1]])


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("make", [lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True, dropout=0.2),
                                  lambda: nn.GRU(3, 4, num_layers=2, batch_first=True),
                                  lambda: nn.LSTM(3, 4, proj_size=2)], ids=["lstm", "gru", "lstm-proj"])
def test_the_forward_is_cpus_op_sequence(make):
    """The aten ops the hpu forward runs are the ones CPU's ATen runs, in the same order."""
    torch.manual_seed(0)
    m = make()
    h = copy.deepcopy(m).to("hpu")
    x = torch.randn(5, 2, 3)
    xh = x.to("hpu")
    with _Ops() as cpu:
        m(x)
    with _Ops() as hpu:
        h(xh)
    assert hpu.names == cpu.names


def test_a_repeated_training_step_compiles_once():
    """The oneDNN layer's node has a signature like any op: the second identical step hits the cache."""
    torch.manual_seed(0)
    m = nn.LSTM(3, 4, num_layers=2).to("hpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(5, 2, 3).to("hpu")
    compiles = []
    for _ in range(3):
        n0 = dict(metrics.metric_global("graph_compilation").stats())["TotalNumber"]
        opt.zero_grad()
        m(x)[0].sum().backward()
        opt.step()
        htcore.mark_step()
        compiles.append(dict(metrics.metric_global("graph_compilation").stats())["TotalNumber"] - n0)
    assert compiles[0] > 0 and compiles[2] == 0
