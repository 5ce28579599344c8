"""Static pictures of the live views, for wherever no kernel runs (GitHub, nbviewer, JupyterLab before
the cell is re-run).

A section panel is a live widget. The committed notebooks do not store widget state (it was 98% of
their bytes), and a widget view without its state draws nothing. So the panel is displayed with a
display id, and when its section ends the display is updated to carry, next to the widget view, a
PNG of the panel's main figure: the Timeline, or the Graph for a section about one graph. A live
JupyterLab still draws the widget (it ranks first); any other viewer draws the picture, and
notebooks/run_notebooks.py drops the view from the stored output. Both bundles carry the same
text/plain, so nbval (which sees the first display only) compares equal outputs.

``snapshot(widget)`` does the same for a widget that is static by nature (``widgets.compare``): its
HTML and its pictures, as one text/html output.
"""
from __future__ import annotations

import base64
import html
import io
from typing import Optional

PICTURES = ("timeline", "graph", "none")
VIEW = "application/vnd.jupyter.widget-view+json"
MAX_WIDTH_PX = 1600          # a long timeline is scaled down to this width rather than scrolled
COLORS = 64                  # plots use few colours: a 64-colour palette PNG is ~3x smaller, looks the same
STORED_DPI = 100             # the pictures notebooks store: a 7.5 pt label is 10 px high (at 60 dpi, 6 px)
GREYS = 24                   # grey levels kept for text and antialiased edges


def png_bytes(fig, dpi: int = STORED_DPI, max_width_px: int = MAX_WIDTH_PX, colors: int = COLORS) -> bytes:
    """``fig`` as a palette PNG, at most ``max_width_px`` wide."""
    dpi = min(dpi, max_width_px / fig.get_size_inches()[0])
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return palette(buf.getvalue(), colors)


def palette(png: bytes, colors: int = COLORS) -> bytes:
    """``png`` re-encoded with a palette of at most ``colors`` colours (unchanged without Pillow).

    The palette is the views' own fill colours (common.COLORS, exactly), a grey ramp for text and
    antialiased edges, then the picture's most frequent other colours; every pixel takes its
    nearest entry, undithered. An adaptive (median-cut) palette spent its entries on the greys of
    text and merged distinct fills: the legend's red and orange came out as one colour."""
    try:
        from PIL import Image       # matplotlib depends on Pillow
    except ImportError:
        return png
    img = Image.open(io.BytesIO(png)).convert("RGB")
    counts = sorted(img.getcolors(maxcolors=1 << 24), reverse=True)
    from .common import COLORS as FILLS
    greys = [(round(255 * i / (GREYS - 1)),) * 3 for i in range(GREYS)]
    fills = [tuple(int(h[i:i + 2], 16) for i in (1, 3, 5)) for h in dict.fromkeys(FILLS.values())]
    chosen = list(dict.fromkeys(greys + fills))
    for _, rgb in counts:
        if len(chosen) >= colors:
            break
        if rgb not in chosen:
            chosen.append(rgb)
    pal = Image.new("P", (1, 1))
    pal.putpalette([c for rgb in chosen for c in rgb] + [0, 0, 0] * (256 - len(chosen)))
    out = io.BytesIO()
    img.quantize(palette=pal, dither=Image.Dither.NONE).save(out, format="png", optimize=True)
    return out.getvalue()


def panel_figure(title: str, events: list, picture: str = "timeline"):
    """The figure that stands for a section: its timeline, or its first compiled graph (falling back
    to the timeline when the section compiled none); None for no picture or no events."""
    if picture not in PICTURES:
        raise ValueError(f"picture must be one of {PICTURES}, got {picture!r}")
    if picture == "none" or not events:
        return None
    if picture == "graph":
        from .panel import graphs_seen
        graphs = graphs_seen(events)
        if graphs:
            from .graph_view import draw_graph
            label, summary = graphs[0]
            return draw_graph(summary, title=f"{title}: {label}" if title else label)
    from .timeline import draw_timeline
    return draw_timeline(events, title=f"{title}: host and device timeline" if title else None)


def _text(title: str) -> str:
    return f"<section panel: {title}>" if title else "<section panel>"


def _view(widget, title: str) -> dict:
    """The bundle of a panel's display: its widget's view, and the text/plain nbval compares."""
    return {VIEW: widget._repr_mimebundle_()[VIEW], "text/plain": _text(title)}


def display_panel(panel):
    """Display ``panel`` (a SectionPanel) so that its output can be updated later; the handle. A
    panel whose tabs are not built yet shows its status line, and the whole panel once built (its
    first redraw). Every bundle carries the same text/plain (see the module's docstring)."""
    from IPython.display import display
    handle = display(_view(panel.view(), panel.title), raw=True, display_id=True)
    if not panel.built:
        panel._on_built = lambda: handle.update(_view(panel.widget, panel.title), raw=True)
    return handle


def leave_picture(handle, panel, picture: str = "timeline", dpi: int = STORED_DPI) -> Optional[bytes]:
    """Update the panel's display to carry the picture of its section too; the PNG, or None."""
    drawn = panel.timeline_png() if picture == "timeline" else None
    if drawn is not None:              # the finished panel just drew it: the same picture, not a second draw
        png = palette(drawn)
    else:
        fig = panel_figure(panel.title, list(panel.events), picture)
        if fig is None:
            return None
        png = png_bytes(fig, dpi)
    handle.update({**_view(panel.widget, panel.title), "image/png": base64.b64encode(png).decode("ascii")}, raw=True)
    return png


def static_html(widget) -> str:
    """The HTML of a tree of boxes, HTML widgets and Output widgets holding figures or HTML."""
    import ipywidgets as W
    if isinstance(widget, W.Box):
        return "".join(static_html(c) for c in widget.children)
    if isinstance(widget, (W.HTML, W.HTMLMath)):
        return widget.value
    if isinstance(widget, W.Output):
        parts = []
        for out in widget.outputs:
            data = out.get("data", {})
            if "image/png" in data:
                b64 = base64.b64encode(palette(base64.b64decode(data["image/png"]))).decode("ascii")
                parts.append(f"<img src='data:image/png;base64,{b64}' style='max-width:100%'/>")
            elif "text/html" in data:
                parts.append(data["text/html"])
            elif "text/plain" in data or "text" in out:
                parts.append(f"<pre>{html.escape(data.get('text/plain', out.get('text', '')))}</pre>")
        return "".join(parts)
    return ""                      # controls (buttons, sliders) have no static form


def snapshot(widget):
    """``widget``, displayed with its static HTML alongside the view (see the module's docstring)."""
    def _repr_mimebundle_(**kwargs):
        bundle = type(widget)._repr_mimebundle_(widget, **kwargs)
        return {**bundle, "text/html": static_html(widget)}
    widget._repr_mimebundle_ = _repr_mimebundle_
    return widget
