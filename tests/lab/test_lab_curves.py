"""hpu_lab.lab curves: recorded runs on the Gaudi clock cross from host-bound to device-bound where
perfmodel.estimate says, and HPU Graphs stop paying there (docs/lab.md). Counts and modeled times
only; each sweep records a few steps of a few sizes (a few seconds)."""
import pytest

import hpu_lab  # noqa: F401
from hpu_lab import lab


def test_width_crossover_on_first_gen_gaudi_where_the_model_says():
    # MLP width x width, batch 64, fp32: the host's work a step is the same at any width (same ops
    # traced), the device's grows as width**2; first-gen Gaudi's device is the slowest of the three
    c = lab.width_curve([1024, 8192], batch=64, modes=("lazy",), steps=2, warmup=1)
    lazy = c.series("gaudi")
    assert [p.verdict for p in lazy] == ["host-bound", "device-bound"]
    assert lazy[0].host_ms == lazy[1].host_ms                       # host: the same ops, modeled
    assert lazy[1].device_ms > 4 * lazy[0].device_ms
    assert c.crossover("gaudi") == c.predicted_crossover("gaudi") == 8192
    # a faster device moves the crossover out of the sweep: still host-bound at 8192 on Gaudi 2 and 3
    for card in ("gaudi2", "gaudi3"):
        assert c.crossover(card) is None and c.predicted_crossover(card) is None
        assert c.point(card, 8192).device_ms < c.point("gaudi", 8192).device_ms
    assert "width" in c.table() and "modeled" in c.table()


def test_batch_throughput_and_where_hpu_graphs_stop_paying():
    c = lab.batch_curve([256, 4096], width=1024, modes=("lazy", "replay"), steps=2, warmup=1)
    assert c.crossover("gaudi") == c.predicted_crossover("gaudi") == 4096
    # seed 004: a larger batch is, in general, better for throughput; host-bound, the step costs the
    # same at any batch (16x the samples: 16x the throughput); device-bound, it grows with the batch
    for card in c.cards:
        small, big = c.point(card, 256), c.point(card, 4096)
        assert big.samples_per_s > small.samples_per_s
    g3 = c.point("gaudi3", 4096).samples_per_s / c.point("gaudi3", 256).samples_per_s
    g1 = c.point("gaudi", 4096).samples_per_s / c.point("gaudi", 256).samples_per_s
    assert g3 == pytest.approx(16, rel=0.02) and g1 < 0.95 * 16
    big1 = c.point("gaudi", 4096)                      # device-bound: the step is the device's time
    assert big1.wall_ms == pytest.approx(big1.device_ms) and big1.wall_ms > big1.host_ms
    # HPU Graphs: a large gain while host-bound, small once device-bound
    assert c.gain("gaudi", 256) > 5 and c.gain("gaudi", 4096) < 1.5
    assert c.graphs_stop_paying("gaudi") == 4096 and c.graphs_stop_paying("gaudi3") is None
    assert "samples/s" in c.table() and "replay gain" in c.table()


def test_bad_sweeps_are_named():
    with pytest.raises(ValueError, match="at least two sizes"):
        lab.width_curve([256], modes=("lazy",))
    with pytest.raises(ValueError, match="unknown mode"):
        lab.batch_curve([16, 32], width=64, modes=("eager",))
    c = lab.batch_curve([16, 32], width=64, modes=("lazy",), estimate=False, steps=1, warmup=1)
    with pytest.raises(ValueError, match="without estimate=True"):
        c.predicted_crossover("gaudi")
    with pytest.raises(KeyError, match="no point"):
        c.point("gaudi", 64)


def test_the_figures_draw_a_recorded_curve():
    import widgets
    c = lab.batch_curve([16, 64], width=64, modes=("lazy", "replay"), estimate=False, steps=1, warmup=1)
    fig = widgets.draw_step_curve(c)
    assert len(fig.axes) == 3 and all("modeled" in fig.axes[0].get_ylabel() for _ in (0,))
    assert [ax.get_title() for ax in fig.axes] == ["gaudi", "gaudi2", "gaudi3"]
    t = widgets.draw_throughput(c)
    (ax,) = t.axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["gaudi", "gaudi2", "gaudi3"]
