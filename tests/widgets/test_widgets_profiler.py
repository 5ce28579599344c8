"""hpu_lab.observe.profiler: Chrome trace export and graph dumps (DOT, GraphML, pbtxt, SVG)."""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from hpu_lab import config
from hpu_lab.observe import profiler
from hpu_lab import events as ev
from test_widgets_fixtures import MS, Sim, host_bound_loop, mlp_summary

pytestmark = pytest.mark.usefixtures("measured_clock")   # synthetic spans: the measured clock


def test_chrome_trace_counts_and_lanes(tmp_path):
    evs = host_bound_loop(steps=3)
    path = profiler.export_chrome_trace(str(tmp_path / "trace.json"), evs, clock="measured")
    data = json.load(open(path))
    te = data["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in te if e["ph"] == "M" and e["name"] == "thread_name"}
    # the panels' names (profiler.lane_name): on the measured clock the host lane is the emulator's
    assert threads == {0: "host: emulator (measured, this CPU)", 1: "hpu:0 device, stream 0 (emulated, measured)"}
    spans = [e for e in te if e["ph"] == "X"]
    instants = [e for e in te if e["ph"] == "i"]
    counters = [e for e in te if e["ph"] == "C"]
    n_mem = sum(isinstance(e, ev.MemorySample) for e in evs)
    n_zero = sum(e.t_end == e.t_start for e in evs if not isinstance(e, ev.MemorySample))
    assert len(spans) + len(instants) + len(counters) == len(evs)
    assert len(instants) == n_zero and len(counters) == n_mem
    assert all(e["pid"] == 0 and e["dur"] >= 0 for e in spans)
    assert sum(e["name"] == "compile" for e in spans) == 1
    execs = [e for e in spans if e["tid"] == 1]
    assert len(execs) == 3 and all(e["dur"] == pytest.approx(1000.0) for e in execs)   # 1 ms in µs
    assert min(e["ts"] for e in spans + instants) == 0.0
    flows = [e for e in te if e["ph"] in ("s", "f")]
    assert len(flows) == 6                                  # one arrow per launch
    compile_ev = next(e for e in spans if e["cat"] == "Compile")
    assert compile_ev["args"]["graph"] == {"nodes": 11, "edges": 11}
    assert compile_ev["args"]["reason"] == "first compile"


def test_profile_context_collects_global_events(tmp_path):
    with profiler.profile() as c:
        ev.emit(ev.HostSync(0, 2 * MS, "host", 0, reason=".item()"))
        ev.emit(ev.DeviceExecution(0, MS, "hpu:0", 0, launch_id=1))
    assert len(c.events) == 2
    path = profiler.export_chrome_trace(str(tmp_path / "t.json"), clock="measured")
    names = [e["name"] for e in json.load(open(path))["traceEvents"] if e["ph"] == "X"]
    assert names == ["sync .item()", "recipe "]
    ev.emit(ev.HostSync(0, 0, "host", 0))          # after stop: not collected
    assert len(profiler.collected()) == 2


def test_start_twice_is_an_error():
    profiler.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            profiler.start()
    finally:
        profiler.stop()


def test_dump_graphml_parses(tmp_path):
    s = mlp_summary(cast=True)
    profiler.dump_graph(s, str(tmp_path / "g.graphml"), "graphml")
    root = ET.parse(tmp_path / "g.graphml").getroot()
    ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
    nodes = root.findall(".//g:node", ns)
    edges = root.findall(".//g:edge", ns)
    assert len(nodes) == len(s.nodes) and len(edges) == len(s.edges)
    ops = [n.find("g:data[@key='op']", ns).text for n in nodes]
    assert ops[4] == "aten::addmm"
    import networkx as nx
    G = nx.read_graphml(tmp_path / "g.graphml")
    assert G.nodes["n4"]["engine"] == "MME" and G.nodes["n8"]["is_cast"] is True


def test_dump_dot_pbtxt_svg(tmp_path):
    s = mlp_summary()
    dot = open(profiler.dump_graph(s, str(tmp_path / "g.dot"), "dot")).read()
    assert dot.startswith('digraph "g" {') and dot.count("->") == len(s.edges)
    assert "subgraph cluster_0" in dot and 'label="addmm\\n32x128"' in dot
    pb = open(profiler.dump_graph(s, str(tmp_path / "g.pbtxt"), "pbtxt")).read()
    assert pb.count("node {") == len(s.nodes) and 'input: "4_addmm"' in pb
    svg = ET.parse(profiler.dump_graph(s, str(tmp_path / "g.svg"), "svg")).getroot()
    assert svg.tag.endswith("svg") and len(svg.findall("{http://www.w3.org/2000/svg}rect")) == len(s.nodes)
    with pytest.raises(ValueError, match="fmt must be one of"):
        profiler.dump_graph(s, str(tmp_path / "g.png"), "png")


def test_dump_graph_if_enabled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = mlp_summary()
    try:
        config.set(GRAPH_VISUALIZATION="false")
        assert profiler.dump_graph_if_enabled(s, "step0") is None
        assert not (tmp_path / ".graph_dumps").exists()
        config.set(GRAPH_VISUALIZATION="true", PT_HPU_GRAPH_DUMP_FORMAT="dot", PT_HPU_GRAPH_DUMP_PREFIX="run1_")
        path = profiler.dump_graph_if_enabled(s, "recipe 7")
        assert path == ".graph_dumps/run1_recipe_7.dot"
        assert (tmp_path / ".graph_dumps" / "run1_recipe_7.dot").read_text().startswith("digraph")
        config.set(PT_HPU_GRAPH_DUMP_FORMAT="graphml")
        ET.parse(profiler.dump_graph_if_enabled(s, "r8"))
    finally:
        config.reload()


def test_profiler_imports_no_plotting_library():
    code = ("import sys, hpu_lab, hpu_lab.observe.profiler; "
            "bad = [m for m in ('matplotlib', 'ipywidgets', 'networkx', 'widgets') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_trace_lanes_are_named_as_the_panels_name_them():
    """On the Gaudi clock the host lane is the modeled Gaudi host (the bridge's work), not "host
    (Python)"; your own code, measured, is a lane of its own, as in the panels."""
    from widgets import timeline as tl
    s = Sim()
    t = s.t
    s.t += 3 * MS
    s._emit(ev.UserCode(t, s.t, "host", s.step, what="data loading", src="train.py:5", own_ns=3 * MS))
    s.op(n=5)
    s.mark_step()
    for clock, measured in (("gaudi", False), ("measured", True)):
        te = profiler.chrome_trace(s.events, clock=clock)["traceEvents"]
        threads = {e["tid"]: e["args"]["name"] for e in te if e["ph"] == "M" and e["name"] == "thread_name"}
        names = [tl.lane_title(lane, measured).replace("\n", " ") for lane in ("host", "user", "hpu:0")]
        assert list(threads.values()) == names, threads
        assert names[0] == ("host: emulator (measured, this CPU)" if measured else "host: the bridge (modeled)")
        (user,) = [e for e in te if e.get("cat") == "UserCode"]
        assert threads[user["tid"]] == "your code (measured, this CPU)"
