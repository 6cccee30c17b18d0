"""The claims report's rows, from the records :func:`common.report.records.load_records` loads: one row per
quantitative claim of the paper and of Cohen et al., and apart, the identity checks.

Each row holds the claim, the paper's value (``common/presets/paper.py`` only), the reproduced value, the records it came
from (preset, dataset, seeds, number of runs), the verdict and the rule that gave it. The rules are
:mod:`common.report.rules` (pure functions of numbers); this module only picks their inputs out of the records:

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
- **Growth by the criterion** (09, beyond the paper, last): placing by ``V_S,l`` against the other arms at the
  budget B, and the controller's stop rule against the sweep's N* (:mod:`common.report.rows.grow_by_criterion`); the
  rows against the never-grown ResNet-8, against scratch and about the stop are judged only where the regime row
  (after every claim) says that depth pays at equal FLOPs at B.
- **Expanding a decoder by the criterion** (10, beyond the paper, last): K new layers placed where ``V_S,l`` is
  largest against even spacing, Block Influence and ``AG_l``, held-out loss at equal training steps
  (:mod:`common.report.rows.expand_decoder`).

A claim without records is "not run", its records column naming the command that makes them
(:func:`common.report.records.commands`). A row that a run left out of the report would have entered names that run,
per arm, and is "not decidable" (:mod:`common.report.left_out`).
Verdicts of ``--preset smoke`` and ``mini`` records carry the scale (:data:`SCALE_NOTES`).

What a row says beyond its rule (issue 29; docs/decisions.md, section "Figures and the claims report"):

- **its power** at its records' own design (:func:`finish_row`): each row names the case of
  :mod:`common.power.claim_rates` that simulates its rule and the design of its records (:data:`RowDesign`);
  the power is looked up in the committed table, never guessed ("power not computed for this design"); an
  undecided row whose rule cannot reach 0.8 there is "not decidable at this design (needs ...)";
- **one row per test**: a rank-based rule whose two readings of AGmax order the runs identically;
- **"not comparable"** for the rules at the paper's 5e-3 line, with the line's per-example value at the records'
  batch size; where AGmax sits (the stem output) and its trend without it; the sweep's test-loss regime in every
  row about test performance; the depths that did not fit (:data:`FIT_TARGET`) in the rows about AGmax.

Where each part lives: what every row shares (the row, its verdict cell, its design, the regime) in
:mod:`common.report.verdict_row`; the rows about AGmax (ResNet sweep, App. G, decoders, V_S,l <= AG_l) in
:mod:`common.report.rows.probe_ag`; growth vs scratch in :mod:`common.report.rows.growth_vs_scratch`; the matched insertion
in :mod:`common.report.rows.matched_insertion`; weight scaling in :mod:`common.report.rows.weight_scaling`; growth by the
criterion in :mod:`common.report.rows.grow_by_criterion`; the decoder expansion in :mod:`common.report.rows.expand_decoder`. This
module
puts them in the paper's order (:func:`claim_rows`).
"""

from __future__ import annotations

from common.experiments import gpt2_ascend, growth_vs_scratch, matched_insertion, weight_scaling
from common.report import claim_power
from common.report.left_out import Reads, mark_left_out
from common.report.records import PROBE, PYTHIA, SWEEP, Records, commands
from common.report.rows.expand_decoder import expand_claims
from common.report.rows.grow_by_criterion import grow_claims
from common.report.rows.growth_vs_scratch import growth_claims
from common.report.rows.matched_insertion import matched_claims
from common.report.rows.probe_ag import decoder_claims, projection_claims, resnet_claims, saturation_claims
from common.report.rows.weight_scaling import scaling_claims
from common.report.rules import verdicts
from common.report.verdict_row import REGIME_ROW, about_test_performance, finish_row, regime


def claim_rows(rec: Records, power: claim_power.PowerTable | None = None) -> list[dict]:
    """Every row of the report, in the paper's order (``kind``: claim or identity check), each with its verdict cell
    and its power at the records' own design, looked up in ``power`` (default: the committed table,
    :data:`common.power.claim_power.POWER_TABLE`). A row about test performance states the regime of the
    sweep on its dataset (:func:`regime`). The rows about a design's regime (09's "does depth pay at equal FLOPs",
    :data:`~common.report.verdict_row.REGIME_ROW`) come after every claim: they are not counted, and adding one
    renumbers no claim."""
    power = claim_power.PowerTable.load() if power is None else power
    cmd = commands(rec.preset, rec.out)
    groups = [  # each group of rows, and the experiments its rows read (a row's own ``_reads`` says more)
        (resnet_claims(rec, cmd), (SWEEP, PROBE)),
        (projection_claims(rec, cmd), (PROBE, gpt2_ascend.EXPERIMENT)),
        (saturation_claims(rec, cmd), (PROBE,)),
        (decoder_claims(rec, cmd), None),
        (growth_claims(rec, cmd), (growth_vs_scratch.EXPERIMENT,)),
        (matched_claims(rec, cmd), (matched_insertion.EXPERIMENT,)),
        (scaling_claims(rec, cmd), (weight_scaling.EXPERIMENT,)),
        (grow_claims(rec, cmd), ()),
        (expand_claims(rec), ()),
    ]
    regimes = {d: regime(g) for d, g in rec.sweep.groupby("dataset")} if len(rec.sweep) else {}
    rows = []
    for group, experiments in groups:
        for row in group:
            said = regimes.get(row_dataset(row))
            if said and about_test_performance(row) and row["_outcome"] is not None:
                row["reproduced"] = verdicts.clauses(row["reproduced"], f"regime of the sweep: {said}")
            rows.append(mark_left_out(row, rec.dropped, default_reads(row, experiments)))
    # the rows about a design's regime are not claims: after every claim, so that adding one renumbers no claim
    rows = [r for r in rows if r["kind"] != REGIME_ROW] + [r for r in rows if r["kind"] == REGIME_ROW]
    return [{"id": i + 1, **finish_row(r, power)} for i, r in enumerate(rows)]


def default_reads(row: dict, experiments: tuple[str, ...] | None) -> Reads:
    """What a row reads when its module did not say (:mod:`common.report.left_out`): its group's experiments, of its
    dataset where it names one (the decoder rows: GPT-2's or Pythia's, by the claim)."""
    if experiments is None:
        experiments = (gpt2_ascend.EXPERIMENT,) if "GPT-2" in row["claim"] else (PYTHIA,)
    dataset = row_dataset(row)
    return [(e, {"dataset": {dataset}} if dataset and e in BY_DATASET else {}) for e in experiments]


BY_DATASET = (SWEEP, PROBE, growth_vs_scratch.EXPERIMENT, matched_insertion.EXPERIMENT)  # a row per image dataset


def row_dataset(row: dict) -> str | None:
    """The dataset of a row with records (its records cell is :func:`describe`'s: ``preset, dataset, ...``)."""
    parts = row["records"].split(", ")
    return parts[1] if len(parts) > 2 and parts[0] == row["scale"] else None


__all__ = ["claim_rows"]
