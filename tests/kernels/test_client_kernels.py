"""The bridge kernels clients call directly (issue 35, point 1): torch.ops.hpu.optimizer_adamw (DeepSpeed's
HPU FusedAdam), the fp8 casts and GEMM, and Intel's Transformer Engine built on them. Each runs on hpu
as its CPU kernel does on CPU, bitwise."""
import copy

import pytest
import torch

from hpu_lab import config


@pytest.fixture
def card():
    was = config.get("HPU_LAB_DEVICE")

    def use(name):
        config.set(HPU_LAB_DEVICE=name)
    yield use
    config.set(HPU_LAB_DEVICE=was)


def _adam_lists(dev):
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (4,)]
    mk = [[torch.randn(s, generator=g) for s in shapes] for _ in range(2)]
    lists = [mk[0], mk[1], [torch.zeros(s) for s in shapes], [torch.zeros(s) for s in shapes]]
    return [[t.to(dev) for t in lst] for lst in lists]


def test_optimizer_adamw_both_schemas_equal_cpu_and_the_kernels_formula():
    res = {}
    for dev in ("cpu", "hpu"):
        grads, weights, m, v = _adam_lists(dev)
        neg = torch.tensor([-0.01]).to(dev)
        torch.ops.hpu.optimizer_adamw(grads, weights, m, v, neg, 0.9, 0.999, 1e-8, 0.99)     # lazy schema
        torch.ops.hpu.optimizer_adamw(grads, weights, m, v, neg, 0.9, 0.999, 1e-8,          # eager schema
                                      torch.tensor([0.98]).to(dev), True)
        res[dev] = [t.cpu() for t in weights + m + v]
    assert all(torch.equal(a, b) for a, b in zip(res["cpu"], res["hpu"]))
    # the kernel's node order (optimizer_adamw_gen.cpp), written out for the first tensor
    grads, weights, m, v = _adam_lists("cpu")
    g, w = grads[0], weights[0].clone()
    mm, vv = torch.zeros_like(g), torch.zeros_like(g)
    for wd in (0.99, 0.98):
        mm = mm * 0.9 + g * (1 - 0.9)
        vv = vv * 0.999 + (g * g) * (1 - 0.999)
        w = w * wd + (mm / (vv.sqrt() + 1e-8)) * torch.tensor([-0.01])
    assert torch.equal(w, res["cpu"][0])


def test_optimizer_adamw_errors_say_what():
    grads, weights, m, v = _adam_lists("hpu")
    neg = torch.tensor([-0.01]).to("hpu")
    with pytest.raises(RuntimeError, match="can not process empty weight vector"):
        torch.ops.hpu.optimizer_adamw([], [], [], [], neg, 0.9, 0.999, 1e-8, 1.0)
    with pytest.raises(RuntimeError, match="fp8 moments"):
        torch.ops.hpu.optimizer_adamw(grads, weights, m, v, neg, 0.9, 0.999, 1e-8, 1.0, m, v)
    torch.ops.hpu.optimizer_adamw(grads, weights, m, v, neg, 0.9, 0.999, 1e-8, 1.0)   # still usable
    assert torch.isfinite(weights[0].cpu()).all()


@pytest.mark.parametrize("name, e4m3_max", [("gaudi2", 240.0), ("gaudi3", 448.0)])
def test_cast_to_fp8_saturates_at_the_cards_maximum(card, name, e4m3_max):
    card(name)
    x = torch.tensor([[1.0, -300.0, 1000.0, 0.3]])
    for dev in ("cpu", "hpu"):
        out, amax = torch.ops.hpu.cast_to_fp8_v2(x.to(dev), torch.tensor(2.0).to(dev), False, True,
                                                 torch.float8_e4m3fn)
        assert out.dtype == torch.float8_e4m3fn
        assert out.cpu().float().tolist() == [[2.0, -e4m3_max, e4m3_max, 0.625]]
        assert amax.cpu().item() == 1000.0
    out, amax = torch.ops.hpu.cast_to_fp8_v2(x.to("hpu"), 0.5, dtype=torch.float8_e5m2)     # .scalar
    assert out.cpu().float().tolist() == [[0.5, -160.0, 512.0, 0.15625]] and amax.numel() == 0
    back = torch.ops.hpu.cast_from_fp8(out, 2.0, torch.bfloat16)
    assert back.dtype == torch.bfloat16 and back.cpu().float().tolist() == [[1.0, -320.0, 1024.0, 0.3125]]
    with pytest.raises(RuntimeError, match="stochastic_rounding"):
        torch.ops.hpu.cast_to_fp8_v2(x.to("hpu"), None, True)


def test_fp8_ops_refused_on_first_gen_gaudi(card):
    card("gaudi")
    with pytest.raises(RuntimeError, match="FP8 data type is not available on this device"):
        torch.ops.hpu.cast_to_fp8_v2(torch.ones(2).to("hpu"))
    from hpu_lab.hpex.experimental.transformer_engine import fp8
    assert fp8.is_fp8_available() == (False, "FP8 not supported on Gaudi, Gaudi2 or higher required.")
    with pytest.raises(RuntimeError, match="Gaudi2 or higher required"):
        with fp8.fp8_autocast(enabled=True):
            pass


def test_fp8_gemm_v2_is_the_scaled_float32_product():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(6, 8, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(5, 8, generator=g).to(torch.float8_e4m3fn)
    bias = torch.randn(5, generator=g)
    ref = ((a.float() @ b.float().t()) * 0.5 * 0.25 + bias).to(torch.bfloat16)
    for dev in ("cpu", "hpu"):
        y = torch.ops.hpu.fp8_gemm_v2(a.to(dev), False, b.to(dev), True, None, torch.bfloat16,
                                      torch.tensor(0.5).to(dev), torch.tensor(0.25).to(dev), bias.to(dev))
        assert torch.equal(y.cpu(), ref)


def _te_steps(model, x, dev, recipe, steps=3):
    import hpu_lab.hpex.experimental.transformer_engine as te
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            y = model(x.to(dev))
        loss = (y.float() ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("fmt", ["HYBRID", "E4M3", "E5M2"])
def test_te_linear_trains_on_hpu_as_on_cpu(fmt):
    import hpu_lab.hpex.experimental.transformer_engine as te
    from hpu_lab.hpex.experimental.transformer_engine import recipe
    torch.manual_seed(0)
    model = torch.nn.Sequential(te.Linear(16, 12), torch.nn.ReLU(), te.Linear(12, 4, bias=False))
    x = torch.randn(8, 16) * 4
    r = recipe.DelayedScaling(fp8_format=getattr(recipe.Format, fmt), amax_history_len=3)
    cpu_l, cpu_m = _te_steps(copy.deepcopy(model), x, "cpu", r)
    hpu_l, hpu_m = _te_steps(copy.deepcopy(model), x, "hpu", r)
    assert cpu_l == hpu_l and cpu_l[-1] < cpu_l[0]
    for a, b in zip(cpu_m.state_dict().values(), hpu_m.state_dict().values()):
        assert torch.equal(a, b.cpu())
    # delayed scaling: after 3 forwards, x's scale comes from the amaxes of the first two
    lin = hpu_m[0]
    hist = lin._fp8_fwd.history.cpu()
    fmax = 240.0 if fmt != "E5M2" else 57344.0
    assert hist[0, 0].item() == x.abs().max().item()
    assert lin._fp8_fwd.scale.cpu()[0].item() == pytest.approx(fmax / x.abs().max().item(), rel=1e-6)
    # an fp8 forward is a float32 forward up to fp8 rounding; outside fp8_autocast it is F.linear
    ref = torch.nn.functional.linear(x, cpu_m[0].weight, cpu_m[0].bias)
    assert torch.equal(cpu_m[0](x), ref)
    with te.fp8_autocast(enabled=True, fp8_recipe=r):
        y = cpu_m[0](x)
    assert (y - ref).abs().max() <= 0.15 * ref.abs().max()


def test_te_delayed_scaling_survives_a_new_recipe_object_each_step():
    # lightning-habana enters fp8_autocast(enabled=True, fp8_recipe=None) at every forward: the default
    # recipe (and any equal one) must keep the scales and history (was: reset to 1 every step)
    import hpu_lab.hpex.experimental.transformer_engine as te
    from hpu_lab.hpex.experimental.transformer_engine import recipe
    torch.manual_seed(0)
    lin = te.Linear(8, 4)
    x = torch.randn(5, 8) * 3
    for r in (None, None, recipe.DelayedScaling(), recipe.DelayedScaling()):
        with te.fp8_autocast(enabled=True, fp8_recipe=r):
            lin(x).sum().backward()
    assert lin._fp8_fwd.steps == 4
    assert lin._fp8_fwd.scale[0].item() == pytest.approx(240.0 / x.abs().max().item(), rel=1e-6)


def test_te_modules_not_emulated_say_so():
    import hpu_lab.hpex.experimental.transformer_engine as te
    with pytest.raises(AttributeError, match="LayerNormMLP is not emulated"):
        te.LayerNormMLP
    from hpu_lab.hpex.experimental.transformer_engine import recipe
    with pytest.raises(ValueError, match="amax_compute_algo"):
        recipe.DelayedScaling(amax_compute_algo="mean")
