"""Static pictures of the section panel and of compare (widgets/static.py): what a notebook shows
where no kernel runs, since the committed notebooks store no widget state."""
from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import pytest                            # noqa: E402
from PIL import Image                    # noqa: E402  (matplotlib's own dependency)

import widgets                           # noqa: E402
from hpu_lab import events as ev         # noqa: E402
from test_widgets_fixtures import host_bound_loop  # noqa: E402
from widgets import recording, static    # noqa: E402


def _png_size(png: bytes):
    assert png.startswith(b"\x89PNG"), png[:8]
    return Image.open(io.BytesIO(png)).size


def test_png_is_a_small_palette_png_at_most_max_width():
    fig = widgets.draw_timeline(host_bound_loop(steps=4), title="t")
    full = io.BytesIO()
    fig.savefig(full, format="png", dpi=80)
    png = static.png_bytes(fig, dpi=80)
    assert Image.open(io.BytesIO(png)).mode == "P"
    assert len(png) < len(full.getvalue()) / 2          # the point of the palette
    assert _png_size(png)[0] == pytest.approx(fig.get_size_inches()[0] * 80, abs=2)
    assert _png_size(static.png_bytes(fig, dpi=80, max_width_px=400))[0] <= 400


def test_panel_figure_timeline_graph_none():
    import torch
    import hpu_lab.core as htcore
    with widgets.section("real", display=False) as s:
        y = (torch.ones(3, 4).to("hpu") * 2).relu().sum()
        htcore.mark_step()
    timeline = static.panel_figure("real", s.events)
    assert any(a.get_title(loc="left").startswith("real: host and device timeline") for a in timeline.axes)
    graph = static.panel_figure("real", s.events, "graph")
    assert graph is not timeline and graph.get_size_inches().tolist() != timeline.get_size_inches().tolist()
    assert static.panel_figure("real", s.events, "none") is None
    assert static.panel_figure("real", [], "timeline") is None
    no_graph = [e for e in host_bound_loop(steps=2) if not isinstance(e, (ev.Compile, ev.Launch))]
    assert static.panel_figure("x", no_graph, "graph") is not None      # falls back to the timeline
    with pytest.raises(ValueError, match="picture must be one of"):
        static.panel_figure("x", s.events, "graf")
    with pytest.raises(ValueError, match="picture must be one of"):
        with widgets.section("bad", picture="graf"):
            pass


def test_section_in_a_shell_leaves_its_picture_in_the_same_display():
    """As in a kernel: the panel is displayed with a display id, then that display is updated with
    the PNG; both bundles carry the same text/plain (what nbval compares)."""
    from IPython.testing.globalipapp import get_ipython
    from IPython.utils.capture import capture_output
    get_ipython()
    with capture_output() as cap:
        with widgets.section("pictured", display=True, min_interval=10, picture="timeline"):
            for e in host_bound_loop(steps=3):
                ev.emit(e)
    # shown on entry as its status line, the whole panel once built (the final redraw), then the picture
    first, built, last = cap.outputs
    assert static.VIEW in first.data and "image/png" not in first.data
    assert built.update and last.update
    assert last.transient["display_id"] == built.transient["display_id"] == first.transient["display_id"]
    assert {o.data["text/plain"] for o in cap.outputs} == {"<section panel: pictured>"}
    assert last.data[static.VIEW] == built.data[static.VIEW] != first.data[static.VIEW]
    _png_size(base64.b64decode(last.data["image/png"]))


def test_no_picture_leaves_the_view_alone():
    from IPython.testing.globalipapp import get_ipython
    from IPython.utils.capture import capture_output
    get_ipython()
    with capture_output() as cap:
        with widgets.section("bare", display=True, min_interval=10, picture="none"):
            ev.emit(ev.MarkStep(0, 1, "host", 0))
    # the status line, then the whole panel (built at the final redraw): no picture in either
    assert len(cap.outputs) == 2 and not any("image/png" in o.data for o in cap.outputs)


def test_compare_snapshot_has_the_table_and_the_picture():
    a = recording.Section("lazy")
    a.events = host_bound_loop(steps=3)
    box = static.snapshot(widgets.compare([a, ("other", host_bound_loop(steps=2))]))
    bundle = box._repr_mimebundle_()
    assert static.VIEW in bundle
    html = bundle["text/html"]
    assert "<table" in html and "lazy" in html
    b64 = html.split("data:image/png;base64,")[1].split("'")[0]
    _png_size(base64.b64decode(b64))
