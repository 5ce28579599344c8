"""Ops whose CPU kernel writes arguments their schema calls read-only (hpu_lab/ops/__init__.py HIDDEN_WRITES,
found by tests/mutation_audit.py) are recorded as writing them (hpu_lab/kernels/hidden_writes.py): dead code
removal keeps the write, a read sees it, a capture replays it. Each compared with CPU, bit for bit."""
import copy

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import config, ops
from hpu_lab.dispatch import fallback
from hpu_lab.graphs import HPUGraph

BNS = {"1d": (torch.nn.BatchNorm1d, (8, 4)), "1d-seq": (torch.nn.BatchNorm1d, (8, 4, 5)),
       "2d": (torch.nn.BatchNorm2d, (4, 3, 5, 5)), "3d": (torch.nn.BatchNorm3d, (2, 3, 3, 4, 4))}


@pytest.fixture(params=["lazy", "eager", "lazy-on-cpu"])
def mode(request):
    """lazy and eager mode, and with native_batch_norm placed on the CPU (the fallback's host op)."""
    config.set(PT_HPU_LAZY_MODE="0" if request.param == "eager" else "1",
               PT_HPU_PLACE_ON_CPU="aten::native_batch_norm" if request.param.endswith("on-cpu") else "")
    before = fallback.counts["aten::native_batch_norm"]
    yield request.param
    if request.param.endswith("on-cpu"):
        assert fallback.counts["aten::native_batch_norm"] > before      # the host path was taken
    config.reload()


def _stats(bn):
    return [t.cpu() for t in (bn.running_mean, bn.running_var, bn.num_batches_tracked)]


def _equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", list(BNS))
def test_discarded_output_still_updates_running_stats(kind, mode):
    """``bn(x)`` with its output unused (swa_utils.update_bn, calibration passes): on CPU the forward
    updates the statistics; on hpu the unused output's node was removed as dead code."""
    cls, shape = BNS[kind]
    torch.manual_seed(0)
    cpu = cls(shape[1], momentum=0.3)
    hpu = copy.deepcopy(cpu).to("hpu")
    for step in range(3):
        x = torch.randn(shape) * (step + 1) + step
        cpu(x)
        hpu(x.to("hpu"))                   # discarded
    if mode != "eager":
        htcore.mark_step()
    assert _equal(_stats(hpu), _stats(cpu))


@pytest.mark.parametrize("autograd_off", [torch.no_grad, torch.inference_mode])
def test_autograd_off_still_updates_running_stats(autograd_off, mode):
    """With autograd off the forward still updates the statistics. Under ``inference_mode`` the
    dispatcher skips the autograd key, where composites are decomposed, so ``batch_norm`` and
    ``instance_norm`` reached hpu whole and their running-stat writes were left out of the graph."""
    torch.manual_seed(2)
    cpu_bn, x = torch.nn.BatchNorm2d(3), torch.randn(4, 3, 5, 5) + 1
    hpu_bn = copy.deepcopy(cpu_bn).to("hpu")
    stats = [torch.zeros(3), torch.ones(3)]
    hpu_stats = [t.to("hpu") for t in stats]
    with autograd_off():
        cpu_bn(x)                                              # discarded
        hpu_bn(x.to("hpu"))
        torch.nn.functional.instance_norm(x, *stats, use_input_stats=True)
        torch.nn.functional.instance_norm(x.to("hpu"), *hpu_stats, use_input_stats=True)
    if mode != "eager":
        htcore.mark_step()
    assert _equal(_stats(hpu_bn), _stats(cpu_bn))
    assert _equal([t.cpu() for t in hpu_stats], stats)


def test_running_stats_read_before_the_output_is_needed(mode):
    """A read of running_mean/var while the forward's output is still pending sees the update."""
    torch.manual_seed(1)
    cpu = torch.nn.BatchNorm2d(3)
    hpu = copy.deepcopy(cpu).to("hpu")
    x = torch.randn(4, 3, 6, 6) + 2
    y_cpu = cpu(x)
    y_hpu = hpu(x.to("hpu"))
    assert _equal(_stats(hpu), _stats(cpu))      # read first
    assert torch.equal(y_hpu.cpu(), y_cpu)       # the output after


def test_momentum_none_and_no_running_stats():
    """Cumulative averages (momentum=None) and track_running_stats=False (nothing written)."""
    torch.manual_seed(2)
    for kw in ({"momentum": None}, {"track_running_stats": False}, {"affine": False}):
        cpu = torch.nn.BatchNorm1d(5, **kw)
        hpu = copy.deepcopy(cpu).to("hpu")
        for _ in range(3):
            x = torch.randn(6, 5)
            assert torch.equal(hpu(x.to("hpu")).cpu(), cpu(x))
        if cpu.running_mean is not None:
            assert _equal(_stats(hpu), _stats(cpu))


def test_swa_update_bn_matches_cpu():
    """torch.optim.swa_utils.update_bn: forwards in train mode whose outputs are all discarded."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 8), torch.nn.BatchNorm1d(8))
    data = [torch.randn(5, 3, 8, 8) * 2 + 1 for _ in range(4)]
    cpu = torch.optim.swa_utils.AveragedModel(model)
    hpu = copy.deepcopy(cpu).to("hpu")
    torch.optim.swa_utils.update_bn(data, cpu)
    torch.optim.swa_utils.update_bn([x.to("hpu") for x in data], hpu)
    for (name, a), (_, b) in zip(cpu.named_buffers(), hpu.named_buffers()):
        assert torch.equal(b.cpu(), a), name


def test_eval_mode_writes_nothing():
    """In evaluation mode batch norm reads the statistics: no write is recorded (they stay the
    buffers they were: no node output, no copy)."""
    bn = torch.nn.BatchNorm1d(4).to("hpu").eval()
    held = bn.running_mean._st.value
    y = bn(torch.randn(3, 4).to("hpu"))
    assert bn.running_mean._st.value is held
    assert ops.hidden_writes(torch.ops.aten.native_batch_norm.default,
                             (y, None, None, bn.running_mean, bn.running_var, False, 0.1, 1e-5), {}) == []


def test_captured_graph_replays_the_update():
    """An HPU Graph of a train-mode forward whose output is discarded still updates the statistics
    at every replay, as every CPU forward does."""
    torch.manual_seed(4)
    cpu = torch.nn.BatchNorm1d(4)
    hpu = copy.deepcopy(cpu).to("hpu")
    x = torch.randn(6, 4) + 1
    xs = x.to("hpu")
    g = HPUGraph()
    g.capture_begin()
    hpu(xs)
    g.capture_end()
    cpu(x)
    for _ in range(3):
        g.replay()
        cpu(x)
    assert _equal(_stats(hpu)[:2], _stats(cpu)[:2])


@pytest.mark.parametrize("where", ["lazy", "eager"])
def test_batch_norm_update_stats_writes_the_statistics(where):
    """torch.batch_norm_update_stats: CPU's kernel writes running_mean/var (momentum update), its
    schema declares no write. With the output discarded, a read before and after mark_step sees
    CPU's values bit for bit (before: the statistics stayed as they were, lazy and eager). It has
    no meta kernel: it runs on the host (the CPU fallback), which writes the statistics back."""
    config.set(PT_HPU_LAZY_MODE="0" if where == "eager" else "1")
    before = fallback.counts["aten::batch_norm_update_stats"]
    torch.manual_seed(6)
    x = torch.randn(4, 3, 5) * 2 + 1
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    hrm, hrv = rm.to("hpu"), rv.to("hpu")
    out = torch.batch_norm_update_stats(x, rm, rv, 0.3)
    torch.batch_norm_update_stats(x.to("hpu"), hrm, hrv, 0.3)         # discarded
    assert torch.equal(hrm.cpu(), rm) and torch.equal(hrv.cpu(), rv)  # read while pending
    hout = torch.batch_norm_update_stats(x.to("hpu"), hrm, hrv, 0.3)
    out = torch.batch_norm_update_stats(x, rm, rv, 0.3)
    if where != "eager":
        htcore.mark_step()
    assert torch.equal(hrm.cpu(), rm) and torch.equal(hrv.cpu(), rv)
    assert all(torch.equal(a.cpu(), b) for a, b in zip(hout, out))
    mean_only = torch.zeros(3).to("hpu")                              # running_var None: mean only
    torch.batch_norm_update_stats(x.to("hpu"), mean_only, None, 0.5)
    ref = torch.zeros(3)
    torch.batch_norm_update_stats(x, ref, None, 0.5)
    assert torch.equal(mean_only.cpu(), ref)
    assert fallback.counts["aten::batch_norm_update_stats"] > before


def _find_node(fn, name):
    seen, stack = set(), [fn]
    while stack:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        if type(f).__name__ == name:
            return f
        stack += [g for g, _ in f.next_functions]
    return None


def test_lstm_backward_workspace_write_is_seen():
    """mkldnn_rnn_layer_backward (nn.LSTM's backward on CPU) writes the forward's workspace. On hpu
    a read of the saved workspace after backward, before any mark_step, sees what the backward
    wrote: it equals the read after mark_step. (The bytes themselves are not compared with CPU's:
    oneDNN leaves some of the forward's workspace uninitialised.)"""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("CPU's LSTM uses oneDNN only where torch was built with it")

    def forward(dev):
        torch.manual_seed(5)
        m = torch.nn.LSTM(3, 4).to(dev)
        out = m(torch.randn(5, 2, 3).to(dev).requires_grad_())[0]
        return out, _find_node(out.grad_fn, "MkldnnRnnLayerBackward0")

    out, node = forward("cpu")                        # the write is real here: CPU's bytes change
    before = node._saved_result3.clone()
    out.sum().backward(retain_graph=True)
    if torch.equal(before, node._saved_result3):
        pytest.skip("this CPU's oneDNN LSTM backward leaves its workspace as it was: nothing to see")

    out, node = forward("hpu")
    out.sum().backward(retain_graph=True)
    early = node._saved_result3.cpu()                 # lazy: the backward is still pending here
    htcore.mark_step()
    assert torch.equal(early, node._saved_result3.cpu())


def test_every_hidden_write_has_an_entry_the_audit_confirms():
    """The table's ops are the audit's findings on their own samples (tests/mutation_audit.py runs
    everything): batch norm's OpInfo samples, an LSTM's backward, batch_norm_update_stats on
    arguments from its schema."""
    from mutation_audit import audit_modules, audit_opinfo, audit_schemas
    found = audit_opinfo(names={"nn.functional.batch_norm"})
    if torch.backends.mkldnn.is_available():
        found.update(audit_modules(names={"nn.LSTM"}))
    audit_schemas(["aten.batch_norm_update_stats.default"], found)      # no OpInfo sample calls it
    table = {str(f): set(v[0]) for f, v in ops.HIDDEN_WRITES.items()}
    assert found == {k: v for k, v in table.items() if k in found}
    assert {"aten.native_batch_norm.default", "aten.batch_norm_update_stats.default"} <= set(found)
