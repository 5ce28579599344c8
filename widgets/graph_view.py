"""The graph view: a compiled recipe (``GraphSummary`` of a Compile or Launch event), drawn.

    G = to_networkx(summary)            # nx.DiGraph, one node per NodeInfo, attributes kept
    fig = draw_graph(summary)           # layered left-to-right, coloured by engine

Nodes are boxes labelled by op and output shape, filled by engine (MME orange, TPC blue, CPU
fallback red), inputs and outputs as grey arrows, casts with a toothed border, views pale.
A fusion cluster is a halo in the cluster's colour around each of its ops (and its inner
edges in that colour): it outlines exactly the fused ops. Graphs above ``COLLAPSE_ABOVE`` nodes are drawn
with each cluster collapsed into one box and views skipped, so a big graph stays readable.
"""
from __future__ import annotations

import textwrap
from typing import Dict, List, Optional

import networkx as nx

from hpu_lab import events as ev

from .common import COLORS, fmt_shape, short_op

COLLAPSE_ABOVE = 40          # ops (not counting inputs, outputs, views); above this draw_graph collapses
MAX_INCHES = (60.0, 20.0)    # a wider graph shrinks its text (the panel lets the picture scroll)
_CLUSTER_EDGE = "#2e7d32"


def node_kind(n: ev.NodeInfo) -> str:
    """'input', 'output', 'cast', 'view' or 'op'."""
    if n.op in ("input", "output"):
        return n.op
    if n.is_cast:
        return "cast"
    if n.op == "view" or n.tensor_class == "alias":
        return "view"
    return "op"


def node_color(n: ev.NodeInfo) -> str:
    kind = node_kind(n)
    if kind in ("input", "output", "view"):
        return COLORS[kind]
    return COLORS.get(n.engine or "TPC", COLORS["TPC"])


def _wrap(name: str, width: int = 16) -> str:
    """Break a long op name at an underscore so boxes stay narrow."""
    if len(name) <= width:
        return name
    cut = name.rfind("_", 1, width + 1)
    if cut <= 0:
        return name[:width - 1] + "\u2026"
    return name[:cut] + "\n" + _wrap(name[cut:], width)


def node_label(n: ev.NodeInfo, input_no: Optional[int] = None) -> str:
    kind = node_kind(n)
    shape = fmt_shape(n.shape)
    if kind == "input":
        return f"input {input_no if input_no is not None else ''}\n{shape}".replace("input \n", "input\n")
    if kind == "output":
        return "output"
    if kind == "cast":
        return f"cast \u2192 {n.dtype or '?'}\n{shape}"
    name = short_op(n.op)
    if n.engine == "CPU":
        name += " (CPU)"
    return f"{_wrap(name)}\n{shape}"


def to_networkx(summary: ev.GraphSummary) -> nx.DiGraph:
    """One node per NodeInfo (key = its index) with every NodeInfo field as an attribute, plus
    ``kind``, ``label`` and ``color``; one edge per (producer, consumer) pair."""
    G = nx.DiGraph()
    inputs = 0
    for n in summary.nodes:
        kind = node_kind(n)
        G.add_node(n.index, op=n.op, short=short_op(n.op), shape=tuple(n.shape), dtype=n.dtype,
                   engine=n.engine, cluster=n.cluster, is_cast=n.is_cast, src=n.src,
                   tensor_class=n.tensor_class, kind=kind, color=node_color(n),
                   label=node_label(n, inputs if kind == "input" else None))
        if kind == "input":
            inputs += 1
    G.add_edges_from((a, b) for a, b in summary.edges if a in G and b in G)
    return G


def collapse(G: nx.DiGraph) -> nx.DiGraph:
    """A smaller graph for drawing: each fusion cluster becomes one node ("cluster:<id>"), view
    nodes are bypassed (their producer feeds their consumers directly) and the graph's inputs
    and output are left out, so only the ops remain."""
    H = G.copy()
    H.remove_nodes_from([v for v, d in G.nodes(data=True) if d["kind"] in ("input", "output")])
    for v in [v for v, d in H.nodes(data=True) if d["kind"] == "view"]:
        preds, succs = list(H.predecessors(v)), list(H.successors(v))
        H.remove_node(v)
        H.add_edges_from((p, s) for p in preds for s in succs if p != s)
    clusters: Dict[int, List] = {}
    for v, d in H.nodes(data=True):
        if d["cluster"] >= 0:
            clusters.setdefault(d["cluster"], []).append(v)
    for cid, members in clusters.items():
        before = H.copy()
        _merge_cluster(H, cid, sorted(members, key=str))
        if not nx.is_directed_acyclic_graph(H):   # a path leaves and re-enters: keep it expanded
            H = before
    return H


def _merge_cluster(H: nx.DiGraph, cid: int, members: List) -> None:
    ops = [H.nodes[m]["short"] for m in members]
    engines = {H.nodes[m]["engine"] for m in members}
    engine = "CPU" if "CPU" in engines else ("MME" if "MME" in engines else "TPC")
    last = H.nodes[members[-1]]
    shown = ", ".join(dict.fromkeys(ops))
    if len(shown) > 22:
        shown = shown[:21] + "\u2026"
    name = f"cluster:{cid}"
    H.add_node(name, op="fused", short="fused", shape=last["shape"], dtype=last["dtype"], engine=engine,
               cluster=cid, is_cast=False, src=last["src"], tensor_class="", kind="cluster",
               color=COLORS[engine], members=members,
               label=f"fused \u00d7{len(members)}\n{_wrap(shown, 18)}\n{fmt_shape(last['shape'])}")
    mset = set(members)
    for m in members:
        for p in H.predecessors(m):
            if p not in mset:
                H.add_edge(p, name)
        for s in H.successors(m):
            if s not in mset:
                H.add_edge(name, s)
    H.remove_nodes_from(members)


def split_terminals(G: nx.DiGraph) -> nx.DiGraph:
    """For drawing: a graph input feeding several ops is drawn once per consumer, right before
    it, and the output node once per tensor it returns, right after its producer -- instead of
    one box with long edges across the whole graph."""
    H = G.copy()
    for v, d in list(G.nodes(data=True)):
        if d.get("kind") == "input":
            ends = list(G.successors(v))
        elif d.get("kind") == "output":
            ends = list(G.predecessors(v))
        else:
            continue
        for i, s in enumerate(ends[1:], 1):
            copy = (v, "copy", i)
            H.add_node(copy, **d)
            if d["kind"] == "input":
                H.remove_edge(v, s)
                H.add_edge(copy, s)
            else:
                H.remove_edge(s, v)
                H.add_edge(s, copy)
    return H


def layered_layout(G: nx.DiGraph):
    """Left-to-right layers (a Sugiyama-style layout), returns (pos, routes).

    Each op sits one column after its latest input; graph inputs sit just before their first
    consumer (not all in column 0). An edge spanning several columns gets a waypoint in every
    column it crosses, so it is routed around the boxes instead of through them. Rows inside a
    column are ordered by the mean row of the neighbours (barycenter sweeps) to reduce
    crossings. ``pos``: node -> (x, y); ``routes``: (a, b) -> list of waypoints between a and b.
    Disconnected parts (e.g. one update per parameter in an optimizer step) are stacked.
    """
    if not nx.is_directed_acyclic_graph(G):
        return nx.spring_layout(G, seed=0), {}
    rank = {v: i for i, v in enumerate(G.nodes)}
    parts = sorted(nx.weakly_connected_components(G), key=lambda c: min(rank[v] for v in c))
    pos: Dict[object, tuple] = {}
    routes: Dict[tuple, list] = {}
    top = 0.0
    for part in parts:
        p, r = _layout_component(G.subgraph(part))
        ys = [y for _, y in p.values()] + [y for w in r.values() for _, y in w]
        dy = top - max(ys)
        pos.update({v: (x, y + dy) for v, (x, y) in p.items()})
        routes.update({e: [(x, y + dy) for x, y in w] for e, w in r.items()})
        top = min(ys) + dy - 1.0
    return pos, routes


def _layout_component(G: nx.DiGraph):
    layer: Dict[object, int] = {}
    for v in nx.topological_sort(G):
        preds = [p for p in G.predecessors(v) if G.nodes[p].get("kind") != "input"]
        layer[v] = 1 + max((layer[p] for p in preds), default=0)
    for v, d in G.nodes(data=True):
        if d.get("kind") == "input":
            succ = [layer[s] for s in G.successors(v)]
            layer[v] = (min(succ) - 1) if succ else 0
    # the layout graph: real nodes plus one dummy per column crossed by a long edge
    preds: Dict[object, List] = {v: [] for v in G.nodes}
    succs: Dict[object, List] = {v: [] for v in G.nodes}
    chains: Dict[tuple, List] = {}
    for a, b in G.edges:
        chain, prev = [], a
        for k in range(layer[a] + 1, layer[b]):
            dmy = ("dummy", a, b, k)
            layer[dmy] = k
            preds[dmy], succs[dmy] = [], []
            succs[prev].append(dmy)
            preds[dmy].append(prev)
            chain.append(dmy)
            prev = dmy
        succs[prev].append(b)
        preds[b].append(prev)
        chains[(a, b)] = chain
    columns: Dict[int, List] = {}
    for v in sorted(layer, key=lambda v: (layer[v], str(v))):
        columns.setdefault(layer[v], []).append(v)
    order = {v: i for col in columns.values() for i, v in enumerate(col)}
    keys = sorted(columns)
    for sweep in range(6):
        down = sweep % 2 == 0
        for k in (keys if down else reversed(keys)):
            col = columns[k]
            nb = preds if down else succs
            col.sort(key=lambda v: (sum(order[u] for u in nb[v]) / len(nb[v])) if nb[v] else order[v])
            for i, v in enumerate(col):
                order[v] = i
    at = _assign_rows(columns, preds, succs, is_dummy=lambda v: isinstance(v, tuple) and v[:1] == ("dummy",))
    pos = {v: at[v] for v in G.nodes}
    routes = {e: [at[d] for d in chain] for e, chain in chains.items()}
    return pos, routes


def _assign_rows(columns, preds, succs, is_dummy, gap=1.0, dummy_gap=0.45, rounds=12):
    """y of every node: keep the order found, pull each node toward its neighbours' mean y (so
    chains and long edges run straight), and keep boxes at least ``gap`` apart (waypoints of
    long edges ``dummy_gap``)."""
    def sep(u, v):
        return gap if not (is_dummy(u) and is_dummy(v)) else dummy_gap
    y = {}
    for col in columns.values():
        acc = 0.0
        for i, v in enumerate(col):
            if i:
                acc -= sep(col[i - 1], v)
            y[v] = acc
        mid = acc / 2
        for v in col:
            y[v] -= mid
    keys = sorted(columns)
    for r in range(rounds):
        for k in (keys if r % 2 == 0 else reversed(keys)):
            col = columns[k]
            want = []
            for v in col:
                nb = preds[v] + succs[v]
                want.append(sum(y[u] for u in nb) / len(nb) if nb else y[v])
            # keep order and spacing: place top-down below the wanted row, then re-centre the
            # column on the mean of what was wanted
            placed = []
            for i, v in enumerate(col):
                w = want[i]
                if i and w > placed[-1] - sep(col[i - 1], v):
                    w = placed[-1] - sep(col[i - 1], v)
                placed.append(w)
            shift = (sum(want) - sum(placed)) / len(col)
            for v, w in zip(col, placed):
                y[v] = w + shift
    return {v: (float(k), y[v]) for k, col in columns.items() for v in col}


def layered_positions(G: nx.DiGraph) -> Dict[object, tuple]:
    """node -> (x, y) of ``layered_layout``."""
    return layered_layout(G)[0]


def draw_graph(summary: ev.GraphSummary, ax=None, collapse_clusters: Optional[bool] = None,
               title: Optional[str] = None):
    """Draw a recipe graph and return the matplotlib Figure.

    ``collapse_clusters``: None = automatic (collapse above COLLAPSE_ABOVE nodes), True/False to force.
    ``title``: shown above the counts line (e.g. "recipe 7c3b86, step 3: first compile").
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    G = to_networkx(summary)
    if collapse_clusters is None:
        collapse_clusters = sum(1 for _, d in G.nodes(data=True) if d["kind"] in ("op", "cast")) > COLLAPSE_ABOVE
    D = split_terminals(collapse(G) if collapse_clusters else G)
    pos, routes = layered_layout(D)
    allpts = list(pos.values()) + [p for r in routes.values() for p in r]
    n_layers = 1 + int(max((x for x, _ in allpts), default=0) - min((x for x, _ in allpts), default=0))
    ys_all = [y for _, y in allpts] or [0.0]
    tallest = 1 + int(max(ys_all) - min(ys_all))
    want_w, want_h = 1.35 * n_layers + 1.0, 0.75 * tallest + 2.2
    if ax is None:
        w = min(max(want_w, 7.0), MAX_INCHES[0])
        h = min(max(want_h, 3.6), MAX_INCHES[1])
        fig = Figure(figsize=(w, h))          # margins set below: constrained layout would draw twice
        ax = fig.add_subplot()
        own_figure = True
    else:
        own_figure = False
    fig = ax.figure
    fw, fh = fig.get_size_inches()
    fontsize = max(4.5, 8 * min(1.0, fw / want_w, fh / want_h))   # shrink text only if the figure is capped

    # fusion clusters (only when not collapsed): drawn after the boxes, whose sizes they need
    clusters: Dict[int, List] = {}
    if not collapse_clusters:
        for v, d in D.nodes(data=True):
            if d["kind"] in ("op", "cast") and d["cluster"] >= 0:
                clusters.setdefault(d["cluster"], []).append(v)

    boxes = {}
    for v, d in D.nodes(data=True):
        kind = d["kind"]
        style = {"input": "rarrow,pad=0.3", "output": "rarrow,pad=0.3", "cast": "roundtooth,pad=0.35",
                 "view": "round,pad=0.3", "cluster": "round4,pad=0.35"}.get(kind, "round,pad=0.3")
        dark = kind in ("op", "cast", "cluster")
        bbox = dict(boxstyle=style, facecolor=d["color"], edgecolor="#333333",
                    linewidth=1.6 if kind in ("cast", "cluster") else 0.8,
                    linestyle="--" if kind == "view" else "-")
        if kind == "cluster":
            bbox["edgecolor"] = cluster_colour(d["cluster"])
        x, y = pos[v]
        t = ax.text(x, y, d["label"], ha="center", va="center", fontsize=fontsize, zorder=3, bbox=bbox,
                    color="white" if dark and d["engine"] != "" else "black", gid=f"node {v}",
                    fontweight="bold" if dark else "normal", linespacing=1.1)
        boxes[v] = t
    xs = [p[0] for p in allpts] or [0.0]
    ys = [p[1] for p in allpts] or [0.0]
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_ylim(min(ys) - 0.7, max(ys) + 0.75)
    ax.set_axis_off()

    engines = [d["engine"] for _, d in G.nodes(data=True) if d["kind"] in ("op", "cast")]
    n_ops = len(engines)
    fc = fusion_counts(summary)
    counts = (f"{n_ops} ops: {engines.count('MME')} on MME, {engines.count('TPC')} on TPC"
              + (f", {engines.count('CPU')} CPU fallback" if "CPU" in engines else "")
              + f"; {fc['fused ops']} fused into {fc['clusters']} fusion cluster{'s' if fc['clusters'] != 1 else ''}, "
              + f"{fc['unfused ops']} unfused"
              + (" (collapsed; views, inputs, outputs hidden)" if collapse_clusters else ""))
    width_chars = int(ax.figure.get_size_inches()[0] * 11)
    head = "\n".join(textwrap.wrap(title or "Recipe graph", width_chars) + textwrap.wrap(counts, width_chars))
    ax.set_title(head, fontsize=11, loc="left")

    kinds = {d["kind"] for _, d in D.nodes(data=True)}
    used_engines = {d["engine"] for _, d in D.nodes(data=True) if d["kind"] in ("op", "cast", "cluster")}
    legend = []
    for eng, name in (("MME", "MME (matrix engine)"), ("TPC", "TPC (vector cores)"), ("CPU", "CPU fallback")):
        if eng in used_engines or eng != "CPU":
            legend.append(Patch(facecolor=COLORS[eng], edgecolor="#333333", label=name))
    if "view" in kinds:
        legend.append(Patch(facecolor=COLORS["view"], edgecolor="#333333", linestyle="--", label="view (no kernel)"))
    if kinds & {"input", "output"}:
        legend.append(Patch(facecolor=COLORS["input"], edgecolor="#333333", label="graph input / output"))
    if "cast" in kinds:
        legend.append(Patch(facecolor=COLORS["TPC"], edgecolor="#333333", linewidth=1.6, label="cast (toothed border)"))
    if clusters:
        legend.append(Patch(facecolor=_HALO_FILL, edgecolor=_CLUSTER_EDGE, linewidth=1.6,
                            label="fusion cluster (a halo per fused op)"))
    if "cluster" in kinds:
        legend.append(Patch(facecolor=COLORS["TPC"], edgecolor=_CLUSTER_EDGE, linewidth=1.6,
                            label="fusion cluster (collapsed)"))
    ncol = min(len(legend), 4)
    # under the graph at the left, like the title: seen without scrolling a wide graph sideways
    ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(0.0, 0.0), ncol=ncol, fontsize=8, frameon=False)
    if own_figure:
        fw, fh = fig.get_size_inches()
        top_in = 0.22 * (head.count("\n") + 1) + 0.15
        bottom_in = 0.2 * -(-len(legend) // ncol) + 0.15
        fig.subplots_adjust(left=0.1 / fw, right=1 - 0.1 / fw, top=1 - top_in / fh, bottom=bottom_in / fh)
    half = _box_halfsizes(ax, boxes)
    colour = {cid: cluster_colour(cid) for cid in clusters}
    for cid, members in sorted(clusters.items()):
        _draw_halos(ax, cid, members, pos, half, colour[cid], fontsize)
    member_of = {v: cid for cid, members in clusters.items() for v in members}
    _draw_edges(ax, D, pos, routes, half,
                lambda a, b: colour[member_of[a]] if a in member_of and member_of.get(b) == member_of[a] else None)
    return fig


_CLUSTER_COLOURS = ("#2e7d32", "#8e24aa", "#00838f", "#ad1457", "#6d4c41", "#9e9d24", "#3949ab", "#ef6c00")
_HALO_FILL = "#f1f8e9"
HALO_PAD_PT = 4.0            # a halo's margin around its node's box, in points


def cluster_colour(cid: int) -> str:
    """The colour of fusion cluster ``cid`` (neighbouring ids differ; the palette repeats every 8)."""
    return _CLUSTER_COLOURS[cid % len(_CLUSTER_COLOURS)]


def fusion_counts(summary: ev.GraphSummary) -> dict:
    """What the compiler fused in a recipe: ops (kernel-running nodes: not views, inputs, outputs),
    fused ops (members of a fusion cluster), clusters (each one TPC kernel) and unfused ops."""
    ops = [n for n in summary.nodes if node_kind(n) in ("op", "cast")]
    fused = [n for n in ops if n.cluster >= 0]
    return {"ops": len(ops), "fused ops": len(fused), "clusters": len({n.cluster for n in fused}),
            "unfused ops": len(ops) - len(fused)}


def _draw_halos(ax, cid, members, pos, half, colour, fontsize) -> None:
    """Fusion cluster ``cid`` drawn as one halo around each member's box, in the cluster's colour:
    the outline covers exactly the fused ops, never a node between them (a bounding box did: it
    made the views, matmuls and unfused ops it happened to enclose look fused). The edges between
    members are drawn in the same colour (_draw_edges), so the halos read as one kernel."""
    from matplotlib.patches import FancyBboxPatch
    (ox, oy), (px, py) = ax.transData.transform([(0.0, 0.0), (1.0, 1.0)])
    pad_pt = HALO_PAD_PT * ax.figure.dpi / 72.0
    dx, dy = pad_pt / abs(px - ox), pad_pt / abs(py - oy)
    top = None
    for v in members:
        (x, y), (hw, hh) = pos[v], half[v]
        ax.add_patch(FancyBboxPatch((x - hw - dx, y - hh - dy), 2 * (hw + dx), 2 * (hh + dy),
                                    boxstyle="round,pad=0,rounding_size=0.06", facecolor=_HALO_FILL,
                                    edgecolor=colour, linewidth=2.0, zorder=1.5, gid=f"cluster {cid}"))
        if top is None or (y + hh, -x) > (top[1] + top[2], -top[0]):
            top = (x, y, hh)
    x, y, hh = top
    ax.text(x, y + hh + 1.6 * dy, f"cluster {cid}", fontsize=max(fontsize - 1.5, 4), color=colour,
            ha="center", va="bottom", zorder=3, gid=f"cluster {cid} label")


def _box_halfsizes(ax, boxes) -> Dict[object, tuple]:
    """node -> (half width, half height) of its drawn box, in data units. Measured once with the
    final axes position; data units do not change with the dpi the figure is later saved at."""
    fig = ax.figure
    renderer = getattr(fig.canvas, "get_renderer", None)
    if renderer is None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        renderer = FigureCanvasAgg(fig).get_renderer()
    else:
        renderer = renderer()
    inv = ax.transData.inverted()
    out = {}
    for v, t in boxes.items():
        t.update_bbox_position_size(renderer)
        bb = t.get_bbox_patch().get_window_extent(renderer)
        (x0, y0), (x1, y1) = inv.transform([(bb.x0, bb.y0), (bb.x1, bb.y1)])
        out[v] = (abs(x1 - x0) / 2, abs(y1 - y0) / 2)
    return out


def _to_border(c, half, toward):
    """The point where the segment from box centre ``c`` toward ``toward`` leaves the box."""
    dx, dy = toward[0] - c[0], toward[1] - c[1]
    s = min(half[0] / abs(dx) if dx else float("inf"), half[1] / abs(dy) if dy else float("inf"), 1.0)
    return (c[0] + dx * s, c[1] + dy * s)


def _draw_edges(ax, D, pos, routes, half, edge_colour=lambda a, b: None) -> None:
    """Edges clipped to the box borders by plain geometry (matplotlib's patch clipping of every
    arrow costs more than the rest of the figure). ``edge_colour(a, b)``: a colour for an edge
    inside a fusion cluster (drawn thicker), None for the plain grey."""
    from matplotlib.patches import FancyArrowPatch, PathPatch
    from matplotlib.path import Path
    for a, b in D.edges:
        c = edge_colour(a, b)
        colour, lw = (c, 1.8) if c else ("#666666", 0.8)
        way = routes.get((a, b), [])
        first = way[0] if way else pos[b]
        start = _to_border(pos[a], half[a], first)
        if way:       # a long edge: a smooth curve through its waypoints, the arrow on the last leg
            verts, codes = [start], [Path.MOVETO]
            for i, p in enumerate(way):
                nxt = way[i + 1] if i + 1 < len(way) else p
                verts += [p, ((p[0] + nxt[0]) / 2, (p[1] + nxt[1]) / 2)]
                codes += [Path.CURVE3, Path.CURVE3]
            ax.add_patch(PathPatch(Path(verts, codes), fill=False, edgecolor=colour, lw=lw, zorder=2))
            start = way[-1]
        end = _to_border(pos[b], half[b], start)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color=colour, lw=lw,
                                     shrinkA=0, shrinkB=1, zorder=2))
