"""Permutation placement for channels-last convolutions (compiler/layouts.py, seed 004).

Counts of the recipe's nodes with the pass on and off, the Gaudi clock's time of each, and every
result equal to the CPU's (bit for bit: the permutes are views of the memory the plain graph uses)."""
import pytest
import torch
import torch.nn as nn

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import config, perfmodel
from hpu_lab.compiler import disk_cache
from hpu_lab import events as ev
from hpu_lab.compiler import layouts
from hpu_lab.perfmodel import placement

SWITCH = "PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING"


def convnet(c_out=4):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(8, c_out, 1))


def run(model, x, placement: bool, grad=False, fmt=torch.contiguous_format):
    """(result on hpu, CPU reference, the recipe's Compile events) of one forward (+ backward)."""
    config.set(**{SWITCH: str(placement).lower()})
    ref_model = model
    hmodel = __import__("copy").deepcopy(model).to("hpu").to(memory_format=fmt)
    x = x.to(memory_format=fmt)
    with torch.set_grad_enabled(grad), ev.Collector() as c:
        ref = ref_model(x)
        y = hmodel(x.to("hpu"))
        if grad:
            ref.sum().backward()
            y.sum().backward()
        htcore.mark_step()
        out = y.cpu()
    if grad:
        for p, q in zip(ref_model.parameters(), hmodel.parameters()):
            assert torch.equal(q.grad.cpu(), p.grad)
    return out, ref, c.of(ev.Compile)


def ops_of(summary):
    return [n.op for n in summary.nodes if n.op not in ("input", "output")]


def test_placement_keeps_nhwc_between_convolutions():
    x = torch.randn(2, 3, 16, 16)
    on, ref, (c_on,) = run(convnet(), x, True)
    assert torch.equal(on, ref)
    hpu_lab.compiler.cache.clear()
    off, ref2, (c_off,) = run(convnet(), x, False)
    assert torch.equal(off, ref2) and torch.equal(on, off)
    # placed: one permute into NHWC at the graph's input, one back at its output
    assert ops_of(c_on.graph) == ["aten::permute", "aten::convolution", "aten::relu", "aten::convolution",
                                  "aten::relu", "aten::convolution", "aten::permute"]
    # op by op: a pair around each of the three convolutions
    assert ops_of(c_off.graph).count("aten::permute") == 6 and ops_of(c_off.graph).count("aten::convolution") == 3
    assert c_off.node_count - c_on.node_count == 4
    # inside the region the values are NHWC: (N, H, W, C)
    convs = [n for n in c_on.graph.nodes if n.op == "aten::convolution"]
    assert [n.shape for n in convs] == [(2, 16, 16, 8), (2, 16, 16, 8), (2, 16, 16, 4)]
    # the Gaudi clock: the interior permutes were transposes (HBM traffic); placement removes them
    for dev in perfmodel.DEVICES:
        cost_on = perfmodel.recipe_cost(c_on.graph, perfmodel.card(dev))
        cost_off = perfmodel.recipe_cost(c_off.graph, perfmodel.card(dev))
        assert cost_on.ns < cost_off.ns and cost_on.hbm_bytes < cost_off.hbm_bytes
        assert cost_on.kernels == cost_off.kernels - 2


def test_estimate_sees_the_placement():
    m = convnet().to("hpu")
    x = torch.randn(2, 3, 16, 16).to("hpu")
    htcore.mark_step()

    def fwd(m, x):
        with torch.no_grad():
            return m(x)
    config.set(**{SWITCH: "true"})
    placed = perfmodel.estimate(fwd, m, x).device_ns
    config.set(**{SWITCH: "false"})
    per_op = perfmodel.estimate(fwd, m, x).device_ns
    assert placed < per_op


def test_channels_last_input_needs_no_transpose():
    """A channels_last tensor already sits NHWC in memory: its permute is a view (no kernel). The
    convolution's result is channels_last too (as on CPU), so the exit permute is a view as well."""
    out, ref, (c,) = run(convnet(), torch.randn(2, 3, 16, 16), True, fmt=torch.channels_last)
    assert torch.equal(out, ref) and out.stride() == ref.stride()
    permutes = [n for n in c.graph.nodes if n.op == "aten::permute"]
    assert len(permutes) == 2 and all(n.tensor_class == "alias" for n in permutes)
    kernels = perfmodel.cost.kernels(c.graph, perfmodel.card())
    assert sum(k.name == "aten::permute" for k in kernels) == 0          # no memory moves


def test_training_step_equal_to_cpu_both_ways():
    x = torch.randn(2, 3, 8, 8)
    for placement in (True, False):
        hpu_lab.compiler.cache.clear()
        out, ref, compiles = run(convnet(), x, placement, grad=True)
        assert torch.equal(out, ref)
        assert any("aten::permute" in ops_of(c.graph) for c in compiles)


def test_region_ends_where_layout_matters():
    """A flatten (a view: layout-sensitive) and a matmul leave the region: the value is permuted
    back before them; a residual add of two region values stays inside."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
            self.fc = nn.Linear(4 * 6 * 6, 3)

        def forward(self, x):
            a = self.c1(x).relu()
            b = self.c2(a) + a                        # residual: both NHWC
            return self.fc(b.flatten(1))
    torch.manual_seed(0)
    out, ref, (c,) = run(Net(), torch.randn(2, 3, 6, 6), True)
    assert torch.equal(out, ref)
    ops = ops_of(c.graph)
    assert ops.count("aten::permute") == 2                 # into the region, and out before the view
    i_add = ops.index("aten::add")
    assert ops[i_add + 1] == "aten::permute"               # the add runs NHWC, then one permute out


def test_the_switch_is_a_known_setting_and_changing_it_drops_recipes():
    assert config.SETTINGS[SWITCH].default == "true"
    with pytest.raises(config.ConfigError, match=SWITCH):
        config.set(**{SWITCH: "sometimes"})
    x = torch.randn(1, 3, 4, 4)
    run(convnet(), x, True)
    assert hpu_lab.compiler.cache.recipes()
    config.set(**{SWITCH: "false"})
    assert hpu_lab.compiler.cache.recipes() == []          # the old layout plan is not reused


def test_a_placed_recipe_round_trips_through_the_disk_cache(tmp_path, collect):
    config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{tmp_path / 'rc'},false,64")
    try:
        m = convnet().to("hpu")
        x = torch.randn(1, 3, 8, 8)
        with torch.no_grad():
            y = m(x.to("hpu"))
            htcore.mark_step()
            disk_cache.flush_writes()
            hpu_lab.compiler.cache.clear()
            collect.events.clear()
            y2 = m(x.to("hpu"))
            htcore.mark_step()
        assert [e.hit for e in collect.of(ev.CacheLookup) if e.source == "disk"] == [True]
        assert torch.equal(y2.cpu(), y.cpu())
    finally:
        disk_cache.flush_writes()
        config.reload()


@pytest.mark.parametrize("placement, permutes", [(True, 2), (False, 8)])
def test_pass_counts_on_a_graph(placement, permutes):
    """Four 1x1 convolutions in a row on an NCHW input."""
    import torch.fx as fx
    g = fx.Graph()
    meta = ((1, 2, 4, 4), (32, 16, 4, 1), torch.float32)
    wmeta = ((2, 2, 1, 1), (2, 1, 1, 1), torch.float32)
    x, w = g.placeholder("x"), g.placeholder("w")
    x.meta["hpu_meta"], w.meta["hpu_meta"] = meta, wmeta
    prev = x
    for _ in range(4):
        prev = g.call_function(torch.ops.aten.convolution.default,
                               (prev, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1))
        prev.meta["hpu_meta"] = meta
    g.output((prev,))
    counts = layouts.place_permutes(g, placement=placement)
    assert counts == {"convolutions": 4, "permutes": permutes, "transposes": permutes}
    g.lint()
    assert sum(n.target is torch.ops.aten.permute.default for n in g.nodes) == permutes
    assert sum(n.target is layouts.conv_nhwc for n in g.nodes) == 4


def test_compare_in_one_call():
    m = convnet().to("hpu")
    x = torch.randn(2, 3, 16, 16).to("hpu")
    htcore.mark_step()
    with torch.no_grad():
        r = placement.compare(m, x)
    placed, per_conv = r["placed"], r["per convolution"]
    assert (placed["permutes"], per_conv["permutes"]) == (2, 6)
    assert (placed["transposes"], per_conv["transposes"]) == (2, 6)
    assert placed["device us"] < per_conv["device us"]
    assert layouts.enabled() is True                    # the setting is untouched
    import widgets
    widgets.draw_graph(placed["graphs"][0])
