"""The AG figures: AGmax against depth, per candidate, in GPT-2 and Pythia, beside the growth value and the loss.

Figures 1-4, 8 and 9, one function each, drawn with :mod:`common.report.plots` (a tidy table of run records in,
a matplotlib ``Figure`` out).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from common.report.plots import LINE_STYLE, READINGS, low_signal_line, new_figure, seed_band, seeds_note


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
