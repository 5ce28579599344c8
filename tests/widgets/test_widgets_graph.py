"""The graph view: networkx conversion, colours, collapsing, layout and the drawn figure."""
import matplotlib

matplotlib.use("Agg")

import networkx as nx  # noqa: E402

from hpu_lab import events as ev  # noqa: E402
from test_widgets_fixtures import chain_summary, mlp_summary  # noqa: E402
from widgets import graph_view as gv  # noqa: E402
from widgets.common import COLORS  # noqa: E402


def test_to_networkx_nodes_edges_attributes():
    s = mlp_summary()
    G = gv.to_networkx(s)
    assert G.number_of_nodes() == len(s.nodes) == 11
    assert G.number_of_edges() == len(s.edges) == 11
    assert G.nodes[4]["op"] == "aten::addmm" and G.nodes[4]["short"] == "addmm"
    assert G.nodes[4]["label"] == "addmm\n32\u00d7128"
    assert [G.nodes[i]["label"].split("\n")[0] for i in (0, 1, 2)] == ["input 0", "input 1", "input 2"]
    assert nx.is_directed_acyclic_graph(G)


def test_colours_by_engine_and_kind():
    G = gv.to_networkx(mlp_summary(cast=True, fallback=True))
    assert G.nodes[4]["color"] == COLORS["MME"]
    assert G.nodes[5]["color"] == COLORS["TPC"]
    assert G.nodes[9]["color"] == COLORS["CPU"] and "(CPU)" in G.nodes[9]["label"]
    assert G.nodes[0]["kind"] == "input" and G.nodes[0]["color"] == COLORS["input"]
    assert G.nodes[10]["kind"] == "output"
    assert G.nodes[3]["kind"] == "view"
    assert G.nodes[8]["kind"] == "cast" and G.nodes[8]["label"].startswith("cast \u2192 bfloat16")


def test_collapse_merges_clusters_and_drops_views_and_terminals():
    G = gv.to_networkx(mlp_summary())
    H = gv.collapse(G)
    assert "cluster:0" in H
    assert H.nodes["cluster:0"]["members"] == [5, 6, 7]
    assert "fused \u00d73" in H.nodes["cluster:0"]["label"]
    assert not any(d["kind"] in ("view", "input", "output") for _, d in H.nodes(data=True))
    assert H.has_edge(4, "cluster:0") and H.has_edge("cluster:0", 8)
    assert nx.is_directed_acyclic_graph(H)


def test_collapse_keeps_a_cluster_that_would_make_a_cycle():
    N = ev.NodeInfo
    # 1 and 3 in one cluster, but 1 -> 2 (not in it) -> 3: merging would make a cycle
    s = ev.GraphSummary((N(0, "input"), N(1, "aten::mul", cluster=0), N(2, "aten::mm", engine="MME"),
                         N(3, "aten::add", cluster=0), N(4, "output")), ((0, 1), (1, 2), (2, 3), (1, 3), (3, 4)))
    H = gv.collapse(gv.to_networkx(s))
    assert "cluster:0" not in H and {1, 2, 3} <= set(H.nodes)


def test_layout_left_to_right_and_no_overlap():
    G = gv.split_terminals(gv.to_networkx(mlp_summary()))
    pos, routes = gv.layered_layout(G)
    for a, b in G.edges:
        assert pos[a][0] < pos[b][0]          # every edge points right
    seen = {}
    for v, (x, y) in pos.items():
        for (x2, y2) in seen.values():
            assert not (x == x2 and abs(y - y2) < 0.99)
        seen[v] = (x, y)
    for (a, b), way in routes.items():
        assert [p[0] for p in way] == list(range(int(pos[a][0]) + 1, int(pos[b][0])))


def test_split_terminals_one_box_per_use():
    s = mlp_summary()
    D = gv.split_terminals(gv.to_networkx(s))
    outputs = [v for v, d in D.nodes(data=True) if d["kind"] == "output"]
    assert len(outputs) == 2                 # node 10 returns two tensors (9 and 8)
    assert all(D.in_degree(v) == 1 for v in outputs)


def test_draw_graph_artists():
    s = mlp_summary(cast=True, fallback=True)
    fig = gv.draw_graph(s, title="recipe k0")
    ax = fig.axes[0]
    nodes = [t for t in ax.texts if (t.get_gid() or "").startswith("node ")]
    D = gv.split_terminals(gv.to_networkx(s))
    assert len(nodes) == D.number_of_nodes()
    assert any(p.get_gid() == "cluster 0" for p in ax.patches)
    title = ax.get_title(loc="left")
    assert title.startswith("recipe k0") and "1 on MME" in title and "1 CPU fallback" in title
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    for want in ("MME (matrix engine)", "TPC (vector cores)", "CPU fallback", "fusion cluster (a halo per fused op)",
                 "cast (toothed border)", "graph input / output", "view (no kernel)"):
        assert want in legend


def test_draw_graph_collapses_big_graphs_automatically():
    big = chain_summary(60)
    fig = gv.draw_graph(big)
    ax = fig.axes[0]
    assert "collapsed" in ax.get_title(loc="left")
    nodes = [t for t in ax.texts if (t.get_gid() or "").startswith("node ")]
    assert len(nodes) == gv.collapse(gv.to_networkx(big)).number_of_nodes() < 30
    fig = gv.draw_graph(big, collapse_clusters=False)
    nodes = [t for t in fig.axes[0].texts if (t.get_gid() or "").startswith("node ")]
    assert len(nodes) == 62
    small = gv.draw_graph(chain_summary(10))
    assert "collapsed" not in small.axes[0].get_title(loc="left")


def test_draw_graph_renders_png(tmp_path):
    fig = gv.draw_graph(mlp_summary())
    fig.savefig(tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 1000


def _outline_check(summary, **kw):
    """Draw ``summary``; for every fusion cluster, the drawn outline (its halos) must not overlap
    the box of any node outside the cluster. Returns the number of halos checked."""
    fig = gv.draw_graph(summary, **kw)
    fig.canvas.draw()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    member = {}                                   # drawn node -> its cluster (ops only)
    D = gv.split_terminals(gv.to_networkx(summary))
    for v, d in D.nodes(data=True):
        if d["kind"] in ("op", "cast") and d["cluster"] >= 0:
            member[v] = d["cluster"]
    boxes = {t.get_gid()[5:]: t.get_bbox_patch().get_window_extent(renderer)
             for t in ax.texts if (t.get_gid() or "").startswith("node ")}
    halos = [(int(p.get_gid().split()[1]), p) for p in ax.patches
             if (p.get_gid() or "").startswith("cluster ")]
    for cid, halo in halos:
        outline = halo.get_path().transformed(halo.get_patch_transform() + ax.transData)
        ext = halo.get_window_extent(renderer)
        for v in D.nodes:
            if member.get(v) == cid:
                continue
            b = boxes[str(v)]
            corners = [(b.x0, b.y0), (b.x0, b.y1), (b.x1, b.y0), (b.x1, b.y1), ((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2)]
            assert not any(outline.contains_point(c) for c in corners), f"node {v} inside cluster {cid}'s outline"
            assert not ext.overlaps(b), f"node {v} overlaps cluster {cid}'s outline"
    # every fused op has exactly one halo, in its cluster's colour
    assert sorted(str(v) for v in member) == sorted(
        str(next(v for v in member if boxes[str(v)].fully_overlaps(p.get_window_extent(renderer))
                 and member[v] == cid)) for cid, p in halos)
    for cid, p in halos:
        assert matplotlib.colors.to_hex(p.get_edgecolor()) == gv.cluster_colour(cid)
    return fig, len(halos)


def test_cluster_outline_covers_exactly_its_nodes():
    N = ev.NodeInfo
    # mul and add are fused; the matmul and relu between them are not (a bounding box around
    # mul..add covered both and made them look fused)
    s = ev.GraphSummary((N(0, "input", (8, 8)), N(1, "aten::mul", (8, 8), cluster=0),
                         N(2, "aten::mm", (8, 8), engine="MME"), N(3, "aten::relu", (8, 8)),
                         N(4, "aten::add", (8, 8), cluster=0), N(5, "output")),
                        ((0, 1), (1, 2), (2, 3), (3, 4), (1, 4), (4, 5)))
    fig, n = _outline_check(s, collapse_clusters=False)
    assert n == 2
    ax = fig.axes[0]
    inner = [p for p in ax.patches if matplotlib.colors.to_hex(p.get_edgecolor()) == gv.cluster_colour(0)
             and not (p.get_gid() or "").startswith("cluster")]
    assert inner                             # the mul -> add edge is drawn in the cluster's colour
    title = ax.get_title(loc="left")
    assert "2 fused into 1 fusion cluster, 2 unfused" in title


def test_cluster_outlines_on_a_real_recipe():
    """The forward + backward recipe of a Linear-ReLU-Dropout-Linear step, as hpu_lab compiled it."""
    import torch
    import hpu_lab.core as htcore
    from hpu_lab import events
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                            torch.nn.Linear(8, 4), torch.nn.LogSoftmax(1)).to("hpu")
    with events.Collector() as c:
        x, y = torch.randn(6, 16).to("hpu"), torch.randint(0, 4, (6,)).to("hpu")
        torch.nn.functional.nll_loss(m(x), y).backward()
        htcore.mark_step()
    summary = c.of(events.Compile)[0].graph
    counts = gv.fusion_counts(summary)
    assert counts["clusters"] >= 1 and counts["fused ops"] >= 2 and counts["unfused ops"] >= 1
    assert counts["fused ops"] + counts["unfused ops"] == counts["ops"]
    _, n = _outline_check(summary, collapse_clusters=False)
    assert n == counts["fused ops"]


def test_fusion_counts():
    assert gv.fusion_counts(mlp_summary()) == {"ops": 6, "fused ops": 3, "clusters": 1, "unfused ops": 3}
    assert gv.fusion_counts(mlp_summary(with_cluster=False))["fused ops"] == 0
