"""The claims report's rows, from the records :mod:`common.experiments.make_figures` loads: one row per quantitative
claim of the paper and of Cohen et al., and apart, the identity checks.

Each row holds the claim, the paper's value (``common/paper.py`` only), the reproduced value, the records it came
from (preset, dataset, seeds, number of runs), the verdict and the rule that gave it. The rules are
:mod:`common.claims` (pure functions of numbers); this module only picks their inputs out of the records:

- **ResNet sweep** (scripts 01, 02): per dataset and per reading of AGmax (batch-mean ``AG_l``, per-example RMS),
  under the probe setting 08 chose: falls with depth, stays below the line once below, the low-signal plateau, and
  (beyond the paper) whether the training loss alone explains it. **App. G**: every seed's interval at the deepest
  depth probed.
- **Identity checks**, never counted among reproduced claims: ``V_S,l <= AG_l`` over every exact run (02 and 05),
  and the matched insertion's drop at small alpha.
- **Decoders**: AGmax falls with depth over the GPT-2 sweep (05) and across the probed Pythia models (04).
- **Growth vs scratch** (03): per chosen table, the means, the relative and absolute reductions and the
  per-architecture winners; each row shows both sides' total epochs.
- **Matched insertion** (06): the end-of-stage-1 candidate at every depth (06's default ``stage1-end``, or the
  same candidate from ``next`` / ``all`` runs), the closed-form fit and the paper's alpha, one value per seed.
- **Weight scaling** (07): Cohen et al.'s exponents against the fits of the Frobenius norm; a beta-based verdict
  uses the max-norm estimator, Step 2's estimate is shown beside it.

A claim without records is "not run", its records column naming the command that makes them (:func:`commands`).
Verdicts of ``--preset smoke`` and ``mini`` records carry the scale (:data:`SCALE_NOTES`).

What a row says beyond its rule (issue 29; docs/decisions.md, section "Figures and the claims report"):

- **its power** at its records' own design (:func:`finish_row`): each row names the case of
  :mod:`common.experiments.claim_rates` that simulates its rule and the design of its records (:data:`RowDesign`);
  the power is looked up in the committed table, never guessed ("power not computed for this design"); an
  undecided row whose rule cannot reach 0.8 there is "not decidable at this design (needs ...)";
- **one row per test**: a rank-based rule whose two readings of AGmax order the runs identically;
- **"not comparable"** for the rules at the paper's 5e-3 line, with the line's per-example value at the records'
  batch size; where AGmax sits (the stem output) and its trend without it; the sweep's test-loss regime in every
  row about test performance; the depths that did not fit (:data:`FIT_TARGET`) in the rows about AGmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from common import claims, paper, scaling
from common.claims import fmt
from common.experiments import claim_rates, matched_insertion, probe_ag, weight_scaling
from common.models.resnet import BACKBONE_DEPTH

if TYPE_CHECKING:  # the records' type only: make_figures loads them and imports this module
    from common.experiments.make_figures import Records

SMOKE_NOTE = "smoke scale: not evidence about the paper"
# Presets whose verdicts are marked (the note after every verdict, the banner atop the report); the paper preset has none.
MINI_NOTE = "mini scale"  # every verdict of --preset mini records carries it (docs/decisions.md)
SCALE_NOTES = {"smoke": SMOKE_NOTE, "mini": MINI_NOTE}
CLAIM, IDENTITY = "claim", "identity check"  # the two kinds of report rows: only claims are counted as reproduced
READINGS = (("ag_max", "batch-mean AG_l"), ("ag_max_per_example", "per-example RMS"))
CANDIDATE_COLUMNS = {"ag_max": "ag_norm", "ag_max_per_example": "per_example_rms"}  # a reading's per-candidate value
STEM_OUTPUT = "block0.in"  # the probe's name of the stem's output (the first block's input), where AGmax often sits
LINE_RULES = (claims.stays_below_line, claims.plateau_within_margin)  # they read the 5e-3 line: not comparable
# A sweep depth "fits" when its final clean training loss (01's eval-mode pass over the training images) is at most
# this (issue 29: the mini sizing study's target); the rows and figure 1 name the depths that did not.
FIT_TARGET = 0.05
POWER_NOT_COMPUTED = "power not computed for this design"


def commands(preset: str, out: str | Path) -> dict[str, str]:
    """The command that makes each experiment's records (what a skipped figure or a "not run" claim names)."""
    p = "" if preset == "paper" else f" --preset {preset}"
    o = f" --out {out}"
    sweep = f"python 01_train_resnet_sweep.py{p}{o}"
    return {
        "sweep": sweep,
        "probe": f"{sweep} && python 02_probe_ag.py{p}{o}",
        "exact": f"{sweep} && python 02_probe_ag.py{p} --exact{o}",
        "growth": f"python 03_growth_vs_scratch.py{p}{o}",
        "pythia": f"python 04_pythia_cpt.py{p}{o}",
        "gpt2": f"python 05_gpt2_ascend.py{p}{o}",
        "matched": f"{sweep} && python 06_matched_insertion.py{p}{o}",
        "scaling": f"python 07_weight_scaling.py{p}{o}",
    }


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


RowDesign = tuple[claim_rates.Case, claim_rates.Design] | KnownPower  # what the power of a row is looked up by


def claim_row(
    claim: str,
    said: str,
    fn: Callable,
    outcome: claims.Outcome | None,
    records: str,
    preset: str,
    kind: str = CLAIM,
    design: RowDesign | None = None,
    comparable: bool = True,
) -> dict:
    """One row of the report; ``outcome`` None means not run (``records`` then names the command).

    ``kind``: a paper's ``claim`` (counted) or an ``identity check`` (shown apart). ``design``: the records' own
    design (the case of :mod:`common.experiments.claim_rates` that simulates the rule and the design of the records
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
        "verdict": claims.NOT_RUN if outcome is None else outcome.verdict,
        "power": "-",
        "rule": claims.sentences(fn.rule),
        "scale": preset,
        "_outcome": outcome,
        "_design": design,
        "_comparable": comparable,
    }


def finish_row(row: dict, power: claim_rates.PowerTable) -> dict:
    """The row's verdict cell and power, from its outcome and the power of its rule at its records' design.

    A verdict the evidence decided stands, its power beside it. An undecided one is ``not decidable at this
    design (needs ...)`` where the rule cannot reach :data:`common.claims.POWER_TARGET` there, ``not decidable``
    where it can; a design missing from the power table says so and is never guessed. Not comparable: its own
    verdict. The preset's scale note ends every verdict with records.
    """
    outcome, design, comparable = row.pop("_outcome"), row.pop("_design"), row.pop("_comparable")
    if outcome is None:
        return row
    entry = design if isinstance(design, KnownPower) else power.lookup(*design) if design is not None else None
    verdict = outcome.verdict
    if not comparable:
        verdict = f"{claims.NOT_COMPARABLE}: {claims.NOT_COMPARABLE_WHY}"
    elif verdict == claims.UNDECIDABLE and entry is not None and entry.power < claims.POWER_TARGET:
        verdict = f"{claims.UNDECIDABLE_AT_DESIGN} (needs {entry.needs()})"
    if design is None:
        row["power"] = "-"
    elif entry is None:
        row["power"] = f"{POWER_NOT_COMPUTED} ({claim_rates.POWER_COMMAND})"
    else:
        low = entry.power < claims.POWER_TARGET
        needs = "" if verdict.startswith(claims.UNDECIDABLE_AT_DESIGN) else f": needs {entry.needs()}"
        row["power"] = f"{entry.power:.2f}" + (f" (< {claims.POWER_TARGET:g}{needs})" if low else "")
    row["verdict"] = f"{verdict} ({SCALE_NOTES[row['scale']]})" if row["scale"] in SCALE_NOTES else verdict
    return row


# ----------------------------------------------------------------------------- the records' designs
BASE_DESIGN = claim_rates.design_for_preset("paper")  # the fields a row's case does not read


def _depth_counts(depths: Iterable) -> tuple[tuple[int, ...], tuple[int, ...]]:
    values = [int(round(float(d))) for d in depths]
    distinct = tuple(sorted(set(values)))
    return distinct, tuple(values.count(d) for d in distinct)


def sweep_design(case: str, depths: Iterable) -> RowDesign | None:
    """A depth-trend or low-signal row's design: its runs' depths (each depth as many times as it has seeds)."""
    distinct, counts = _depth_counts(depths)
    if not distinct:
        return None
    return claim_rates.case_named(case), replace(BASE_DESIGN, sweep_depths=distinct, sweep_seeds=counts)


def growth_design(table, fn: Callable, claim: str, said: str) -> RowDesign:
    """A growth-vs-scratch row's design: 03's table's architectures and seeds (and, for "lower at every
    architecture", how many the claim names: the architectures listed in ``said``)."""
    archs = int((table.rows["model"] != "mean").sum())
    named = None
    if fn is claims.growth_lower_mean:
        case = "growth_lower_mean (mean over the architectures)"
    elif fn is claims.growth_wins_everywhere:
        case, named = "growth_wins_everywhere (every architecture)", len(said.split(", "))
    elif fn is claims.paper_size and claim.startswith("relative"):
        case = "paper_size (relative reduction of the means)"
    elif fn is claims.paper_size:
        case = "paper_size (one architecture, spread pooled)"
    else:
        case = "paper_direction (one architecture, spread pooled)"
    design = replace(BASE_DESIGN, growth_architectures=archs, growth_seeds=len(table.seeds), growth_required=named)
    return claim_rates.case_named(case), design


def matched_design(case: str, drops: claims.LogDrops) -> RowDesign | None:
    """A matched-insertion row's design: the depths and seeds whose drops enter the log pool."""
    usable = [d for d in drops.depths if drops.logs[d]]
    if not usable:
        return None
    if case == "matches_paper_precision" and not set(usable) & set(paper.MATCHED_INSERTION_REDUCTION):
        return None
    counts = tuple(len(drops.logs[d]) for d in usable)
    return claim_rates.case_named(case), replace(BASE_DESIGN, matched_depths=tuple(usable), matched_seeds=counts)


def scaling_design(fn: Callable, fits: Iterable[Iterable[float]]) -> RowDesign | None:
    """A weight-scaling row's design: the x values (depths, one per record) of every fit the row reads."""
    xs = tuple(tuple(sorted(float(x) for x in f)) for f in fits)
    if not xs or any(len(set(f)) < 3 for f in xs):
        return None
    case = "exponent_within_tolerance" if fn is claims.exponent_within_tolerance else "sign_within_tolerance ('<= 0')"
    return claim_rates.case_named(case), replace(BASE_DESIGN, scaling_fits=xs)


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
        rho, p = claims.spearman(usable["depth_n"], usable[column])
        moves[column] = 0 if math.isnan(rho) or p >= claims.SIGNIFICANCE else (1 if rho > 0 else -1)
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
    return len(a) == len(b) and bool(np.array_equal(claims.ranks(a), claims.ranks(b)))


def without_stem(candidates: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (dataset, depth_n, seed), the max of ``column`` over the candidates other than the stem output."""
    if candidates.empty or column not in candidates or "name" not in candidates:
        return pd.DataFrame(columns=["dataset", "depth_n", "seed", column])
    rest = candidates[candidates["name"] != STEM_OUTPUT]
    return rest.groupby(["dataset", "depth_n", "seed"], as_index=False)[column].max()


def resnet_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """AGmax across ResNet depth, per dataset: falls, stays low, plateau, training loss alone.

    Per reading of AGmax (batch-mean ``AG_l``, per-example RMS); a rank-based rule (the fall, the training loss
    alone) whose two readings order the runs identically is one test and one row, with both readings' values in it.
    The two rules at the paper's 5e-3 line are "not comparable" (the paper gives no normalisation); every row names
    the depths that did not fit, and the plateau states the test-loss regime of the sweep.
    """
    specs = [
        (
            "AGmax falls with depth",
            paper.AG_DEPTH_TREND,
            claims.falls_with_depth,
            "falls_with_depth",
            True,
            lambda g, c: claims.falls_with_depth(g["depth_n"], g[c]),
        ),
        (
            f"once below {paper.LOW_SIGNAL_AG:g}, AGmax stays below it",
            paper.LOW_SIGNAL_PLATEAU,
            claims.stays_below_line,
            "stays_below_line",
            False,
            lambda g, c: claims.stays_below_line(g["depth_n"], g[c], paper.LOW_SIGNAL_AG),
        ),
        (
            f"low-signal plateau: past N*, test loss gains less than {claims.PLATEAU_MARGIN:.0%}",
            paper.LOW_SIGNAL_PLATEAU,
            claims.plateau_within_margin,
            "plateau_within_margin",
            False,
            lambda g, c: claims.plateau_within_margin(g["depth_n"], g[c], g["test_loss"], paper.LOW_SIGNAL_AG),
        ),
        (
            "beyond the paper: AGmax is explained by the training loss alone",
            "not claimed by the paper (reviewers' question)",
            claims.explained_by_training_loss,
            "explained_by_training_loss",
            True,
            lambda g, c: claims.explained_by_training_loss(g["depth_n"], g[c], g["train_loss"]),
        ),
    ]
    if rec.probe.empty:
        return [
            claim_row(
                f"{claim} (ResNet sweep, any dataset, {reading})", said, fn, None, f"none: {cmd['probe']}", rec.preset
            )
            for claim, said, fn, *_ in specs
            for _, reading in READINGS
        ]
    rows = []
    for dataset in sorted(rec.probe["dataset"].unique()):
        group = rec.probe[rec.probe["dataset"] == dataset]
        sweep = rec.sweep[rec.sweep["dataset"] == dataset] if len(rec.sweep) else rec.sweep
        for column, _ in READINGS:
            beside = without_stem(rec.probe_candidates, CANDIDATE_COLUMNS[column]).rename(
                columns={CANDIDATE_COLUMNS[column]: f"{column}_without_stem"}
            )
            group = group.merge(beside, on=["dataset", "depth_n", "seed"], how="left")
        unfit = unfit_note(sweep)
        setting = f"probe {rec.probe_settings[dataset]}" + (f"; {unfit}" if unfit else "")
        both = group.dropna(subset=[c for c, _ in READINGS] + ["test_loss", "train_loss"])
        for claim, said, fn, case, rank_based, run in specs:
            if rank_based and len(both) and identical_ranks(both["ag_max"], both["ag_max_per_example"]):
                readings = [(READINGS[0][0], "batch-mean AG_l and per-example RMS: identical ranks, one test")]
            else:
                readings = list(READINGS)
            for column, reading in readings:
                usable = group.dropna(subset=[column, "test_loss", "train_loss"]) if len(readings) > 1 else both
                outcome = run(usable, column)
                value = outcome.value
                if len(readings) == 1:
                    value = claims.clauses(value, readings_range(usable))
                if fn is claims.falls_with_depth:
                    value = claims.clauses(
                        value, stem_note(usable, [c for c, _ in READINGS] if len(readings) == 1 else [column])
                    )
                comparable = fn not in LINE_RULES
                if not comparable:
                    value = claims.clauses(
                        line_note(usable.get("batch_size", [])),
                        f"the rule at {paper.LOW_SIGNAL_AG:g} as read: {outcome.verdict}: {value}",
                    )
                records = describe(rec.preset, dataset, usable["seed"], len(usable), setting)
                rows.append(
                    claim_row(
                        f"{claim} (ResNet sweep, {dataset}, {reading})",
                        said,
                        fn,
                        claims.Outcome(outcome.verdict, value),
                        records,
                        rec.preset,
                        design=sweep_design(case, usable["depth_n"]),
                        comparable=comparable,
                    )
                )
    return rows


def readings_range(usable: pd.DataFrame) -> str:
    """``AGmax over the runs: batch-mean AG_l 0.0149-0.0989, per-example RMS 0.178-1.12`` (a merged row's values)."""
    return "AGmax over the runs: " + ", ".join(
        f"{reading} {fmt(float(usable[c].min()))}-{fmt(float(usable[c].max()))}" for c, reading in READINGS
    )


def stem_note(usable: pd.DataFrame, columns: Iterable[str]) -> str:
    """Where AGmax sits (the stem output, ``block0.in``, in how many runs) and, beside the verdict, the same trend of
    AGmax over the candidates other than the stem output (not used for the verdict); two readings that agree (the
    same count, the same ranks without the stem) are said once."""
    columns = list(columns)
    texts, signatures = {}, {}
    for column in columns:
        where, rest = usable.get(f"{column}_candidate"), usable.get(f"{column}_without_stem")
        bits, signature = [], []
        if where is not None and where.notna().any():
            at = int((where == STEM_OUTPUT).sum())
            bits.append(f"AGmax at the stem output ({STEM_OUTPUT}) in {at} of {len(where)} runs")
            signature.append(at)
        if rest is not None and len(rest) >= 3 and rest.notna().all():
            rho, p = claims.spearman(usable["depth_n"], rest)
            bits.append(
                f"without it AGmax {fmt(float(rest.min()))}-{fmt(float(rest.max()))}, rho = {rho:+.2f}, p = {fmt(p)}"
            )
            signature.append(tuple(claims.ranks(rest)))
        if bits:
            texts[column], signatures[column] = ", ".join(bits), signature
    if not texts:
        return ""
    if len(texts) > 1 and len({repr(v) for v in signatures.values()}) == 1:
        text = f"{texts[columns[0]]} (per-example RMS: the same count and ranks)"
    elif len(texts) == 1:
        (text,) = texts.values()
    else:
        text = "; ".join(f"{dict(READINGS)[c]}: {t}" for c, t in texts.items())
    return f"{text} (beside the verdict, not used for it)"


def projection_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """The identity check V_S,l <= AG_l over every exact run (a theorem: shown apart from the claims)."""
    claim, fn = "the exact growth value never exceeds AG_l at any candidate", claims.projection_never_exceeds
    if rec.exact_candidates.empty:
        return [claim_row(claim, paper.PROJECTION_BOUND, fn, None, f"none: {cmd['exact']}", rec.preset, IDENTITY)]
    c = rec.exact_candidates
    sources = ", ".join(f"{s} ({n} candidates)" for s, n in c.groupby("source").size().items())
    records = f"{rec.preset}, exact runs of 02/05: {sources}"
    return [
        claim_row(claim, paper.PROJECTION_BOUND, fn, fn(c["growth_value"], c["ag_norm"]), records, rec.preset, IDENTITY)
    ]


def saturation_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """App. G at the deepest depth probed, per dataset: every seed's interval, t, number of candidates and verdict
    (Theorem 3's interval gives it), and the test examples it would need to decide."""
    claim, fn = (
        "the deepest models probed are first-order saturated within delta (App. G)",
        claims.saturated_within_delta,
    )
    if rec.probe.empty:
        return [claim_row(claim, paper.SEPARATED_TEST, fn, None, f"none: {cmd['probe']}", rec.preset)]
    rows = []
    for dataset, group in rec.probe.groupby("dataset"):
        deepest = group[group["depth_n"] == group["depth_n"].max()]
        found = deepest.dropna(subset=["saturation"]) if "saturation" in deepest else deepest.iloc[:0]
        summaries = {
            f"ResNet-{r['depth_label']} seed {r['seed']}": app_g_summary(r["saturation"])
            for r in found.to_dict("records")
        }
        n_test = sorted({s["n_test"] for s in summaries.values()})
        sweep = rec.sweep[rec.sweep["dataset"] == dataset] if len(rec.sweep) else rec.sweep
        deepest_n = int(deepest["depth_n"].iloc[0])
        unfit = unfit_runs(sweep).get(deepest_n)
        records = describe(
            rec.preset,
            dataset,
            found["seed"],
            len(found),
            f"ResNet-{int(BACKBONE_DEPTH + deepest_n)}, probe {rec.probe_settings[dataset]}, "
            f"n_test {', '.join(map(str, n_test)) or '-'}{sources_note(summaries)}"
            + (f"; did not fit: {', '.join(f'seed {s}: {v:.3g}' for s, v in unfit)}" if unfit else ""),
        )
        outcome = fn(summaries)
        rows.append(
            claim_row(
                f"{claim} ({dataset})",
                paper.SEPARATED_TEST,
                fn,
                outcome,
                records,
                rec.preset,
                design=app_g_power(summaries) if summaries else None,
            )
        )
    return rows


APP_G_KEYS = (  # 02's App. G keys the row reads beside saturation_summary's (issue 29; absent from older records)
    "split",
    "sources",
    "n_test_to_exclude_zero",
    "n_test_to_exclude_delta",
    "n_test_to_exclude_delta_side",
    "asymptotic",
)


def app_g_summary(sat: Mapping) -> dict:
    """:func:`common.experiments.probe_ag.saturation_summary` with 02's n_test projections, asymptotic interval and
    sample sources where the record has them."""
    summary = dict(probe_ag.saturation_summary(sat))
    for key in APP_G_KEYS:
        if key in sat and key not in summary:
            summary[key] = sat[key]
    return summary


def sources_note(summaries: Mapping[str, Mapping]) -> str:
    """`` (held-out: train_unused 9,000, test 2,000)``: where App. G's sample came from, when 02 recorded it."""
    seen = {
        (s.get("split"), tuple(sorted((s.get("sources") or {}).items())))
        for s in summaries.values()
        if s.get("sources")
    }
    if len(seen) != 1:
        return ""
    ((split, sources),) = seen
    return f" ({split}: " + ", ".join(f"{k} {int(v):,}" for k, v in sources) + ")"


def app_g_power(summaries: Mapping[str, Mapping]) -> KnownPower | None:
    """App. G's power where it is known without simulation: without a delta (or delta = 0), or with a delta at most t
    (the upper end Gamma_hat + t is then above it), "saturated within delta" cannot occur at this n_test: power 0.
    None otherwise (not simulated: the report says the power was not computed)."""
    given = [s for s in summaries.values() if s.get("delta")]
    if not given:
        return KnownPower(0.0, "a delta: none was given, and without one 'saturated within delta' cannot occur")
    if len(given) == len(summaries) and all(s.get("t") is not None and s["t"] >= s["delta"] for s in given):
        n = max(math.ceil(s["n_test"] * s["t"] ** 2 / s["delta"] ** 2) for s in given)
        return KnownPower(
            0.0, f"more than {n:,} test examples, where t falls below delta (the upper end Gamma_hat + t is above it)"
        )
    return None


def decoder_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """AGmax falls with depth: the GPT-2 sweep (over L) and the probed Pythia models (across models); one row for
    both readings when they order the runs identically (a rank-based rule: one test)."""
    rows = []
    fn = claims.falls_with_depth
    for df, depth, what, key in (
        (rec.gpt, "n_layer", "GPT-2 sweep, over L", "gpt2"),
        (rec.pythia, "n_layer", "Pythia models, across models", "pythia"),
    ):
        if df.empty:
            rows += [
                claim_row(
                    f"AGmax falls with depth ({what}, {reading})",
                    paper.AG_DEPTH_TREND,
                    fn,
                    None,
                    f"none: {cmd[key]}",
                    rec.preset,
                )
                for _, reading in READINGS
            ]
            continue
        both = df.dropna(subset=[c for c, _ in READINGS])
        merged = len(both) and identical_ranks(both["ag_max"], both["ag_max_per_example"])
        readings = (
            [(READINGS[0][0], "batch-mean AG_l and per-example RMS: identical ranks, one test")]
            if merged
            else list(READINGS)
        )
        for column, reading in readings:
            usable = both if merged else df.dropna(subset=[column])
            outcome = fn(usable[depth], usable[column])
            if merged:
                outcome = claims.Outcome(outcome.verdict, claims.clauses(outcome.value, readings_range(usable)))
            records = describe(rec.preset, gpt_data_label(usable), usable.get("seed", [0]), len(usable))
            rows.append(
                claim_row(
                    f"AGmax falls with depth ({what}, {reading})",
                    paper.AG_DEPTH_TREND,
                    fn,
                    outcome,
                    records,
                    rec.preset,
                    design=sweep_design("falls_with_depth", usable[depth]),
                )
            )
    return rows


def gpt_data_label(df: pd.DataFrame) -> str:
    """The text source of decoder runs (05, 04) as their configs name it."""
    data = df["data"].iloc[0] if "data" in df and len(df) else {}
    return str(data.get("source", "?")) if isinstance(data, dict) else "?"


def reduction_summaries(
    t: pd.DataFrame, models: Iterable[str], metric: str
) -> tuple[dict[str, tuple[float, float, int]], bool]:
    """Per architecture, (mean, sample std, seeds) of the per-seed ``scratch - growth`` ``metric`` from 03's table.

    Paired: its ``<metric>_reduction`` and ``_std`` columns. A table written before 03 kept the paired training-loss
    spread has only each side's std: then the unpaired spread ``sqrt(std_g^2 + std_s^2)`` (the second value is False).
    """
    paired = f"{metric}_reduction_std" in t.columns
    out = {}
    for m in models:
        row = t.loc[m]
        if paired:
            out[m] = (float(row[f"{metric}_reduction"]), float(row[f"{metric}_reduction_std"]), int(row["seeds"]))
        else:
            std = math.hypot(float(row[f"growth_{metric}_std"]), float(row[f"scratch_{metric}_std"]))
            out[m] = (float(row[f"scratch_{metric}"] - row[f"growth_{metric}"]), std, int(row["seeds"]))
    return out, paired


TEST_LOSS_CLAIMS = (1, 2, 3, 5, 6, 7, 8)  # positions in growth_claims' specs whose claim is about test loss


def growth_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Growth vs scratch: the means, the relative and absolute reductions, per-architecture winners; per dataset.

    The verdicts read the table whose scratch arm had the grown models' epochs in all (03's ``total`` arm: equal
    budgets, docs/decisions.md, section "Function-preserving growth"); the same numbers at the other arm's budget
    (the sweep's fixed epochs) stand beside them, without a verdict. Without an equal-budget table the rows are not
    run (no verdict rests on unequal budgets), the other arm's numbers still shown. Rows about test loss give each
    side's test accuracy beside it.
    """
    mean_train = f"growth {paper.GROWTH_MEAN_TRAIN_LOSS['growth']} vs scratch {paper.GROWTH_MEAN_TRAIN_LOSS['scratch']}"
    mean_test = f"growth {paper.GROWTH_MEAN_TEST_LOSS['growth']} vs scratch {paper.GROWTH_MEAN_TEST_LOSS['scratch']}"
    specs = [
        ("growth's mean training loss is below scratch's", mean_train, claims.growth_lower_mean),
        ("growth's mean test loss is below scratch's", mean_test, claims.growth_lower_mean),
        ("relative test-loss reduction of the means", f"{paper.GROWTH_TEST_RELATIVE_REDUCTION:.1%}", claims.paper_size),
        (
            "growth's test loss is lower for all four architectures",
            ", ".join(paper.GROWTH_LOWER_TEST_LOSS),
            claims.growth_wins_everywhere,
        ),
        (
            "growth's training loss is lower at ResNet-10, -11 and -13",
            ", ".join(paper.GROWTH_LOWER_TRAIN_LOSS),
            claims.growth_wins_everywhere,
        ),
        *(
            spec
            for m, v in paper.GROWTH_TEST_ABS_REDUCTION_RANGE.items()
            for spec in (
                (f"absolute test-loss reduction at {m}: direction", f"{v} (growth lower)", claims.paper_direction),
                (f"absolute test-loss reduction at {m}: size", f"{v}", claims.paper_size),
            )
        ),
    ]
    if not rec.growth:
        return [claim_row(c, p, fn, None, f"none: {cmd['growth']}", rec.preset) for c, p, fn in specs]
    rows = []
    for dataset in sorted({t.dataset for t in rec.growth}):
        equal = next((t for t in rec.growth if t.dataset == dataset and t.equal_budget), None)
        other = next((t for t in rec.growth if t.dataset == dataset and not t.equal_budget), None)
        beside = growth_outcomes(other) if other is not None else None
        shown = equal or other
        accuracy = test_accuracies(shown)
        for i, (claim, said, fn) in enumerate(specs):
            values = []
            if i in TEST_LOSS_CLAIMS:
                values.append(accuracy[claim_models(claim)])
            if beside is not None:
                values.append(f"beside it, {other.budget_words()}: {beside[i].value}")
            if equal is None:
                row = claim_row(
                    f"{claim} ({dataset})",
                    said,
                    fn,
                    None,
                    f"no equal-budget scratch arm: {cmd['growth']} (its default arms); "
                    + growth_records(rec.preset, other),
                    rec.preset,
                )
                row["reproduced"] = "; ".join(values)
            else:
                outcome = growth_outcomes(equal)[i]
                value = "; ".join([f"at {equal.budget_words()}: {outcome.value}", *values])
                records = growth_records(rec.preset, equal) + (f"; beside it {other.path.name}" if other else "")
                row = claim_row(
                    f"{claim} ({dataset})",
                    said,
                    fn,
                    claims.Outcome(outcome.verdict, value),
                    records,
                    rec.preset,
                    design=growth_design(equal, fn, claim, said),
                )
            rows.append(row)
    return rows


def growth_records(preset: str, table) -> str:
    """The records column of a growth row: preset, dataset, seeds, runs, architectures, budgets, the table file."""
    t = table.rows.set_index("model")
    present = [m for m in t.index if m != "mean"]
    _, paired = reduction_summaries(t, present, "train_loss")
    return describe(
        preset,
        table.dataset,
        table.seeds,
        2 * len(present) * len(table.seeds),
        f"{', '.join(present)}; {table.budget()}; {table.path.name}"
        + ("" if paired else "; training-loss spread unpaired (table without train_loss_reduction_std)"),
    )


def growth_outcomes(table) -> list[claims.Outcome]:
    """Every growth rule's outcome on one of 03's tables, in the order of :func:`growth_claims`' specs."""
    t = table.rows.set_index("model")
    mean = t.loc["mean"]
    present = [m for m in t.index if m != "mean"]
    test, _ = reduction_summaries(t, present, "test_loss")
    train, _ = reduction_summaries(t, present, "train_loss")
    mean_train_est = claims.over_seeds(*reduction_summaries(t, ["mean"], "train_loss")[0]["mean"])
    mean_test_est = claims.over_seeds(*reduction_summaries(t, ["mean"], "test_loss")[0]["mean"])
    scale = float(mean["scratch_test_loss"])
    relative = (
        None
        if mean_test_est is None
        else claims.Estimate(mean_test_est.mean / scale, mean_test_est.se / scale, mean_test_est.df)
    )
    pooled = claims.pooled_estimates(test) or {}
    outcomes = [
        claims.growth_lower_mean(mean["growth_train_loss"], mean["scratch_train_loss"], mean_train_est),
        claims.growth_lower_mean(mean["growth_test_loss"], mean["scratch_test_loss"], mean_test_est),
        claims.paper_size(relative, paper.GROWTH_TEST_RELATIVE_REDUCTION),
        claims.growth_wins_everywhere(test, [f"ResNet-{d}" for d in paper.GROWTH_DEPTHS]),
        claims.growth_wins_everywhere(train, paper.GROWTH_LOWER_TRAIN_LOSS),
    ]
    for model, value in paper.GROWTH_TEST_ABS_REDUCTION_RANGE.items():
        if model in t.index:
            outcomes += [claims.paper_direction(pooled.get(model), value), claims.paper_size(pooled.get(model), value)]
        else:
            outcomes += [claims.Outcome(claims.UNDECIDABLE, f"{model} not run")] * 2
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


def matched_rows(matched: pd.DataFrame) -> pd.DataFrame:
    """The rows the matched-insertion claims use: the end-of-stage-1 candidate at every depth (whichever
    ``--candidate`` rule produced it: ``stage1-end``, ``next`` at N = 0 mod 3, ``all``), the closed-form fit and the
    paper's alpha; one row per (dataset, depth, seed)."""
    if matched.empty:
        return matched
    at_stage1 = matched["candidate"] == matched["depth_n"].map(lambda n: matched_insertion.stage_end_candidate(int(n)))
    chosen = matched[
        at_stage1
        & (matched["fit"] == "closed-form")
        & matched["alpha"].map(lambda a: math.isclose(a, paper.MATCHED_INSERTION_ALPHA))
    ]
    preferred = chosen.assign(_rank=(chosen["candidate_rule"] != matched_insertion.DEFAULT_CANDIDATE).astype(int))
    return (
        preferred.sort_values(["_rank", "run"])
        .drop_duplicates(["dataset", "depth_label", "seed"])
        .drop(columns="_rank")
    )


def floor_flags(group: pd.DataFrame) -> pd.Series | None:
    """Per row, whether 06 found its change within the run's measurement floor (None: records without a floor).

    Read from the record's ``measured_change_precision`` (06's words, :data:`common.claims.BELOW_FLOOR`), or as
    ``|measured_change| <= measurement_floor`` where only the floor is recorded.
    """
    if "measured_change_precision" in group and group["measured_change_precision"].notna().any():
        return group["measured_change_precision"] == claims.BELOW_FLOOR
    if "measurement_floor" in group and group["measurement_floor"].notna().any():
        return group["measured_change"].abs() <= group["measurement_floor"].fillna(-math.inf)
    return None


def matched_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Matched insertion at the paper's alpha, at one kind of candidate (the end of stage 1) at every depth: the drop
    does not rise with depth and equals the paper's (claims, on the log scale, drops within the measurement floor or of
    the wrong sign left out and named); a drop at every depth (an identity check)."""
    said = ", ".join(f"ResNet-{d}: {v:.0e}" for d, v in sorted(paper.MATCHED_INSERTION_REDUCTION.items()))
    specs = [
        ("matched insertion lowers the training loss at every depth", said, claims.lowers_loss_everywhere, IDENTITY),
        ("the matched-insertion drop does not increase with depth", said, claims.drop_not_increasing, CLAIM),
        ("the matched-insertion drops equal the paper's", said, claims.matches_paper_precision, CLAIM),
    ]
    rows_df = matched_rows(rec.matched)
    where = f"candidate: end of stage 1 (input of stage 2's first block), alpha {paper.MATCHED_INSERTION_ALPHA:g}"
    if rows_df.empty:
        return [
            claim_row(c, p, fn, None, f"none at the {where}: {cmd['matched']}", rec.preset, kind)
            for c, p, fn, kind in specs
        ]
    out = []
    for dataset, group in rows_df.groupby("dataset"):
        flags = floor_flags(group)
        group = group.assign(_below=flags if flags is not None else False)
        per_seed = {
            int(d): dict(zip(g["seed"].astype(int), g["measured_change"].astype(float), strict=True))
            for d, g in group.groupby("depth_label")
        }
        below = (
            {
                int(d): dict(zip(g["seed"].astype(int), g["_below"], strict=True))
                for d, g in group.groupby("depth_label")
            }
            if flags is not None
            else None
        )
        measured = {
            d: [c for seed, c in v.items() if not (below and below[d].get(seed))] for d, v in per_seed.items()
        }  # the identity check reads no sign off a change within the floor
        means = {d: sum(v) / len(v) for d, v in measured.items() if v}
        records = describe(
            rec.preset,
            dataset,
            group["seed"],
            group["run"].nunique(),
            f"ResNet-{', -'.join(map(str, sorted(per_seed)))}, {where}"
            + ("" if flags is not None else "; no measurement floor recorded"),
        )
        drops = claims.log_drops(per_seed, below)
        unmeasured = [f"ResNet-{d}" for d, v in measured.items() if not v]
        everywhere = claims.lowers_loss_everywhere(means)
        if unmeasured:
            everywhere = claims.Outcome(
                everywhere.verdict,
                claims.clauses(everywhere.value, f"{', '.join(unmeasured)}: every seed {claims.BELOW_FLOOR}"),
            )
        outcomes = [
            everywhere,
            claims.drop_not_increasing(per_seed, below),
            claims.matches_paper_precision(per_seed, paper.MATCHED_INSERTION_REDUCTION, below),
        ]
        designs = [None, matched_design("drop_not_increasing", drops), matched_design("matches_paper_precision", drops)]
        exact = group.get("predicted_change_exact_targets")
        if exact is not None and exact.notna().any():  # another reading of H.1's scale (docs/decisions.md; not judged)
            drops_exact = group.assign(x=-exact).groupby("depth_label")["x"].mean()
            beside = ", ".join(f"ResNet-{int(d)}: {v:.1e}" for d, v in drops_exact.items())
            outcomes[2] = claims.Outcome(
                outcomes[2].verdict, f"{outcomes[2].value}; beside it, the exact-target reading: {beside}"
            )
        out += [
            claim_row(f"{c} ({dataset})", p, fn, o, records, rec.preset, kind, design=d)
            for (c, p, fn, kind), o, d in zip(specs, outcomes, designs, strict=True)
        ]
    return out


SCALING_CLAIMS = (  # (claim, family, tensor, exponent of the verdict, Step 2's exponent beside it, paper value, side or None for ±0.1)
    ("fc-tanh: beta", "fc-tanh", "A", "max_norm_exponent", "beta", paper.COHEN_TANH_BETA, None),
    ("fc-tanh: alpha from max |delta_k|", "fc-tanh", "delta", "alpha", None, paper.COHEN_TANH_ALPHA, None),
    (
        "fc-relu: alpha + beta from |delta_k| A_k",
        "fc-relu",
        "delta_A",
        "alpha_plus_beta_max_norm",
        "alpha_plus_beta",
        paper.COHEN_RELU_ALPHA_PLUS_BETA,
        None,
    ),
    (
        "ResNet sweep (BatchNorm folded): max norm exponent ~0",
        "sweep",
        None,
        "max_norm_exponent",
        None,
        paper.COHEN_CONV_MAX_NORM_EXPONENT,
        None,
    ),
    (
        "ResNet sweep (BatchNorm folded): scaled increments bounded, nu >= 0",
        "sweep",
        None,
        "nu_max_norm",
        "nu",
        paper.COHEN_CONV_BOUNDED["nu"],
        ">= 0",
    ),
    (
        "ResNet sweep (BatchNorm folded): root sum of squares bounded",
        "sweep",
        None,
        "rss_slope",
        None,
        paper.COHEN_CONV_BOUNDED["rss_slope"],
        "<= 0",
    ),
)


def scaling_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Cohen et al.'s exponents against 07's fits (Frobenius norm): FC families within ±0.1, the sweep's bounds.

    A beta-based verdict uses the max-norm estimator (how their figures were read); Step 2's cumulative-sum
    estimate (their text) is shown beside it in the reproduced value, not used."""
    rows = []
    for claim, family, tensor, exponent, step2, said, side in SCALING_CLAIMS:
        fn = claims.exponent_within_tolerance if side is None else claims.sign_within_tolerance
        paper_text = f"{said}" if side is None or isinstance(said, str) else f"{side}"
        if step2 is not None:
            claim = f"{claim}, {scaling.MAX_NORM_ESTIMATOR}"
        ex = rec.exponents
        mine = ex[(ex["family"] == family) & (ex["norm"] == "fro")] if len(ex) else ex
        if tensor is not None and len(mine):
            mine = mine[mine["tensor"] == tensor]
        if mine.empty or not (mine["exponent"] == exponent).any():
            rows.append(claim_row(claim, paper_text, fn, None, f"none: {cmd['scaling']}", rec.preset))
            continue
        for dataset, both in mine.groupby("dataset"):
            group = both[both["exponent"] == exponent]
            runs_used = rec.scaling[(rec.scaling["family"] == family) & (rec.scaling["dataset"] == dataset)]
            records = describe(
                rec.preset,
                dataset,
                runs_used["seed"],
                runs_used["run"].nunique(),
                f"depths {sorted(runs_used['depth'].unique().tolist())}",
            )
            fits = {exponent_label(r, family): (r["estimate"], r["ci_low"], r["ci_high"]) for _, r in group.iterrows()}
            outcome = fn(
                fits, said if side is None else side
            )  # the fit's intervals, so the sign rows' verdicts are statistical too
            if step2 is not None:
                beside = both[both["exponent"] == step2]
                shown = ", ".join(
                    f"{exponent_label(r, family) + ': ' if exponent_label(r, family) else ''}{r['estimate']:.3f}"
                    + (f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if side is None else "")
                    for _, r in beside.iterrows()
                    if r["status"] == "ok"
                )
                outcome = claims.Outcome(
                    outcome.verdict,
                    f"{outcome.value}; {scaling.STEP2_ESTIMATOR}, not used for the verdict: {shown or 'not fitted'}",
                )
            points = rec.scaling[
                (rec.scaling["family"] == family)
                & (rec.scaling["dataset"] == dataset)
                & (rec.scaling["norm"] == "fro")
                & (rec.scaling["depth"] >= weight_scaling.MIN_BLOCKS)
            ]
            fitted = group[group["status"] == "ok"]
            fits = [
                points[(points["stage"] == r["stage"]) & (points["tensor"] == r["tensor"])]["depth"].tolist()
                for _, r in fitted.iterrows()
            ]
            rows.append(
                claim_row(
                    f"{claim} ({dataset})",
                    paper_text,
                    fn,
                    outcome,
                    records,
                    rec.preset,
                    design=scaling_design(fn, fits),
                )
            )
    return rows


def exponent_label(row, family: str) -> str:
    """How an exponent row is named in a claim's reproduced value: the sweep's stage and tensor, nothing for an FC family."""
    return f"stage {row['stage']} {row['tensor']}" if family == "sweep" else ""


def claim_rows(rec: Records, power: claim_rates.PowerTable | None = None) -> list[dict]:
    """Every row of the report, in the paper's order (``kind``: claim or identity check), each with its verdict cell
    and its power at the records' own design, looked up in ``power`` (default: the committed table,
    :data:`common.experiments.claim_rates.POWER_TABLE`). A row about test performance states the regime of the
    sweep on its dataset (:func:`regime`)."""
    power = claim_rates.PowerTable.load() if power is None else power
    cmd = commands(rec.preset, rec.out)
    rows = [
        *resnet_claims(rec, cmd),
        *projection_claims(rec, cmd),
        *saturation_claims(rec, cmd),
        *decoder_claims(rec, cmd),
        *growth_claims(rec, cmd),
        *matched_claims(rec, cmd),
        *scaling_claims(rec, cmd),
    ]
    regimes = {d: regime(g) for d, g in rec.sweep.groupby("dataset")} if len(rec.sweep) else {}
    for row in rows:
        said = regimes.get(row_dataset(row))
        if said and about_test_performance(row) and row["_outcome"] is not None:
            row["reproduced"] = claims.clauses(row["reproduced"], f"regime of the sweep: {said}")
    return [{"id": i + 1, **finish_row(r, power)} for i, r in enumerate(rows)]


def row_dataset(row: dict) -> str | None:
    """The dataset of a row with records (its records cell is :func:`describe`'s: ``preset, dataset, ...``)."""
    parts = row["records"].split(", ")
    return parts[1] if len(parts) > 2 and parts[0] == row["scale"] else None


__all__ = [
    "CLAIM",
    "FIT_TARGET",
    "IDENTITY",
    "MINI_NOTE",
    "SCALE_NOTES",
    "SMOKE_NOTE",
    "claim_row",
    "claim_rows",
    "commands",
    "matched_rows",
]
