"""The ResNet sweep (01) at equal training FLOPs, beside equal epochs (issue 57): where each depth stands at equal
compute, the question 09's claims against the never-grown ResNet-8 depend on.

Every sweep run trains its own schedule for the preset's epochs; its ``metrics.jsonl`` holds, per epoch, the running
training loss (the mean over the epoch's steps, train mode, augmented batches). Its training FLOPs per epoch are its
total, counted from its architecture with 09's counter (:func:`common.report.rows.grow_by_criterion.sweep_flops`),
over its epochs, so epoch e has spent e times that: one compute axis for every depth, 09's included.

- :func:`sweep_curves`: one row per (run, epoch): ``depth_n``, ``seed``, ``epoch``, ``train_flops`` (cumulative),
  ``train_loss`` (running);
- :func:`mean_curves`: per depth and epoch, the mean over seeds;
- :func:`equal_flops_rows`: 08's ``sweep_equal_flops`` table, one row per depth: the equal-epochs view (the last
  epoch's running loss; the first epoch at which the depth's mean curve is below the shallowest depth's at the same
  epoch) and the equal-FLOPs view (its running loss at every depth's total training FLOPs that it reaches; the first
  FLOPs at which it is below the shallowest depth's loss at the same FLOPs, within the shallowest depth's run).

A loss "at F FLOPs" is the running loss of the last epoch whose cumulative FLOPs are at most F (no interpolation):
a deeper run is then mid-schedule, at a higher learning rate than at its own end, which the table's note says.
"""

from __future__ import annotations

import math

import pandas as pd

from common.models.resnet import depth_label
from common.report.rows.grow_by_criterion import sweep_flops
from common.runs import run_store

CURVE_COLUMNS = ["depth_n", "seed", "epoch", "train_flops", "train_loss"]


def sweep_curves(sweep: pd.DataFrame) -> pd.DataFrame:
    """Every sweep run's running training loss per epoch against its cumulative training FLOPs (module docstring);
    runs without the keys a FLOP count needs, or without per-epoch losses, are left out (an empty frame when none
    has them)."""
    needed = ("depth_n", "num_classes", "train_size", "epochs", "run_dir")
    if sweep.empty or any(c not in sweep for c in needed):
        return pd.DataFrame(columns=CURVE_COLUMNS)
    usable = sweep.dropna(subset=list(needed))
    rows = []
    for run in sweep_flops(usable).to_dict("records"):
        per_epoch = run["flops"] / int(run["epochs"])
        losses = {int(r["epoch"]): r["train_loss"] for r in run_store.read_metrics(run["run_dir"]) if "epoch" in r}
        for epoch, loss in sorted(losses.items()):
            if loss is not None and math.isfinite(float(loss)):
                rows.append([int(run["depth_n"]), int(run["seed"]), epoch, epoch * per_epoch, float(loss)])
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def mean_curves(curves: pd.DataFrame) -> pd.DataFrame:
    """Per depth and epoch: the mean running loss over the seeds that reached that epoch, the cumulative FLOPs (one
    architecture per depth: the same for every seed) and the number of seeds."""
    grouped = curves.groupby(["depth_n", "epoch"])
    means = grouped.agg(
        train_flops=("train_flops", "mean"), train_loss=("train_loss", "mean"), seeds=("seed", "nunique")
    )
    return means.reset_index().sort_values(["depth_n", "epoch"], ignore_index=True)


def loss_at_flops(curve: pd.DataFrame, flops: float) -> float | None:
    """The running loss of the last epoch of ``curve`` (one depth's mean curve) whose cumulative FLOPs are at most
    ``flops`` (a relative 1e-9 of slack for the float product); None before its first epoch or beyond its last."""
    if curve.empty or flops > curve["train_flops"].max() * (1 + 1e-9):
        return None
    done = curve[curve["train_flops"] <= flops * (1 + 1e-9)]
    return None if done.empty else float(done.sort_values("epoch")["train_loss"].iloc[-1])


def first_below(curve: pd.DataFrame, reference: pd.DataFrame, by: str) -> float | None:
    """The first ``by`` (``epoch`` or ``train_flops``) of ``curve`` at which its loss is below ``reference``'s at the
    same epoch, or at the same FLOPs (:func:`loss_at_flops`); None when it never is where both have a value."""
    for point in curve.sort_values("epoch").to_dict("records"):
        if by == "epoch":
            match = reference[reference["epoch"] == point["epoch"]]
            other = float(match["train_loss"].iloc[0]) if len(match) else None
        else:
            other = loss_at_flops(reference, point["train_flops"])
        if other is not None and point["train_loss"] < other:
            return float(point[by])
    return None


def equal_flops_rows(curves: pd.DataFrame) -> list[dict]:
    """08's ``sweep_equal_flops`` table (module docstring): one row per depth, the shallowest depth the reference."""
    means = mean_curves(curves)
    if means.empty:
        return []
    depths = sorted(means["depth_n"].unique())
    by_depth = {n: means[means["depth_n"] == n] for n in depths}
    ref_n = depths[0]
    ref, ref_name = by_depth[ref_n], f"ResNet-{depth_label(int(ref_n))}"
    totals = {n: float(c["train_flops"].max()) for n, c in by_depth.items()}
    rows = []
    for n, curve in by_depth.items():
        last = curve.sort_values("epoch").iloc[-1]
        row = {
            "N": int(n), "model": f"ResNet-{depth_label(int(n))}",
            "seeds": int(curves[curves["depth_n"] == n]["seed"].nunique()), "epochs": int(last["epoch"]),
            "flops_per_epoch": f"{totals[n] / int(last['epoch']):.3g}", "train_flops": f"{totals[n]:.3g}",
            "loss_last_epoch (equal epochs)": f"{float(last['train_loss']):.3g}",
        }  # fmt: skip
        epoch = first_below(curve, ref, "epoch") if n != ref_n else None
        flops = first_below(curve[curve["train_flops"] <= totals[ref_n]], ref, "train_flops") if n != ref_n else None
        row[f"first epoch below {ref_name} (equal epochs)"] = "-" if n == ref_n else _or_never(epoch, "d")
        for m, total in totals.items():
            value = loss_at_flops(curve, total)
            row[f"loss at {total:.3g} FLOPs (N = {int(m)}'s end)"] = "-" if value is None else f"{value:.3g}"
        never = f"never within {ref_name}'s {totals[ref_n]:.3g}"
        row[f"first FLOPs below {ref_name} (equal FLOPs)"] = "-" if n == ref_n else _or_never(flops, ".3g", never)
        rows.append(row)
    return rows


def _or_never(value: float | None, spec: str, never: str = "never") -> str:
    return never if value is None else format(int(value) if spec == "d" else value, spec)


NOTE = (
    "Running training loss (the mean over an epoch's steps, train mode, augmented batches), mean over seeds; "
    "cumulative training FLOPs counted from each run's architecture (09's counter). A loss at F FLOPs is the last "
    "epoch at or below F: a deeper run there is mid-schedule, at a higher learning rate than at its own end."
)


__all__ = ["NOTE", "equal_flops_rows", "first_below", "loss_at_flops", "mean_curves", "sweep_curves"]
