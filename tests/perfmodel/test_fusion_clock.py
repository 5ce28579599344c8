"""T7: fusion clusters change the Gaudi clock (not labels only), and the Graph tab counts them.

Through the public API: a recorded run re-timed with and without fusion (perfmodel.retime), the
kernels the clock charges for a recipe (perfmodel.cost.kernels), and the drawn graph's counts."""
import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402

import hpu_lab.core as htcore  # noqa: E402
import widgets  # noqa: E402
from hpu_lab import events as ev  # noqa: E402
from hpu_lab import perfmodel  # noqa: E402


def _recorded_step():
    """One lazy step: a matmul, then an elementwise chain the compiler fuses, then a reduction."""
    w = torch.randn(256, 256).to("hpu")
    x = torch.randn(512, 256).to("hpu")
    htcore.mark_step()
    with ev.Collector() as c:
        y = ((x @ w) * 0.5 + 1.0).relu().sigmoid() - 0.25
        s = y.sum()
        htcore.mark_step()
        s.item()
    return c


def test_fused_chain_costs_less_on_the_gaudi_clock():
    c = _recorded_step()
    (compile_,) = c.of(ev.Compile)
    counts = widgets.fusion_counts(compile_.graph)
    assert counts["clusters"] == 1 and counts["fused ops"] >= 4
    for dev in perfmodel.DEVICES:
        fused = perfmodel.retime(c.events, dev)
        unfused = perfmodel.retime(c.events, dev, fusion=False)
        assert fused.device_busy_ns < unfused.device_busy_ns
        card = perfmodel.card(dev)
        k_fused = perfmodel.cost.kernels(compile_.graph, card)
        k_unfused = perfmodel.cost.kernels(compile_.graph, card, fusion=False)
        # a cluster is one kernel where its ops were one each; its intermediates stay on chip
        assert len(k_unfused) - len(k_fused) == counts["fused ops"] - counts["clusters"]
        assert sum(k.name.startswith("cluster ") for k in k_fused) == counts["clusters"]
        assert sum(k.hbm_bytes for k in k_fused) < sum(k.hbm_bytes for k in k_unfused)


def test_graph_tab_shows_fused_and_unfused_counts():
    c = _recorded_step()
    (compile_,) = c.of(ev.Compile)
    counts = widgets.fusion_counts(compile_.graph)
    title = widgets.draw_graph(compile_.graph).axes[0].get_title(loc="left")
    want = (f"{counts['fused ops']} fused into {counts['clusters']} fusion cluster"
            f"{'s' if counts['clusters'] != 1 else ''}, {counts['unfused ops']} unfused")
    assert want in title.replace("\n", " ")
