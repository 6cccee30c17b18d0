"""The claims report's rows about the matched insertion (script 06), at the end-of-stage-1 candidate."""

from __future__ import annotations

import math

import pandas as pd

from common.experiments import matched_insertion
from common.presets import paper
from common.presets.matched_insertion import DEFAULT_CANDIDATE
from common.report.records import Records
from common.report.rules import identities, verdicts
from common.report.rules import matched_insertion as matched_insertion_rules
from common.report.verdict_row import CLAIM, IDENTITY, claim_row, describe, matched_design


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
    preferred = chosen.assign(_rank=(chosen["candidate_rule"] != DEFAULT_CANDIDATE).astype(int))
    return (
        preferred.sort_values(["_rank", "run"])
        .drop_duplicates(["dataset", "depth_label", "seed"])
        .drop(columns="_rank")
    )


def floor_flags(group: pd.DataFrame) -> pd.Series | None:
    """Per row, whether 06 found its change within the run's measurement floor (None: records without a floor).

    Read from the record's ``measured_change_precision`` (06's words, :data:`common.report.rules.matched_insertion.BELOW_FLOOR`), or as
    ``|measured_change| <= measurement_floor`` where only the floor is recorded.
    """
    if "measured_change_precision" in group and group["measured_change_precision"].notna().any():
        return group["measured_change_precision"] == matched_insertion_rules.BELOW_FLOOR
    if "measurement_floor" in group and group["measurement_floor"].notna().any():
        return group["measured_change"].abs() <= group["measurement_floor"].fillna(-math.inf)
    return None


def matched_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Matched insertion at the paper's alpha, at one kind of candidate (the end of stage 1) at every depth: the drop
    does not rise with depth and equals the paper's (claims, on the log scale, drops within the measurement floor or of
    the wrong sign left out and named); a drop at every depth (an identity check)."""
    specs = matched_specs()
    rows_df = matched_rows(rec.matched)
    where = f"candidate: end of stage 1 (input of stage 2's first block), alpha {paper.MATCHED_INSERTION_ALPHA:g}"
    if rows_df.empty:
        return [
            claim_row(c, p, fn, None, f"none at the {where}: {cmd['matched']}", rec.preset, kind)
            for c, p, fn, kind in specs
        ]
    out = []
    for dataset, group in rows_df.groupby("dataset"):
        out += dataset_rows(rec.preset, dataset, group, specs, where)
    return out


def matched_specs() -> list[tuple]:
    """``(claim, the paper's value, rule, kind)`` of the three rows, in the report's order."""
    said = ", ".join(f"ResNet-{d}: {v:.0e}" for d, v in sorted(paper.MATCHED_INSERTION_REDUCTION.items()))
    return [
        (
            "matched insertion lowers the training loss at every depth",
            said,
            identities.lowers_loss_everywhere,
            IDENTITY,
        ),
        (
            "the matched-insertion drop does not increase with depth",
            said,
            matched_insertion_rules.drop_not_increasing,
            CLAIM,
        ),
        ("the matched-insertion drops equal the paper's", said, matched_insertion_rules.matches_paper_precision, CLAIM),
    ]


def dataset_rows(preset: str, dataset: str, group: pd.DataFrame, specs: list[tuple], where: str) -> list[dict]:
    """The three rows of one dataset, read off each depth's and seed's measured change and whether it lies within the
    run's measurement floor (:func:`floor_flags`)."""
    flags = floor_flags(group)
    group = group.assign(_below=flags if flags is not None else False)
    per_seed = {
        int(d): dict(zip(g["seed"].astype(int), g["measured_change"].astype(float), strict=True))
        for d, g in group.groupby("depth_label")
    }
    below = (
        {int(d): dict(zip(g["seed"].astype(int), g["_below"], strict=True)) for d, g in group.groupby("depth_label")}
        if flags is not None
        else None
    )
    records = describe(
        preset,
        dataset,
        group["seed"],
        group["run"].nunique(),
        f"ResNet-{', -'.join(map(str, sorted(per_seed)))}, {where}"
        + ("" if flags is not None else "; no measurement floor recorded"),
    )
    drops = matched_insertion_rules.log_drops(per_seed, below)
    outcomes = [
        lowers_loss_at_every_depth(per_seed, below),
        matched_insertion_rules.drop_not_increasing(per_seed, below),
        with_exact_targets(
            group, matched_insertion_rules.matches_paper_precision(per_seed, paper.MATCHED_INSERTION_REDUCTION, below)
        ),
    ]
    designs = [None, matched_design("drop_not_increasing", drops), matched_design("matches_paper_precision", drops)]
    return [
        claim_row(f"{c} ({dataset})", p, fn, o, records, preset, kind, design=d)
        for (c, p, fn, kind), o, d in zip(specs, outcomes, designs, strict=True)
    ]


def lowers_loss_at_every_depth(per_seed: dict[int, dict[int, float]], below: dict | None) -> verdicts.Outcome:
    """The identity check on each depth's mean change; a change within the floor gives no sign and is left out, a
    depth with every seed within it named."""
    measured = {
        d: [c for seed, c in v.items() if not (below and below[d].get(seed))] for d, v in per_seed.items()
    }  # the identity check reads no sign off a change within the floor
    means = {d: sum(v) / len(v) for d, v in measured.items() if v}
    unmeasured = [f"ResNet-{d}" for d, v in measured.items() if not v]
    everywhere = identities.lowers_loss_everywhere(means)
    if unmeasured:
        everywhere = verdicts.Outcome(
            everywhere.verdict,
            verdicts.clauses(
                everywhere.value, f"{', '.join(unmeasured)}: every seed {matched_insertion_rules.BELOW_FLOOR}"
            ),
        )
    return everywhere


def with_exact_targets(group: pd.DataFrame, outcome: verdicts.Outcome) -> verdicts.Outcome:
    """``outcome`` with the drops of the exact-target reading beside it, where the records hold it."""
    exact = group.get("predicted_change_exact_targets")
    if exact is not None and exact.notna().any():  # another reading of H.1's scale (docs/decisions.md; not judged)
        drops_exact = group.assign(x=-exact).groupby("depth_label")["x"].mean()
        beside = ", ".join(f"ResNet-{int(d)}: {v:.1e}" for d, v in drops_exact.items())
        return verdicts.Outcome(outcome.verdict, f"{outcome.value}; beside it, the exact-target reading: {beside}")
    return outcome


__all__ = [
    "floor_flags",
    "matched_claims",
    "matched_rows",
]
