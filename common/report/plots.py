"""The paper's figures, one function each: tidy tables of run records in, a matplotlib ``Figure`` out.

Every function takes pandas DataFrames with the columns its docstring names (built from the run
records by :mod:`common.experiments.make_figures`) and returns a :class:`matplotlib.figure.Figure`
drawn on an Agg canvas: no pyplot, no display, no global state, so it works in batch jobs and
leaves a notebook's backend alone. :func:`save` writes PNG and PDF.

Several seeds at one depth: the line is the mean, the shaded band spans the seeds' minimum to
maximum, and each seed is a faint dot.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, MaxNLocator, NullFormatter

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


# ----------------------------------------------------------------------------- figure 1
def ag_vs_depth(
    probe: pd.DataFrame,
    sweep: pd.DataFrame,
    *,
    dataset: str,
    line: float,
    setting: str = "",
    fit_target: float | None = None,
) -> Figure:
    """Figure 1: AGmax against depth N (log y, both normalisations, the low-signal line); test loss and accuracy below.

    ``probe``: ``depth_n``, ``seed``, ``ag_max``, ``ag_max_per_example``; ``sweep``: ``depth_n``,
    ``seed``, ``test_loss``, ``test_acc`` (every trained depth, probed or not), and ``train_loss``: with a
    ``fit_target``, a depth where a run ended above it (it did not fit) is marked by a grey band on every panel.
    """
    fig = new_figure(6.4, 7.0)
    ax_ag, ax_loss, ax_acc = fig.subplots(3, 1, sharex=True, height_ratios=(2.2, 1, 1))
    unfit = []
    if fit_target is not None and "train_loss" in sweep:
        unfit = sorted({float(n) for n in sweep.loc[sweep["train_loss"] > fit_target, "depth_n"]})
    for ax in (ax_ag, ax_loss, ax_acc):
        for i, n in enumerate(unfit):
            label = f"did not fit (a run's training loss > {fit_target:g})" if ax is ax_ag and i == 0 else None
            ax.axvspan(n - 0.35, n + 0.35, color="0.85", zorder=0, label=label)
    for column, label in READINGS:
        seed_band(ax_ag, probe, "depth_n", column, label)
    low_signal_line(ax_ag, line)
    ax_ag.set_yscale("log")
    ax_ag.set_ylabel("AGmax")
    ax_ag.legend(fontsize=7)
    ax_ag.set_title(f"AGmax against depth, {dataset} ({setting}; {seeds_note(probe)})", fontsize=9)
    seed_band(ax_loss, sweep, "depth_n", "test_loss", "test loss")
    ax_loss.set_ylabel("test loss")
    seed_band(ax_acc, sweep, "depth_n", "test_acc", "test accuracy", color="C2")
    ax_acc.set_ylabel("test accuracy")
    ax_acc.set_xlabel("N, extra blocks (ResNet-(8+N))")
    ax_acc.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (ax_ag, ax_loss, ax_acc):
        ax.grid(alpha=0.3)
    return fig


# ----------------------------------------------------------------------------- figure 2
def ag_heatmap(candidates: pd.DataFrame, *, dataset: str) -> Figure:
    """Figure 2: ``AG_l`` per candidate as a heat map, depth N (rows) by candidate index (columns), both normalisations.

    ``candidates``: ``depth_n``, ``index``, ``ag_norm``, ``per_example_rms`` (mean over seeds; a
    ResNet-(8+N) has 4 + N candidates, the rest of its row is blank).
    """
    fig = new_figure(10.0, 4.6)
    axes = fig.subplots(1, 2)
    for ax, (column, title) in zip(
        axes, (("ag_norm", "AG_l, batch-mean"), ("per_example_rms", "per-example RMS")), strict=True
    ):
        grid = candidates.pivot_table(index="depth_n", columns="index", values=column, aggfunc="mean").sort_index()
        values = np.ma.masked_invalid(grid.to_numpy(dtype=float))
        positive = values.compressed()
        positive = positive[positive > 0]
        norm = LogNorm(vmin=positive.min(), vmax=positive.max()) if positive.size else None
        image = ax.imshow(values, aspect="auto", origin="lower", interpolation="nearest", norm=norm, cmap="viridis")
        step = max(1, len(grid.index) // 12)
        ax.set_yticks(range(0, len(grid.index), step), [str(n) for n in grid.index[::step]])
        cstep = max(1, len(grid.columns) // 12)
        ax.set_xticks(range(0, len(grid.columns), cstep), [str(c) for c in grid.columns[::cstep]])
        ax.set_xlabel("candidate l (0: stem output; last: the head's input)")
        ax.set_ylabel("N, extra blocks")
        ax.set_title(f"{title}, {dataset}", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.9)
    return fig


# ----------------------------------------------------------------------------- figure 3
def gpt2_depth(gpt: pd.DataFrame, *, line: float) -> Figure:
    """Figure 3: GPT-2, AGmax (both normalisations) and validation loss against the number of blocks L.

    ``gpt``: ``n_layer``, ``seed``, ``ag_max``, ``ag_max_per_example``, ``val_loss``.
    """
    fig = new_figure(6.0, 5.4)
    ax_ag, ax_loss = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    seed_band(ax_ag, gpt, "n_layer", "ag_max", "AGmax, batch-mean AG_l (probe batch of sequences)")
    seed_band(ax_ag, gpt, "n_layer", "ag_max_per_example", "AGmax, per-sequence RMS")
    low_signal_line(ax_ag, line)
    ax_ag.set_yscale("log")
    ax_ag.set_ylabel("AGmax")
    ax_ag.legend(fontsize=7)
    ax_ag.set_title(f"GPT-2 depth sweep ({seeds_note(gpt)})", fontsize=9)
    seed_band(ax_loss, gpt, "n_layer", "val_loss", "validation loss", color="C3")
    ax_loss.set_ylabel("validation loss")
    ax_loss.set_xlabel("L, decoder blocks")
    ax_loss.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (ax_ag, ax_loss):
        ax.grid(alpha=0.3)
    return fig


# ----------------------------------------------------------------------------- figure 4
def pythia(models: pd.DataFrame, candidates: pd.DataFrame, *, line: float) -> Figure:
    """Figure 4: probed decoders (Pythia): AG per layer for each model, AGmax across models, Block Influence beside AG.

    ``models``: ``model``, ``n_layer``, ``ag_max``, ``ag_max_per_example``; ``candidates``: ``model``,
    ``n_layer``, ``index``, ``ag_norm``, ``block_influence`` (None for the last candidate).
    """
    fig = new_figure(13.0, 4.2)
    ax_layers, ax_max, ax_bi = fig.subplots(1, 3)
    order = models.sort_values("n_layer")["model"].tolist()
    for i, name in enumerate(order):
        rows = candidates[candidates["model"] == name].sort_values("index")
        depth = rows["n_layer"].iloc[0] if len(rows) else 1
        color = f"C{i % 10}"
        ax_layers.plot(rows["index"] / depth, rows["ag_norm"], marker=".", color=color, label=name)
        bi = rows.dropna(subset=["block_influence"])
        ax_bi.plot(bi["index"] / depth, bi["block_influence"], marker=".", color=color, label=name)
    ax_layers.set_yscale("log")
    low_signal_line(ax_layers, line)
    ax_layers.set_xlabel("candidate l / number of blocks")
    ax_layers.set_ylabel("AG_l (batch-mean)")
    ax_layers.set_title("AG per layer", fontsize=9)
    ax_layers.legend(fontsize=6)
    ordered = models.sort_values("n_layer")
    for column, label in READINGS:
        ax_max.plot(ordered["n_layer"], ordered[column], marker="o", label=label)
    for _, row in ordered.iterrows():
        ax_max.annotate(
            str(row["model"]).split("/")[-1],
            (row["n_layer"], row["ag_max"]),
            fontsize=6,
            xytext=(3, 3),
            textcoords="offset points",
        )
    low_signal_line(ax_max, line)
    ax_max.set_yscale("log")
    ax_max.set_xlabel("number of blocks")
    ax_max.set_ylabel("AGmax")
    ax_max.set_title("AGmax across models", fontsize=9)
    ax_max.legend(fontsize=6)
    ax_bi.set_xlabel("candidate l / number of blocks")
    ax_bi.set_ylabel("Block Influence (1 - cos(z_l, z_l+1))")
    ax_bi.set_title("Block Influence beside AG", fontsize=9)
    for ax in (ax_layers, ax_max, ax_bi):
        ax.grid(alpha=0.3)
    return fig


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


# ----------------------------------------------------------------------------- figure 7
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


# ----------------------------------------------------------------------------- figure 8
def growth_value_vs_ag(candidates: pd.DataFrame) -> Figure:
    """Figure 8: the exact growth value ``V_S,l`` against ``AG_l`` per candidate, log-log, with the diagonal.

    ``candidates``: ``source`` (one colour each: a ResNet dataset, GPT-2, ...), ``ag_norm``,
    ``growth_value``. Projection cannot increase the norm: every point lies on or below the diagonal.
    """
    fig = new_figure(5.6, 5.0)
    ax = fig.subplots()
    shown = candidates[(candidates["ag_norm"] > 0) & (candidates["growth_value"] > 0)]
    for i, (source, group) in enumerate(shown.groupby("source")):
        ax.scatter(
            group["ag_norm"],
            group["growth_value"],
            s=12,
            alpha=0.7,
            color=f"C{i % 10}",
            label=f"{source} ({len(group)})",
        )
    if len(shown):
        lo, hi = shown[["ag_norm", "growth_value"]].min().min(), shown[["ag_norm", "growth_value"]].max().max()
        ax.plot([lo / 2, hi * 2], [lo / 2, hi * 2], **LINE_STYLE, label="V_S,l = AG_l (realizability)")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("AG_l (batch-mean)")
    ax.set_ylabel("V_S,l, exact growth value (same normalisation)")
    ax.set_title("exact growth value against AG, every candidate of the exact runs", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    return fig


# ----------------------------------------------------------------------------- figure 9
def ag_vs_train_loss(probe: pd.DataFrame) -> Figure:
    """Figure 9: AGmax against each run's final training loss, across depths (colour) and datasets (marker).

    ``probe``: ``dataset``, ``depth_n``, ``train_loss``, ``ag_max``, ``ag_max_per_example``.
    """
    fig = new_figure(10.0, 4.4)
    axes = fig.subplots(1, 2)
    markers = "osD^v<>"
    depth_norm = (float(probe["depth_n"].min()), float(probe["depth_n"].max()) or 1.0)
    for ax, (column, label) in zip(axes, READINGS, strict=True):
        for i, (dataset, group) in enumerate(probe.groupby("dataset")):
            points = ax.scatter(
                group["train_loss"],
                group[column],
                c=group["depth_n"],
                cmap="plasma",
                vmin=depth_norm[0],
                vmax=depth_norm[1],
                marker=markers[i % len(markers)],
                s=22,
                label=dataset,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("final training loss (clean pass over the training set)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, title="dataset", title_fontsize=7)
        ax.grid(alpha=0.3, which="both")
    fig.colorbar(points, ax=axes, shrink=0.85, label="N, extra blocks")
    fig.suptitle(
        "does AGmax say more than the training loss? (claims report: partial Spearman given training loss)", fontsize=9
    )
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


def _candidate_order(name: str) -> tuple[int, int, str]:
    """``blockK.in`` by K, then any other name (``head.in``) after them."""
    match = re.fullmatch(r"block(\d+)\.in", str(name))
    return (0, int(match.group(1)), "") if match else (1, 0, str(name))


def _mean_note(df: pd.DataFrame) -> str:
    n = df["seed"].nunique() if "seed" in df else 0
    return f"{n} seed{'s' if n != 1 else ''}" + (" (mean; faint: each seed)" if n > 1 else "")
