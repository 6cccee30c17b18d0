"""The growth figures: growth against scratch, the matched insertion, and growth by the criterion (script 09).

Figures 5, 6, 10, 11 and 12 (the sweep at equal epochs and at equal FLOPs, what 09's claims against the never-grown
ResNet-8 depend on), one function each, drawn with :mod:`common.report.plots` (a tidy table of run records in,
a matplotlib ``Figure`` out).
"""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from common.report.plots import LINE_STYLE, new_figure, seed_band, seeds_note


# ----------------------------------------------------------------------------- figure 5
def growth_bars(table: pd.DataFrame, *, dataset: str) -> Figure:
    """Figure 5: growth against scratch, train and test loss per architecture and their mean, the paper's means beside.

    ``table``: the rows of script 03's table (``model``, ``growth_train_loss`` (``_std``),
    ``scratch_train_loss``, ``growth_test_loss``, ``scratch_test_loss``, ``paper_*``, ``seeds``).
    """
    fig = new_figure(9.0, 3.8)
    axes = fig.subplots(1, 2)
    x = np.arange(len(table))
    width = 0.27
    for ax, metric in zip(axes, ("train_loss", "test_loss"), strict=True):
        for offset, method, color in ((-width, "growth", "C0"), (0.0, "scratch", "C1")):
            err = table.get(f"{method}_{metric}_std")
            err = None if err is None or err.isna().all() else err.fillna(0).to_numpy()
            ax.bar(x + offset, table[f"{method}_{metric}"], width, yerr=err, color=color, label=method, capsize=2)
        for offset, method, color in ((width, "growth", "C0"), (2 * width, "scratch", "C1")):
            paper = pd.to_numeric(table[f"paper_{method}_{metric}"], errors="coerce")
            shown = paper.notna().to_numpy()
            if shown.any():
                ax.bar(
                    (x + offset)[shown],
                    paper[shown],
                    width,
                    color="white",
                    edgecolor=color,
                    hatch="//",
                    label=f"paper, {method}",
                )
        ax.set_xticks(x, table["model"], fontsize=8)
        ax.set_ylabel(metric.replace("_", " "))
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    seeds = int(table["seeds"].iloc[0]) if "seeds" in table and len(table) else 0
    axes[0].set_title(f"growth vs scratch, {dataset}, {seeds} seed(s); hatched: the paper's CIFAR-10 means", fontsize=9)
    return fig


# ----------------------------------------------------------------------------- figure 6
def matched_insertion(rows: pd.DataFrame, *, paper: dict[int, float], alpha: float) -> Figure:
    """Figure 6: matched insertion, measured against predicted training-loss drop, and the drop against depth.

    ``rows``: ``depth_label``, ``seed``, ``alpha``, ``measured_change``, ``predicted_change``. ``paper``:
    depth d of ResNet-d -> the paper's drop at ``alpha``.
    """
    fig = new_figure(10.0, 4.2)
    ax_pred, ax_depth = fig.subplots(1, 2)
    drops = rows.assign(measured=-rows["measured_change"], predicted=-rows["predicted_change"])
    shown = drops[(drops["measured"] > 0) & (drops["predicted"] > 0)]
    for i, (depth, group) in enumerate(shown.groupby("depth_label")):
        ax_pred.scatter(group["predicted"], group["measured"], s=18, color=f"C{i % 10}", label=f"ResNet-{depth}")
    if len(shown):
        lo, hi = shown[["measured", "predicted"]].min().min(), shown[["measured", "predicted"]].max().max()
        ax_pred.plot([lo / 2, hi * 2], [lo / 2, hi * 2], **LINE_STYLE, label="measured = predicted")
        ax_pred.set_xscale("log")
        ax_pred.set_yscale("log")
    hidden = len(drops) - len(shown)
    ax_pred.set_title(
        "measured vs first-order predicted drop" + (f" ({hidden} rows with no drop not shown)" if hidden else ""),
        fontsize=9,
    )
    ax_pred.set_xlabel("predicted drop, alpha ||Pi g||^2 / n")
    ax_pred.set_ylabel("measured drop of the training loss")
    ax_pred.legend(fontsize=7)
    at_alpha = drops[np.isclose(drops["alpha"], alpha)]
    seed_band(ax_depth, at_alpha, "depth_label", "measured", f"reproduced, alpha = {alpha:g}")
    ax_depth.scatter(
        sorted(paper),
        [paper[d] for d in sorted(paper)],
        marker="s",
        facecolor="none",
        edgecolor="k",
        zorder=3,
        label="the paper (H.1)",
    )
    ax_depth.set_yscale("log")
    ax_depth.set_xlabel("d of ResNet-d")
    ax_depth.set_ylabel("training-loss drop right after insertion")
    ax_depth.set_title(f"drop against depth ({seeds_note(at_alpha)})", fontsize=9)
    ax_depth.legend(fontsize=7)
    for ax in (ax_pred, ax_depth):
        ax.grid(alpha=0.3)
    return fig


# ----------------------------------------------------------------------------- figures 10 and 11 (script 09)
POLICY_COLORS = {"criterion": "C0", "ag": "C2", "cyclic": "C1", "random": "C3", "none": "0.5", "scratch": "C4"}


def grow_vs_compute(curves: pd.DataFrame, probes: pd.DataFrame, sweep: pd.DataFrame, *, dataset: str) -> Figure:
    """Figure 10: growth by the criterion (09). Left: clean training loss against cumulative training FLOPs, one
    line per run coloured by arm (every arm ends at the same budget B), the sweep's runs (01) as points labelled N.
    Right: the controller's statistic ``max V_S,l / max V_b`` at each probe against the FLOPs spent, one line per
    policy run, the stop rule's constant dashed.

    ``curves``: ``policy``, ``seed``, ``train_flops``, ``train_loss`` per point; ``probes``: ``policy``, ``seed``,
    ``flops_cum``, ``ratio`` per probe; ``sweep``: ``depth_n``, ``flops``, ``train_loss`` per run (empty: no points).
    """
    fig = new_figure(9.5, 3.8)
    axes = fig.subplots(1, 2)
    for (policy, seed), run in curves.groupby(["policy", "seed"], sort=True):
        first = seed == curves[curves["policy"] == policy]["seed"].min()
        axes[0].plot(run["train_flops"], run["train_loss"], "-", color=POLICY_COLORS.get(policy, "0.4"),
                     linewidth=0.9, alpha=0.8, label=policy if first else None)  # fmt: skip
    if len(sweep):
        points = sweep.groupby("depth_n")[["flops", "train_loss"]].mean()
        axes[0].scatter(points["flops"], points["train_loss"], marker="s", color="k", s=14, label="sweep (01)")
        for n, row in points.iterrows():
            axes[0].annotate(f"N={int(n)}", (row["flops"], row["train_loss"]), fontsize=6, xytext=(3, 3),
                             textcoords="offset points")  # fmt: skip
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("cumulative training FLOPs")
    axes[0].set_ylabel("clean training loss")
    axes[0].legend(fontsize=7)
    axes[0].set_title(f"growth within one budget, {dataset}: {_mean_note(curves).split(' (')[0]}", fontsize=9)
    for (policy, _), run in probes.groupby(["policy", "seed"], sort=True):
        axes[1].plot(run["flops_cum"], run["ratio"], "o-", color=POLICY_COLORS.get(policy, "0.4"), markersize=3,
                     linewidth=0.8, alpha=0.8)  # fmt: skip
    axes[1].axhline(1.0, color="k", linestyle="--", linewidth=0.8)
    axes[1].set_xlabel("training FLOPs at the probe")
    axes[1].set_ylabel("max V_S,l / max V_b")
    axes[1].set_title("the stop rule's statistic at each probe (dashed: its constant)", fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig


def grow_choices(probes: pd.DataFrame, *, dataset: str) -> Figure:
    """Figure 11: which candidate each policy chose, probe by probe (09): one panel per policy, x the probe, y the
    candidate by name in the network's order (``block0.in`` .. ``blockN.in``, then ``head.in``: an index shifts as
    blocks are inserted, a name keeps its place below the head), one marker per seed, offset a little to stay apart.

    ``probes``: one row per (policy, seed, probe) with ``round`` (the probe) and ``chosen_candidate``."""
    grown = probes.dropna(subset=["chosen_candidate"])
    policies = sorted(grown["policy"].unique()) or ["(none)"]
    names = sorted(grown["chosen_candidate"].unique(), key=_candidate_order)
    place = {name: i for i, name in enumerate(names)}
    fig = new_figure(min(3.0 * len(policies), 12.0), 1.2 + 0.28 * max(len(names), 4))
    axes = np.atleast_1d(fig.subplots(1, len(policies), sharey=True))
    seeds = sorted(grown["seed"].unique())
    for ax, policy in zip(axes, policies, strict=True):
        rows = grown[grown["policy"] == policy]
        for j, seed in enumerate(seeds):
            mine = rows[rows["seed"] == seed].sort_values("round")
            offset = 0.12 * (j - (len(seeds) - 1) / 2)
            y = [place[c] for c in mine["chosen_candidate"]]
            ax.plot(mine["round"] + offset, y, "o-", color=POLICY_COLORS.get(policy, "0.4"), alpha=0.6,
                    markersize=4, linewidth=0.7)  # fmt: skip
        ax.set_title(policy, fontsize=9)
        ax.set_xlabel("probe")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_yticks(range(len(names)), names, fontsize=7)
    axes[0].set_ylabel("candidate chosen")
    fig.suptitle(f"where each probe's block went, {dataset}: one line per seed", fontsize=9)
    return fig


# ----------------------------------------------------------------------------- figure 12 (the sweep, for 09)
def sweep_equal_flops(means: pd.DataFrame, *, dataset: str, seeds: int) -> Figure:
    """Figure 12: the ResNet sweep's running training loss, mean over seeds, one line per depth, against the epoch
    (left: equal epochs) and against cumulative training FLOPs (right: equal FLOPs), the shallowest depth's total
    FLOPs dashed (:mod:`common.report.sweep_compute`).

    ``means``: ``depth_n``, ``epoch``, ``train_flops``, ``train_loss`` (:func:`common.report.sweep_compute.mean_curves`).
    """
    fig = new_figure(9.5, 3.8)
    axes = fig.subplots(1, 2, sharey=True)
    depths = sorted(means["depth_n"].unique())
    colors = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, max(len(depths), 2)))
    for color, n in zip(colors, depths, strict=False):
        curve = means[means["depth_n"] == n].sort_values("epoch")
        for ax, x in zip(axes, ("epoch", "train_flops"), strict=True):
            ax.plot(curve[x], curve["train_loss"], color=color, linewidth=0.9, label=f"N={int(n)}")
    shallowest = means[means["depth_n"] == depths[0]]["train_flops"].max() if depths else None
    if shallowest:
        axes[1].axvline(shallowest, **LINE_STYLE, label=f"N={int(depths[0])}'s total")
    axes[0].set_xlabel("epoch (each run on its own schedule)")
    axes[1].set_xlabel("cumulative training FLOPs")
    axes[1].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("running training loss")
    axes[0].set_title(
        f"the sweep at equal epochs, {dataset}, {seeds} seed{'s' if seeds != 1 else ''} (mean)", fontsize=9
    )
    axes[1].set_title("the same runs at equal training FLOPs", fontsize=9)
    axes[1].legend(fontsize=7, ncol=2)
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig


def _candidate_order(name: str) -> tuple[int, int, str]:
    """``blockK.in`` by K, then any other name (``head.in``) after them."""
    match = re.fullmatch(r"block(\d+)\.in", str(name))
    return (0, int(match.group(1)), "") if match else (1, 0, str(name))


def _mean_note(df: pd.DataFrame) -> str:
    n = df["seed"].nunique() if "seed" in df else 0
    return f"{n} seed{'s' if n != 1 else ''}" + (" (mean; faint: each seed)" if n > 1 else "")
