"""Each claim rule of the report gives "holds" on one hand-made input and "does not hold" on another.

The rules are pure functions of numbers (common/claims.py); the last tests check that the report
builder feeds them the records of scripts 01-07 (hand-made, tests/figure_records.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from common import claims
from common.claims import FAILS, HOLDS, UNDECIDABLE
from common.experiments import make_figures
from common.projection import saturation_interval
from tests import figure_records

LINE = 5e-3


def test_partial_spearman_equals_the_first_order_partial_correlation_formula_on_spearman_rhos():
    # Independent route: r_xy.z = (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2)) on Spearman's rhos,
    # and the p-value from t with n - 3 degrees of freedom.
    rng = np.random.default_rng(0)
    z = rng.normal(size=30)
    x, y = z + rng.normal(size=30), z + 0.5 * rng.normal(size=30)
    r_xy, r_xz, r_yz = (stats.spearmanr(a, b).statistic for a, b in ((x, y), (x, z), (y, z)))
    expected = (r_xy - r_xz * r_yz) / math.sqrt((1 - r_xz**2) * (1 - r_yz**2))
    r, p = claims.partial_spearman(x, y, z)
    assert r == pytest.approx(expected, abs=1e-10)  # |r| <= 1; the residuals come from lstsq: not a summation bound
    t = expected * math.sqrt(27 / (1 - expected**2))
    assert p == pytest.approx(2 * stats.t.sf(abs(t), 27), rel=1e-9)
    assert abs(r) < abs(r_xy)  # z drives both: guards against the test passing with the plain correlation


def test_falls_with_depth():
    depths = [0, 1, 2, 3, 4, 5, 6]
    assert claims.falls_with_depth(depths, [0.1 / (1 + n) for n in depths]).verdict == HOLDS
    assert claims.falls_with_depth(depths, [0.1 * (1 + n) for n in depths]).verdict == FAILS
    assert claims.falls_with_depth(depths, [0.1, 0.3, 0.15, 0.25, 0.12, 0.28, 0.2]).verdict == FAILS  # no significant trend
    # Four depths in perfect order: the exact p is 2/4! = 1/12 (scipy's t approximation says 0): no power to decide.
    assert claims.spearman([0, 1, 2, 4], [4, 3, 2, 1]) == (-1.0, pytest.approx(1 / 12))
    assert claims.falls_with_depth([0, 1, 2, 4], [4, 3, 2, 1]).verdict == UNDECIDABLE


def test_stays_below_line():
    depths = [0, 2, 4, 6, 8]
    assert claims.stays_below_line(depths, [0.02, 0.01, 0.004, 0.003, 0.002], LINE).verdict == HOLDS
    assert claims.stays_below_line(depths, [0.02, 0.01, 0.004, 0.006, 0.002], LINE).verdict == FAILS
    assert claims.stays_below_line(depths, [0.02, 0.01, 0.009, 0.008, 0.007], LINE).verdict == UNDECIDABLE


def test_plateau_within_seed_spread_needs_two_seeds():
    depths = [0, 0, 4, 4, 8, 8]
    ag = [0.02, 0.02, 0.004, 0.004, 0.003, 0.003]
    flat = [0.50, 0.52, 0.40, 0.42, 0.405, 0.395]  # after N* = 4: gain 0.01 against a spread ~0.012
    assert claims.plateau_within_seed_spread(depths, ag, flat, LINE).verdict == HOLDS
    still_falling = [0.50, 0.52, 0.40, 0.42, 0.30, 0.31]
    assert claims.plateau_within_seed_spread(depths, ag, still_falling, LINE).verdict == FAILS
    one_seed = claims.plateau_within_seed_spread([0, 4, 8], [0.02, 0.004, 0.003], [0.5, 0.4, 0.3], LINE)
    assert one_seed.verdict == UNDECIDABLE and "single seed" in one_seed.value


def test_explained_by_training_loss():
    rng = np.random.default_rng(1)
    depths = np.repeat(np.arange(8), 3)
    train = rng.uniform(0.01, 1.0, size=len(depths))  # unrelated to depth
    ag_from_loss = 0.1 * train * (1 + 0.01 * rng.normal(size=len(depths)))
    assert claims.explained_by_training_loss(depths, ag_from_loss, train).verdict == HOLDS
    # AGmax follows depth, and the training loss falls with depth too: rho(AGmax, train loss) is significant,
    # so only the partial correlation with depth given the training loss can make the rule fail.
    train_by_depth = 0.5 * 0.8**depths * (1 + 0.3 * rng.uniform(size=len(depths)))
    ag_from_depth = 0.1 * 0.7**depths * (1 + 0.01 * rng.normal(size=len(depths)))
    assert stats.spearmanr(ag_from_depth, train_by_depth).pvalue < 0.05
    assert claims.explained_by_training_loss(depths, ag_from_depth, train_by_depth).verdict == FAILS


def test_projection_never_exceeds():
    assert claims.projection_never_exceeds([0.1, 0.2], [0.1, 0.3]).verdict == HOLDS
    assert claims.projection_never_exceeds([0.1, 0.31], [0.1, 0.3]).verdict == FAILS


def test_growth_lower_mean_and_everywhere():
    assert claims.growth_lower_mean(0.25, 0.29).verdict == HOLDS
    assert claims.growth_lower_mean(0.30, 0.29).verdict == FAILS
    four = ("ResNet-10", "ResNet-11", "ResNet-12", "ResNet-13")
    assert claims.growth_wins_everywhere(dict.fromkeys(four, "growth"), four).verdict == HOLDS
    assert claims.growth_wins_everywhere({**dict.fromkeys(four, "growth"), "ResNet-12": "scratch"}, four).verdict == FAILS
    assert claims.growth_wins_everywhere({"ResNet-10": "growth"}, four).verdict == UNDECIDABLE


def test_paper_value_in_interval():
    assert claims.paper_value_in_interval(0.12, 0.01, 5, 0.118).verdict == HOLDS
    assert claims.paper_value_in_interval(0.05, 0.01, 5, 0.118).verdict == FAILS
    assert claims.paper_value_in_interval(0.12, math.nan, 1, 0.118).verdict == UNDECIDABLE


def test_matched_insertion_rules():
    paper = {8: 7e-4, 14: 4e-4, 20: 2e-4, 34: 2e-4}
    assert claims.lowers_loss_everywhere({8: -7e-4, 14: -4e-4}).verdict == HOLDS
    assert claims.lowers_loss_everywhere({8: -7e-4, 14: 1e-5}).verdict == FAILS
    assert claims.drop_not_increasing({8: -7e-4, 14: -4e-4, 20: -2e-4, 34: -2e-4}).verdict == HOLDS
    assert claims.drop_not_increasing({8: -7e-4, 14: -9e-4}).verdict == FAILS
    assert claims.matches_paper_precision({8: -7.2e-4, 14: -3.8e-4}, paper).verdict == HOLDS
    assert claims.matches_paper_precision({8: -7.2e-4, 14: -1e-4}, paper).verdict == FAILS


def test_exponent_rules():
    assert claims.exponent_within_tolerance({"": (0.35, 0.3, 0.4)}, 0.3).verdict == HOLDS
    assert claims.exponent_within_tolerance({"": (0.45, 0.4, 0.5)}, 0.3).verdict == FAILS
    assert claims.exponent_within_tolerance({"": (math.nan, math.nan, math.nan)}, 0.3).verdict == UNDECIDABLE
    assert claims.sign_within_tolerance({"stage 1": 0.05, "stage 2": -0.3}, "<= 0").verdict == HOLDS
    assert claims.sign_within_tolerance({"stage 1": 0.25}, "<= 0").verdict == FAILS
    assert claims.sign_within_tolerance({"stage 1": -0.05}, ">= 0").verdict == HOLDS
    assert claims.sign_within_tolerance({"stage 1": -0.25}, ">= 0").verdict == FAILS


def test_every_rule_carries_its_text():
    assert all(isinstance(fn.rule, str) and len(fn.rule) > 20 for fn in claims.RULES)


# ----------------------------------------------------------------------------- the report builder feeds the rules
def verdicts(out, preset="smoke") -> dict[str, str]:
    return {r["claim"]: r["verdict"] for r in make_figures.claim_rows(make_figures.load_records(out, preset))}


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
    key = "AGmax falls with depth (ResNet sweep, digits, batch-mean AG_l)"
    claims_checked = [key, "growth's test loss is lower for all four architectures (digits)",
                      "the matched-insertion drop does not increase with depth (digits)",
                      "fc-tanh: beta, max norm (how their figures were read; used for the verdict) (synthetic)"]  # fmt: skip
    g, b = verdicts(good), verdicts(bad)
    for claim in claims_checked:
        assert g[claim].startswith(HOLDS), (claim, g[claim])
        assert b[claim].startswith(FAILS), (claim, b[claim])
        assert g[claim].endswith(f"({make_figures.SMOKE_NOTE})")


def test_app_g_row_shows_interval_t_candidates_and_verdict_of_new_and_older_records(tmp_path):
    claim = "the deepest models probed are first-order saturated within delta (App. G) (digits)"

    def row(out):
        return next(r for r in make_figures.claim_rows(make_figures.load_records(out, "smoke")) if r["claim"] == claim)

    figure_records.sweep_and_probe(tmp_path / "good", seeds=(0, 1))  # deepest N = 8: Gamma_hat = 4e-5, t = 0.005 <= 0.02
    good = row(tmp_path / "good")
    assert good["verdict"].startswith(HOLDS) and good["rule"] == claims.saturated_within_delta.rule
    assert good["reproduced"].count("t = 0.005, 1 candidates, delta = 0.02: saturated within delta") == 2  # one per seed
    assert "ResNet-16 seed 0: Gamma in [0, 0.00504]" in good["reproduced"] and "n_test 1000" in good["records"]

    def not_saturated(n, seed):
        return saturation_interval([1.0], [1.0], n=1000, t=0.1, delta=0.02).as_record() | {"n_test": 1000}

    figure_records.sweep_and_probe(tmp_path / "bad", app_g=not_saturated)
    assert row(tmp_path / "bad")["verdict"].startswith(FAILS)

    def older(n, seed):  # a record of the earlier test: t from the same sample, delta = 0, a saturated flag
        return {"saturated": True, "max_value": 6.2, "t": 20.4, "delta": 0.0, "n": 1000, "values": {"a": 6.2, "b": 1.0},
                "error_bound": 0.05}  # fmt: skip

    figure_records.sweep_and_probe(tmp_path / "older", app_g=older)
    old = row(tmp_path / "older")
    assert old["verdict"].startswith(UNDECIDABLE)
    assert "Gamma in [0, 26.6], t = 20.4, 2 candidates, delta = 0: undecided" in old["reproduced"]


def test_weight_scaling_verdicts_use_the_max_norm_beta_and_show_step_2_beside_it(tmp_path):
    # i.i.d.-like weights: the max norm reads alpha + beta = 1 (Cohen et al.'s ReLU value), Step 2 reads 1.5.
    figure_records.scaling(tmp_path, beta=0.3, alpha=0.7, diffusive=0.5)
    rows = {r["claim"]: r for r in make_figures.claim_rows(make_figures.load_records(tmp_path, "smoke"))}
    relu = rows["fc-relu: alpha + beta from |delta_k| A_k, max norm (how their figures were read; used for the verdict) (synthetic)"]
    assert relu["verdict"].startswith(HOLDS)
    assert relu["reproduced"].startswith("1.000 [") and "Step 2 (cumulative sum, their text), not used for the verdict: 1.500 [" in relu["reproduced"]
    tanh = rows["fc-tanh: beta, max norm (how their figures were read; used for the verdict) (synthetic)"]
    assert tanh["verdict"].startswith(HOLDS) and "their text), not used for the verdict: 0.800 [" in tanh["reproduced"]
    assert not any("cumulative-sum norm" in claim for claim in rows)  # no verdict rests on Step 2


def test_records_of_the_other_preset_are_not_run(tmp_path):
    figure_records.sweep_and_probe(tmp_path, preset="smoke")
    rows = make_figures.claim_rows(make_figures.load_records(tmp_path, "paper"))
    assert rows and all(r["verdict"] == claims.NOT_RUN for r in rows)
    assert "python 02_probe_ag.py" in rows[0]["records"]
