"""Each claim rule of the report gives "holds", "does not hold" and "not decidable" on hand-made inputs.

The rules are pure functions of numbers (common/report/rules/); their error rates are measured by
simulation in tests/power/test_claim_rates.py. The last tests check that the claim rows
(common/report/claim_rows.py) feed them the records of scripts 01-07 (hand-made,
tests/helpers/figure_records.py), show both sides' growth budgets, and keep the identity checks apart
from the claims.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from common.experiments import make_figures, matched_insertion, probe_ag
from common.presets.make_figures import SMOKE_NOTE
from common.report import claim_power, claim_rows, claims_report, records, verdict_row
from common.report.rows import weight_scaling
from common.report.rules import app_g, depth, growth_vs_scratch, identities, margins, statistics
from common.report.rules import matched_insertion as matched_insertion_rules
from common.report.rules import verdicts as verdicts_rules
from common.report.rules import weight_scaling as weight_scaling_rules
from common.report.rules.statistics import Estimate
from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE
from common.science.saturation import saturation_interval
from tests.helpers import figure_records
from tests.helpers.rules import claim_rules, identity_checks

LINE = 5e-3


def test_partial_spearman_equals_the_first_order_partial_correlation_formula_on_spearman_rhos():
    # Independent route: r_xy.z = (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2)) on Spearman's rhos,
    # and the p-value from t with n - 3 degrees of freedom.
    rng = np.random.default_rng(0)
    z = rng.normal(size=30)
    x, y = z + rng.normal(size=30), z + 0.5 * rng.normal(size=30)
    r_xy, r_xz, r_yz = (stats.spearmanr(a, b).statistic for a, b in ((x, y), (x, z), (y, z)))
    expected = (r_xy - r_xz * r_yz) / math.sqrt((1 - r_xz**2) * (1 - r_yz**2))
    r, p = statistics.partial_spearman(x, y, z)
    assert r == pytest.approx(expected, abs=1e-10)  # |r| <= 1; residuals of a least-squares line: not a summation bound
    t = expected * math.sqrt(27 / (1 - expected**2))
    assert p == pytest.approx(2 * stats.t.sf(abs(t), 27), rel=1e-9)
    assert abs(r) < abs(r_xy)  # z drives both: guards against the test passing with the plain correlation


@pytest.mark.parametrize("n", [9, 40, 303])
def test_spearman_above_eight_points_equals_scipys_spearmanr(n):
    rng = np.random.default_rng(n)
    x = np.repeat(np.arange(n), 1)[:n] // 3  # ties, as depths with seeds
    y = rng.normal(size=n) - 0.02 * x
    rho, p = statistics.spearman(x, y)
    expected = stats.spearmanr(x, y)
    assert rho == pytest.approx(expected.statistic, abs=1e-12) and p == pytest.approx(expected.pvalue, rel=1e-9)


def test_estimate_interval_is_the_student_t_interval_and_pooling_weights_by_degrees_of_freedom():
    e = statistics.over_seeds(1.0, 0.3, 3)
    assert e.interval() == pytest.approx(
        (1.0 - stats.t.ppf(0.975, 2) * 0.3 / math.sqrt(3), 1.0 + stats.t.ppf(0.975, 2) * 0.3 / math.sqrt(3))
    )
    assert statistics.over_seeds(1.0, math.nan, 1) is None
    s, dof = statistics.pooled_spread([(0.1, 3), (0.3, 5), (math.nan, 1)])
    assert dof == 6 and s == pytest.approx(math.sqrt((2 * 0.01 + 4 * 0.09) / 6))
    groups = [[1.0, 2.0, 4.0], [3.0, 3.5]]
    assert statistics.group_spread(groups) == pytest.approx(
        statistics.pooled_spread([(np.std(g, ddof=1), len(g)) for g in groups])
    )


# ----------------------------------------------------------------------------- AG across depth
def test_falls_with_depth():
    depths = [0, 1, 2, 3, 4, 5, 6]
    assert depth.falls_with_depth(depths, [0.1 / (1 + n) for n in depths]).verdict == HOLDS
    assert depth.falls_with_depth(depths, [0.1 * (1 + n) for n in depths]).verdict == FAILS  # a significant rise
    assert depth.falls_with_depth(depths, [0.1, 0.3, 0.15, 0.25, 0.12, 0.28, 0.2]).verdict == UNDECIDABLE  # no trend
    # Four depths in perfect order: the exact p is 2/4! = 1/12 (scipy's t approximation says 0): no power to decide.
    assert statistics.spearman([0, 1, 2, 4], [4, 3, 2, 1]) == (-1.0, pytest.approx(1 / 12))
    assert depth.falls_with_depth([0, 1, 2, 4], [4, 3, 2, 1]).verdict == UNDECIDABLE


def seeds_of(depths, values, spread=(0.98, 1.0, 1.02)):
    """Three seeds per depth: each value times 0.98, 1 and 1.02."""
    return [d for d in depths for _ in spread], [v * f for v in values for f in spread]


def test_stays_below_line_allows_the_papers_approximately_and_shows_the_strict_verdict_beside_it():
    depths = [0, 2, 4, 6, 8]
    below = depth.stays_below_line(*seeds_of(depths, [0.02, 0.01, 0.004, 0.003, 0.002]), LINE)
    assert below.verdict == HOLDS and "at 1x the line: holds" in below.value
    # 6e-3 is above the line but below 1.5x it: holds at the factor, not at 1x.
    approx = depth.stays_below_line(*seeds_of(depths, [0.02, 0.01, 0.004, 0.006, 0.002]), LINE)
    assert approx.verdict == HOLDS and "at 1x the line: does not hold" in approx.value
    assert depth.stays_below_line(*seeds_of(depths, [0.02, 0.01, 0.004, 0.009, 0.002]), LINE).verdict == FAILS
    assert (
        depth.stays_below_line(*seeds_of(depths, [0.02, 0.01, 0.009, 0.008, 0.007]), LINE).verdict == UNDECIDABLE
    )  # no N*
    one_seed = depth.stays_below_line(depths, [0.02, 0.01, 0.004, 0.003, 0.002], LINE)
    assert one_seed.verdict == UNDECIDABLE and "single seed" in one_seed.value


def plateau_records(loss_after, seeds=3, noise=0.002, star=4, deepest=40):
    """AGmax crossing the line at N = ``star``; test loss ``loss_after(N)`` from there, seed noise +-``noise``."""
    depths, ag, loss = [], [], []
    for n in range(deepest + 1):
        for s in range(seeds):
            depths.append(n)
            ag.append(0.02 if n < star else 0.002)
            loss.append((1.0 + 0.1 * (star - n) if n < star else loss_after(n)) + noise * (s - (seeds - 1) / 2))
    return depths, ag, loss


def test_plateau_holds_on_a_flat_loss_and_not_on_one_still_falling_by_more_than_the_margin():
    flat = depth.plateau_within_margin(*plateau_records(lambda n: 0.5), LINE)
    assert flat.verdict == HOLDS
    falling = depth.plateau_within_margin(
        *plateau_records(lambda n: 0.5 - 0.001 * n), LINE
    )  # 0.036 over the range: > 2%
    assert falling.verdict == FAILS
    # Noise as large as the margin with 2 seeds: failing to reject a gain must not give "holds".
    noisy = depth.plateau_within_margin(*plateau_records(lambda n: 0.5, seeds=2, noise=0.1, deepest=8), LINE)
    assert noisy.verdict == UNDECIDABLE
    one_seed = depth.plateau_within_margin([0, 4, 8], [0.02, 0.004, 0.003], [0.5, 0.4, 0.3], LINE)
    assert one_seed.verdict == UNDECIDABLE and "single seed" in one_seed.value


def test_plateau_blocks_are_consecutive_quarters():
    assert depth.plateau_blocks([4, 5, 6, 7, 8, 9, 10, 11]) == [[4, 5], [6, 7], [8, 9], [10, 11]]
    assert depth.plateau_blocks([4, 8]) == [[4], [8]]


def test_explained_by_training_loss_needs_positive_evidence():
    rng = np.random.default_rng(1)
    depths = np.repeat(np.arange(40), 3)
    train = rng.uniform(0.01, 1.0, size=len(depths))  # unrelated to depth
    ag_from_loss = 0.1 * train * (1 + 0.01 * rng.normal(size=len(depths)))
    assert depth.explained_by_training_loss(depths, ag_from_loss, train).verdict == HOLDS
    # AGmax follows depth, and the training loss falls with depth too: rho(AGmax, train loss) is significant,
    # so only the partial correlation with depth given the training loss can make the rule fail.
    train_by_depth = 0.5 * 0.95**depths * (1 + 0.3 * rng.uniform(size=len(depths)))
    ag_from_depth = 0.1 * 0.9**depths * (1 + 0.01 * rng.normal(size=len(depths)))
    assert stats.spearmanr(ag_from_depth, train_by_depth).pvalue < 0.05
    assert depth.explained_by_training_loss(depths, ag_from_depth, train_by_depth).verdict == FAILS
    # Twelve runs: AGmax follows the training loss, and the partial correlation with depth is not significant, but
    # its interval is far wider than the margin: no evidence that depth adds nothing (the old rule said "holds").
    few = rng.permutation(12)
    loss = rng.uniform(0.1, 1.0, size=12)
    small = depth.explained_by_training_loss(few, loss * (1 + 0.05 * rng.normal(size=12)), loss)
    assert small.verdict == UNDECIDABLE and "interval" in small.value


# ----------------------------------------------------------------------------- growth vs scratch
def test_growth_lower_mean_is_a_significance_statement_over_seeds():
    assert growth_vs_scratch.growth_lower_mean(0.25, 0.29, statistics.over_seeds(0.04, 0.005, 3)).verdict == HOLDS
    assert growth_vs_scratch.growth_lower_mean(0.30, 0.29, statistics.over_seeds(-0.01, 0.001, 3)).verdict == FAILS
    assert (
        growth_vs_scratch.growth_lower_mean(0.289, 0.29, statistics.over_seeds(0.001, 0.02, 3)).verdict == UNDECIDABLE
    )  # noise
    assert growth_vs_scratch.growth_lower_mean(0.25, 0.29, None).verdict == UNDECIDABLE  # one seed


def test_growth_wins_everywhere_needs_every_architecture_significant():
    four = ("ResNet-10", "ResNet-11", "ResNet-12", "ResNet-13")
    wins = {m: (0.03, 0.005, 3) for m in four}
    assert growth_vs_scratch.growth_wins_everywhere(wins, four).verdict == HOLDS
    assert growth_vs_scratch.growth_wins_everywhere({**wins, "ResNet-12": (-0.03, 0.005, 3)}, four).verdict == FAILS
    assert (
        growth_vs_scratch.growth_wins_everywhere({**wins, "ResNet-12": (0.001, 0.005, 3)}, four).verdict == UNDECIDABLE
    )
    assert (
        growth_vs_scratch.growth_wins_everywhere({"ResNet-10": (0.03, 0.005, 3)}, four).verdict == UNDECIDABLE
    )  # not run
    assert (
        growth_vs_scratch.growth_wins_everywhere({m: (0.03, math.nan, 1) for m in four}, four).verdict == UNDECIDABLE
    )  # one seed


def test_paper_value_is_two_rules_direction_and_size():
    paper = 0.118
    # The cases of the old interval rule: zero true effect with noisy seeds, growth 5% worse, a precise 10%.
    noisy_zero = Estimate(0.01, 0.05, 2)
    assert growth_vs_scratch.paper_direction(noisy_zero, paper).verdict == UNDECIDABLE
    assert growth_vs_scratch.paper_size(noisy_zero, paper).verdict == UNDECIDABLE
    worse = Estimate(-0.05, 0.005, 2)
    assert (
        growth_vs_scratch.paper_direction(worse, paper).verdict == FAILS
        and growth_vs_scratch.paper_size(worse, paper).verdict == FAILS
    )
    precise = Estimate(0.10, 0.005 / math.sqrt(3), 2)
    assert (
        growth_vs_scratch.paper_direction(precise, paper).verdict == HOLDS
        and growth_vs_scratch.paper_size(precise, paper).verdict == HOLDS
    )
    assert growth_vs_scratch.paper_size(Estimate(0.5, 0.01, 2), paper).verdict == FAILS  # 4x the paper's
    assert growth_vs_scratch.paper_direction(None, paper).verdict == UNDECIDABLE


# ----------------------------------------------------------------------------- matched insertion
def test_drop_not_increasing_agrees_with_the_papers_precision():
    paper = {8: 7e-4, 14: 4e-4, 20: 2e-4, 34: 2e-4}
    as_changes = {d: -v for d, v in paper.items()}
    # The paper's own drops, and the 7, 4, 1.9, 2.1 (x1e-4): equal at the paper's precision, no rise.
    assert matched_insertion_rules.drop_not_increasing(as_changes).verdict == HOLDS
    near = {8: -7e-4, 14: -4e-4, 20: -1.9e-4, 34: -2.1e-4}
    assert matched_insertion_rules.drop_not_increasing(near).verdict == HOLDS
    assert matched_insertion_rules.matches_paper_precision(near, paper).verdict == HOLDS
    assert matched_insertion_rules.drop_not_increasing({8: -7e-4, 14: -9e-4}).verdict == FAILS
    # With seeds: a rise within the seed spread cannot be called either way; a clear one fails.
    spread = {8: [-7e-4, -7.2e-4], 14: [-4e-4, -4.1e-4], 20: [-2.2e-4, -1.6e-4], 34: [-2.6e-4, -1.8e-4]}
    assert matched_insertion_rules.drop_not_increasing(spread).verdict == UNDECIDABLE
    tight = {8: [-7e-4, -7.02e-4], 14: [-4e-4, -4.02e-4], 20: [-2e-4, -2.02e-4], 34: [-2.1e-4, -2.12e-4]}
    assert matched_insertion_rules.drop_not_increasing(tight).verdict == HOLDS
    rising = {8: [-2e-4, -2.02e-4], 14: [-4e-4, -4.02e-4]}
    assert matched_insertion_rules.drop_not_increasing(rising).verdict == FAILS


def test_matches_paper_precision():
    paper = {8: 7e-4, 14: 4e-4, 20: 2e-4, 34: 2e-4}
    assert matched_insertion_rules.matches_paper_precision({8: -7.2e-4, 14: -3.8e-4}, paper).verdict == HOLDS
    assert matched_insertion_rules.matches_paper_precision({8: -7.2e-4, 14: -1e-4}, paper).verdict == FAILS
    assert (
        matched_insertion_rules.matches_paper_precision({8: [-7.1e-4, -7.0e-4], 14: [-3.9e-4, -4.0e-4]}, paper).verdict
        == HOLDS
    )
    assert (
        matched_insertion_rules.matches_paper_precision({8: [-7.1e-4, -6.0e-4], 14: [-3.9e-4, -4.0e-4]}, paper).verdict
        == UNDECIDABLE
    )
    assert matched_insertion_rules.matches_paper_precision({9: -1e-4}, paper).verdict == UNDECIDABLE


def test_the_h1_rules_pool_log_drops_so_a_spread_at_one_magnitude_does_not_swamp_another():
    # Drops from 6e-7 to 1e-9 (mini's magnitudes), every seed within 5% of its depth's value: on the log scale the
    # spread is 5% at every depth, so a rise of x20 between the two smallest drops is shown; pooled in absolute units
    # the ResNet-8 seeds (a spread of 3e-8) would have hidden a rise of 2e-8.
    changes = {8: [-6e-7, -6.3e-7], 14: [-1.0e-9, -1.05e-9], 20: [-2.0e-8, -2.1e-8]}
    rise = matched_insertion_rules.drop_not_increasing(changes)
    assert rise.verdict == FAILS and "largest rise ResNet-14 -> 20: x20" in rise.value, rise.value
    falling = {8: [-6e-7, -6.3e-7], 14: [-2.0e-8, -2.1e-8], 20: [-1.0e-9, -1.05e-9]}
    assert matched_insertion_rules.drop_not_increasing(falling).verdict == HOLDS
    # Half a unit of the leading digit is the same band on both scales: 7e-4's [6.5e-4, 7.5e-4] as logs.
    low, high = matched_insertion_rules.log_band(7e-4)
    assert (math.exp(low), math.exp(high)) == (pytest.approx(6.5e-4), pytest.approx(7.5e-4))
    near = {8: [-7.05e-4, -7.1e-4], 20: [-1.98e-4, -2.02e-4]}
    assert matched_insertion_rules.matches_paper_precision(near, {8: 7e-4, 20: 2e-4}).verdict == HOLDS


def test_drops_below_the_floor_or_of_the_wrong_sign_leave_the_log_pool_and_are_named():
    changes = {8: {0: -6e-7, 1: -6.3e-7}, 17: {0: -1.3e-9, 1: 1.3e-10}, 20: {0: -2e-9, 1: -2.1e-9}}
    floor = {8: {0: False, 1: False}, 17: {0: True, 1: False}, 20: {0: False, 1: False}}
    out = matched_insertion_rules.drop_not_increasing(changes, floor)
    assert "ResNet-17 seed 0: below measurement precision (change -1.3e-09)" in out.value
    assert "ResNet-17 seed 1: wrong sign (change +1.3e-10)" in out.value
    assert "ResNet-17:" not in out.value.split("; left out")[0]  # no drop left there: skipped, not compared
    assert out.verdict == HOLDS  # 6e-7 -> 2e-9, the depths that have drops
    paper = {8: 7e-4, 17: 3e-4}
    gone = matched_insertion_rules.matches_paper_precision({8: [-7e-4, -7.02e-4], 17: [1e-10, 2e-10]}, paper)
    assert (
        gone.verdict == UNDECIDABLE and "no usable drop at ResNet-17" in gone.value
    )  # a paper depth left without a drop


def test_fisher_interval_cannot_fit_the_margin_below_47_runs():
    # Issue 29: at 16 runs the half-width in z is 0.58 against atanh(0.3) = 0.31; no record could give "holds".
    assert statistics.partial_half_width(16) == pytest.approx(0.58, abs=0.005)
    assert statistics.partial_min_runs(margins.EXPLAINED_MARGIN) == 47
    assert statistics.partial_half_width(46) > math.atanh(0.3) > statistics.partial_half_width(47)
    rng = np.random.default_rng(0)
    depths = np.repeat(np.arange(8), 2)
    train = -depths + rng.normal(size=16)
    out = depth.explained_by_training_loss(depths, np.exp(train + 0.3 * rng.normal(size=16)), np.exp(train))
    assert "'holds' cannot occur below 47 runs" in out.value


def test_report_cells_join_sentences_and_verdict_kinds_are_read_by_their_longest_prefix():
    # Issue 28, case 19: a rule and the text after it never run together ("...not decidable Cannot reach...").
    assert verdicts_rules.sentences("a: not decidable", "Cannot reach it.") == "a: not decidable. Cannot reach it."
    assert verdicts_rules.sentences("done.", "", "next") == "done. next."
    assert verdicts_rules.verdict_kind("not decidable at this design (needs about 3 seeds) (mini scale)") == (
        verdicts_rules.UNDECIDABLE_AT_DESIGN
    )
    assert verdicts_rules.verdict_kind("not decidable (mini scale)") == UNDECIDABLE
    assert (
        verdicts_rules.verdict_kind("not comparable: the paper's normalisation is not given")
        == verdicts_rules.NOT_COMPARABLE
    )
    with pytest.raises(ValueError):
        verdicts_rules.verdict_kind("maybe")
    # The rule text is the same wherever the rule is used: no design-specific example in it (the GPT-2 rows carried
    # the ResNet rows' "4 distinct depths: p = 1/12").
    assert "1/12" not in depth.falls_with_depth.rule


# ----------------------------------------------------------------------------- weight scaling
def test_exponent_rules_read_the_fits_intervals():
    assert weight_scaling_rules.exponent_within_tolerance({"": (0.35, 0.3, 0.38)}, 0.3).verdict == HOLDS
    assert (
        weight_scaling_rules.exponent_within_tolerance({"": (0.35, 0.25, 0.45)}, 0.3).verdict == UNDECIDABLE
    )  # interval too wide
    assert weight_scaling_rules.exponent_within_tolerance({"": (0.45, 0.42, 0.5)}, 0.3).verdict == FAILS
    assert (
        weight_scaling_rules.exponent_within_tolerance({"": (math.nan, math.nan, math.nan)}, 0.3).verdict == UNDECIDABLE
    )
    assert (
        weight_scaling_rules.sign_within_tolerance(
            {"stage 1": (0.05, 0.0, 0.08), "stage 2": (-0.3, -0.4, -0.2)}, "<= 0"
        ).verdict
        == HOLDS
    )
    assert weight_scaling_rules.sign_within_tolerance({"stage 1": (0.05, -0.1, 0.2)}, "<= 0").verdict == UNDECIDABLE
    assert weight_scaling_rules.sign_within_tolerance({"stage 1": (0.25, 0.2, 0.3)}, "<= 0").verdict == FAILS
    assert weight_scaling_rules.sign_within_tolerance({"stage 1": (-0.05, -0.08, -0.02)}, ">= 0").verdict == HOLDS
    assert weight_scaling_rules.sign_within_tolerance({"stage 1": (-0.25, -0.3, -0.2)}, ">= 0").verdict == FAILS
    bare = weight_scaling_rules.sign_within_tolerance(
        {"stage 1": -0.05}, ">= 0"
    )  # estimates without intervals: the point comparison
    assert bare.verdict == HOLDS and "point estimates only" in bare.value


def test_every_rule_carries_its_text_and_identity_checks_are_not_rules():
    assert all(isinstance(fn.rule, str) and len(fn.rule) > 20 for fn in (*claim_rules(), *identity_checks()))
    assert not set(claim_rules()) & set(identity_checks())
    assert all(not fn.rule.endswith(".") for fn in claim_rules())  # the report adds the full stop (claims.sentences)


def test_projection_check_holds_where_v_equals_ag_up_to_the_float32_rounding_of_ag():
    # A realizable candidate: V_S,l = ||G||_F exactly, computed in float64 from the float32 gradient; AG_l as the probe
    # takes it, from per-example norms in float32 (common.science.probe). Rounding alone puts V_S,l above AG_l on some batches.
    batches = torch.randn(100, 32, 1024, generator=torch.Generator().manual_seed(0))
    ag = [float(torch.linalg.vector_norm(g, dim=1).double().square().sum().sqrt()) for g in batches]
    v = [float(torch.linalg.vector_norm(g.double())) for g in batches]
    assert (
        max(a / b for a, b in zip(v, ag, strict=True)) - 1 > 1e-9
    )  # a float64-only slack would report the theorem broken
    assert identities.projection_never_exceeds(v, ag).verdict == HOLDS
    assert (
        identities.projection_never_exceeds([1.001 * a for a in ag], ag).verdict == FAILS
    )  # a projection adding norm is caught


# ----------------------------------------------------------------------------- the report builder feeds the rules
def rows_of(out, preset="smoke") -> dict[str, dict]:
    return {r["claim"]: r for r in claim_rows.claim_rows(records.load_records(out, preset))}


def verdicts(out, preset="smoke") -> dict[str, str]:
    return {claim: r["verdict"] for claim, r in rows_of(out, preset).items()}


def test_report_rows_follow_the_records(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    figure_records.sweep_and_probe(good, seeds=(0, 1))
    figure_records.sweep_and_probe(bad, seeds=(0, 1), ag=lambda n, s: 0.001 * (1 + n))  # rising, always below the line
    figure_records.growth(good)
    figure_records.growth(bad, test_gap=lambda n, s: -0.01 if n == 4 else 0.03)  # scratch wins at ResNet-12
    figure_records.matched(good)
    figure_records.matched(bad, drops={8: 2e-4, 14: 4e-4})
    figure_records.scaling(good)
    figure_records.scaling(bad, beta=0.6)
    key = (
        "AGmax falls with depth (ResNet sweep, digits, batch-mean AG_l and per-example RMS: identical ranks, one test)"
    )
    claims_checked = [
        key,
        "growth's test loss is lower for all four architectures (digits)",
        "the matched-insertion drop does not increase with depth (digits)",
        "fc-tanh: beta, max norm (how their figures were read; used for the verdict) (synthetic)",
    ]
    g, b = verdicts(good), verdicts(bad)
    for claim in claims_checked:
        assert g[claim].startswith(HOLDS), (claim, g[claim])
        assert b[claim].startswith(FAILS), (claim, b[claim])
        assert g[claim].endswith(f"({SMOKE_NOTE})")


def test_growth_rows_read_equal_epochs_with_flops_convergence_and_accuracy_beside(tmp_path):
    figure_records.growth(tmp_path, test_gap=lambda n, s: 0.03 + 0.001 * s)
    rows = rows_of(tmp_path)
    assert len([c for c in rows if c.startswith("growth's mean test loss")]) == 1  # one row per claim and dataset
    mean = rows["growth's mean test loss is below scratch's (digits)"]
    assert mean["verdict"].startswith(HOLDS) and "equal epochs (6, one schedule each)" in mean["records"]
    assert mean["reproduced"].startswith("at equal epochs (6, one schedule): growth 0.2")
    assert "mean test accuracy growth 0.910 vs scratch 0.900" in mean["reproduced"]
    assert "training FLOPs growth 8e+11 vs scratch 1e+12 (80%)" in mean["reproduced"]
    assert "(a fall of growth 0.1%, scratch 0.1% of itself): both levelled off" in mean["reproduced"]
    at10 = rows["absolute test-loss reduction at ResNet-10: direction (digits)"]["reproduced"]
    assert "test accuracy growth 0.910 vs scratch 0.900" in at10
    assert "accuracy" not in rows["growth's mean training loss is below scratch's (digits)"]["reproduced"]


def test_a_run_whose_training_loss_still_falls_is_named_not_converged(tmp_path):
    path = figure_records.growth(tmp_path)
    table = pd.read_csv(path)
    table["growth_train_loss_tail_fall"] = 0.2  # its running training loss fell by 20% over its last epochs
    table.to_csv(path, index=False)
    row = rows_of(tmp_path)["growth's mean training loss is below scratch's (digits)"]
    assert "not converged (growth still falling; the paper compares converged losses)" in row["reproduced"]


def test_the_restart_ablation_is_read_beside_its_table_and_reported(tmp_path):
    figure_records.growth(tmp_path)
    (table,) = records.load_records(tmp_path, "smoke").growth
    assert table.dataset == "digits" and table.epochs == 6 and table.insert_at == "15-30-50-65"
    assert table.ablation is not None and list(table.ablation["model"]) == ["ResNet-13"]
    assert table.ablation["restart_cost_train_loss"].iloc[0] == pytest.approx(0.02)
    row = rows_of(tmp_path)["growth's mean training loss is below scratch's (digits)"]
    assert (
        "restart ablation (2 seeds; restarting optimizer and schedule at every insertion): ResNet-13:"
        in row["reproduced"]
    )
    assert "cost +0.0200" in row["reproduced"]


def test_matched_claims_compare_one_candidate_type_across_depths(tmp_path):
    # "next" puts ResNet-34's candidate at the head's input: those runs cannot join a comparison of stage-1 drops.
    figure_records.matched(tmp_path, drops={8: 7e-4, 14: 4e-4, 20: 2e-4, 34: 2e-4}, rule="next")
    row = rows_of(tmp_path)["the matched-insertion drop does not increase with depth (digits)"]
    assert "ResNet-8, -14, -20," in row["records"] and "-34" not in row["records"]
    assert "end of stage 1" in row["records"]
    figure_records.matched(tmp_path, drops={34: 2e-4}, rule="stage1-end")
    rows = rows_of(tmp_path)
    row = rows["the matched-insertion drop does not increase with depth (digits)"]
    assert "ResNet-8, -14, -20, -34" in row["records"] and row["verdict"].startswith(HOLDS)
    assert (
        "exact-target reading: ResNet-8: 7.7e-04"
        in rows["the matched-insertion drops equal the paper's (digits)"]["reproduced"]
    )


def test_identity_checks_are_reported_apart_and_not_counted(tmp_path):
    out = figure_records.everything(tmp_path, seeds=(0, 1))
    rows = claim_rows.claim_rows(records.load_records(out, "smoke"))
    kinds = {r["claim"]: r["kind"] for r in rows}
    assert kinds["the exact growth value never exceeds AG_l at any candidate"] == verdict_row.IDENTITY
    assert kinds["matched insertion lowers the training loss at every depth (digits)"] == verdict_row.IDENTITY
    assert {r["kind"] for r in rows} == {verdict_row.CLAIM, verdict_row.IDENTITY, verdict_row.REGIME_ROW}
    text = claims_report.claims_markdown(rows, "smoke", out)
    claims_part, checks_part = text.split("## Identity checks")
    assert "never exceeds AG_l" in checks_part and "never exceeds AG_l" not in claims_part
    regime = next(r for r in rows if r["kind"] == verdict_row.REGIME_ROW)
    assert regime["claim"] in claims_part  # listed among the claims, not counted: after every claim, renumbering none
    assert regime["id"] > max(r["id"] for r in rows if r["kind"] == verdict_row.CLAIM)
    counted = sum(1 for r in rows if r["kind"] == verdict_row.CLAIM)
    counts = claims_report.verdict_counts(rows)
    assert sum(int(re.match(r"[^:]+: (\d+)", part)[1]) for part in counts.split(", ")) == counted


def test_app_g_row_shows_interval_t_candidates_and_verdict_of_new_and_older_records(tmp_path):
    claim = "the deepest models probed are first-order saturated within delta (App. G) (digits)"

    def row(out):
        return next(r for r in claim_rows.claim_rows(records.load_records(out, "smoke")) if r["claim"] == claim)

    figure_records.sweep_and_probe(
        tmp_path / "good", seeds=(0, 1)
    )  # deepest N = 8: Gamma_hat = 4e-5, t = 0.005 <= 0.02
    good = row(tmp_path / "good")
    assert good["verdict"].startswith(HOLDS) and good["rule"] == verdicts_rules.sentences(
        app_g.saturated_within_delta.rule
    )
    assert (
        good["reproduced"].count("t = 0.005, 1 candidates, delta = 0.02: saturated within delta") == 2
    )  # one per seed
    assert "ResNet-16 seed 0: Gamma in [0, 0.00504]" in good["reproduced"] and "n_test 1000" in good["records"]

    def not_saturated(n, seed):
        return saturation_interval([1.0], [1.0], n=1000, t=0.1, delta=0.02).as_record() | {"n_test": 1000}

    figure_records.sweep_and_probe(tmp_path / "bad", app_g=not_saturated)
    assert row(tmp_path / "bad")["verdict"].startswith(FAILS)

    def older(n, seed):  # a record of the earlier test: t from the same sample, delta = 0, a saturated flag
        return {
            "saturated": True,
            "max_value": 6.2,
            "t": 20.4,
            "delta": 0.0,
            "n": 1000,
            "values": {"a": 6.2, "b": 1.0},
            "error_bound": 0.05,
        }

    figure_records.sweep_and_probe(tmp_path / "older", app_g=older)
    old = row(tmp_path / "older")
    assert old["verdict"].startswith(UNDECIDABLE)
    assert "Gamma in [0, 26.6], t = 20.4, 2 candidates, delta = 0: undecided" in old["reproduced"]


def test_weight_scaling_verdicts_use_the_max_norm_beta_and_show_step_2_beside_it(tmp_path):
    # i.i.d.-like weights: the max norm reads alpha + beta = 1 (Cohen et al.'s ReLU value), Step 2 reads 1.5.
    figure_records.scaling(tmp_path, beta=0.3, alpha=0.7, diffusive=0.5)
    rows = {r["claim"]: r for r in claim_rows.claim_rows(records.load_records(tmp_path, "smoke"))}
    relu = rows[
        "fc-relu: alpha + beta from |delta_k| A_k, max norm (how their figures were read; used for the verdict) (synthetic)"
    ]
    assert relu["verdict"].startswith(HOLDS)
    assert (
        relu["reproduced"].startswith("1.000 [")
        and "Step 2 (cumulative sum, their text), not used for the verdict: 1.500 [" in relu["reproduced"]
    )
    tanh = rows["fc-tanh: beta, max norm (how their figures were read; used for the verdict) (synthetic)"]
    assert tanh["verdict"].startswith(HOLDS) and "their text), not used for the verdict: 0.800 [" in tanh["reproduced"]
    assert not any("cumulative-sum norm" in claim for claim in rows)  # no verdict rests on Step 2


def peer_record(beta: list[float], alpha: list[float]) -> dict:
    """A hand-made peer-check record (benchmarks/peer_cohen_fc.py's layout) with one variant's exponents."""
    return {
        "settings": {"seeds": [0, 1, 2]},
        "peer": {"corrected": {"exponents": {"beta_max_norm": beta, "alpha": alpha}}},
    }


def test_fc_tanh_rows_say_what_the_authors_code_gives_when_a_peer_check_record_is_present(tmp_path):
    # issue 48: the record adds the authors' code's exponents to rows 26-27's text; the verdicts stay 07's own
    figure_records.scaling(tmp_path, beta=0.3, alpha=0.7, diffusive=0.5)
    beta_claim = "fc-tanh: beta, max norm (how their figures were read; used for the verdict) (synthetic)"
    alpha_claim = "fc-tanh: alpha from max |delta_k| (synthetic)"
    before = rows_of(tmp_path)
    assert not any("authors' code" in before[c]["reproduced"] for c in (beta_claim, alpha_claim))
    path = weight_scaling.peer_check_path(tmp_path, "fc-tanh", "smoke")
    path.write_text(json.dumps(peer_record([0.43, 0.42, 0.44], [0.55, 0.54, 0.56])))
    after = rows_of(tmp_path)
    for claim in (beta_claim, alpha_claim):
        assert after[claim]["verdict"] == before[claim]["verdict"]
        assert after[claim]["reproduced"].startswith(
            before[claim]["reproduced"] + "; the authors' code at these settings"
        )
        assert "setup these settings do not match" in after[claim]["reproduced"]
    assert "with a correct per-epoch permutation 0.430 [0.420, 0.440]" in after[beta_claim]["reproduced"]
    assert (
        "authors' code"
        not in after[
            "fc-relu: alpha + beta from |delta_k| A_k, max norm (how their figures were read; used for the verdict) (synthetic)"
        ]["reproduced"]
    )


def test_peer_words_name_the_side_the_authors_code_falls_on():
    near = weight_scaling.peer_words(peer_record([0.31, 0.28, 0.34], [0.7, 0.69, 0.71]), "beta_max_norm", 0.3)
    assert near is not None and near.endswith("the difference lies in 07's implementation")
    wide = weight_scaling.peer_words(peer_record([0.35, 0.1, 0.6], [0.7, 0.69, 0.71]), "beta_max_norm", 0.3)
    assert wide is not None and wide.endswith("0.350 [0.100, 0.600]")  # undecided: the numbers only
    assert weight_scaling.peer_words(peer_record([0.3, 0.2, 0.4], [0.7, 0.6, 0.8]), "nu", 0.3) is None


def test_records_of_the_other_preset_are_not_run(tmp_path):
    figure_records.sweep_and_probe(tmp_path, preset="smoke")
    rows = claim_rows.claim_rows(records.load_records(tmp_path, "paper"))
    assert rows and all(r["verdict"] == verdicts_rules.NOT_RUN for r in rows)
    assert "python 02_probe_ag.py" in rows[0]["records"]


# ----------------------------------------------------------------------------- issue 29: what the report's rows mean
def rewrite(out, experiment: str, change) -> None:
    """Edit every hand-made ``result.json`` of ``experiment`` under ``out`` in place (``change(config, result)``)."""
    for path in sorted((out / experiment).glob("*/result.json")):
        result = json.loads(path.read_text())
        change(json.loads((path.parent / "config.json").read_text()), result)
        path.write_text(json.dumps(result))


def trend_rows(rows: dict[str, dict], start: str) -> list[dict]:
    return [r for claim, r in rows.items() if claim.startswith(start)]


def test_two_readings_with_identical_ranks_give_one_row_and_readings_whose_ranks_differ_keep_two(tmp_path):
    same, differ = tmp_path / "same", tmp_path / "differ"
    figure_records.sweep_and_probe(same, seeds=(0, 1))  # per-example = 8 x batch-mean in every run: the same ranks
    figure_records.sweep_and_probe(differ, seeds=(0, 1))

    def swap(config, result):  # at N = 1 the per-example reading of seed 0 moves below the N = 8 runs': other ranks
        if config["depth_n"] == 1 and config["seed"] == 0:
            result["ag_max_per_example"] = 1e-6

    rewrite(differ, probe_ag.EXPERIMENT, swap)
    for start in ("AGmax falls with depth (ResNet", "beyond the paper: AGmax is explained"):
        (one,) = trend_rows(rows_of(same), start)
        assert "batch-mean AG_l and per-example RMS: identical ranks, one test" in one["claim"]
        assert "AGmax over the runs: batch-mean AG_l " in one["reproduced"] and "per-example RMS " in one["reproduced"]
        two = trend_rows(rows_of(differ), start)
        assert [r["claim"].rsplit(", ", 1)[1] for r in two] == ["batch-mean AG_l)", "per-example RMS)"]
    # the tally counts tests: the merged record set has two rows fewer
    assert len(rows_of(differ)) == len(rows_of(same)) + 2
    # rules against a fixed line keep a row per reading either way
    assert len(trend_rows(rows_of(same), "once below 0.005, AGmax stays below it")) == 2


def test_the_line_rows_are_not_comparable_and_give_the_lines_per_example_value_at_the_records_batch_size(tmp_path):
    figure_records.sweep_and_probe(tmp_path, seeds=(0, 1))  # AGmax crosses 5e-3 at N = 4: the rule itself holds
    rows = rows_of(tmp_path)
    for start in ("once below 0.005, AGmax stays below it", "low-signal plateau"):
        for row in trend_rows(rows, start):
            assert row["verdict"].startswith(f"{verdicts_rules.NOT_COMPARABLE}: the paper's normalisation is not given")
            assert verdicts_rules.verdict_kind(row["verdict"]) == verdicts_rules.NOT_COMPARABLE
            assert "b = 128: 0.005 x sqrt(128) = 0.0566" in row["reproduced"]
            assert "the rule at 0.005 as read: " in row["reproduced"]
    stays = next(r for c, r in rows.items() if c.startswith("once below 0.005") and "batch-mean" in c)
    assert "as read: holds: N* = 4" in stays["reproduced"]  # the rule's own verdict beside the report's
    counts = claims_report.verdict_counts(list(rows.values()))
    assert f"{verdicts_rules.NOT_COMPARABLE}: 4" in counts


def table_with(rows: dict[str, dict], case: str, power: float, seeds: int | None) -> claim_power.PowerTable:
    """A power table holding ``power`` for the design the row of ``case`` asked for (what power_table computes)."""
    return claim_power.PowerTable(
        [
            claim_power.Power(case, key, power, 0.0, seeds, None if seeds is None else 8 * seeds, 10, 0, 0.5)
            for key in rows
        ]
    )


def designs_asked(out, preset="smoke") -> claim_power.PowerTable:
    asked = claim_power.PowerTable()
    claim_rows.claim_rows(records.load_records(out, preset), power=asked)
    return asked


def test_power_at_the_records_design_marks_an_undecided_row_and_leaves_a_decided_verdict_standing(tmp_path):
    figure_records.sweep_and_probe(tmp_path, seeds=(0, 1))
    figure_records.growth(tmp_path, seeds=(0, 1), test_gap=lambda n, s: 0.03 if s else -0.03)  # undecided
    asked = designs_asked(tmp_path)
    keys = {case: [k for c, k in asked.requested if c == case] for case, _ in asked.requested}
    falls = "falls_with_depth"
    growth_mean = "growth_lower_mean (mean over the architectures)"
    low = claim_power.PowerTable(
        [
            claim_power.Power(falls, keys[falls][0], 0.4, 0.0, 6, 48, 10, 0, 0.5),
            *(claim_power.Power(growth_mean, k, 0.3, 0.0, 4, 32, 10, 0, 0.5) for k in keys[growth_mean]),
        ]
    )
    rows = {r["claim"]: r for r in claim_rows.claim_rows(records.load_records(tmp_path, "smoke"), power=low)}
    (trend,) = trend_rows(rows, "AGmax falls with depth (ResNet")
    assert trend["verdict"].startswith(HOLDS) and "(smoke scale" in trend["verdict"]  # decided: it stands
    assert trend["power"] == "0.40 (< 0.8: needs about 6 seeds per depth, 48 runs)"
    test_mean = rows["growth's mean test loss is below scratch's (digits)"]
    assert test_mean["verdict"].startswith("not decidable at this design (needs about 4 seeds, 32 runs)")
    assert verdicts_rules.verdict_kind(test_mean["verdict"]) == verdicts_rules.UNDECIDABLE_AT_DESIGN
    assert test_mean["power"] == "0.30 (< 0.8)"
    high = claim_power.PowerTable(
        [claim_power.Power(growth_mean, k, 0.9, 0.0, None, None, 10, 0, 0.5) for k in keys[growth_mean]]
    )
    rows = {r["claim"]: r for r in claim_rows.claim_rows(records.load_records(tmp_path, "smoke"), power=high)}
    test_mean = rows["growth's mean test loss is below scratch's (digits)"]
    assert verdicts_rules.verdict_kind(test_mean["verdict"]) == UNDECIDABLE and test_mean["power"] == "0.90"


def test_a_design_missing_from_the_power_table_is_said_to_be_so_and_never_guessed(tmp_path):
    # 5 seeds: a design no committed record set has (the committed table holds results/mini's designs)
    figure_records.growth(tmp_path, seeds=(0, 1, 2, 3, 4), test_gap=lambda n, s: 0.03 if s % 2 else -0.03)
    rows = claim_rows.claim_rows(records.load_records(tmp_path, "smoke"), power=claim_power.PowerTable())
    test_mean = next(r for r in rows if r["claim"] == "growth's mean test loss is below scratch's (digits)")
    assert test_mean["power"].startswith(verdict_row.POWER_NOT_COMPUTED)
    assert claim_power.POWER_COMMAND in test_mean["power"]
    assert (
        verdicts_rules.verdict_kind(test_mean["verdict"]) == UNDECIDABLE
    )  # not "at this design": no power was computed
    counts = claims_report.verdict_counts(rows)
    assert f"with {verdict_row.POWER_NOT_COMPUTED})" in counts
    # 08 reads the committed table, which does not hold this design either: the same fallback
    committed = claim_rows.claim_rows(records.load_records(tmp_path, "smoke"))
    assert next(r for r in committed if r["claim"] == test_mean["claim"])["power"] == test_mean["power"]


def test_rows_about_test_performance_state_the_regime_and_the_trend_rows_name_the_depths_that_did_not_fit(tmp_path):
    figure_records.sweep_and_probe(
        tmp_path,
        seeds=(0, 1),
        train_loss=lambda n, s: 0.2 if n == 6 else 0.01,  # N = 6 stalls
        test_loss=lambda n, s: 1.0 + 0.1 * n + 0.001 * s,  # rises with depth: over-fitting
    )
    figure_records.growth(tmp_path)
    rows = rows_of(tmp_path)
    said = "test loss rises with depth, 1 at N = 0 to 1.8 at N = 8"
    for claim in ("low-signal plateau", "growth's mean test loss", "relative test-loss reduction"):
        for row in trend_rows(rows, claim):
            assert (
                f"regime of the sweep: {said}" in row["reproduced"]
                and "the deeper networks over-fit" in row["reproduced"]
            )
    assert "regime" not in rows["growth's mean training loss is below scratch's (digits)"]["reproduced"]
    (trend,) = trend_rows(rows, "AGmax falls with depth (ResNet")
    assert "did not fit (clean training loss above 0.05): N = 6 (seed 0: 0.2, seed 1: 0.2)" in trend["records"]
    rec = records.load_records(tmp_path, "smoke")
    table = make_figures.depth_table(rec.probe, rec.sweep, LINE)
    assert [r["N"] for r in table if not r["fits"]] == [6]


def test_the_app_g_row_reads_02s_asymptotic_interval_and_the_n_test_each_interval_needs(tmp_path):
    def with_asymptotic(n, seed):
        record = figure_records.app_g_shrinking(n, seed) | {"delta": None, "verdict": "undecided"}
        return record | {
            "split": "held-out",
            "sources": {"train_unused": 9000, "test": 2000},
            "n_test_to_exclude_zero": 21000,
            "asymptotic": {"lower": 0.5, "upper": 2.5, "verdict": "not saturated", "n_test_to_exclude_zero": 640},
        }

    figure_records.sweep_and_probe(tmp_path, seeds=(0, 1), app_g=with_asymptotic)
    (row,) = trend_rows(rows_of(tmp_path), "the deepest models probed are first-order saturated")
    assert (
        "asymptotic interval (normal, Bonferroni; not used for the verdict) [0.5, 2.5]: not saturated"
        in row["reproduced"]
    )
    assert "n_test to exclude 0: Theorem 3's about 21,000, the asymptotic interval's about 640" in row["reproduced"]
    assert "(held-out: test 2,000, train_unused 9,000)" in row["records"]
    # without a delta "saturated within delta" cannot occur: the row says so, whatever the power table holds
    assert row["verdict"].startswith("not decidable at this design (needs a delta")
    assert row["power"] == "0.00 (< 0.8)"


def test_the_matched_rows_leave_drops_below_the_measurement_floor_out_and_name_them(tmp_path):
    figure_records.matched(tmp_path, drops={8: 7e-4, 14: 4e-4, 20: 2e-4}, seeds=(0, 1), spread=1e-6)

    def floor(config, result):
        for row in result["rows"]:
            below = row["depth_label"] == 20 and row["seed"] == 1
            row["measured_change_precision"] = matched_insertion_rules.BELOW_FLOOR if below else "measured"
            row["measurement_floor"] = 1e-12

    rewrite(tmp_path, matched_insertion.EXPERIMENT, floor)
    rows = rows_of(tmp_path)
    drop = rows["the matched-insertion drop does not increase with depth (digits)"]
    assert "left out of the log pool: ResNet-20 seed 1: below measurement precision" in drop["reproduced"]
    assert "no measurement floor recorded" not in drop["records"]
    every = rows["matched insertion lowers the training loss at every depth (digits)"]
    assert every["verdict"].startswith(HOLDS)
