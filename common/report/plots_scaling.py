"""The weight-scaling figure: Cohen et al.'s statistics of the trained weights against depth (script 07).

Figure 7, drawn with :mod:`common.report.plots` (a tidy table of run records in, a matplotlib ``Figure`` out).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from common.report.plots import new_figure

SCALING_PANELS = {  # family -> (tensor, statistic, exponent row shown) per curve
    "fc-tanh": (("A", "cumsum_norm", "beta"), ("A", "max_norm", "max_norm_exponent"), ("delta", "max_norm", "alpha")),
    "fc-relu": (
        ("delta_A", "cumsum_norm", "alpha_plus_beta"),
        ("delta_A", "max_norm", "alpha_plus_beta_max_norm"),
        ("A", "max_norm", "max_norm_exponent"),
    ),
    "sweep": (
        ("A", "max_norm", "max_norm_exponent"),
        ("delta", "max_norm", "max_norm_exponent"),
        ("A", "root_sum_squares", "rss_slope"),
    ),
}


def weight_scaling(records: pd.DataFrame, exponents: pd.DataFrame, *, panels: Sequence[tuple[str, str]]) -> Figure:
    """Figure 7: weight-scaling statistics against depth, log-log, with the fitted lines and exponents.

    ``records``: 07's per-depth records (``family``, ``dataset``, ``stage``, ``tensor``, ``norm``,
    ``depth`` and the statistics); ``exponents``: its exponent rows (``estimate``, ``slope``,
    ``intercept``, ``status``); ``panels``: ``(family, dataset)`` pairs, one panel each (Frobenius norm;
    the sweep's stages as separate curves).
    """
    fig = new_figure(4.3 * len(panels), 4.0)
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (family, dataset) in zip(axes, panels, strict=True):
        mine = records[(records["family"] == family) & (records["dataset"] == dataset) & (records["norm"] == "fro")]
        fits = exponents[
            (exponents["family"] == family) & (exponents["dataset"] == dataset) & (exponents["norm"] == "fro")
        ]
        curve = 0
        for tensor, statistic, exponent in SCALING_PANELS["sweep" if family == "sweep" else family]:
            for stage in sorted(mine["stage"].unique()):
                points = mine[(mine["tensor"] == tensor) & (mine["stage"] == stage)].dropna(subset=[statistic])
                points = points[points[statistic] > 0]
                if points.empty:
                    continue
                color = f"C{curve % 10}"
                curve += 1
                fit = fits[(fits["tensor"] == tensor) & (fits["stage"] == stage) & (fits["exponent"] == exponent)]
                label = f"{tensor} {statistic}" + (f", stage {stage}" if family == "sweep" else "")
                if len(fit) and fit["status"].iloc[0] == "ok":
                    f = fit.iloc[0]
                    label += f": {exponent} = {f['estimate']:.2f}"
                    grid = np.geomspace(points["depth"].min(), points["depth"].max(), 20)
                    ax.plot(grid, np.exp(f["intercept"]) * grid ** f["slope"], color=color, linewidth=0.8)
                else:
                    label += ": not fitted"
                means = points.groupby("depth")[statistic].mean()
                ax.plot(
                    means.index,
                    means.to_numpy(),
                    linestyle="none",
                    marker="o",
                    markersize=3.5,
                    color=color,
                    label=label,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("depth L (sweep: blocks per stage)")
        ax.set_ylabel("statistic (Frobenius)")
        ax.set_title(f"{family} ({dataset})", fontsize=9)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3, which="both")
    return fig
