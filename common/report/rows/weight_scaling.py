"""The claims report's rows about Cohen et al.'s weight-scaling exponents (script 07)."""

from __future__ import annotations

from pathlib import Path

from common.experiments import weight_scaling
from common.presets import paper
from common.report.records import Records
from common.report.rules import margins
from common.report.rules import verdicts as verdicts_rules
from common.report.rules import weight_scaling as weight_scaling_rules
from common.report.verdict_row import claim_row, describe, scaling_design
from common.runs import record_io
from common.science import scaling

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
        "ResNet sweep (U's BatchNorm folded, V raw): max norm exponent ~0",
        "sweep",
        None,
        "max_norm_exponent",
        None,
        paper.COHEN_CONV_MAX_NORM_EXPONENT,
        None,
    ),
    (
        "ResNet sweep (U's BatchNorm folded, V raw): scaled increments bounded, nu >= 0",
        "sweep",
        None,
        "nu_max_norm",
        "nu",
        paper.COHEN_CONV_BOUNDED["nu"],
        ">= 0",
    ),
    (
        "ResNet sweep (U's BatchNorm folded, V raw): root sum of squares bounded",
        "sweep",
        None,
        "rss_slope",
        None,
        paper.COHEN_CONV_BOUNDED["rss_slope"],
        "<= 0",
    ),
)


# The peer check (benchmarks/peer_cohen_fc.py, issue 48): Cohen et al.'s own model and loop at 07's settings.
PEER_CHECK = "benchmarks/peer_cohen_fc.py"
PEER_EXPONENTS = {
    ("fc-tanh", "max_norm_exponent"): "beta_max_norm",
    ("fc-tanh", "alpha"): "alpha",
}  # claim -> record key
PEER_VARIANTS = {  # record variant -> how a row names it
    "corrected": "with a correct per-epoch permutation",
    "published": "as published (1,000 examples, its duplicating shuffle)",
}


def peer_check_path(out: str | Path, family: str, preset: str) -> Path:
    """Where the peer check of ``family`` at ``preset`` writes its record: beside 07's records."""
    return Path(out) / weight_scaling.EXPERIMENT / f"peer_check-{family}-{preset}.json"


def read_peer_check(out: str | Path, family: str, preset: str) -> dict | None:
    """The peer check's record of ``family`` at ``preset`` under ``out``, or None when it was not run."""
    path = peer_check_path(out, family, preset)
    return record_io.read_json(path) if path.is_file() else None


def peer_words(record: dict, key: str, said: float) -> str | None:
    """What the authors' code gave for exponent ``key`` at the same settings, judged by the row's own rule
    (:func:`claims.exponent_within_tolerance`, the verdict itself unchanged); None when the record lacks it."""
    fits = {v: got["exponents"][key] for v, got in record.get("peer", {}).items() if key in got.get("exponents", {})}
    if not fits:
        return None
    shown = ", ".join(f"{PEER_VARIANTS.get(v, v)} {f[0]:.3f} [{f[1]:.3f}, {f[2]:.3f}]" for v, f in fits.items())
    seeds = ",".join(map(str, record["settings"]["seeds"]))
    text = f"the authors' code at these settings ({PEER_CHECK}, seeds {seeds}): {shown}"
    verdicts = {weight_scaling_rules.exponent_within_tolerance({"": tuple(f)}, said).verdict for f in fits.values()}
    if verdicts == {verdicts_rules.FAILS}:
        return f"{text}; it too lies outside ±{margins.EXPONENT_TOLERANCE} of {said}: the paper's figure comes from a setup these settings do not match"
    if verdicts == {verdicts_rules.HOLDS}:
        return f"{text}; within ±{margins.EXPONENT_TOLERANCE} of {said}: the difference lies in 07's implementation"
    return text


def scaling_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Cohen et al.'s exponents against 07's fits (Frobenius norm): FC families within ±0.1, the sweep's bounds.

    A beta-based verdict uses the max-norm estimator (how their figures were read); Step 2's cumulative-sum
    estimate (their text) is shown beside it in the reproduced value, not used."""
    rows = []
    for spec in SCALING_CLAIMS:
        claim, family, tensor, exponent, step2, said, side = spec
        if step2 is not None:
            claim = f"{claim}, {scaling.MAX_NORM_ESTIMATOR}"
        ex = rec.exponents
        mine = ex[(ex["family"] == family) & (ex["norm"] == "fro")] if len(ex) else ex
        if tensor is not None and len(mine):
            mine = mine[mine["tensor"] == tensor]
        if mine.empty or not (mine["exponent"] == exponent).any():
            rows.append(
                claim_row(claim, paper_value(said, side), claim_rule(side), None, f"none: {cmd['scaling']}", rec.preset)
            )
            continue
        rows += [dataset_row(rec, spec, claim, dataset, both) for dataset, both in mine.groupby("dataset")]
    return rows


def claim_rule(side: str | None):
    """The rule of a claim: an exponent within ±0.1 of the paper's, or (``side``) its sign."""
    if side is None:
        return weight_scaling_rules.exponent_within_tolerance
    return weight_scaling_rules.sign_within_tolerance


def paper_value(said, side: str | None) -> str:
    """The paper's value as the row shows it: the exponent, or the side of a sign claim."""
    return f"{said}" if side is None or isinstance(said, str) else f"{side}"


def dataset_row(rec: Records, spec: tuple, claim: str, dataset: str, both) -> dict:
    """One claim's row at one dataset (``both``: its exponent rows): the verdict read off the fit's intervals, Step 2's
    estimate and the peers' check beside it."""
    _, family, _, exponent, step2, said, side = spec
    fn = claim_rule(side)
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
    # the fit's intervals, so the sign rows' verdicts are statistical too
    outcome = fn(fits, said if side is None else side)
    if step2 is not None:
        outcome = with_step2(outcome, both[both["exponent"] == step2], family, side)
    peer = read_peer_check(rec.out, family, rec.preset) if (family, exponent) in PEER_EXPONENTS else None
    beside_peer = peer_words(peer, PEER_EXPONENTS[(family, exponent)], said) if peer else None
    if beside_peer:
        outcome = verdicts_rules.Outcome(outcome.verdict, f"{outcome.value}; {beside_peer}")
    design = scaling_design(fn, fitted_depths(rec, family, dataset, group))
    return claim_row(f"{claim} ({dataset})", paper_value(said, side), fn, outcome, records, rec.preset, design=design)


def with_step2(outcome: verdicts_rules.Outcome, beside, family: str, side: str | None) -> verdicts_rules.Outcome:
    """``outcome`` with Step 2's fitted estimates (``beside``: its exponent rows) shown after it, not judged."""
    shown = ", ".join(
        f"{exponent_label(r, family) + ': ' if exponent_label(r, family) else ''}{r['estimate']:.3f}"
        + (f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if side is None else "")
        for _, r in beside.iterrows()
        if r["status"] == "ok"
    )
    return verdicts_rules.Outcome(
        outcome.verdict,
        f"{outcome.value}; {scaling.STEP2_ESTIMATOR}, not used for the verdict: {shown or 'not fitted'}",
    )


def fitted_depths(rec: Records, family: str, dataset: str, group) -> list[list]:
    """The depths each fitted exponent row of ``group`` was fitted on (Frobenius records, at least ``MIN_BLOCKS``)."""
    points = rec.scaling[
        (rec.scaling["family"] == family)
        & (rec.scaling["dataset"] == dataset)
        & (rec.scaling["norm"] == "fro")
        & (rec.scaling["depth"] >= weight_scaling.MIN_BLOCKS)
    ]
    fitted = group[group["status"] == "ok"]
    return [
        points[(points["stage"] == r["stage"]) & (points["tensor"] == r["tensor"])]["depth"].tolist()
        for _, r in fitted.iterrows()
    ]


def exponent_label(row, family: str) -> str:
    """How an exponent row is named in a claim's reproduced value: the sweep's stage and tensor, nothing for an FC family."""
    return f"stage {row['stage']} {row['tensor']}" if family == "sweep" else ""


__all__ = [
    "PEER_CHECK",
    "PEER_EXPONENTS",
    "SCALING_CLAIMS",
    "exponent_label",
    "peer_check_path",
    "peer_words",
    "read_peer_check",
    "scaling_claims",
]
