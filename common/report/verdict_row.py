"""What every row of the claims report shares: the row and its verdict cell (:func:`claim_row`,
:func:`finish_row`), the design of its records by which its power is looked up, and what the records are (the sweep's
test-loss regime, the depths that did not fit, the paper's line per example); :mod:`common.report.claim_rows`
lists every row."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from common.presets import paper
from common.presets.make_figures import REPORTS, report_preset
from common.report import claim_power
from common.report.rules import (
    depth,
    growth_vs_scratch,
    margins,
    matched_insertion,
    statistics,
    verdicts,
    weight_scaling,
)
from common.report.rules.cases import Case, case_named
from common.report.rules.design import Design
from common.report.rules.verdicts import fmt

SCALE_NOTES = {name: r.scale_note for name, r in REPORTS.items() if r.scale_note}  # presets whose verdicts are marked
CLAIM, IDENTITY = "claim", "identity check"  # report rows: only claims are counted as reproduced
# A third kind: whether the design lets some claims be judged at all (09's "depth pays at equal FLOPs", issue 57). It is
# listed among the claims, where the rows it decides are, with "yes" or "no" for a verdict, and is never counted.
REGIME_ROW = "regime of the design"
READINGS = (("ag_max", "batch-mean AG_l"), ("ag_max_per_example", "per-example RMS"))
CANDIDATE_COLUMNS = {"ag_max": "ag_norm", "ag_max_per_example": "per_example_rms"}  # a reading's per-candidate value
STEM_OUTPUT = "block0.in"  # the probe's name of the stem's output (the first block's input), where AGmax often sits
LINE_RULES = (depth.stays_below_line, depth.plateau_within_margin)  # they read the 5e-3 line: not comparable


# A sweep depth "fits" when its final clean training loss (01's eval-mode pass over the training images) is at most
# this (issue 29: the mini sizing study's target); the rows and figure 1 name the depths that did not.
FIT_TARGET = 0.05
POWER_NOT_COMPUTED = "power not computed for this design"


def describe(preset: str, dataset: str, seeds: Iterable, n_runs: int, extra: str = "") -> str:
    seeds = sorted({int(s) for s in seeds})
    return f"{preset}, {dataset}, seeds {','.join(map(str, seeds)) or '-'}, {n_runs} runs" + (
        f", {extra}" if extra else ""
    )


@dataclass(frozen=True)
class KnownPower:
    """A row's P(holds | claim true) known without simulation, and why (App. G: no "saturated" without a delta)."""

    power: float
    why: str

    def needs(self) -> str:
        return self.why


RowDesign = tuple[Case, Design] | KnownPower  # what the power of a row is looked up by


def claim_row(
    claim: str,
    said: str,
    fn: Callable,
    outcome: verdicts.Outcome | None,
    records: str,
    preset: str,
    kind: str = CLAIM,
    design: RowDesign | None = None,
    comparable: bool = True,
) -> dict:
    """One row of the report; ``outcome`` None means not run (``records`` then names the command).

    ``kind``: a paper's ``claim`` (counted) or an ``identity check`` (shown apart). ``design``: the records' own
    design (the case of :mod:`common.power.claim_rates` that simulates the rule and the design of the records
    behind the row), by which :func:`claim_rows` looks the row's power up; ``comparable`` False: the paper's value
    cannot be compared as it stands (``not comparable``). The verdict cell and the power are set by
    :func:`finish_row`.
    """
    return {
        "kind": kind,
        "claim": claim,
        "paper": said,
        "reproduced": "-" if outcome is None else outcome.value,
        "records": records,
        "verdict": verdicts.NOT_RUN if outcome is None else outcome.verdict,
        "power": "-",
        "rule": verdicts.sentences(fn.rule),
        "scale": preset,
        "_outcome": outcome,
        "_design": design,
        "_comparable": comparable,
    }


def finish_row(row: dict, power: claim_power.PowerTable) -> dict:
    """The row's verdict cell and power, from its outcome and the power of its rule at its records' design.

    A verdict the evidence decided stands, its power beside it. An undecided one is ``not decidable at this
    design (needs ...)`` where the rule cannot reach :data:`common.report.rules.margins.POWER_TARGET` there, ``not decidable``
    where it can; a design missing from the power table says so and is never guessed. Not comparable: its own
    verdict. The preset's scale note ends every verdict with records.
    """
    outcome, design, comparable = row.pop("_outcome"), row.pop("_design"), row.pop("_comparable")
    if outcome is None:
        return row
    entry = design if isinstance(design, KnownPower) else power.lookup(*design) if design is not None else None
    verdict = outcome.verdict
    if not comparable:
        verdict = f"{verdicts.NOT_COMPARABLE}: {verdicts.NOT_COMPARABLE_WHY}"
    elif verdict == verdicts.UNDECIDABLE and entry is not None and entry.power < margins.POWER_TARGET:
        verdict = f"{verdicts.UNDECIDABLE_AT_DESIGN} (needs {entry.needs()})"
    if design is None:
        row["power"] = "-"
    elif entry is None:
        row["power"] = f"{POWER_NOT_COMPUTED} ({claim_power.POWER_COMMAND})"
    else:
        low = entry.power < margins.POWER_TARGET
        needs = "" if verdict.startswith(verdicts.UNDECIDABLE_AT_DESIGN) else f": needs {entry.needs()}"
        row["power"] = f"{entry.power:.2f}" + (f" (< {margins.POWER_TARGET:g}{needs})" if low else "")
    note = report_preset(row["scale"]).scale_note
    row["verdict"] = f"{verdict} ({note})" if note else verdict
    return row


# ----------------------------------------------------------------------------- the records' designs
BASE_DESIGN = claim_power.design_for_preset("paper")  # the fields a row's case does not read


def _depth_counts(depths: Iterable) -> tuple[tuple[int, ...], tuple[int, ...]]:
    values = [int(round(float(d))) for d in depths]
    distinct = tuple(sorted(set(values)))
    return distinct, tuple(values.count(d) for d in distinct)


def sweep_design(case: str, depths: Iterable) -> RowDesign | None:
    """A depth-trend or low-signal row's design: its runs' depths (each depth as many times as it has seeds)."""
    distinct, counts = _depth_counts(depths)
    if not distinct:
        return None
    return case_named(case), replace(BASE_DESIGN, sweep_depths=distinct, sweep_seeds=counts)


def growth_design(table, fn: Callable, claim: str, said: str) -> RowDesign:
    """A growth-vs-scratch row's design: 03's table's architectures and seeds (and, for "lower at every
    architecture", how many the claim names: the architectures listed in ``said``)."""
    archs = int((table.rows["model"] != "mean").sum())
    named = None
    if fn is growth_vs_scratch.growth_lower_mean:
        case = "growth_lower_mean (mean over the architectures)"
    elif fn is growth_vs_scratch.growth_wins_everywhere:
        case, named = "growth_wins_everywhere (every architecture)", len(said.split(", "))
    elif fn is growth_vs_scratch.paper_size and claim.startswith("relative"):
        case = "paper_size (relative reduction of the means)"
    elif fn is growth_vs_scratch.paper_size:
        case = "paper_size (one architecture, spread pooled)"
    else:
        case = "paper_direction (one architecture, spread pooled)"
    design = replace(BASE_DESIGN, growth_architectures=archs, growth_seeds=len(table.seeds), growth_required=named)
    return case_named(case), design


def matched_design(case: str, drops: matched_insertion.LogDrops) -> RowDesign | None:
    """A matched-insertion row's design: the depths and seeds whose drops enter the log pool."""
    usable = [d for d in drops.depths if drops.logs[d]]
    if not usable:
        return None
    if case == "matches_paper_precision" and not set(usable) & set(paper.MATCHED_INSERTION_REDUCTION):
        return None
    counts = tuple(len(drops.logs[d]) for d in usable)
    return case_named(case), replace(BASE_DESIGN, matched_depths=tuple(usable), matched_seeds=counts)


def scaling_design(fn: Callable, fits: Iterable[Iterable[float]]) -> RowDesign | None:
    """A weight-scaling row's design: the x values (depths, one per record) of every fit the row reads."""
    xs = tuple(tuple(sorted(float(x) for x in f)) for f in fits)
    if not xs or any(len(set(f)) < 3 for f in xs):
        return None
    case = (
        "exponent_within_tolerance"
        if fn is weight_scaling.exponent_within_tolerance
        else "sign_within_tolerance ('<= 0')"
    )
    return case_named(case), replace(BASE_DESIGN, scaling_fits=xs)


# ----------------------------------------------------------------------------- what the records are: regime, fit, line
def unfit_runs(sweep: pd.DataFrame, target: float = FIT_TARGET) -> dict[int, list[tuple[int, float]]]:
    """Depth -> (seed, final clean training loss) of every sweep run above ``target``: the depths that did not fit."""
    out: dict[int, list[tuple[int, float]]] = {}
    if sweep.empty or "train_loss" not in sweep:
        return out
    for r in sweep.dropna(subset=["train_loss"]).sort_values(["depth_n", "seed"]).to_dict("records"):
        if float(r["train_loss"]) > target:
            out.setdefault(int(r["depth_n"]), []).append((int(r["seed"]), float(r["train_loss"])))
    return out


def unfit_note(sweep: pd.DataFrame, target: float = FIT_TARGET) -> str:
    """``did not fit (clean training loss above 0.05): N = 12 (seed 0: 0.159, seed 1: 0.188)`` ("" when all fit)."""
    unfit = unfit_runs(sweep, target)
    if not unfit:
        return ""
    parts = [f"N = {n} ({', '.join(f'seed {s}: {v:.3g}' for s, v in runs)})" for n, runs in unfit.items()]
    return f"did not fit (clean training loss above {target:g}): {'; '.join(parts)}"


def regime(sweep: pd.DataFrame) -> str:
    """How test loss and accuracy move with depth over the sweep's runs, in words (Spearman over the runs, the mean
    over seeds at the shallowest and the deepest depth), and what that says: "" with fewer than 2 depths."""
    if sweep.empty or "test_loss" not in sweep:
        return ""
    usable = sweep.dropna(subset=["depth_n", "test_loss"])
    if usable["depth_n"].nunique() < 2:
        return ""
    means = usable.groupby("depth_n").mean(numeric_only=True)
    first, last = means.index.min(), means.index.max()
    moves = {}

    def trend(column: str, what: str) -> str:
        rho, p = statistics.spearman(usable["depth_n"], usable[column])
        moves[column] = 0 if math.isnan(rho) or p >= margins.SIGNIFICANCE else (1 if rho > 0 else -1)
        word = {1: "rises with depth", -1: "falls with depth", 0: "shows no significant trend with depth"}
        return (
            f"{what} {word[moves[column]]}, {fmt(means.loc[first, column])} at N = {int(first)} to "
            f"{fmt(means.loc[last, column])} at N = {int(last)} (Spearman rho = {rho:+.2f}, p = {fmt(p)})"
        )

    parts = [trend("test_loss", "test loss")]
    if "test_acc" in usable and usable["test_acc"].notna().all():
        parts.append(trend("test_acc", "test accuracy"))
    conclusion = {
        1: "the deeper networks over-fit",
        -1: "the deeper networks generalise better",
        0: "depth does not move the test loss significantly",
    }[moves["test_loss"]]
    return f"{'; '.join(parts)}: {conclusion}"


def about_test_performance(row: dict) -> bool:
    """A row whose claim is about test performance (the plateau, growth's test losses or accuracy): it states the
    regime."""
    return any(word in row["claim"] for word in ("test loss", "test-loss", "test accuracy", "test-accuracy"))


def line_note(batch_sizes: Iterable, line: float = paper.LOW_SIGNAL_AG) -> str:
    """What the paper's line means per example at the records' analysis batch size (it gives none)."""
    sizes = sorted({int(b) for b in batch_sizes if b is not None and not pd.isna(b)})
    at = "; ".join(f"b = {b}: {line:g} x sqrt({b}) = {fmt(line * math.sqrt(b))}" for b in sizes) or "not recorded"
    return (
        f"the paper's {line:g} line is a batch-mean AG_l at a batch size it does not give; per example it is, at the "
        f"records' batch size, {at} (per batch, the per-example RMS is exactly sqrt(b) x AG_l in eval mode)"
    )


def identical_ranks(a: Iterable[float], b: Iterable[float]) -> bool:
    """The two readings order the runs the same way (ties included): a rank-based rule gives them one verdict."""
    a, b = np.asarray(list(a), float), np.asarray(list(b), float)
    return len(a) == len(b) and bool(np.array_equal(statistics.ranks(a), statistics.ranks(b)))


def readings_range(usable: pd.DataFrame) -> str:
    """``AGmax over the runs: batch-mean AG_l 0.0149-0.0989, per-example RMS 0.178-1.12`` (a merged row's values)."""
    return "AGmax over the runs: " + ", ".join(
        f"{reading} {fmt(float(usable[c].min()))}-{fmt(float(usable[c].max()))}" for c, reading in READINGS
    )


__all__ = [
    "BASE_DESIGN",
    "CANDIDATE_COLUMNS",
    "CLAIM",
    "FIT_TARGET",
    "IDENTITY",
    "KnownPower",
    "LINE_RULES",
    "POWER_NOT_COMPUTED",
    "READINGS",
    "REGIME_ROW",
    "RowDesign",
    "SCALE_NOTES",
    "STEM_OUTPUT",
    "about_test_performance",
    "claim_row",
    "describe",
    "finish_row",
    "growth_design",
    "identical_ranks",
    "line_note",
    "matched_design",
    "readings_range",
    "regime",
    "scaling_design",
    "sweep_design",
    "unfit_note",
    "unfit_runs",
]
