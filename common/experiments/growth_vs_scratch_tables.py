"""Rows of script 03's tables (:mod:`common.experiments.growth_vs_scratch`): growth against scratch, the ablation.

:func:`growth_table` builds the comparison at equal steps from the records of
:func:`~common.experiments.growth_vs_scratch.collect_records` (means over seeds, the paired reductions
``scratch - growth``, the per-row winner, each side's training FLOPs, the last epochs' slope of the training loss,
the paper's values from ``common/presets/paper.py`` beside them); :func:`ablation_table` the restart's cost;
:func:`tail_slope` and :func:`tail_fall` the per-run convergence measures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from common.models.resnet import depth_label
from common.presets.paper import (
    GROWTH_DEPTHS,
    GROWTH_LOWER_TEST_LOSS,
    GROWTH_LOWER_TRAIN_LOSS,
    GROWTH_MEAN_TEST_LOSS,
    GROWTH_MEAN_TRAIN_LOSS,
    GROWTH_TEST_ABS_REDUCTION_RANGE,
    GROWTH_TEST_RELATIVE_REDUCTION,
)

METRICS = ("train_loss", "test_loss", "test_acc")
METHODS = ("growth", "scratch")
TAIL = 0.1  # the last epochs' slope: over the last 10% of the run's epochs (at least 2)
EXTRA = (
    "train_flops",
    "train_loss_slope",
    "train_loss_tail_fall",
    "branch_inserted",
    "branch_original",
)  # per-run measures the tables average beside the metrics (branch_*: growth runs only, NaN for scratch)
ARMS = ("growth", "restart", "scratch")  # one schedule, restarted at every insertion, the sweep's run


def tail_slope(history: Sequence[dict], tail: float = TAIL) -> float:
    """Least-squares slope per epoch of the running ``train_loss`` over the last ``tail`` of the epochs (at least 2;
    NaN with fewer): near 0 where the run had levelled off, negative where it was still falling."""
    fit = _tail_fit(history, tail)
    return math.nan if fit is None else fit[0]


def tail_fall(history: Sequence[dict], tail: float = TAIL) -> float:
    """How much the least-squares line of :func:`tail_slope` falls over those epochs, as a fraction of its value at
    the last of them (0.05: the running training loss still fell by 5% of itself; NaN with fewer than 2 epochs)."""
    fit = _tail_fit(history, tail)
    if fit is None:
        return math.nan
    slope, intercept, first, last = fit
    end = slope * last + intercept
    return -slope * (last - first) / end if end > 0 else math.nan


def _tail_fit(history: Sequence[dict], tail: float) -> tuple[float, float, float, float] | None:
    """(slope, intercept, first epoch, last epoch) of the line through the running ``train_loss`` of the last ``tail``
    of the epochs (at least 2); None with fewer than 2."""
    points = [(r["epoch"], r["train_loss"]) for r in history if r.get("train_loss") is not None]
    if len(points) < 2:
        return None
    x, y = np.array(points[-max(2, round(tail * len(points))) :], dtype=float).T
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept), float(x[0]), float(x[-1])


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; NaN for one value); both NaN where a value is (a measure a run does
    not have: a scratch run's branch norms)."""
    if any(math.isnan(v) for v in values):
        return math.nan, math.nan
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else math.nan


def _winner(growth: float, scratch: float) -> str:
    return "growth" if growth < scratch else "scratch" if scratch < growth else "tie"


def growth_table(records: Iterable[dict]) -> list[dict]:
    """Rows of the comparison: one per final architecture, then ``mean``.

    ``records``: dicts with ``method`` (growth or scratch), ``depth_n``, ``seed`` and
    ``train_loss`` / ``test_loss`` / ``test_acc`` (and ``total_epochs``, optional). Per row, each
    metric's mean and sample std over seeds, the absolute test- and training-loss reductions
    ``scratch - growth`` (per seed, then mean and std over seeds: the paired spread the claims
    test) and the relative test-loss reduction ``(scratch - growth) / scratch`` (of the means), the
    winner (lower mean loss) for train and test loss, and each side's total epochs
    (``growth_epochs``, ``scratch_epochs``; None on the mean row). The mean row averages the
    architectures per seed first, then over seeds; its relative reduction is that of the mean test
    losses (as the paper's 11.8%). Paper columns (``paper_*``, from common/presets/paper.py) where the paper
    reports a value. Records with ``train_flops`` and ``train_loss_slope``
    (:func:`~common.experiments.growth_vs_scratch.collect_records`) give each side's mean of those too
    (``growth_train_flops``, ...).
    """
    records = list(records)
    measured = METRICS + tuple(k for k in EXTRA if records and all(k in r for r in records))
    by, depths, seeds = _cells(records)
    per_seed = {  # (row, method, metric) -> values over seeds; row "mean" averages the architectures first
        (n, method, metric): [by[(n, method)][s][metric] for s in seeds]
        for n in depths
        for method in METHODS
        for metric in measured
    }
    for method in METHODS:
        for metric in measured:
            per_seed[("mean", method, metric)] = [
                statistics.fmean(by[(n, method)][s][metric] for n in depths) for s in seeds
            ]
    rows = []
    for key in [*depths, "mean"]:
        row = {
            "model": f"ResNet-{depth_label(key)}" if key != "mean" else "mean",
            "depth_n": key if key != "mean" else None,
            "seeds": len(seeds),
        }
        for method in METHODS:
            for metric in measured:
                row[f"{method}_{metric}"], row[f"{method}_{metric}_std"] = _mean_std(per_seed[(key, method, metric)])
        for metric in ("test_loss", "train_loss"):
            reductions = [
                s - g
                for g, s in zip(per_seed[(key, "growth", metric)], per_seed[(key, "scratch", metric)], strict=True)
            ]
            row[f"{metric}_reduction"], row[f"{metric}_reduction_std"] = _mean_std(reductions)
        for method in METHODS:
            epochs = {by[(key, method)][s].get("total_epochs") for s in seeds} if key != "mean" else {None}
            row[f"{method}_epochs"] = epochs.pop() if len(epochs) == 1 else max(e for e in epochs if e is not None)
        row["test_loss_reduction_rel"] = (
            row["test_loss_reduction"] / row["scratch_test_loss"] if row["scratch_test_loss"] else math.nan
        )
        row["train_winner"] = _winner(row["growth_train_loss"], row["scratch_train_loss"])
        row["test_winner"] = _winner(row["growth_test_loss"], row["scratch_test_loss"])
        row.update(paper_columns(row["model"]))
        rows.append(row)
    return rows


def _cells(records: Sequence[dict]) -> tuple[dict[tuple[int, str], dict[int, dict]], list[int], list[int]]:
    """The records by (N, method), each a seed -> record map, the depths and the seeds; every cell must hold every
    seed (:class:`ValueError` naming the cell otherwise)."""
    by: dict[tuple[int, str], dict[int, dict]] = {}
    for r in records:
        by.setdefault((r["depth_n"], r["method"]), {})[r["seed"]] = r
    depths = sorted({n for n, _ in by})
    seeds = sorted({s for cell in by.values() for s in cell})
    for n in depths:
        for method in METHODS:
            if set(by.get((n, method), {})) != set(seeds):
                raise ValueError(
                    f"ResNet-{depth_label(n)} {method}: records for seeds {sorted(by.get((n, method), {}))}, expected {seeds}"
                )
    return by, depths, seeds


def paper_columns(model: str) -> dict:
    """The paper's values for one row (``ResNet-d`` or ``mean``); None where it reports none."""
    losses = (("train_loss", GROWTH_MEAN_TRAIN_LOSS), ("test_loss", GROWTH_MEAN_TEST_LOSS))
    keys = [f"{m}_{loss}" for loss, _ in losses for m in METHODS]
    out = dict.fromkeys(f"paper_{k}" for k in (*keys, "test_loss_reduction", "test_loss_reduction_rel"))
    out |= dict.fromkeys(("paper_train_winner", "paper_test_winner"))
    if model == "mean":
        out.update({f"paper_{m}_{loss}": paper[m] for loss, paper in losses for m in METHODS})
        out.update(
            paper_test_loss_reduction=GROWTH_MEAN_TEST_LOSS["scratch"] - GROWTH_MEAN_TEST_LOSS["growth"],
            paper_test_loss_reduction_rel=GROWTH_TEST_RELATIVE_REDUCTION,
            paper_train_winner=_winner(GROWTH_MEAN_TRAIN_LOSS["growth"], GROWTH_MEAN_TRAIN_LOSS["scratch"]),
            paper_test_winner=_winner(GROWTH_MEAN_TEST_LOSS["growth"], GROWTH_MEAN_TEST_LOSS["scratch"]),
        )
    elif model in {f"ResNet-{d}" for d in GROWTH_DEPTHS}:
        out["paper_train_winner"] = "growth" if model in GROWTH_LOWER_TRAIN_LOSS else "scratch"
        out["paper_test_winner"] = "growth" if model in GROWTH_LOWER_TEST_LOSS else "scratch"
        out["paper_test_loss_reduction"] = GROWTH_TEST_ABS_REDUCTION_RANGE.get(model)
    return out


def ablation_table(growth: Iterable[dict], restart: Iterable[dict]) -> list[dict]:
    """One row per ablation depth: each arm's metrics, FLOPs and slope (mean ± std over seeds) and the restart's
    cost, ``restart - growth`` per seed (then mean and std): what restarting the optimizer and schedule at every
    insertion alone changes. ``growth`` and ``restart``: :func:`~common.experiments.growth_vs_scratch.collect_records`
    of the two kinds of run (each with its scratch records, the same runs)."""
    cells: dict[tuple[int, str], dict[int, dict]] = {}
    for arm, records in (("growth", growth), ("restart", restart)):
        for r in records:
            name = arm if r["method"] == "growth" else "scratch"
            cells.setdefault((r["depth_n"], name), {})[r["seed"]] = r
    rows = []
    for n in sorted({n for n, arm in cells if arm == "restart"}):
        seeds = sorted(cells[(n, "restart")])
        missing = [a for a in ARMS if set(cells.get((n, a), {})) < set(seeds)]
        if missing:
            raise ValueError(f"ResNet-{depth_label(n)}: no {', '.join(missing)} records for seeds {seeds}")
        row: dict[str, Any] = {"model": f"ResNet-{depth_label(n)}", "depth_n": n, "seeds": len(seeds)}
        for arm in ARMS:
            for key in (*METRICS, *EXTRA):  # an EXTRA measure a record lacks (an older one) is NaN
                values = [cells[(n, arm)][s].get(key, math.nan) if key in EXTRA else cells[(n, arm)][s][key]
                          for s in seeds]  # fmt: skip
                row[f"{arm}_{key}"], row[f"{arm}_{key}_std"] = _mean_std(values)
        for metric in ("train_loss", "test_loss"):
            cost = [cells[(n, "restart")][s][metric] - cells[(n, "growth")][s][metric] for s in seeds]
            row[f"restart_cost_{metric}"], row[f"restart_cost_{metric}_std"] = _mean_std(cost)
        rows.append(row)
    return rows


__all__ = [
    "ARMS",
    "EXTRA",
    "METHODS",
    "METRICS",
    "TAIL",
    "ablation_table",
    "growth_table",
    "paper_columns",
    "tail_fall",
    "tail_slope",
]
