"""The recompilation log: every compile with its reason, and recipe-cache hits/misses per step.

    recompile_rows(events)   # [{"time_ms", "step", "key", "nodes", "reason", "src", ...}, ...]
    cache_per_step(events)   # [{"step": 0, "hits": 0, "misses": 1}, ...]
    recompiles_html(events)  # both as HTML tables (recompiles highlighted)
"""
from __future__ import annotations

import html
from typing import Dict, List, Sequence

from hpu_lab import events as ev

from .common import ms, ns_origin, pretty_src, short_key

FIRST = "first compile"


def is_recompile(c: ev.Compile) -> bool:
    """Any compile whose reason is not "first compile": the cache had a recipe for this call
    site, but the new graph differs (shape, dtype, op, constant...)."""
    return c.reason != FIRST


def recompile_rows(events: Sequence[ev.Event]) -> List[dict]:
    """One row per Compile event, in time order; times in ms since the first event of the list."""
    t0 = ns_origin(events)
    rows = []
    for c in sorted((e for e in events if isinstance(e, ev.Compile)), key=lambda e: e.t_start):
        rows.append({
            "time_ms": round(ms(c.t_start, t0), 3),
            "step": c.step,
            "key": short_key(c.key),
            "nodes": c.node_count,
            "reason": c.reason,
            "src": pretty_src(c.src),
            "compile_ms": round(c.duration_ns / 1e6, 3),
            "recompile": is_recompile(c),
        })
    return rows


def cache_per_step(events: Sequence[ev.Event]) -> List[dict]:
    """Recipe-cache hits and misses per step (steps without a lookup are left out)."""
    per: Dict[int, dict] = {}
    for e in events:
        if isinstance(e, ev.CacheLookup):
            row = per.setdefault(e.step, {"step": e.step, "hits": 0, "misses": 0})
            row["hits" if e.hit else "misses"] += 1
    return [per[s] for s in sorted(per)]


def _runs(per_step: List[dict]) -> List[dict]:
    """Consecutive steps with the same hits and misses as one row ("2\u201357"), for display."""
    out: List[dict] = []
    for r in per_step:
        last = out[-1] if out else None
        if last and (last["hits"], last["misses"]) == (r["hits"], r["misses"]) and last["_hi"] == r["step"] - 1:
            last["_hi"] = r["step"]
            last["steps"] = f"{last['_lo']}\u2013{r['step']}"
        else:
            out.append({"steps": str(r["step"]), "hits": r["hits"], "misses": r["misses"],
                        "_lo": r["step"], "_hi": r["step"]})
    return out


_CSS = ("<style>.hpu-t{border-collapse:collapse;font-size:12px;margin:4px 0 10px 0}"
        ".hpu-t th,.hpu-t td{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}"
        ".hpu-t th{background:#f3f3f3}.hpu-t tr.re td{background:#fdecea}"
        ".hpu-t td.n{text-align:right;font-variant-numeric:tabular-nums}</style>")


def table_html(rows: List[dict], columns: List[tuple], row_class=None) -> str:
    """A plain HTML table: ``columns`` = [(key, header, numeric?), ...]."""
    # inline alignment: JupyterLab's own table style (right-aligned cells) wins over a class rule
    def align(num):
        return ' style="text-align:right"' if num else ' style="text-align:left"'
    head = "".join(f"<th{align(num)}>{html.escape(h)}</th>" for _, h, num in columns)
    body = []
    for r in rows:
        cls = f' class="{row_class(r)}"' if row_class and row_class(r) else ""
        cells = "".join(f"<td{align(num)}>{html.escape(str(r[k]))}</td>" for k, _, num in columns)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f'<table class="hpu-t"><tr>{head}</tr>{"".join(body)}</table>'


def recompiles_html(events: Sequence[ev.Event]) -> str:
    rows = recompile_rows(events)
    n_re = sum(r["recompile"] for r in rows)
    out = [_CSS, f"<b>{len(rows)} compile{'s' if len(rows) != 1 else ''}</b>, "
                 f"<b style='color:#c0392b'>{n_re} recompile{'s' if n_re != 1 else ''}</b> "
                 "(red rows: the cache had a recipe for this call site but the graph changed; the reason "
                 "says what changed)"]
    if rows:
        out.append(table_html(rows, [("time_ms", "time (ms)", True), ("step", "step", True),
                                     ("key", "recipe key", False), ("nodes", "nodes", True),
                                     ("compile_ms", "compile (ms)", True), ("reason", "reason", False),
                                     ("src", "where", False)],
                              row_class=lambda r: "re" if r["recompile"] else ""))
    cache = cache_per_step(events)
    if cache:
        hits = sum(r["hits"] for r in cache)
        misses = sum(r["misses"] for r in cache)
        out.append(f"<b>Recipe cache</b>: {hits} hits, {misses} misses")
        out.append(table_html(_runs(cache), [("steps", "steps", True), ("hits", "hits per step", True),
                                             ("misses", "misses per step", True)],
                              row_class=lambda r: "re" if r["misses"] else ""))
    else:
        out.append("<p>No recipe-cache lookups in this section.</p>")
    return "".join(out)
