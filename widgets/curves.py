"""Curves of hpu_lab.lab (recorded runs on the Gaudi clock) as matplotlib Figures.

    c = hpu_lab.lab.width_curve([512, 1024, 2048, 4096], batch=128)
    widgets.draw_step_curve(c)             # step time against width, lazy and replay, one panel per card
    b = hpu_lab.lab.batch_curve([64, 256, 1024, 4096], width=1024)
    widgets.draw_throughput(b)             # samples/s against batch, one line per card

The figures only read the Curve: the data functions live in hpu_lab/lab/curves.py. Each panel
marks where the lazy loop turns device-bound (and, with replay points, where a replay stops
paying), and says the figures are modeled.
"""
from __future__ import annotations

_CARD_COLORS = {"gaudi": "#1f77b4", "gaudi2": "#d62728", "gaudi3": "#2ca02c"}
_CARD_STYLE = {"gaudi": ("-", "o"), "gaudi2": ("--", "s"), "gaudi3": (":", "^")}   # lines that overlap stay visible
_MODE_STYLE = {"lazy": "-o", "replay": "--s"}


def draw_step_curve(curve, below: float = 1.5):
    """One panel per card: wall, host and device time a step against the curve's size (log-log)."""
    from matplotlib.figure import Figure
    cards = curve.cards
    fig = Figure(figsize=(4.2 * len(cards), 3.6), layout="constrained")
    axes = fig.subplots(1, len(cards), sharey=True, squeeze=False)[0]
    modes = list(dict.fromkeys(p.mode for p in curve.points))
    for ax, card in zip(axes, cards):
        color = _CARD_COLORS.get(card, "black")
        for mode in modes:
            s = curve.series(card, mode)
            ax.plot([p.size for p in s], [p.wall_ms for p in s], _MODE_STYLE.get(mode, "-"), color=color,
                    label=f"{mode}: wall")
        lazy = curve.series(card, "lazy")
        if lazy:
            ax.plot([p.size for p in lazy], [p.host_ms for p in lazy], ":", color="gray", label="host work (lazy)")
            ax.plot([p.size for p in lazy], [p.device_ms for p in lazy], "-.", color="black", label="device (lazy)")
        x = curve.crossover(card) if lazy else None
        if x is not None:
            ax.axvline(x, color=color, alpha=0.3, lw=6, label="lazy device-bound from here")
        if "replay" in modes and lazy:
            stop = curve.graphs_stop_paying(card, below)
            if stop is not None:
                ax.axvline(stop, color="black", ls="--", lw=1, label=f"replay < {below:g}x faster from here")
        ax.legend(fontsize=7, loc="lower right")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(card, fontsize=10)
        ax.set_xlabel(curve.x_name)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ms a step (modeled, Gaudi clock)")
    return fig


def draw_throughput(curve, mode: str = "lazy"):
    """Samples a second against batch size, one line per card; hollow markers where device-bound."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    for card in curve.cards:
        s = curve.series(card, mode)
        color = _CARD_COLORS.get(card, "black")
        line, marker = _CARD_STYLE.get(card, ("-", "o"))
        ax.plot([p.size for p in s], [p.samples_per_s for p in s], line, color=color, label=card)
        for p in s:
            ax.plot(p.size, p.samples_per_s, marker, color=color,
                    markerfacecolor="white" if p.verdict == "device-bound" else color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(curve.x_name)
    ax.set_ylabel("samples/s (modeled, Gaudi clock)")
    ax.set_title(f"{mode} mode; hollow: device-bound", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig
