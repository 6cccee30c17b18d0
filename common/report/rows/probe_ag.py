"""The claims report's rows about AGmax (scripts 01, 02, 04, 05): across ResNet depth per dataset and reading, App.
G at the deepest depth probed, the decoders' depth trends, and the identity check V_S,l <= AG_l."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import pandas as pd

from common.experiments.probe_ag_summary import saturation_summary
from common.models.resnet import BACKBONE_DEPTH
from common.presets import paper
from common.report.records import Records
from common.report.rules import app_g, identities, margins, statistics, verdicts
from common.report.rules import depth as depth_rules
from common.report.rules.verdicts import fmt
from common.report.verdict_row import (
    CANDIDATE_COLUMNS,
    IDENTITY,
    LINE_RULES,
    READINGS,
    STEM_OUTPUT,
    KnownPower,
    claim_row,
    describe,
    identical_ranks,
    line_note,
    readings_range,
    sweep_design,
    unfit_note,
    unfit_runs,
)


def without_stem(candidates: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (dataset, depth_n, seed), the max of ``column`` over the candidates other than the stem output."""
    if candidates.empty or column not in candidates or "name" not in candidates:
        return pd.DataFrame(columns=["dataset", "depth_n", "seed", column])
    rest = candidates[candidates["name"] != STEM_OUTPUT]
    return rest.groupby(["dataset", "depth_n", "seed"], as_index=False)[column].max()


# (claim, the paper's words, rule, its case in claim_rates, rank-based: one row where both readings order the runs
# identically, the rule on a dataset's runs and a reading's column)
RESNET_SPECS = (
    (
        "AGmax falls with depth",
        paper.AG_DEPTH_TREND,
        depth_rules.falls_with_depth,
        "falls_with_depth",
        True,
        lambda g, c: depth_rules.falls_with_depth(g["depth_n"], g[c]),
    ),
    (
        f"once below {paper.LOW_SIGNAL_AG:g}, AGmax stays below it",
        paper.LOW_SIGNAL_PLATEAU,
        depth_rules.stays_below_line,
        "stays_below_line",
        False,
        lambda g, c: depth_rules.stays_below_line(g["depth_n"], g[c], paper.LOW_SIGNAL_AG),
    ),
    (
        f"low-signal plateau: past N*, test loss gains less than {margins.PLATEAU_MARGIN:.0%}",
        paper.LOW_SIGNAL_PLATEAU,
        depth_rules.plateau_within_margin,
        "plateau_within_margin",
        False,
        lambda g, c: depth_rules.plateau_within_margin(g["depth_n"], g[c], g["test_loss"], paper.LOW_SIGNAL_AG),
    ),
    (
        "beyond the paper: AGmax is explained by the training loss alone",
        "not claimed by the paper (reviewers' question)",
        depth_rules.explained_by_training_loss,
        "explained_by_training_loss",
        True,
        lambda g, c: depth_rules.explained_by_training_loss(g["depth_n"], g[c], g["train_loss"]),
    ),
)


def resnet_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """AGmax across ResNet depth, per dataset: falls, stays low, plateau, training loss alone.

    Per reading of AGmax (batch-mean ``AG_l``, per-example RMS); a rank-based rule (the fall, the training loss
    alone) whose two readings order the runs identically is one test and one row, with both readings' values in it.
    The two rules at the paper's 5e-3 line are "not comparable" (the paper gives no normalisation); every row names
    the depths that did not fit, and the plateau states the test-loss regime of the sweep.
    """
    if rec.probe.empty:
        return [
            claim_row(
                f"{claim} (ResNet sweep, any dataset, {reading})", said, fn, None, f"none: {cmd['probe']}", rec.preset
            )
            for claim, said, fn, *_ in RESNET_SPECS
            for _, reading in READINGS
        ]
    return [row for dataset in sorted(rec.probe["dataset"].unique()) for row in resnet_dataset_rows(rec, dataset)]


def resnet_dataset_rows(rec: Records, dataset: str) -> list[dict]:
    """:func:`resnet_claims`' rows of one dataset: every spec of :data:`RESNET_SPECS` on each reading (one row for
    both when a rank-based rule sees identical ranks)."""
    rows = []
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
    for claim, said, fn, case, rank_based, run in RESNET_SPECS:
        if rank_based and len(both) and identical_ranks(both["ag_max"], both["ag_max_per_example"]):
            readings = [(READINGS[0][0], "batch-mean AG_l and per-example RMS: identical ranks, one test")]
        else:
            readings = list(READINGS)
        for column, reading in readings:
            usable = group.dropna(subset=[column, "test_loss", "train_loss"]) if len(readings) > 1 else both
            outcome = run(usable, column)
            value = outcome.value
            if len(readings) == 1:
                value = verdicts.clauses(value, readings_range(usable))
            if fn is depth_rules.falls_with_depth:
                value = verdicts.clauses(
                    value, stem_note(usable, [c for c, _ in READINGS] if len(readings) == 1 else [column])
                )
            comparable = fn not in LINE_RULES
            if not comparable:
                value = verdicts.clauses(
                    line_note(usable.get("batch_size", [])),
                    f"the rule at {paper.LOW_SIGNAL_AG:g} as read: {outcome.verdict}: {value}",
                )
            records = describe(rec.preset, dataset, usable["seed"], len(usable), setting)
            rows.append(
                claim_row(
                    f"{claim} (ResNet sweep, {dataset}, {reading})",
                    said,
                    fn,
                    verdicts.Outcome(outcome.verdict, value),
                    records,
                    rec.preset,
                    design=sweep_design(case, usable["depth_n"]),
                    comparable=comparable,
                )
            )
    return rows


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
            rho, p = statistics.spearman(usable["depth_n"], rest)
            bits.append(
                f"without it AGmax {fmt(float(rest.min()))}-{fmt(float(rest.max()))}, rho = {rho:+.2f}, p = {fmt(p)}"
            )
            signature.append(tuple(statistics.ranks(rest)))
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
    claim, fn = "the exact growth value never exceeds AG_l at any candidate", identities.projection_never_exceeds
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
        app_g.saturated_within_delta,
    )
    if rec.probe.empty:
        return [claim_row(claim, paper.SEPARATED_TEST, fn, None, f"none: {cmd['probe']}", rec.preset)]
    rows = []
    for dataset, group in rec.probe.groupby("dataset"):
        deepest = group[group["depth_n"] == group["depth_n"].max()]
        found = deepest.dropna(subset=["saturation"]) if "saturation" in deepest else deepest.iloc[:0]
        summaries = {
            f"ResNet-{r['depth_label']} seed {r['seed']}": saturation_summary(r["saturation"])
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
    fn = depth_rules.falls_with_depth
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
                outcome = verdicts.Outcome(outcome.verdict, verdicts.clauses(outcome.value, readings_range(usable)))
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


__all__ = [
    "app_g_power",
    "decoder_claims",
    "gpt_data_label",
    "projection_claims",
    "resnet_claims",
    "saturation_claims",
    "sources_note",
    "stem_note",
    "without_stem",
]
