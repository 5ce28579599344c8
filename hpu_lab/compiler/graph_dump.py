"""The compiled graphs as text: DOT, GraphML, pbtxt and SVG, and the bridge's GRAPH_VISUALIZATION dumps.

    from hpu_lab.observe import profiler                 # re-exports these
    profiler.dump_graph(compile_event.graph, "step.graphml", "graphml")

With ``GRAPH_VISUALIZATION=true`` the compiler calls ``dump_graph_if_enabled`` for every compiled
graph (compiler/find.py), which writes ``./.graph_dumps/<PT_HPU_GRAPH_DUMP_PREFIX><name>.<fmt>``
like the real bridge. A module of its own, apart from the profiler's Chrome trace (which re-times
events on the Gaudi clock, perfmodel -> lazy): the compiler can write a dump without importing the
op path back. Plain text written by hand: no plotting or graph library is imported.
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Optional
from xml.sax.saxutils import escape, quoteattr

from .. import config
from .. import events as ev

FORMATS = ("dot", "graphml", "pbtxt", "svg")


def _node_id(n: ev.NodeInfo) -> str:
    return f"n{n.index}"


def _shape(s) -> str:
    return "x".join(str(d) for d in s) if s else "scalar"


def _node_fields(n: ev.NodeInfo) -> dict:
    return {"op": n.op, "shape": _shape(n.shape), "dtype": n.dtype, "engine": n.engine, "cluster": n.cluster,
            "is_cast": n.is_cast, "src": n.src, "tensor_class": n.tensor_class}


_FILL = {"MME": "#f28e2b", "TPC": "#4e79a7", "CPU": "#e15759", "": "#d4d4d4"}


def graph_to_dot(summary: ev.GraphSummary, name: str = "recipe") -> str:
    """Graphviz DOT, left to right, nodes filled by engine, fusion clusters as subgraphs."""
    def q(s):
        # DOT string: quotes escaped; a backslash is kept (labels use DOT's own "\\n" line break)
        return '"' + str(s).replace('"', '\\"') + '"'
    lines = [f"digraph {q(name)} {{", "  rankdir=LR;", '  node [shape=box, style="rounded,filled", fontname="Helvetica"];']
    clusters: dict = {}
    for n in summary.nodes:
        label = f"{n.op.split('::')[-1]}\\n{_shape(n.shape)}"
        fill = _FILL.get(n.engine if n.op not in ("input", "output") else "", "#4e79a7")
        shape = ", shape=cds" if n.op in ("input", "output") else (", peripheries=2" if n.is_cast else "")
        attrs = f"label={q(label)}, fillcolor={q(fill)}{shape}, tooltip={q(n.src)}"
        line = f"  {_node_id(n)} [{attrs}];"
        if n.cluster >= 0:
            clusters.setdefault(n.cluster, []).append(line)
        else:
            lines.append(line)
    for cid, members in sorted(clusters.items()):
        lines.append(f"  subgraph cluster_{cid} {{ label={q(f'fusion cluster {cid}')}; style=dashed;")
        lines += ["  " + m for m in members]
        lines.append("  }")
    lines += [f"  n{a} -> n{b};" for a, b in summary.edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_to_graphml(summary: ev.GraphSummary, name: str = "recipe") -> str:
    """GraphML (XML): one <node> per NodeInfo with its fields as <data>, one <edge> per edge."""
    types = {"op": "string", "shape": "string", "dtype": "string", "engine": "string", "cluster": "int",
             "is_cast": "boolean", "src": "string", "tensor_class": "string"}
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">']
    out += [f'  <key id="{k}" for="node" attr.name="{k}" attr.type="{t}"/>' for k, t in types.items()]
    out.append(f"  <graph id={quoteattr(name)} edgedefault=\"directed\">")
    for n in summary.nodes:
        out.append(f'    <node id="{_node_id(n)}">')
        for k, v in _node_fields(n).items():
            text = str(v).lower() if isinstance(v, bool) else escape(str(v))
            out.append(f'      <data key="{k}">{text}</data>')
        out.append("    </node>")
    out += [f'    <edge source="n{a}" target="n{b}"/>' for a, b in summary.edges]
    out += ["  </graph>", "</graphml>"]
    return "\n".join(out) + "\n"


def graph_to_pbtxt(summary: ev.GraphSummary, name: str = "recipe") -> str:
    """A GraphDef-like protobuf text: node { name op input attr }."""
    preds: dict = {}
    for a, b in summary.edges:
        preds.setdefault(b, []).append(a)
    names = {n.index: f"{n.index}_{n.op.split('::')[-1]}" for n in summary.nodes}
    out = []
    for n in summary.nodes:
        out.append("node {")
        out.append(f"  name: {json.dumps(names[n.index])}")
        out.append(f"  op: {json.dumps(n.op)}")
        for a in preds.get(n.index, []):
            out.append(f"  input: {json.dumps(names.get(a, str(a)))}")
        for k, v in _node_fields(n).items():
            if k == "op" or v in ("", -1) or v is False:
                continue
            out.append(f"  attr {{ key: {json.dumps(k)} value {{ s: {json.dumps(str(v))} }} }}")
        out.append("}")
    return "\n".join(out) + "\n"


def graph_to_svg(summary: ev.GraphSummary, name: str = "recipe") -> str:
    """A small self-contained SVG: longest-path columns left to right, boxes filled by engine."""
    col: dict = {}
    preds: dict = {}
    for a, b in summary.edges:
        preds.setdefault(b, []).append(a)
    for n in summary.nodes:                      # nodes come in topological (schedule) order
        col[n.index] = 1 + max((col.get(p, 0) for p in preds.get(n.index, [])), default=-1)
    rows: dict = {}
    at = {}
    for n in summary.nodes:
        r = rows.get(col[n.index], 0)
        rows[col[n.index]] = r + 1
        at[n.index] = (20 + col[n.index] * 150, 40 + r * 50)
    W = 20 + (max(col.values(), default=0) + 1) * 150
    H = 40 + max(rows.values(), default=1) * 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="Helvetica" font-size="10">',
           f"<title>{escape(name)}</title>",
           '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#666"/></marker></defs>']
    for a, b in summary.edges:
        if a in at and b in at:
            (x0, y0), (x1, y1) = at[a], at[b]
            out.append(f'<line x1="{x0 + 120}" y1="{y0 + 15}" x2="{x1}" y2="{y1 + 15}" stroke="#666" marker-end="url(#a)"/>')
    for n in summary.nodes:
        x, y = at[n.index]
        fill = _FILL.get(n.engine if n.op not in ("input", "output") else "", "#4e79a7")
        dash = ' stroke-dasharray="4,2"' if n.cluster >= 0 else ""
        out.append(f'<rect x="{x}" y="{y}" width="120" height="30" rx="5" fill="{fill}" stroke="#333"{dash}>'
                   f"<title>{escape(n.op)} {escape(n.src)}</title></rect>")
        short = n.op.split("::")[-1][:22]
        out.append(f'<text x="{x + 60}" y="{y + 13}" text-anchor="middle">{escape(short)}</text>')
        out.append(f'<text x="{x + 60}" y="{y + 25}" text-anchor="middle">{escape(_shape(n.shape))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


_WRITERS = {"dot": graph_to_dot, "graphml": graph_to_graphml, "pbtxt": graph_to_pbtxt, "svg": graph_to_svg}


def dump_graph(summary: ev.GraphSummary, path: str, fmt: str = "graphml") -> str:
    """Write ``summary`` to ``path`` as dot, graphml, pbtxt or svg; return the path."""
    fmt = fmt.lower()
    if fmt not in _WRITERS:
        raise ValueError(f"dump_graph: fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, "w") as f:
        f.write(_WRITERS[fmt](summary, name))
    return path


GRAPH_DUMP_DIR = ".graph_dumps"


class GraphDumpWarning(UserWarning):
    """GRAPH_VISUALIZATION is on but a dump cannot be written: said once, the program runs on."""


_dump_failed: set = set()    # the settings under which writing a dump failed (warned once for them)


def dump_graph_if_enabled(summary: Optional[ev.GraphSummary], name: str) -> Optional[str]:
    """If GRAPH_VISUALIZATION is on, write ./.graph_dumps/<PT_HPU_GRAPH_DUMP_PREFIX><name>.<fmt>
    (fmt from PT_HPU_GRAPH_DUMP_FORMAT) and return its path; else do nothing and return None.
    A dump that cannot be written (./.graph_dumps is a file, a prefix too long for a file name, a
    read-only folder) is said once, naming the setting and the error; the compile goes on."""
    if summary is None or not config.get("GRAPH_VISUALIZATION"):
        return None
    fmt = config.get("PT_HPU_GRAPH_DUMP_FORMAT")
    prefix = config.get("PT_HPU_GRAPH_DUMP_PREFIX")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{prefix}{name}")
    try:
        os.makedirs(GRAPH_DUMP_DIR, exist_ok=True)
        return dump_graph(summary, os.path.join(GRAPH_DUMP_DIR, f"{safe}.{fmt}"), fmt)
    except OSError as err:
        key = (os.path.abspath(GRAPH_DUMP_DIR), prefix, fmt)
        if key not in _dump_failed:
            _dump_failed.add(key)
            warnings.warn(f"GRAPH_VISUALIZATION=true: cannot write the graph dump "
                          f"{os.path.join(GRAPH_DUMP_DIR, safe)}.{fmt} (PT_HPU_GRAPH_DUMP_PREFIX={prefix!r}; "
                          f"{type(err).__name__}: {err.strerror or err}); a dump that cannot be written is skipped "
                          "(said once), the program runs on", GraphDumpWarning, stacklevel=2)
        return None
