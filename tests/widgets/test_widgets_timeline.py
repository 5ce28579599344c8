"""Timeline rows, drawing and the host-/device-bound verdict, from synthetic events."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from hpu_lab import events as ev  # noqa: E402
from test_widgets_fixtures import MS, Sim, device_bound_loop, host_bound_loop  # noqa: E402
from widgets import timeline as tl  # noqa: E402

pytestmark = pytest.mark.usefixtures("measured_clock")   # synthetic spans: the measured clock


def _rects(fig):
    """Every rectangle drawn by broken_barh (PolyCollections), keyed by gid 'lane/kind'."""
    out = {}
    for ax in fig.axes:
        for c in ax.collections:
            gid = c.get_gid() or ""
            if "/" in gid:
                out[gid] = len(c.get_paths())
    return out


def test_rows_host_lane_kinds_and_trace_runs():
    evs = host_bound_loop(steps=3)
    rows = tl.timeline_rows(evs)
    host = [r for r in rows if r.lane == "host"]
    kinds = [r.kind for r in host]
    # each step: one trace run of 100 ops, graph build, cache lookup, (compile), launch, host sync
    assert kinds.count("trace") == 3
    assert all(r.label == "trace 100 ops" for r in host if r.kind == "trace")
    assert kinds.count("graph build") == 3 and kinds.count("cache lookup") == 3
    assert kinds.count("compile") == 1 and kinds.count("launch") == 3 and kinds.count("host sync") == 3
    assert [r.start_ms for r in host] == sorted(r.start_ms for r in host)
    assert host[0].start_ms >= 0.0


def test_rows_device_lane_executions_and_idle_gaps():
    evs = host_bound_loop(steps=3)
    rows = [r for r in tl.timeline_rows(evs) if r.lane == "hpu:0"]
    execs = [r for r in rows if r.kind == "execute"]
    idle = [r for r in rows if r.kind == "idle"]
    assert len(execs) == 3
    assert all(r.duration_ms == pytest.approx(1.0) for r in execs)
    # idle before the first execution, between executions and after the last one
    assert len(idle) == 4
    busy = sum(r.duration_ms for r in execs) + sum(r.duration_ms for r in idle)
    window = max(e.t_end for e in evs) / MS - min(e.t_start for e in evs) / MS
    assert busy == pytest.approx(window)


def test_device_execution_belongs_to_the_launching_step():
    s = Sim()
    s.op(n=3)
    s.mark_step(device_ms=5.0)
    # the executor emitted with the step current when it finished: pretend that was step 7
    evs = [ev.DeviceExecution(e.t_start, e.t_end, e.lane, 7, launch_id=e.launch_id, key=e.key)
           if isinstance(e, ev.DeviceExecution) else e for e in s.events]
    assert [r.step for r in tl.timeline_rows(evs) if r.kind == "execute"] == [0]


def test_trace_run_splits_on_long_gap():
    s = Sim()
    s.op(n=5)
    s.host(10)          # 10 ms of untraced Python (data loading)
    s.op(n=5)
    runs = [r for r in tl.timeline_rows(s.events) if r.kind == "trace"]
    assert [r.label for r in runs] == ["trace 5 ops", "trace 5 ops"]


def test_capture_and_replay_rows():
    s = Sim()
    s.capture(graph_id=1, n_ops=20)
    for _ in range(3):
        s.replay(graph_id=1)
    rows = tl.timeline_rows(s.events)
    cap = [r for r in rows if r.kind == "capture"]
    rep = [r for r in rows if r.kind == "replay"]
    assert len(cap) == 1 and cap[0].level == 1 and "20 nodes" in cap[0].label
    assert len(rep) == 3 and all(r.level == 1 for r in rep)
    assert sum(1 for r in rows if r.kind == "execute") == 4


def test_lanes_one_per_stream():
    s = Sim()
    s.dev_free[1] = s.t
    s.op()
    s.mark_step(stream=0)
    s.op()
    s.mark_step(key="k1", stream=1)
    assert tl.lanes_of(s.events) == ["host", "hpu:0", "hpu:1"]


def test_verdict_host_bound_numbers():
    s = Sim()
    s.op(n=1, each_us=0)
    s.host(8)                                    # 8 ms of host work
    s.launch(1, "k", device_ms=2.0)              # then 2 ms on the device (starts 50 us later)
    evs = s.events
    v = tl.verdict(evs)
    window = (max(e.t_end for e in evs) - min(e.t_start for e in evs)) / 1e6
    assert v.window_ms == pytest.approx(window)
    assert v.device_busy_ms == pytest.approx(2.0)
    assert v.bound == "host-bound"
    assert v.idle_fraction == pytest.approx(1 - 2.0 / window)
    assert v.text.startswith(f"host-bound: device idle {v.idle_fraction:.0%} of the window")


def test_verdict_device_bound_and_threshold():
    v = tl.verdict(device_bound_loop())
    assert v.bound == "device-bound" and v.busy_fraction > 0.9
    assert v.text.startswith("device-bound: device busy")
    assert v.host_busy_ms < v.device_busy_ms
    assert tl.classify(2.0, 1.9) == "host-bound"        # the host's work outlasts the device's
    assert tl.classify(1.9, 2.0) == "device-bound"


def test_verdict_counts_overlapping_streams_once():
    evs = [ev.OpAccumulated(0, 0, "host", 0, op="aten::mul"),
           ev.DeviceExecution(0, 6 * MS, "hpu:0", 0, launch_id=1),
           ev.DeviceExecution(2 * MS, 8 * MS, "hpu:1", 0, launch_id=2),
           ev.HostSync(8 * MS, 10 * MS, "host", 0, reason="synchronize")]
    v = tl.verdict(evs)
    assert v.device_busy_ms == pytest.approx(8.0) and v.window_ms == pytest.approx(10.0)
    assert v.bound == "device-bound"


def test_verdict_without_device_work():
    assert tl.verdict([ev.OpAccumulated(0, 0, "host", 0)]).bound == "no device work"
    assert tl.verdict([]).text == "no device work in this window"


def test_draw_timeline_one_rectangle_per_row():
    evs = host_bound_loop(steps=4, shapes_vary=True)
    rows = tl.timeline_rows(evs)
    fig = tl.draw_timeline(evs)
    rects = _rects(fig)
    assert sum(rects.values()) == len(rows)
    for (lane, kind) in {(r.lane, r.kind) for r in rows}:
        assert rects[f"{lane}/{kind}"] == sum(1 for r in rows if (r.lane, r.kind) == (lane, kind))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["host: emulator\n(measured, this CPU)",
                                                            "hpu:0 device, stream 0\n(emulated, measured)"]
    assert "ms" in ax.get_xlabel()
    verdict_text = [t for t in ax.texts if t.get_gid() == "verdict"]
    assert verdict_text and verdict_text[0].get_text() == tl.verdict(evs).text
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "device idle" in labels and "first compile (1)" in labels and "recompile (2)" in labels
    assert "host sync (4)" in labels


def test_compile_markers_first_vs_recompile():
    evs = host_bound_loop(steps=4, shapes_vary=True)
    fig = tl.draw_timeline(evs)
    marks = {c.get_gid(): len(c.get_offsets()) for c in fig.axes[0].collections if c.get_gid() in
             ("first compile", "recompile", "host sync")}
    assert marks == {"first compile": 1, "recompile": 2, "host sync": 4}


def test_draw_timeline_step_range_zooms():
    evs = host_bound_loop(steps=6)
    fig = tl.draw_timeline(evs, step_range=(3, 4))          # the section's own steps, from 1
    ax = fig.axes[0]
    assert "steps 3\u20134 of 6" in ax.get_title(loc="left")
    execs = [c for c in ax.collections if c.get_gid() == "hpu:0/execute"]
    assert sum(len(c.get_paths()) for c in execs) == 2
    lo, hi = ax.get_xlim()
    assert lo < 0 < lo + 0.02 * (hi - lo)      # the axis starts at the window's origin: step 3's start


def test_draw_timeline_into_given_axes_and_empty():
    from matplotlib.figure import Figure
    fig = Figure()
    ax = fig.add_subplot()
    assert tl.draw_timeline(device_bound_loop(), ax=ax, compact=True) is fig
    assert tl.draw_timeline([]) is not None
