"""Expanding a decoder by the criterion (10) in the report: its claim rule on hand-made values, its simulated error
rates against the exact Student-t power, and its rows from 10-format records written here (criterion lower, even
lower, criterion and ag placing the same layers, no records, no training steps)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from common.experiments import expand_decoder
from common.power import claim_rates
from common.presets.expand_decoder import ARMS as SCRIPT_POLICIES
from common.presets.expand_decoder import PRESETS as EXPAND_PRESETS
from common.report import claim_power, claim_rows, records
from common.report.rows import expand_decoder as expand_decoder_rows
from common.report.rules import expand_decoder as expand_decoder_rules
from common.report.rules import margins, verdicts
from common.report.rules.cases import CASES_BY_NAME, case_named
from common.report.verdict_row import REGIME_ROW
from tests.helpers.figure_records import write_run

CASE = "expansion_lower_held_out_loss (paired over runs)"
POLICIES = ("criterion", "even", "bi", "ag", "none")
BLOCKS, SEEDS = (1, 2), (0, 1, 2)  # the mini grid: 6 runs, every policy in each
TEXT = {"source": "text", "text_name": "tinyshakespeare.txt", "text_sha256": "0" * 64}  # 10's config names its text


# ----------------------------------------------------------------------------- the rule on hand-made values
def test_the_rule_is_a_paired_t_interval_over_runs_with_scipys_p_value():
    criterion = {(1, 0): 3.10, (1, 1): 3.12, (1, 2): 3.08, (2, 0): 3.00, (2, 1): 3.03, (2, 2): 2.99}
    diffs = [0.050, 0.041, 0.062, 0.044, 0.039, 0.058]
    even = {key: criterion[key] + d for key, d in zip(criterion, diffs, strict=True)}
    out = expand_decoder_rules.expansion_lower_held_out_loss(criterion, even, "even", 200)
    assert out.verdict == verdicts.HOLDS
    d = np.array([even[k] - criterion[k] for k in criterion])  # float64, as the rule subtracts them
    half = stats.t.ppf(0.975, 5) * d.std(ddof=1) / math.sqrt(6)
    assert f"even - criterion {d.mean():+.4f} [{d.mean() - half:+.4f}, {d.mean() + half:+.4f}] over runs" in out.value
    assert f"p = {verdicts.fmt(stats.ttest_1samp(d, 0.0).pvalue)}" in out.value
    assert "after S = 200 steps" in out.value and "(means over 6 runs)" in out.value
    assert (
        expand_decoder_rules.expansion_lower_held_out_loss(even, criterion, "even").verdict == verdicts.FAILS
    )  # the other way


@pytest.mark.parametrize(
    "criterion, other",
    [
        ({(1, 0): 3.1}, {(1, 0): 3.2}),  # one paired run: no spread
        ({(1, 0): 3.10, (1, 1): 3.30, (2, 0): 3.20}, {(1, 0): 3.20, (1, 1): 3.18, (2, 0): 3.22}),  # straddles 0
        ({(1, 0): 3.1, (1, 1): 3.2}, {(2, 0): 3.3, (2, 1): 3.4}),  # no run in common
    ],
)
def test_the_rule_is_not_decidable_without_evidence_either_way(criterion, other):
    assert expand_decoder_rules.expansion_lower_held_out_loss(criterion, other).verdict == verdicts.UNDECIDABLE


def test_identical_losses_at_every_run_say_no_difference_not_a_lack_of_power():
    # criterion and ag placing the same layers train the same model: every paired difference is exactly 0, sd 0
    same = {(k, s): 3.0 + 0.01 * s + 0.1 * k for k in BLOCKS for s in SEEDS}
    out = expand_decoder_rules.expansion_lower_held_out_loss(same, dict(same), "ag", 50)
    assert out.verdict == verdicts.FAILS
    assert "ag - criterion exactly 0 at every run: no difference" in out.value
    assert "no difference" in expand_decoder_rules.expansion_lower_held_out_loss.rule  # the rule's text says so too


# ----------------------------------------------------------------------------- simulated error rates
def test_the_simulated_rates_are_the_exact_power_of_the_paired_t_test():
    case = case_named(CASE)
    assert case.experiment == "expand" and CASES_BY_NAME[CASE] is case
    design = claim_power.design_for_preset("paper")
    assert design.expand_runs == 6 and design.key("expand") == "expand: 6 paired runs (K, seed)"
    reps = 2000
    rates = claim_rates.measure(case, design, reps=reps, seed=0)
    n, crit = design.expand_runs, stats.t.ppf(0.975, design.expand_runs - 1)
    for k in claim_rates.NOISE:
        exact = stats.nct.sf(crit, n - 1, math.sqrt(n) / k)  # the true world: d ~ N(1, k^2), one-sided at 2.5%
        slack = 4 * math.sqrt(exact * (1 - exact) / reps)  # four binomial standard errors of the simulated rate
        assert rates.holds_true[k] == pytest.approx(exact, abs=slack)
        assert rates.holds_false[k] == pytest.approx(0.025, abs=4 * math.sqrt(0.025 * 0.975 / reps))
    assert rates.meets()


def test_power_below_the_target_names_the_runs_it_needs():
    case = case_named(CASE)
    small = claim_power.design_for_preset("paper", seeds=1)  # 2 runs: df 1
    power = claim_rates.power(case, small, reps=400, seed=0)
    assert power.power < margins.POWER_TARGET and power.seeds_needed is not None
    assert power.runs_needed == power.seeds_needed
    assert power.needs() == f"about {power.seeds_needed} runs (one per K and seed, each training every policy)"


def test_the_command_lines_case_list_includes_the_expansion_case(capsys):
    argv = ["--preset", "smoke", "--reps", "20", "--rules", "expansion_lower_held_out_loss", "--noise", "0.5"]
    assert claim_rates.main(argv) == 0
    table = capsys.readouterr().out
    assert f"`expansion_lower_held_out_loss` ({case_named(CASE).label})" in table
    assert "decoder expansion: 6 paired runs (K, seed)" in table


# ----------------------------------------------------------------------------- rows from 10-format records
def test_the_rows_compare_the_criterion_with_every_other_policy_of_script_10():
    assert (expand_decoder_rows.CRITERION, *expand_decoder_rows.COMPARED) == SCRIPT_POLICIES
    assert expand_decoder_rows.EXPERIMENT == expand_decoder.EXPERIMENT
    # the simulated design's grid is 10's mini grid (claim_rates does not import 10's presets: they load transformers)
    mini = EXPAND_PRESETS["mini"]
    assert mini.blocks == claim_power.EXPAND_BLOCKS == BLOCKS and mini.seeds == len(SEEDS)
    assert claim_power.design_for_preset("mini", seeds=mini.seeds).expand_runs == len(mini.blocks) * mini.seeds


def write_expansion(out, losses, steps: int = 100, places=None):
    """One 10 run per (K, seed) of preset mini: ``losses[policy](K, seed)`` its held-out loss (None when ``steps``
    is 0); ``places[policy](K)`` its places (default: every policy its own)."""
    places = places or {}
    for k in BLOCKS:
        for seed in SEEDS:
            config = {"preset": "mini", "text": TEXT, "blocks": k, "seed": seed, "policies": list(POLICIES)}
            chosen = {
                p: places.get(p, lambda k, i=i: [10 * i + j for j in range(k)])(k) for i, p in enumerate(POLICIES)
            }
            policies = {
                p: {
                    "places": chosen[p],
                    "sources": [x - 1 for x in chosen[p]],
                    "held_out_loss": losses[p](k, seed) if steps else None,
                    "training": [{"step": steps, "train_loss": 3.0, "held_out_loss": losses[p](k, seed)}]
                    if steps
                    else [],
                }
                for p in POLICIES
            }
            ranking = [{"place": i, "growth_value": 0.1, "ag": 0.2, "bi": None, "k": i, "n": 6} for i in range(6)]
            result = {"blocks": k, "seed": seed, "n_layer": 6, "train_steps": steps, "base_held_out_loss": 3.5,
                      "ranking": ranking, "policies": policies}  # fmt: skip
            write_run(out, expand_decoder_rows.EXPERIMENT, f"expand-K{k}-seed{seed}", config, result)
    return out


def noisy(level: float, phase: int = 0):
    """A held-out loss ``level`` plus a fixed small wobble per (K, seed); policies of another ``phase`` wobble
    differently, so that their paired differences spread."""
    return lambda k, s: level - 0.05 * k + 0.003 * ((3 * s + k + phase) % 5)


def mean_difference(other, criterion) -> float:
    return float(np.mean([other(k, s) - criterion(k, s) for k in BLOCKS for s in SEEDS]))


def rows_of(out) -> dict[str, dict]:
    rec = records.Records(out=out, preset="mini")
    return {
        other: row
        for other, row in zip(expand_decoder_rows.COMPARED, expand_decoder_rows.expand_claims(rec), strict=True)
    }


def criterion_lowest() -> dict:
    """Held-out losses per policy (per run) where the criterion is lowest at every run."""
    return {
        "criterion": noisy(3.0),
        "even": noisy(3.2, 1),
        "bi": noisy(3.1, 2),
        "ag": noisy(3.3, 3),
        "none": noisy(3.4, 4),
    }


def test_rows_hold_when_the_criterion_is_lower_at_every_run(tmp_path):
    losses = criterion_lowest()
    rows = rows_of(write_expansion(tmp_path, losses))
    for other, row in rows.items():
        assert row["verdict"] == verdicts.HOLDS, row["reproduced"]
        assert other in row["claim"] and row["claim"].startswith("beyond the paper: expanding a trained decoder")
        assert row["paper"] == expand_decoder_rows.BEYOND and "means over 6 runs" in row["reproduced"]
        assert row["records"].startswith("mini, tinyshakespeare.txt, seeds 0,1,2, 6 runs, policies criterion, ")
        assert "K = 1,2, S = 100 steps" in row["records"]
        case, design = row["_design"]
        assert case.name == CASE and design.expand_runs == 6
    shift = mean_difference(losses["even"], losses["criterion"])
    assert f"even - criterion {shift:+.4f} [" in rows["even"]["reproduced"] and 0.19 < shift < 0.21
    assert "base model before expansion 3.5000" in rows["bi"]["reproduced"]


def test_rows_do_not_hold_when_the_other_policy_is_lower(tmp_path):
    losses = {
        "criterion": noisy(3.0),
        "even": noisy(2.8, 1),
        "bi": noisy(3.2, 2),
        "ag": noisy(3.2, 3),
        "none": noisy(3.2, 4),
    }
    rows = rows_of(write_expansion(tmp_path, losses))
    shift = mean_difference(losses["even"], losses["criterion"])
    assert (
        rows["even"]["verdict"] == verdicts.FAILS and f"even - criterion {shift:+.4f} [" in rows["even"]["reproduced"]
    )
    assert rows["bi"]["verdict"] == verdicts.HOLDS


def test_rows_where_ag_places_the_same_layers_say_no_difference(tmp_path):
    same = {"criterion": lambda k: list(range(2, 2 + k)), "ag": lambda k: list(range(2, 2 + k))}
    losses = {
        "criterion": noisy(3.0),
        "even": noisy(3.2, 1),
        "bi": noisy(3.2, 2),
        "ag": noisy(3.0),
        "none": noisy(3.2, 4),
    }
    rows = rows_of(write_expansion(tmp_path, losses, places=same))
    ag = rows["ag"]
    assert ag["verdict"] == verdicts.FAILS and "exactly 0 at every run: no difference" in ag["reproduced"]
    assert "ag placed the same layers as the criterion at 6 of 6 runs" in ag["reproduced"]
    assert not any("placed the same layers" in rows[o]["reproduced"] for o in ("even", "bi"))


def test_rows_say_not_run_without_records_and_name_the_command(tmp_path):
    rows = expand_decoder_rows.expand_claims(records.Records(out=tmp_path, preset="mini"))
    assert len(rows) == len(expand_decoder_rows.COMPARED) and {r["verdict"] for r in rows} == {verdicts.NOT_RUN}
    assert all(f"none: python 10_expand_decoder.py --preset mini --out {tmp_path}" == r["records"] for r in rows)
    other = write_expansion(tmp_path / "other", {p: noisy(3.0) for p in POLICIES})  # records of preset mini only
    assert {r["verdict"] for r in expand_decoder_rows.expand_claims(records.Records(out=other, preset="paper"))} == {
        verdicts.NOT_RUN
    }


def test_rows_without_training_steps_say_not_run_no_training_steps(tmp_path):
    out = write_expansion(tmp_path, {p: noisy(3.0) for p in POLICIES}, steps=0)
    rows = expand_decoder_rows.expand_claims(records.Records(out=out, preset="mini"))
    assert len(rows) == len(expand_decoder_rows.COMPARED) and {r["verdict"] for r in rows} == {
        "not run (no training steps)"
    }
    assert all(r["records"].startswith("6 runs, all with train_steps = 0") for r in rows)
    assert all(
        r["records"].endswith(f"python 10_expand_decoder.py --preset mini --out {out} --train-steps S") for r in rows
    )
    assert {verdicts.verdict_kind(r["verdict"]) for r in rows} == {verdicts.NOT_RUN}  # counted as not run


def test_the_report_lists_the_rows_last_with_their_power_looked_up(tmp_path):
    losses = criterion_lowest()
    asked = claim_power.PowerTable()
    rows = claim_rows.claim_rows(records.load_records(write_expansion(tmp_path, losses), "mini"), power=asked)
    rows = [r for r in rows if r["kind"] != REGIME_ROW]  # the regime rows come after every claim (issue 57)
    assert [r["claim"] for r in rows[-len(expand_decoder_rows.COMPARED) :]] == [
        expand_decoder_rows.claim_text(o) for o in expand_decoder_rows.COMPARED
    ]
    assert all(
        r["verdict"].startswith(f"{verdicts.HOLDS} (") for r in rows[-len(expand_decoder_rows.COMPARED) :]
    )  # the mini scale note follows
    assert all(
        r["power"].startswith("power not computed for this design") for r in rows[-len(expand_decoder_rows.COMPARED) :]
    )  # an empty table
    assert (CASE, "expand: 6 paired runs (K, seed)") in asked.requested
