"""Recompilation log, per-step cache hits/misses, section metrics and the comparison table."""
from hpu_lab import events as ev
from test_widgets_fixtures import MS, Sim, device_bound_loop, host_bound_loop
from widgets import comparison as cmp
from widgets import metrics_view as mv
from widgets import recompiles as rc
import pytest  # noqa: E402

pytestmark = pytest.mark.usefixtures("measured_clock")   # synthetic spans: the measured clock


def test_recompile_rows_one_per_compile_with_reason():
    evs = host_bound_loop(steps=4, shapes_vary=True)
    rows = rc.recompile_rows(evs)
    assert [r["step"] for r in rows] == [0, 1, 3]
    assert [r["recompile"] for r in rows] == [False, True, True]
    assert rows[0]["reason"] == "first compile"
    assert rows[1]["reason"] == "input 0 shape changed (32, 64) -> (16, 64)"
    assert rows[0]["key"] == "k0" and rows[0]["nodes"] == 11 and rows[0]["src"] == "train.py:20"
    assert rows[0]["compile_ms"] == 30.0
    assert 0 < rows[0]["time_ms"] < rows[1]["time_ms"] < rows[2]["time_ms"]


def test_recompile_key_is_shortened():
    s = Sim()
    s.op()
    s.mark_step(key="0123456789abcdef0123")
    assert rc.recompile_rows(s.events)[0]["key"] == "01234567"


def test_cache_per_step_hits_and_misses():
    evs = host_bound_loop(steps=4, shapes_vary=True)      # keys k0, k1, k0, k3
    assert rc.cache_per_step(evs) == [{"step": 0, "hits": 0, "misses": 1}, {"step": 1, "hits": 0, "misses": 1},
                                      {"step": 2, "hits": 1, "misses": 0}, {"step": 3, "hits": 0, "misses": 1}]


def test_recompiles_html_highlights_recompiles():
    html = rc.recompiles_html(host_bound_loop(steps=4, shapes_vary=True))
    # 2 recompile rows + the cache rows with a miss: steps 0-1 (grouped: same counts) and 3
    assert html.count('<tr class="re">') == 2 + 2
    assert "<td style=\"text-align:right\">0\u20131</td>" in html
    assert "input 0 shape changed (32, 64) -&gt; (16, 64)" in html
    assert "3 compiles" in html and "2 recompiles" in html
    assert "No recipe-cache lookups" in rc.recompiles_html([])


def test_section_metrics_counts():
    s = Sim()
    for i in range(3):
        s.op(n=10)
        s.mark_step(key="k0")
        s.sync(".item()")
    s.fallback("aten::digamma")
    s.memory(5 << 20, 7 << 20)
    s.memory(6 << 20, 9 << 20)
    m = mv.section_metrics(s.events)
    assert m["steps"] == 3 and m["ops accumulated"] == 30 and m["graphs built"] == 3
    assert m["compiles"] == 1 and m["recompiles"] == 0
    assert m["cache hits"] == 2 and m["cache misses"] == 1
    assert m["launches"] == 3 and m["device executions"] == 3
    assert m["host syncs"] == 3 and m["syncs by reason"] == {".item()": 3}
    assert m["CPU fallbacks"] == 1 and m["fallbacks by op"] == {"aten::digamma": 1}
    assert m["peak memory bytes"] == 9 << 20
    assert m["verdict"].startswith("host-bound")
    html = mv.metrics_html(s.events)
    assert "9.00 MiB" in html and "aten::digamma: 1" in html


def test_steps_of_replay_loop_without_mark_step():
    evs = [ev.Replay(i * MS, i * MS + 10, "host", 0, graph_id=1) for i in range(5)]
    assert mv.steps_of(evs) == 5
    assert mv.steps_of([]) == 0


def test_compare_rows_and_figure():
    a, b = host_bound_loop(steps=4), device_bound_loop(steps=4)
    rows = cmp.compare_rows({"lazy": a, "big model": b})
    assert [r["section"] for r in rows] == ["lazy", "big model"]
    assert rows[0]["steps"] == 4 and rows[0]["host syncs"] == 4 and rows[1]["compiles"] == 1
    from hpu_lab import lab                      # the table's times are lab.step_times', on the Gaudi clock
    t = lab.step_times_of(b, steps=4)
    assert (rows[1]["wall ms/step"], rows[1]["verdict"]) == (round(t.wall_ms, 3), t.verdict)
    fig = cmp.draw_compare([("lazy", a), ("big model", b)])
    assert len(fig.axes) == 2
    assert fig.axes[0].get_title(loc="left").startswith("lazy")
    assert "<table" in cmp.compare_html({"lazy": a})


def test_notebook_cell_sources_read_as_cell_lines():
    from widgets.common import pretty_src
    assert pretty_src("1591153720.py:3") == "cell line 3"
    assert pretty_src("/tmp/ipykernel_77/1591153720.py:12") == "cell line 12"
    assert pretty_src("train.py:3") == "train.py:3" and pretty_src("") == ""
    s = Sim()
    s.op()
    s.mark_step(src="1591153720.py:7")
    assert rc.recompile_rows(s.events)[0]["src"] == "cell line 7"
