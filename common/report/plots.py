"""What the paper's figures share: a figure on an Agg canvas, :func:`save` (PNG and PDF), the seed bands and lines.

The figures themselves, one function each, sit beside this module, grouped by what they draw:
:mod:`common.report.plots_ag` (AG in trained networks: figures 1-4, 8 and 9), :mod:`common.report.plots_growth`
(growing a network: figures 5, 6, 10 and 11) and :mod:`common.report.plots_scaling` (weight scaling: figure 7).
Every figure function takes pandas DataFrames with the columns its docstring names (built from the run
records by :mod:`common.experiments.make_figures`) and returns a :class:`matplotlib.figure.Figure`
drawn on an Agg canvas (:func:`new_figure`): no pyplot, no display, no global state, so it works in batch jobs and
leaves a notebook's backend alone. :func:`save` writes PNG and PDF.

Several seeds at one depth: the line is the mean, the shaded band spans the seeds' minimum to
maximum, and each seed is a faint dot (:func:`seed_band`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, NullFormatter

LINE_STYLE = {"color": "0.3", "linestyle": "--", "linewidth": 1.0}
READINGS = (  # AGmax's two normalisations (docs/decisions.md)
    ("ag_max", "AGmax, batch-mean AG_l at the probe batch size"),
    ("ag_max_per_example", "AGmax, per-example RMS"),
)
DPI = 110


def new_figure(width: float, height: float) -> Figure:
    """A figure on an Agg canvas (PNG through Agg, PDF through matplotlib's PDF backend on save)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, folder: str | Path, stem: str) -> list[Path]:
    """``<folder>/<stem>.png`` and ``.pdf``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}.png", folder / f"{stem}.pdf"]
    thin_log_labels(fig)
    fig.draw_without_rendering()  # the constrained layout, once: then both formats keep its positions
    fig.set_layout_engine("none")
    for path in paths:
        fig.savefig(path)
    return paths


def thin_log_labels(fig: Figure) -> None:
    """Log-axis labels as plain text ("0.01", "1e-05"), not mathtext, and no minor-tick labels on an axis
    spanning two labelled decades: the tick labels were most of the drawing time."""
    for ax in fig.axes:
        for axis, scale, limits in (
            (ax.xaxis, ax.get_xscale(), ax.get_xlim()),
            (ax.yaxis, ax.get_yscale(), ax.get_ylim()),
        ):
            if scale != "log":
                continue
            low, high = sorted(limits)
            majors = [t for t in axis.get_majorticklocs() if low <= t <= high]
            axis.set_major_formatter(LogFormatter())
            axis.set_minor_formatter(NullFormatter() if len(majors) >= 2 else LogFormatter(labelOnlyBase=False))


def seed_band(ax, df: pd.DataFrame, x: str, y: str, label: str, **style) -> None:
    """Mean of ``y`` over seeds against ``x``, a min-max band when a depth has several seeds, every seed a dot."""
    df = df.dropna(subset=[y])
    if df.empty:
        return
    grouped = df.groupby(x)[y].agg(["mean", "min", "max", "count"]).sort_index()
    (line,) = ax.plot(grouped.index, grouped["mean"], marker="o", markersize=3.5, label=label, **style)
    if (grouped["count"] > 1).any():
        ax.fill_between(grouped.index, grouped["min"], grouped["max"], color=line.get_color(), alpha=0.2, linewidth=0)
        ax.plot(df[x], df[y], linestyle="none", marker=".", color=line.get_color(), alpha=0.35)


def low_signal_line(ax, line: float) -> None:
    ax.axhline(line, **LINE_STYLE, label=f"{line:g}: the paper's low-signal line")


def seeds_note(df: pd.DataFrame, column: str = "seed") -> str:
    seeds = sorted(df[column].dropna().unique()) if column in df else []
    return f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}" + (" (mean, band: min-max)" if len(seeds) > 1 else "")
