"""The claims report's rows about growth against training from scratch (script 03), from its chosen tables."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from common.presets import paper
from common.report.records import Records
from common.report.rules import growth_vs_scratch, statistics, verdicts
from common.report.verdict_row import claim_row, describe, growth_design


def reduction_summaries(t: pd.DataFrame, models: Iterable[str], metric: str) -> dict[str, tuple[float, float, int]]:
    """Per architecture, (mean, sample std, seeds) of the per-seed ``scratch - growth`` ``metric`` from 03's table:
    its paired ``<metric>_reduction`` and ``_std`` columns."""
    return {
        m: (float(t.loc[m, f"{metric}_reduction"]), float(t.loc[m, f"{metric}_reduction_std"]), int(t.loc[m, "seeds"]))
        for m in models
    }


TEST_LOSS_CLAIMS = (1, 2, 3, 5, 6, 7, 8)  # positions in growth_specs() whose claim is about test loss


def growth_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Growth vs scratch: the means, the relative and absolute reductions, per-architecture winners; per dataset.

    The verdicts read 03's table: growth and scratch at equal epochs, each on one schedule (docs/decisions.md,
    section "Function-preserving growth"). Every row gives each side's training FLOPs and whether the runs had
    converged (:func:`convergence_words`) beside its value; rows about test loss give each side's test accuracy.
    """
    specs = growth_specs()
    if not rec.growth:
        return [claim_row(c, p, fn, None, f"none: {cmd['growth']}", rec.preset) for c, p, fn in specs]
    return [row for table in rec.growth for row in table_rows(rec.preset, table, specs)]


def growth_specs() -> list[tuple]:
    """``(claim, the paper's value, rule)`` of every row, in the report's order (the positions that
    :data:`TEST_LOSS_CLAIMS` and :data:`MEAN_CLAIMS` name)."""
    mean_train = f"growth {paper.GROWTH_MEAN_TRAIN_LOSS['growth']} vs scratch {paper.GROWTH_MEAN_TRAIN_LOSS['scratch']}"
    mean_test = f"growth {paper.GROWTH_MEAN_TEST_LOSS['growth']} vs scratch {paper.GROWTH_MEAN_TEST_LOSS['scratch']}"
    return [
        ("growth's mean training loss is below scratch's", mean_train, growth_vs_scratch.growth_lower_mean),
        ("growth's mean test loss is below scratch's", mean_test, growth_vs_scratch.growth_lower_mean),
        (
            "relative test-loss reduction of the means",
            f"{paper.GROWTH_TEST_RELATIVE_REDUCTION:.1%}",
            growth_vs_scratch.paper_size,
        ),
        (
            "growth's test loss is lower for all four architectures",
            ", ".join(paper.GROWTH_LOWER_TEST_LOSS),
            growth_vs_scratch.growth_wins_everywhere,
        ),
        (
            "growth's training loss is lower at ResNet-10, -11 and -13",
            ", ".join(paper.GROWTH_LOWER_TRAIN_LOSS),
            growth_vs_scratch.growth_wins_everywhere,
        ),
        *(
            spec
            for m, v in paper.GROWTH_TEST_ABS_REDUCTION_RANGE.items()
            for spec in (
                (
                    f"absolute test-loss reduction at {m}: direction",
                    f"{v} (growth lower)",
                    growth_vs_scratch.paper_direction,
                ),
                (f"absolute test-loss reduction at {m}: size", f"{v}", growth_vs_scratch.paper_size),
            )
        ),
    ]


def table_rows(preset: str, table, specs: list[tuple]) -> list[dict]:
    """One row per spec from one of 03's tables (a dataset): its verdict and value at the table's budget, the test
    accuracies and the restart ablation where the claim reads them, the FLOPs and convergence words beside."""
    accuracy = test_accuracies(table)
    outcomes = growth_outcomes(table)
    beside = [w for w in (table.flops_words(), convergence_words(table)) if w]
    rows = []
    for i, (claim, said, fn) in enumerate(specs):
        values = [f"at {table.budget_words()}: {outcomes[i].value}"]
        if i in TEST_LOSS_CLAIMS:
            values.append(accuracy[claim_models(claim)])
        if i in MEAN_CLAIMS and ablation_words(table, MEAN_CLAIMS[i]):
            values.append(ablation_words(table, MEAN_CLAIMS[i]))
        rows.append(
            claim_row(
                f"{claim} ({table.dataset})",
                said,
                fn,
                verdicts.Outcome(outcomes[i].verdict, "; ".join([*values, *beside])),
                growth_records(preset, table),
                preset,
                design=growth_design(table, fn, claim, said),
            )
        )
    return rows


MEAN_CLAIMS = {0: "train_loss", 1: "test_loss"}  # the mean rows, which show the restart ablation beside them


def ablation_words(table, metric: str) -> str:
    """The restart ablation in words for ``metric``: per ablation depth, the paired cost ``restart - growth`` (mean and
    sample std over seeds; "" without an ablation)."""
    rows = table.ablation
    if rows is None or not len(rows) or f"restart_cost_{metric}" not in rows.columns:
        return ""
    cells = []
    for r in rows.to_dict("records"):
        std = r.get(f"restart_cost_{metric}_std")
        spread = "" if std is None or pd.isna(std) else f" ± {std:.4f}"
        cells.append(
            f"{r['model']}: restarted {r[f'restart_{metric}']:.4f} vs one schedule {r[f'growth_{metric}']:.4f}, "
            f"cost {r[f'restart_cost_{metric}']:+.4f}{spread}"
        )
    seeds = int(rows["seeds"].iloc[0])
    return (
        f"restart ablation ({seeds} seed{'s' if seeds != 1 else ''}; restarting optimizer and schedule at every insertion): "
        + ", ".join(cells)
    )


LEVELLED = 0.05  # a side has levelled off when its running training loss fell by under 5% over its last 10% of epochs


def convergence_words(table) -> str:
    """Whether both sides had converged, from the records: the paper compares converged losses, so a side whose
    running training loss still fell by at least :data:`LEVELLED` of itself over the last 10% of its epochs (the
    least-squares line through them, mean over seeds) is named as not converged ("" where the table has none)."""
    falls = table.side_means("train_loss_tail_fall")
    if falls is None:
        return ""
    falling = [side for side, fall in zip(("growth", "scratch"), falls, strict=True) if fall >= LEVELLED]
    state = (
        f"not converged ({' and '.join(falling)} still falling; the paper compares converged losses)"
        if falling
        else "both levelled off"
    )
    fell = f"growth {falls[0]:.1%}, scratch {falls[1]:.1%}"
    return f"{table.slope_words()} (a fall of {fell} of itself): {state}"


def growth_records(preset: str, table) -> str:
    """The records column of a growth row: preset, dataset, seeds, runs, architectures, budgets, the table file."""
    t = table.rows.set_index("model")
    present = [m for m in t.index if m != "mean"]
    return describe(
        preset,
        table.dataset,
        table.seeds,
        2 * len(present) * len(table.seeds),
        f"{', '.join(present)}; {table.budget()}; {table.path.name}",
    )


def growth_outcomes(table) -> list[verdicts.Outcome]:
    """Every growth rule's outcome on one of 03's tables, in the order of :func:`growth_claims`' specs."""
    t = table.rows.set_index("model")
    mean = t.loc["mean"]
    present = [m for m in t.index if m != "mean"]
    test = reduction_summaries(t, present, "test_loss")
    train = reduction_summaries(t, present, "train_loss")
    mean_train_est = statistics.over_seeds(*reduction_summaries(t, ["mean"], "train_loss")["mean"])
    mean_test_est = statistics.over_seeds(*reduction_summaries(t, ["mean"], "test_loss")["mean"])
    scale = float(mean["scratch_test_loss"])
    relative = (
        None
        if mean_test_est is None
        else statistics.Estimate(mean_test_est.mean / scale, mean_test_est.se / scale, mean_test_est.df)
    )
    pooled = statistics.pooled_estimates(test) or {}
    outcomes = [
        growth_vs_scratch.growth_lower_mean(mean["growth_train_loss"], mean["scratch_train_loss"], mean_train_est),
        growth_vs_scratch.growth_lower_mean(mean["growth_test_loss"], mean["scratch_test_loss"], mean_test_est),
        growth_vs_scratch.paper_size(relative, paper.GROWTH_TEST_RELATIVE_REDUCTION),
        growth_vs_scratch.growth_wins_everywhere(test, [f"ResNet-{d}" for d in paper.GROWTH_DEPTHS]),
        growth_vs_scratch.growth_wins_everywhere(train, paper.GROWTH_LOWER_TRAIN_LOSS),
    ]
    for model, value in paper.GROWTH_TEST_ABS_REDUCTION_RANGE.items():
        if model in t.index:
            outcomes += [
                growth_vs_scratch.paper_direction(pooled.get(model), value),
                growth_vs_scratch.paper_size(pooled.get(model), value),
            ]
        else:
            outcomes += [verdicts.Outcome(verdicts.UNDECIDABLE, f"{model} not run")] * 2
    return outcomes


def claim_models(claim: str) -> str:
    """Which test accuracies a growth claim shows: the architecture it names, every one, or the mean row."""
    for model in paper.GROWTH_TEST_ABS_REDUCTION_RANGE:
        if f"at {model}:" in claim:
            return model
    return "all" if "all four" in claim else "mean"


def test_accuracies(table) -> dict[str, str]:
    """Each side's test accuracy (mean over seeds) in words, per architecture, for every one, and for the mean row."""
    t = table.rows.set_index("model")

    def pair(model: str) -> str:
        if model not in t.index or "growth_test_acc" not in t.columns:
            return f"{model}: -"
        row = t.loc[model]
        return f"growth {float(row['growth_test_acc']):.3f} vs scratch {float(row['scratch_test_acc']):.3f}"

    words = {m: f"test accuracy {pair(m)}" for m in paper.GROWTH_TEST_ABS_REDUCTION_RANGE}
    words["mean"] = f"mean test accuracy {pair('mean')}"
    present = [m for m in t.index if m != "mean"]
    words["all"] = "test accuracy " + ", ".join(f"{m}: {pair(m)}" for m in present)
    return words


__all__ = [
    "TEST_LOSS_CLAIMS",
    "claim_models",
    "growth_claims",
    "growth_outcomes",
    "growth_records",
    "reduction_summaries",
    "test_accuracies",
]
