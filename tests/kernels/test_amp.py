"""torch.autocast("hpu"): the dtype every listed op produces, and the same numbers as CPU autocast
running the same lists (``amp.cpu_reference``); env-file lists; casts visible in the graph."""
import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import hpu_lab.core as htcore
from hpu_lab.kernels import amp
from hpu_lab import config, events

BF16, FP32 = torch.bfloat16, torch.float32


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def R(*shape, lo=-1.0, hi=1.0, g=None):
    return torch.rand(*shape, generator=g) * (hi - lo) + lo


def I(hi, *shape, g=None):
    return torch.randint(0, hi, shape, generator=g)


def pm1(*shape, g=None):
    return (torch.randint(0, 2, shape, generator=g) * 2 - 1).float()


# op name (as the lists spell it) -> (function, inputs); float inputs are made fp32 for the lower list
# and bf16 for the fp32 list; integer inputs are left alone
LOWER_CASES = {
    "addmm": (torch.addmm, lambda g: (R(3, 5, g=g), R(3, 4, g=g), R(4, 5, g=g))),
    "addbmm": (torch.addbmm, lambda g: (R(3, 5, g=g), R(2, 3, 4, g=g), R(2, 4, 5, g=g))),
    "batch_norm": (lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=True),
                   lambda g: (R(4, 3, 5, g=g), torch.zeros(3), torch.ones(3), R(3, g=g), R(3, g=g))),
    "baddbmm": (torch.baddbmm, lambda g: (R(2, 3, 5, g=g), R(2, 3, 4, g=g), R(2, 4, 5, g=g))),
    "bmm": (torch.bmm, lambda g: (R(2, 3, 4, g=g), R(2, 4, 5, g=g))),
    "conv1d": (F.conv1d, lambda g: (R(2, 3, 8, g=g), R(4, 3, 3, g=g), R(4, g=g))),
    "conv2d": (F.conv2d, lambda g: (R(2, 3, 6, 6, g=g), R(4, 3, 3, 3, g=g), R(4, g=g))),
    "conv3d": (F.conv3d, lambda g: (R(1, 2, 4, 4, 4, g=g), R(3, 2, 2, 2, 2, g=g), R(3, g=g))),
    "conv_transpose1d": (F.conv_transpose1d, lambda g: (R(2, 3, 5, g=g), R(3, 4, 3, g=g))),
    "conv_transpose2d": (F.conv_transpose2d, lambda g: (R(2, 3, 4, 4, g=g), R(3, 2, 3, 3, g=g))),
    "conv_transpose3d": (F.conv_transpose3d, lambda g: (R(1, 2, 3, 3, 3, g=g), R(2, 2, 2, 2, 2, g=g))),
    "dot": (torch.dot, lambda g: (R(5, g=g), R(5, g=g))),
    "dropout": (lambda x: F.dropout(x, 0.5, training=True), lambda g: (R(4, 6, g=g),)),
    "feature_dropout": (lambda x: torch.feature_dropout(x, 0.5, True), lambda g: (R(2, 3, 4, 4, g=g),)),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), lambda g: (R(2, 4, 5, g=g), R(4, g=g), R(4, g=g))),
    "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                      lambda g: (R(2, 3, 5, g=g), R(3, g=g), R(3, g=g))),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (5,), w, b), lambda g: (R(3, 5, g=g), R(5, g=g), R(5, g=g))),
    "leaky_relu": (F.leaky_relu, lambda g: (R(4, 5, g=g),)),
    "linear": (F.linear, lambda g: (R(3, 4, g=g), R(5, 4, g=g), R(5, g=g))),
    "matmul": (torch.matmul, lambda g: (R(2, 3, 4, g=g), R(4, 5, g=g))),
    "mean": (lambda x: (x.mean(), x.mean(dim=1)), lambda g: (R(4, 5, g=g),)),
    "mm": (torch.mm, lambda g: (R(3, 4, g=g), R(4, 5, g=g))),
    "mul": (lambda a, b: (a * b, a * 3.0), lambda g: (R(4, 5, g=g), R(4, 5, g=g))),
    "mv": (torch.mv, lambda g: (R(3, 4, g=g), R(4, g=g))),
    "softmax": (lambda x: F.softmax(x, -1), lambda g: (R(3, 5, g=g),)),
    "log_softmax": (lambda x: F.log_softmax(x, -1), lambda g: (R(3, 5, g=g),)),
    "scaled_dot_product_attention": (F.scaled_dot_product_attention,
                                     lambda g: (R(2, 2, 4, 8, g=g), R(2, 2, 6, 8, g=g), R(2, 2, 6, 8, g=g))),
}

FP32_CASES = {
    "acos": (torch.acos, lambda g: (R(6, lo=-0.9, hi=0.9, g=g),)),
    "addcdiv": (torch.addcdiv, lambda g: (R(6, g=g), R(6, g=g), R(6, lo=1, hi=2, g=g))),
    "asin": (torch.asin, lambda g: (R(6, lo=-0.9, hi=0.9, g=g),)),
    "atan2": (torch.atan2, lambda g: (R(6, g=g), R(6, g=g))),
    "bilinear": (F.bilinear, lambda g: (R(3, 4, g=g), R(3, 5, g=g), R(6, 4, 5, g=g), R(6, g=g))),
    "binary_cross_entropy": (F.binary_cross_entropy, lambda g: (R(6, lo=0.1, hi=0.9, g=g), R(6, lo=0, hi=1, g=g))),
    "binary_cross_entropy_with_logits": (F.binary_cross_entropy_with_logits,
                                         lambda g: (R(6, g=g), R(6, lo=0, hi=1, g=g))),
    "cdist": (torch.cdist, lambda g: (R(3, 4, g=g), R(5, 4, g=g))),
    "cosh": (torch.cosh, lambda g: (R(6, g=g),)),
    "cosine_embedding_loss": (F.cosine_embedding_loss, lambda g: (R(3, 4, g=g), R(3, 4, g=g), pm1(3, g=g))),
    "cosine_similarity": (F.cosine_similarity, lambda g: (R(3, 4, g=g), R(3, 4, g=g))),
    "cross_entropy_loss": (F.cross_entropy, lambda g: (R(4, 5, g=g), I(5, 4, g=g))),
    "dist": (torch.dist, lambda g: (R(6, g=g), R(6, g=g))),
    "div": (torch.div, lambda g: (R(6, g=g), R(6, lo=1, hi=2, g=g))),
    "divide": (torch.divide, lambda g: (R(6, g=g), R(6, lo=1, hi=2, g=g))),
    "embedding": (lambda i, w: F.embedding(i, w), lambda g: (I(7, 2, 3, g=g), R(7, 4, g=g))),
    "embedding_bag": (lambda i, w: F.embedding_bag(i, w, mode="sum"), lambda g: (I(7, 2, 3, g=g), R(7, 4, g=g))),
    "erfinv": (torch.erfinv, lambda g: (R(6, lo=-0.9, hi=0.9, g=g),)),
    "exp": (torch.exp, lambda g: (R(6, g=g),)),
    "expm1": (torch.expm1, lambda g: (R(6, g=g),)),
    "hinge_embedding_loss": (F.hinge_embedding_loss, lambda g: (R(6, g=g), pm1(6, g=g))),
    "huber_loss": (F.huber_loss, lambda g: (R(6, g=g), R(6, g=g))),
    "kl_div": (lambda a, b: F.kl_div(a, b, reduction="batchmean"), lambda g: (R(3, 4, lo=-3, hi=-0.1, g=g),
                                                                            R(3, 4, lo=0, hi=1, g=g))),
    "l1_loss": (F.l1_loss, lambda g: (R(6, g=g), R(6, g=g))),
    "log": (torch.log, lambda g: (R(6, lo=0.1, hi=2, g=g),)),
    "log10": (torch.log10, lambda g: (R(6, lo=0.1, hi=2, g=g),)),
    "log1p": (torch.log1p, lambda g: (R(6, lo=0, hi=2, g=g),)),
    "log2": (torch.log2, lambda g: (R(6, lo=0.1, hi=2, g=g),)),
    "logsumexp": (lambda x: torch.logsumexp(x, 1), lambda g: (R(3, 5, g=g),)),
    "margin_ranking_loss": (F.margin_ranking_loss, lambda g: (R(6, g=g), R(6, g=g), pm1(6, g=g))),
    "mse_loss": (F.mse_loss, lambda g: (R(6, g=g), R(6, g=g))),
    "multi_margin_loss": (F.multi_margin_loss, lambda g: (R(3, 4, g=g), I(4, 3, g=g))),
    "multilabel_margin_loss": (F.multilabel_margin_loss,
                               lambda g: (R(2, 4, g=g), torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1]]))),
    "nll_loss": (F.nll_loss, lambda g: (R(4, 5, lo=-3, hi=0, g=g), I(5, 4, g=g))),
    "pdist": (F.pdist, lambda g: (R(4, 3, g=g),)),
    "poisson_nll_loss": (F.poisson_nll_loss, lambda g: (R(6, g=g), R(6, lo=0, hi=3, g=g))),
    "pow": (lambda a, b: (torch.pow(a, b), a ** 2), lambda g: (R(6, lo=0.5, hi=2, g=g), R(6, g=g))),
    "reciprocal": (torch.reciprocal, lambda g: (R(6, lo=1, hi=2, g=g),)),
    "renorm": (lambda x: torch.renorm(x, 2, 0, 1.0), lambda g: (R(3, 4, g=g),)),
    "rsqrt": (torch.rsqrt, lambda g: (R(6, lo=0.5, hi=2, g=g),)),
    "sinh": (torch.sinh, lambda g: (R(6, g=g),)),
    "smooth_l1_loss": (F.smooth_l1_loss, lambda g: (R(6, g=g), R(6, g=g))),
    "soft_margin_loss": (F.soft_margin_loss, lambda g: (R(6, g=g), pm1(6, g=g))),
    "softplus": (F.softplus, lambda g: (R(6, g=g),)),
    "tan": (torch.tan, lambda g: (R(6, g=g),)),
    "topk": (lambda x: torch.topk(x, 2).values, lambda g: (R(3, 5, g=g),)),
    "triplet_margin_loss": (F.triplet_margin_loss, lambda g: (R(3, 4, g=g), R(3, 4, g=g), R(3, 4, g=g))),
    "truediv": (lambda a, b: (a / b, a / 2), lambda g: (R(6, g=g), R(6, lo=1, hi=2, g=g))),
    "true_divide": (torch.true_divide, lambda g: (R(6, g=g), R(6, lo=1, hi=2, g=g))),
}


def _inputs(make, dtype):
    return [t.to(dtype) if t.is_floating_point() else t for t in make(_gen())]


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _run_both(fn, make, in_dtype, ac_dtype=BF16):
    """(hpu results, cpu results) of fn under autocast, CPU following the hpu lists."""
    cpu_in = _inputs(make, in_dtype)
    hpu_in = [t.to("hpu") for t in cpu_in]
    torch.manual_seed(0)
    with torch.autocast("hpu", dtype=ac_dtype):
        h = _flat(fn(*hpu_in))
    htcore.mark_step()
    torch.manual_seed(0)
    with amp.cpu_reference(), torch.autocast("cpu", dtype=ac_dtype):
        c = _flat(fn(*cpu_in))
    return h, c, hpu_in, cpu_in


def test_lists_are_the_bridge_defaults():
    ls = amp.lists()
    assert ls["lower"] == amp.DEFAULT_LOWER and ls["fp32"] == amp.DEFAULT_FP32
    assert "mm" in ls["lower"] and "cross_entropy_loss" in ls["fp32"] and "cat" in ls["promote"]
    assert set(LOWER_CASES) == set(amp.DEFAULT_LOWER) and set(FP32_CASES) == set(amp.DEFAULT_FP32)


@pytest.mark.parametrize("name", sorted(LOWER_CASES))
def test_lower_precision_list(name):
    fn, make = LOWER_CASES[name]
    h, c, hin, cin = _run_both(fn, make, FP32)
    for x, y in zip(h, c):
        assert x.dtype == BF16, f"{name} gave {x.dtype}"
        assert y.dtype == BF16
        tol = dict(atol=2e-2, rtol=2e-2) if name == "scaled_dot_product_attention" else dict(atol=0, rtol=0)
        torch.testing.assert_close(x.cpu(), y, **tol)
    if name == "batch_norm":        # running statistics stay fp32 and are updated in place
        assert hin[1].dtype == FP32
        torch.testing.assert_close(hin[1].cpu(), cin[1], atol=0, rtol=0)


@pytest.mark.parametrize("name", sorted(FP32_CASES))
def test_fp32_list(name):
    fn, make = FP32_CASES[name]
    h, c, _, _ = _run_both(fn, make, BF16)
    for x, y in zip(h, c):
        assert x.dtype == FP32, f"{name} gave {x.dtype}"
        torch.testing.assert_close(x.cpu(), y, atol=0, rtol=0)


def test_promote_list_casts_to_the_widest_input():
    a, b = torch.randn(4, 5).to(BF16), torch.randn(4, 5)
    ha, hb = a.to("hpu"), b.to("hpu")
    with torch.autocast("hpu"):
        assert (ha + hb).dtype == FP32
        assert (ha + ha).dtype == BF16              # all bf16: no cast, stays bf16
        assert torch.cat([ha, hb]).dtype == FP32
        assert torch.stack([ha, hb]).dtype == FP32
        assert torch.addcmul(ha, hb, ha).dtype == FP32
        assert (ha - hb).dtype == FP32
        s = torch.cat([ha, hb])
    torch.testing.assert_close(s.cpu(), torch.cat([a.float(), b]), atol=0, rtol=0)


def test_float16_autocast():
    x, w = torch.randn(3, 4).to("hpu"), torch.randn(5, 4).to("hpu")
    with torch.autocast("hpu", dtype=torch.float16):
        assert F.linear(x, w).dtype == torch.float16
        assert torch.hpu.get_autocast_hpu_dtype() == torch.float16
        assert F.cross_entropy(F.linear(x, w), torch.tensor([0, 1, 2]).to("hpu")).dtype == FP32


def test_autocast_state_functions():
    assert torch.hpu.is_bf16_supported()
    assert torch.hpu.get_amp_supported_dtype() == [BF16, torch.float16]
    assert not torch.hpu.is_autocast_hpu_enabled()
    assert torch.hpu.get_autocast_hpu_dtype() == BF16          # Gaudi's default
    with torch.autocast("hpu"):
        assert torch.hpu.is_autocast_hpu_enabled()
    assert not torch.hpu.is_autocast_hpu_enabled()
    torch.hpu.set_autocast_hpu_enabled(True)
    try:
        assert torch.is_autocast_enabled("hpu")
        assert torch.mm(torch.ones(2, 2).to("hpu"), torch.ones(2, 2).to("hpu")).dtype == BF16
    finally:
        torch.hpu.set_autocast_hpu_enabled(False)
    torch.hpu.set_autocast_hpu_dtype(torch.float16)
    try:
        assert torch.get_autocast_dtype("hpu") == torch.float16
    finally:
        torch.hpu.set_autocast_hpu_dtype(BF16)
    with pytest.raises(ValueError, match="bfloat16 and torch.float16"):
        torch.hpu.set_autocast_hpu_dtype(torch.float64)


def test_unlisted_ops_and_other_devices_are_untouched():
    x = torch.randn(3, 4)
    with torch.autocast("hpu"):
        assert torch.relu(x.to("hpu")).dtype == FP32          # relu is in no list
        assert torch.mm(x, x.T).dtype == FP32                 # a CPU tensor: hpu autocast does not apply
        assert torch.mm(x.double().to("hpu"), x.double().T.to("hpu")).dtype == torch.float64   # fp64 not eligible


def test_training_step_matches_cpu_autocast_with_the_same_lists():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Dropout(0.1), torch.nn.Linear(32, 5))
    mh = copy.deepcopy(model).to("hpu")
    oc = torch.optim.SGD(model.parameters(), lr=0.1)
    oh = torch.optim.SGD(mh.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(16, 8), torch.randint(0, 5, (16,))
        torch.manual_seed(100 + step)
        with torch.autocast("hpu"):
            lh = F.cross_entropy(mh(x.to("hpu")), y.to("hpu"))
        lh.backward()
        oh.step()
        oh.zero_grad()
        htcore.mark_step()
        torch.manual_seed(100 + step)
        with amp.cpu_reference():
            with torch.autocast("cpu", dtype=BF16):
                lc = F.cross_entropy(model(x), y)
            lc.backward()
        oc.step()
        oc.zero_grad()
        assert lh.dtype == FP32
        torch.testing.assert_close(lh.cpu(), lc, atol=1e-2, rtol=1.6e-2)     # bf16 tolerance
    for a, b in zip(model.parameters(), mh.parameters()):
        assert b.dtype == FP32
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=1e-2, rtol=1.6e-2)


def test_casts_are_visible_nodes_of_the_graph(collect):
    x, w, b = torch.randn(4, 8).to("hpu"), torch.randn(3, 8).to("hpu"), torch.randn(3).to("hpu")
    with torch.autocast("hpu"):
        y = F.linear(x, w, b)
        loss = F.cross_entropy(y, torch.tensor([0, 1, 2, 0]).to("hpu"))
    htcore.mark_step()
    (c,) = collect.of(events.Compile)
    nodes = {n.index: n for n in c.graph.nodes}
    casts = [n for n in c.graph.nodes if n.is_cast]
    assert sorted(n.dtype for n in casts) == ["bfloat16"] * 3 + ["float32"]    # x, w, b down; logits up
    addmm = [n for n in c.graph.nodes if n.op == "aten::addmm"]
    assert addmm and addmm[0].dtype == "bfloat16"
    # each cast feeds the matmul or the loss: an edge from it leads somewhere
    for n in casts:
        assert any(src == n.index for src, _ in c.graph.edges)
    assert loss.dtype == FP32 and nodes


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_env_files_replace_the_default_lists(tmp_path):
    lower = _write(tmp_path, "lower.txt", "# only matrix products\nmm\naten::bmm\n\n")
    fp32 = _write(tmp_path, "fp32.txt", "relu\n")
    config.set(PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST=lower, PT_HPU_AUTOCAST_FP32_OPS_LIST=fp32)
    try:
        amp.reload()
        assert amp.lists()["lower"] == ("mm", "bmm") and amp.lists()["fp32"] == ("relu",)
        x = torch.randn(3, 4).to("hpu")
        with torch.autocast("hpu"):
            assert torch.mm(x, x.T).dtype == BF16
            w, b = torch.randn(5, 4).to("hpu"), torch.randn(5).to("hpu")
            assert F.linear(x, w, b).dtype == FP32      # linear and addmm are no longer listed
            assert F.linear(x, w).dtype == BF16         # without bias it decomposes to mm: listed
            assert torch.relu(x.to(BF16)).dtype == FP32                     # now in the fp32 list
            assert torch.log(x.to(BF16).abs()).dtype == BF16                # default fp32 list replaced
    finally:
        config.reload()
        amp.reload()
    assert amp.lists()["lower"] == amp.DEFAULT_LOWER


def test_unreadable_list_file_warns_and_keeps_the_defaults(tmp_path):
    config.set(PT_HPU_AUTOCAST_FP32_OPS_LIST=str(tmp_path / "missing.txt"))
    try:
        with pytest.warns(UserWarning, match="PT_HPU_AUTOCAST_FP32_OPS_LIST=.*cannot be read"):
            amp.reload()
        assert amp.lists()["fp32"] == amp.DEFAULT_FP32
    finally:
        config.reload()
        amp.reload()


def test_env_file_is_read_at_import(tmp_path):
    lower = _write(tmp_path, "lower.txt", "mm\n")
    code = ("import torch, hpu_lab, torch.nn.functional as F\n"
            "x = torch.randn(3, 4).to('hpu')\n"
            "with torch.autocast('hpu'):\n"
            "    print(torch.mm(x, x.T).dtype, F.linear(x, x, x[:, 0]).dtype)\n")
    env = dict(os.environ, PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST=lower,
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["torch.bfloat16", "torch.float32"]


def test_unknown_op_in_a_list_file_warns(tmp_path):
    lower = _write(tmp_path, "lower.txt", "mm\nnot_an_op\n")
    config.set(PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST=lower)
    try:
        with pytest.warns(UserWarning, match="no aten op named not_an_op"):
            amp.reload()
    finally:
        config.reload()
        amp.reload()
