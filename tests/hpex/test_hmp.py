"""Legacy HMP (seed 002): hmp.convert O1/O2, op lists from files, disable_casts, the deprecation
warning; an hpu run under HMP gives the numbers of the same run on CPU under HMP."""
import copy
import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

import hpu_lab.core as htcore
from hpu_lab import events
from hpu_lab.hpex import hmp

BF16, FP32 = torch.bfloat16, torch.float32

pytestmark = pytest.mark.filterwarnings("ignore:Habana Mixed Precision")


@pytest.fixture(autouse=True)
def _undo_hmp():
    yield
    hmp._restore()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 4))


def test_optimum_default_lists():
    assert hmp.hmp_bf16_ops == ["add", "addmm", "bmm", "div", "dropout", "gelu", "iadd", "linear", "layer_norm",
                                "matmul", "mm", "rsub", "softmax", "truediv"]
    assert hmp.hmp_fp32_ops == ["embedding", "nll_loss", "log_softmax"]


def test_deprecation_warning():
    with pytest.warns(FutureWarning, match="HMP\\) module is deprecated"):
        hmp.convert()
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", "import hpu_lab.hpex.hmp"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Habana Mixed Precision (HMP) module is deprecated" in out.stderr
    assert "Please use native PyTorch autocast" in out.stderr


def test_o1_default_lists(capsys):
    hmp.convert()
    assert "hmp:opt_level O1" in capsys.readouterr().out
    x, w = torch.randn(3, 8).to("hpu"), torch.randn(4, 8).to("hpu")
    assert F.linear(x, w).dtype == BF16                     # bf16 list
    assert F.relu(x).dtype == BF16
    assert F.softmax(x.to(BF16), -1).dtype == FP32          # fp32 list
    assert F.cross_entropy(x.to(BF16), torch.tensor([0, 1, 2]).to("hpu")).dtype == FP32
    assert torch.exp(x).dtype == FP32                       # multi-input op, one fp32 input
    assert torch.exp(x.to(BF16)).dtype == BF16              # ... all bf16
    assert (x.to(BF16) + x).dtype == FP32                   # add: fp32 if any input is fp32
    assert torch.cat([x.to(BF16), x.to(BF16)]).dtype == BF16
    ln = F.layer_norm(x, (8,), torch.ones(8).to("hpu"), torch.zeros(8).to("hpu"))
    assert ln.dtype == BF16                                 # only the input is cast (weight stays fp32)
    y = torch.ones(3, 8).to("hpu").to(BF16)
    y.add_(x)                                               # in-place: cast to the written tensor's type
    assert y.dtype == BF16
    assert torch.sigmoid(x).dtype == FP32                   # in no list: follows its input


def test_training_step_equals_cpu_under_hmp():
    mc = _model()
    mh = copy.deepcopy(mc).to("hpu")
    hmp.convert()
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    lc = F.cross_entropy(mc(x), y)
    lh = F.cross_entropy(mh(x.to("hpu")), y.to("hpu"))
    lc.backward()
    lh.backward()
    htcore.mark_step()
    assert mh(x.to("hpu")).dtype == BF16 and lh.dtype == FP32
    torch.testing.assert_close(lh.cpu(), lc, atol=0, rtol=0)
    for a, b in zip(mc.parameters(), mh.parameters()):
        assert b.grad.dtype == FP32
        torch.testing.assert_close(b.grad.cpu(), a.grad, atol=0, rtol=0)


def test_o1_lists_from_files(tmp_path):
    bf16, fp32 = tmp_path / "bf16.txt", tmp_path / "fp32.txt"
    bf16.write_text("mm\nbmm\n")
    fp32.write_text("linear\n")
    hmp.convert(bf16_file_path=str(bf16), fp32_file_path=str(fp32))
    x = torch.randn(3, 8).to("hpu")
    assert torch.mm(x, x.T).dtype == BF16
    assert F.linear(x.to(BF16), x.to(BF16)).dtype == FP32
    assert F.relu(x).dtype == FP32                          # not in these lists any more


def test_o1_refuses_an_op_in_both_lists(tmp_path):
    f = tmp_path / "ops.txt"
    f.write_text("mm\n")
    with pytest.raises(ValueError, match="in both fp32 & bf16 list"):
        hmp.convert(bf16_file_path=str(f), fp32_file_path=str(f))


def test_unknown_op_and_opt_level(tmp_path, capsys):
    f = tmp_path / "bf16.txt"
    f.write_text("mm\nnot_an_op\n")
    hmp.convert(bf16_file_path=str(f))
    assert "not_an_op OP not supported" in capsys.readouterr().out
    with pytest.raises(ValueError, match="Optlevel should be either O1 or O2"):
        hmp.convert(opt_level="O3")


def test_o2_gemm_and_conv_in_bf16_everything_else_fp32(capsys):
    hmp.convert(opt_level="O2", bf16_file_path="ignored.txt")
    assert "Input op list would be overridden in opt_level O2" in capsys.readouterr().out
    x = torch.randn(3, 8).to("hpu")
    assert torch.mm(x, x.T).dtype == BF16
    assert torch.bmm(x[None], x.T[None]).dtype == BF16
    assert F.conv1d(torch.randn(1, 2, 5).to("hpu"), torch.randn(3, 2, 2).to("hpu")).dtype == BF16
    assert F.linear(x, x).dtype == FP32                     # linear is not a listed GEMM in O2
    assert F.softmax(x.to(BF16), -1).dtype == FP32
    assert (x.to(BF16) + x.to(BF16)).dtype == FP32


def test_disable_casts_and_verbose(capsys):
    hmp.convert(isVerbose=True)
    x, w = torch.randn(3, 8).to("hpu"), torch.randn(4, 8).to("hpu")
    with hmp.disable_casts():
        assert F.linear(x, w).dtype == FP32
    assert F.linear(x, w).dtype == BF16
    out = capsys.readouterr().out
    assert "Disabled HMP casting" in out and "Enabled HMP casting" in out and "casting  linear to_bf16" in out


def test_restore_puts_torch_back():
    originals = (torch.Tensor.__add__, F.linear, torch.mm)
    hmp.convert()
    assert hmp.is_active() and F.linear is not originals[1]
    hmp._restore()
    assert (torch.Tensor.__add__, F.linear, torch.mm) == originals and not hmp.is_active()


def test_casts_only_in_the_converting_thread():
    hmp.convert()
    x, w = torch.randn(3, 8), torch.randn(4, 8)
    seen = []
    t = threading.Thread(target=lambda: seen.append(F.linear(x, w).dtype))
    t.start()
    t.join()
    assert seen == [FP32] and F.linear(x, w).dtype == BF16


def test_casts_are_visible_nodes_of_the_graph(collect):
    hmp.convert()
    x, w = torch.randn(3, 8).to("hpu"), torch.randn(4, 8).to("hpu")
    y = F.softmax(F.linear(x, w), -1)
    htcore.mark_step()
    (c,) = collect.of(events.Compile)
    casts = [n for n in c.graph.nodes if n.is_cast]
    assert sorted(n.dtype for n in casts) == ["bfloat16", "bfloat16", "float32"]    # x, w down; logits up
    assert y.dtype == FP32
