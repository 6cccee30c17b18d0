"""The post-hoc stopping rules of growth by the criterion (09) and the fixed sweep's N* (common/report/grow_by_criterion_stopping.py),
on hand-made trajectories of probes: each rule firing and not firing, one probe only, NaN losses, ties at every
threshold."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from common.presets import paper
from common.presets.grow_by_criterion import PRESETS as GROW_PRESETS
from common.report import grow_by_criterion_stopping as gs
from common.science import saturation


def trajectory(rounds: int = 4, policy: str = "criterion", seed: int = 0, **columns) -> pd.DataFrame:
    """``rounds + 1`` rows (round 0 .. rounds) of one (policy, seed), depth N = round, nothing firing by default;
    ``columns`` replace whole columns (a list of one value per round)."""
    n = rounds + 1
    frame = pd.DataFrame({
        "policy": policy, "seed": seed, "round": range(n), "depth_n": range(n),
        "chosen_candidate": "block0.in", "v_max": [1.0] * n, "ag_max": [0.05] * n,
        "app_g_verdict": saturation.UNDECIDED, "app_g_lower": [0.0] * n, "app_g_upper": [1.0] * n,
        "val_loss": [2.0 - 0.2 * r for r in range(n)], "ratio": [1.4] * n,
        "train_loss": [1.0 / (r + 1) for r in range(n)], "test_loss": [2.0 + 0.1 * r for r in range(n)],
        "flops_cum": [1e9 * (r + 1) for r in range(n)],
    })  # fmt: skip
    for name, values in columns.items():
        frame[name] = values
    return frame[list(gs.TRAJECTORY_COLUMNS) + [c for c in frame if c not in gs.TRAJECTORY_COLUMNS]]


def test_the_hand_made_trajectory_has_the_engines_columns_and_no_rule_fires_on_it():
    rows = trajectory()
    assert tuple(rows.columns) == gs.TRAJECTORY_COLUMNS
    for key, rule in gs.RULES.items():
        stop = rule(rows)
        assert not stop.fired, (key, stop)
        assert stop.round is stop.depth_n is stop.train_loss is stop.test_loss is stop.flops_cum is None
        assert stop.text.startswith("did not stop within 4 rounds"), stop.text


def test_the_constants_are_the_ones_the_decisions_give():
    assert gs.AG_LINE == paper.LOW_SIGNAL_AG == 5e-3
    assert (gs.APP_G_DELTA, gs.V_FRACTION, gs.IMPROVEMENT_MARGIN, gs.PATIENCE) == (1e-2, 0.1, 0.01, 2)


# ----------------------------------------------------------------------------- (a)
def test_a_fires_at_the_first_round_strictly_below_the_line_and_reports_that_round():
    stop = gs.ag_below_line(trajectory(ag_max=[0.05, 0.005, 0.0049, 0.001, 0.01]))
    assert stop.fired and stop.round == 2 and stop.depth_n == 2  # 0.005 ties the line: not below
    assert (stop.train_loss, stop.test_loss, stop.flops_cum) == (1 / 3, 2.2, 3e9)
    assert "stopped at round 2" in stop.text and "0.0049 < 0.005" in stop.text


def test_a_does_not_fire_at_the_mini_sweeps_lowest_agmax_and_nan_rounds_never_fire():
    stop = gs.ag_below_line(trajectory(ag_max=[0.0989, 0.03, math.nan, 0.0149, 0.02]))
    assert not stop.fired and "never below 0.005 (lowest 0.0149)" in stop.text


def test_on_a_single_round_a_and_b_can_stop_before_any_growth_and_c_and_d_cannot():
    assert gs.ag_below_line(trajectory(0, ag_max=[0.001])).round == 0
    assert gs.app_g_saturated(trajectory(0, app_g_upper=[0.005])).round == 0
    stop = gs.ag_below_line(trajectory(0))
    assert not stop.fired and stop.text.startswith("did not stop within 0 rounds")
    table = gs.stop_table(trajectory(0, ag_max=[0.001], v_max=[0.0], val_loss=[math.nan]))
    assert table["fired"].tolist() == [True, False, False, False, False] and table["round"].tolist()[0] == 0


# ----------------------------------------------------------------------------- (b)
def test_b_fires_where_the_upper_end_is_at_most_delta_recomputed_at_the_rules_delta():
    rows = trajectory(app_g_lower=[0.0, 0.0, 0.0, 0.0, 0.0], app_g_upper=[0.5, 0.02, 0.01, 0.005, 0.5])
    stop = gs.app_g_saturated(rows)  # 0.01 ties delta: "saturated within delta" is upper <= delta (Theorem 3)
    assert stop.fired and stop.round == 2 and "upper end <= delta = 0.01" in stop.text
    assert "no asymptotic interval recorded" in stop.text
    assert gs.app_g_saturated(rows, delta=0.001).fired is False  # the recorded verdict strings are not read


def test_b_never_fires_on_no_verdict_rounds_nor_missing_intervals():
    rows = trajectory(
        app_g_verdict=[saturation.NO_VERDICT] * 2 + [saturation.UNDECIDED] * 3,
        app_g_lower=[0.0, 0.0, math.nan, 0.02, 0.0],
        app_g_upper=[0.001, 0.001, math.nan, 0.03, 0.5],
    )
    stop = gs.app_g_saturated(rows)
    assert not stop.fired and "never saturated within delta = 0.01 (last interval [0, 0.5])" in stop.text


def test_b_reads_the_asymptotic_interval_beside_it_and_never_fires_on_it():
    rows = trajectory(app_g_asymptotic_lower=[0.0] * 5, app_g_asymptotic_upper=[0.5, 0.008, 0.5, 0.5, 0.5])
    stop = gs.app_g_saturated(rows)
    assert not stop.fired and "first saturated within 0.01 at round 1" in stop.text
    rows["app_g_upper"] = [0.5, 0.5, 0.5, 0.009, 0.5]
    stop = gs.app_g_saturated(rows)
    assert stop.round == 3 and "(not the verdict) is first saturated within 0.01 at round 1" in stop.text


# ----------------------------------------------------------------------------- (c)
def test_c_fires_strictly_below_the_fraction_of_round_zero_and_never_at_round_zero():
    stop = gs.v_max_fallen(trajectory(v_max=[2.0, 1.0, 0.2, 0.19, 0.1]))  # 0.2 ties 0.1 x 2.0
    assert stop.fired and stop.round == 3 and "0.19 < 0.1 x round 0's 2" in stop.text
    assert not gs.v_max_fallen(trajectory(0, v_max=[1.0])).fired


def test_c_cannot_fire_without_a_positive_round_zero_value_or_without_round_zero():
    for first in (0.0, math.nan):
        stop = gs.v_max_fallen(trajectory(v_max=[first, 0.0, 0.0, 0.0, 0.0]))
        assert not stop.fired and "no reference to fall from" in stop.text
    stop = gs.v_max_fallen(trajectory(v_max=[1.0, 0.01, 0.01, 0.01, 0.01]).iloc[1:])
    assert not stop.fired and "no round 0 recorded" in stop.text
    stop = gs.v_max_fallen(trajectory(v_max=[1.0, math.nan, 0.5, 0.3, math.nan]))
    assert not stop.fired and "lowest after round 0: 0.3" in stop.text


# ----------------------------------------------------------------------------- (d)
def test_improvements_are_relative_to_the_best_so_far_and_ties_and_nans_never_improve():
    flags = gs.improvements([math.nan, 1.0, 0.995, 0.99, 0.99, math.nan, 0.97, 0.5])
    assert flags.tolist() == [False, True, False, False, False, False, True, True]  # 0.99 = 1.0 - 0.01 x 1.0: a tie
    assert not gs.improvements([math.nan, math.nan]).any()


def test_d_fires_after_patience_rounds_without_an_improvement():
    stop = gs.val_loss_stalled(trajectory(val_loss=[2.0, 1.5, 1.49, 1.6, 1.0]))
    assert stop.fired and stop.round == 3 and stop.depth_n == 3
    assert "best validation loss 1.5 at round 1" in stop.text
    stop = gs.val_loss_stalled(trajectory(val_loss=[2.0, 2.5, 3.0, 0.1, 0.1]))  # over-fitting from round 1 on
    assert stop.round == 2


def test_d_counts_nan_rounds_as_rounds_without_an_improvement_and_needs_a_finite_one():
    assert gs.val_loss_stalled(trajectory(val_loss=[1.0, math.nan, math.nan, 0.5, 0.4])).round == 2
    assert gs.val_loss_stalled(trajectory(val_loss=[math.nan, math.nan, 1.0, 1.0, 1.0])).round == 4
    stop = gs.val_loss_stalled(trajectory(val_loss=[math.nan] * 5))
    assert not stop.fired and "no finite validation loss" in stop.text


def test_d_does_not_fire_while_the_loss_keeps_improving_nor_within_fewer_rounds_than_its_patience():
    stop = gs.val_loss_stalled(trajectory(val_loss=[2.0, 2.0, 1.9, 1.9, 1.8]))
    assert not stop.fired and "last improvement at round 4" in stop.text
    assert not gs.val_loss_stalled(trajectory(1, val_loss=[1.0, 1.0])).fired
    assert not gs.val_loss_stalled(trajectory(0)).fired


def test_a_trajectory_is_checked_one_policy_and_seed_unique_rounds_and_its_columns():
    both = pd.concat([trajectory(), trajectory(seed=1)])
    with pytest.raises(ValueError, match="one \\(policy, seed\\)"):
        gs.ag_below_line(both)
    with pytest.raises(ValueError, match="rounds recorded twice"):
        gs.ag_below_line(pd.concat([trajectory(1), trajectory(1)]))
    with pytest.raises(ValueError, match="lacks the columns \\['v_max'\\]"):
        gs.v_max_fallen(trajectory().drop(columns="v_max"))
    with pytest.raises(ValueError, match="no rounds"):
        gs.ag_below_line(trajectory().iloc[:0])
    shuffled = trajectory(ag_max=[0.05, 0.05, 0.001, 0.05, 0.05]).iloc[::-1]
    assert gs.ag_below_line(shuffled).round == 2  # rows in any order: read by round


# ----------------------------------------------------------------------------- (r), the runs' own rule, and its ratio
def test_r_fires_on_the_second_probe_in_a_row_strictly_below_the_constant_and_a_nan_breaks_the_streak():
    assert {(p.ratio_below, p.in_a_row) for p in GROW_PRESETS.values()} == {(gs.RATIO_BELOW, gs.IN_A_ROW)} == {(1.0, 2)}
    stop = gs.ratio_stopped(trajectory(ratio=[1.2, 0.9, 1.0, 0.8, 0.7]))  # 1.0 ties: not below
    assert stop.fired and stop.round == 4 and "2 probes in a row" in stop.text
    stop = gs.ratio_stopped(trajectory(ratio=[0.9, math.nan, 0.9, 1.1, 0.9]))
    assert not stop.fired and "lowest 0.9" in stop.text


def test_the_ratio_is_the_spread_over_the_places_over_the_best_branchs_same_place_value():
    probe = {  # candidates 0..3 (3: the head's input); branch b writes to candidate b + 1
        "ratio": 0.5 / 0.3,
        "candidates": [{"index": i, "v_s": v} for i, v in enumerate([0.1, 0.2, 0.5, 0.25])],
        "branches": [{"index": 0, "v_b": 0.1}, {"index": 1, "v_b": 0.3}, {"index": 2, "v_b": 0.2}],
    }
    parts = gs.ratio_parts(probe)
    assert parts["s_star"] == pytest.approx(0.3 / 0.5) and parts["spread"] == pytest.approx(1.0)  # b* = 1 at the max
    assert parts["spread"] / parts["s_star"] == pytest.approx(probe["ratio"])
    assert parts["s_max"] == pytest.approx(0.8) and parts["s_median"] == pytest.approx(0.6)
    runs = pd.DataFrame([{"policy": "criterion", "seed": 0, "probes": [
        {**probe, "probe": 0, "depth_n": 0}, {"probe": 1, "depth_n": 1, "stopped": "growth phase over"}]}])  # fmt: skip
    probes = gs.ratio_probes(runs, "hand-made")
    assert len(probes) == 1 and (probes["candidates"].item(), probes["branches"].item()) == (4, 3)
    [row] = gs.ratio_rows(probes)
    assert row["ratio median"] == "1.67" and row["below 1"] == 0 and row["s_b* = V_b* / V_S there"] == "0.6"


# ----------------------------------------------------------------------------- every rule, every trajectory
def test_the_stop_table_has_one_row_per_rule_policy_and_seed():
    frame = pd.concat([
        trajectory(policy="criterion", seed=0, ag_max=[0.05, 0.004, 0.05, 0.05, 0.05]),
        trajectory(policy="criterion", seed=1),
        trajectory(2, policy="cyclic", seed=0, val_loss=[1.0, 1.0, 1.0]),
    ])  # fmt: skip
    table = gs.stop_table(frame)
    assert len(table) == 5 * 3 and not table.duplicated(["rule", "policy", "seed"]).any()
    assert list(table.columns[:4]) == ["rule", "policy", "seed", "rounds"]
    fired = table[table["fired"]]
    assert set(zip(fired["rule"], fired["policy"], fired["seed"], fired["round"])) == {
        ("a", "criterion", 0, 1),
        ("d", "cyclic", 0, 2),
    }
    assert table.loc[(table["policy"] == "cyclic") & (table["rule"] == "a"), "rounds"].item() == 2
    assert table["rule_name"].str.startswith(("a:", "b:", "c:", "d:", "r:")).all()
    with pytest.raises(ValueError, match="no trajectories"):
        gs.stop_table(frame.iloc[:0])


# ----------------------------------------------------------------------------- against the fixed sweep
def sweep(train=(0.4, 0.2, 0.1, 0.05), test=(1.0, 1.1, 1.2, 1.3), depths=(0, 1, 2, 4), seeds=(0, 1), flops=None):
    """Two seeds per depth, seed 1's losses 10% above seed 0's (so a depth's mean is 1.05 x the given value)."""
    rows = []
    for n, tr, te in zip(depths, train, test, strict=True):
        for s in seeds:
            row = {"depth_n": n, "seed": s, "train_loss": tr * (1 + 0.1 * s), "test_loss": te * (1 + 0.1 * s)}
            if flops is not None:
                row["flops"] = flops * (n + 1)
            rows.append(row)
    return pd.DataFrame(rows)


def test_the_sweeps_plateau_is_the_smallest_depth_no_deeper_one_improves_on_by_the_margin():
    plateau = gs.sweep_plateau(sweep(train=(0.4, 0.2, 0.199, 0.2)))  # 0.199 is within 1% of 0.2
    assert (plateau.depth_n, plateau.train_loss) == (
        1,
        pytest.approx(0.21),
    ) and "stops improving at N = 1" in plateau.text
    assert gs.sweep_plateau(sweep(train=(0.4, 0.3, 0.2, 0.199))).depth_n == 2  # 0.3 to 0.2 improves; 0.199 does not
    still = gs.sweep_plateau(sweep())
    assert still.depth_n is None and "still improves at its deepest depth, N = 4" in still.text
    assert gs.sweep_plateau(sweep(train=(0.4,), test=(1.0,), depths=(0,))).depth_n is None
    assert gs.sweep_plateau(sweep(train=(0.4, math.nan, 0.4, 0.1))).depth_n is None  # the NaN depth is left out


def test_each_rules_stop_against_the_sweeps_plateau():
    frame = pd.concat([
        trajectory(policy="criterion", ag_max=[0.05, 0.05, 0.05, 0.004, 0.05]),
        trajectory(policy="cyclic", ag_max=[0.05, 0.004, 0.05, 0.05, 0.05]),
        trajectory(policy="random", ag_max=[0.05, 0.05, 0.004, 0.05, 0.05]),
    ])  # fmt: skip
    stops = gs.stop_table(frame)
    against = gs.stops_against_sweep(stops, sweep(train=(0.4, 0.2, 0.1, 0.1)))  # N* = 2
    a = against[against["rule"] == "a"].set_index("policy")
    assert a["plateau_depth_n"].tolist() == [2, 2, 2] and a["depths_from_plateau"].tolist() == [1, -1, 0]
    assert a.loc["criterion", "against"] == "stopped at N = 3, 1 deeper than the sweep's N* = 2"
    assert a.loc["cyclic", "against"] == "stopped at N = 1, 1 shallower than the sweep's N* = 2"
    assert a.loc["random", "against"] == "stopped at N = 2, at the sweep's N* = 2"
    c = against[against["rule"] == "c"]
    assert c["depths_from_plateau"].isna().all() and c["against"].str.startswith("did not stop within 4").all()
    none = gs.stops_against_sweep(stops, sweep())
    assert none["depths_from_plateau"].isna().all() and "still improves" in none["against"].iloc[0]
    assert np.array_equal(none["fired"], stops["fired"])
