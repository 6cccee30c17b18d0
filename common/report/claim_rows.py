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
- **Growth by the criterion** (09, beyond the paper, last): placing by ``V_S,l`` against cyclic and random
  placement after K rounds, and stop rule (c) against the sweep's N* (:mod:`common.report.rows.grow_by_criterion`).
- **Expanding a decoder by the criterion** (10, beyond the paper, last): K new layers placed where ``V_S,l`` is
  largest against even spacing, Block Influence and ``AG_l``, held-out loss at equal training steps
  (:mod:`common.report.rows.expand_decoder`).

A claim without records is "not run", its records column naming the command that makes them
(:func:`common.report.records.commands`).
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

from common.report import claim_power
from common.report.records import Records, commands
from common.report.rows.expand_decoder import expand_claims
from common.report.rows.grow_by_criterion import grow_claims
from common.report.rows.growth_vs_scratch import growth_claims
from common.report.rows.matched_insertion import matched_claims
from common.report.rows.probe_ag import decoder_claims, projection_claims, resnet_claims, saturation_claims
from common.report.rows.weight_scaling import scaling_claims
from common.report.rules import verdicts
from common.report.verdict_row import about_test_performance, finish_row, regime


def claim_rows(rec: Records, power: claim_power.PowerTable | None = None) -> list[dict]:
    """Every row of the report, in the paper's order (``kind``: claim or identity check), each with its verdict cell
    and its power at the records' own design, looked up in ``power`` (default: the committed table,
    :data:`common.power.claim_power.POWER_TABLE`). A row about test performance states the regime of the
    sweep on its dataset (:func:`regime`)."""
    power = claim_power.PowerTable.load() if power is None else power
    cmd = commands(rec.preset, rec.out)
    rows = [
        *resnet_claims(rec, cmd),
        *projection_claims(rec, cmd),
        *saturation_claims(rec, cmd),
        *decoder_claims(rec, cmd),
        *growth_claims(rec, cmd),
        *matched_claims(rec, cmd),
        *scaling_claims(rec, cmd),
        *grow_claims(rec, cmd),
        *expand_claims(rec),
    ]
    regimes = {d: regime(g) for d, g in rec.sweep.groupby("dataset")} if len(rec.sweep) else {}
    for row in rows:
        said = regimes.get(row_dataset(row))
        if said and about_test_performance(row) and row["_outcome"] is not None:
            row["reproduced"] = verdicts.clauses(row["reproduced"], f"regime of the sweep: {said}")
    return [{"id": i + 1, **finish_row(r, power)} for i, r in enumerate(rows)]


def row_dataset(row: dict) -> str | None:
    """The dataset of a row with records (its records cell is :func:`describe`'s: ``preset, dataset, ...``)."""
    parts = row["records"].split(", ")
    return parts[1] if len(parts) > 2 and parts[0] == row["scale"] else None


__all__ = ["claim_rows"]
