"""Growth by the criterion (09) in the report: its claim rules on hand-made values, its rows ("not run" without 09
records, verdicts from hand-written 09 and 01 records), 08's figures 10 and 11 and its tables at the budget, of the
FLOPs to reach the sweep's loss at N*, and of the post-hoc stopping rules."""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest

from common.experiments import grow_by_criterion, make_figures
from common.experiments.shared.resnet_sweep import build_resnet
from common.report import claim_power, grow_by_criterion_stopping, records
from common.report.rows import grow_by_criterion as grow_by_criterion_rows
from common.report.rules import grow_by_criterion as grow_by_criterion_rules
from common.report.rules import verdicts as verdicts_rules
from common.report.verdict_row import REGIME_ROW, finish_row
from common.training.flops import training_flops
from tests.helpers.figure_records import write_run

WIDTHS = [4, 8, 16]  # a tiny ResNet: its FLOPs are counted for real, in milliseconds
CANDIDATES = ("block0.in", "block1.in", "block2.in", "head.in")


# ----------------------------------------------------------------------------- the rules on hand-made values
def test_placement_holds_when_the_criterion_is_lower_at_every_seed():
    out = grow_by_criterion_rules.placement_lower_train_loss(
        {0: 0.10, 1: 0.12, 2: 0.11}, {0: 0.20, 1: 0.23, 2: 0.21}, "cyclic"
    )
    assert out.verdict == verdicts_rules.HOLDS
    assert "train loss at B" in out.value and "cyclic - criterion" in out.value


def test_placement_does_not_hold_when_the_other_is_significantly_lower():
    out = grow_by_criterion_rules.placement_lower_train_loss(
        {0: 0.30, 1: 0.31, 2: 0.29}, {0: 0.20, 1: 0.22, 2: 0.21}, "random"
    )
    assert out.verdict == verdicts_rules.FAILS


@pytest.mark.parametrize(
    "criterion, other",
    [
        ({0: 0.1}, {0: 0.2}),  # one paired seed: no spread
        ({0: 0.10, 1: 0.30, 2: 0.20}, {0: 0.20, 1: 0.18, 2: 0.22}),  # noisy: the interval straddles 0
        ({0: 0.1, 1: 0.2}, {2: 0.3, 3: 0.4}),  # no seed in common
    ],
)
def test_placement_is_not_decidable_without_evidence_either_way(criterion, other):
    assert grow_by_criterion_rules.placement_lower_train_loss(criterion, other).verdict == verdicts_rules.UNDECIDABLE


def test_stop_rule_holds_when_every_seed_stops_at_the_plateau_and_fails_far_from_it():
    assert grow_by_criterion_rules.stop_within_depths({0: 3, 1: 3, 2: 3}, 3, 5).verdict == verdicts_rules.HOLDS
    assert grow_by_criterion_rules.stop_within_depths({0: 5, 1: 5, 2: 5}, 2, 5).verdict == verdicts_rules.FAILS
    assert (
        grow_by_criterion_rules.stop_within_depths({0: 1, 1: 1, 2: 1}, 5, 6).verdict == verdicts_rules.FAILS
    )  # far too early


def test_stop_rule_gives_seeds_at_one_depth_the_rounding_spread_and_never_holds_with_a_seed_that_did_not_stop():
    # three seeds one depth off: the mean is exactly +1, but with the rounding's spread its interval leaves [-1, 1]
    assert grow_by_criterion_rules.stop_within_depths({0: 4, 1: 4, 2: 4}, 3, 5).verdict == verdicts_rules.UNDECIDABLE
    assert grow_by_criterion_rules.stop_within_depths({0: 3, 1: 3, 2: None}, 3, 3).verdict == verdicts_rules.UNDECIDABLE
    out = grow_by_criterion_rules.stop_within_depths(
        {0: None, 1: None, 2: None}, 1, 5
    )  # not stopped by 5: at 6 or later, N* = 1
    assert out.verdict == verdicts_rules.FAILS and "3 not stopped within 5 blocks" in out.value
    assert (
        grow_by_criterion_rules.stop_within_depths({0: 3, 1: 3}, None, 5).verdict == verdicts_rules.UNDECIDABLE
    )  # no N*
    assert grow_by_criterion_rules.stop_within_depths({0: 3}, 3, 5).verdict == verdicts_rules.UNDECIDABLE  # one seed


def test_a_run_the_rule_stopped_early_does_not_lower_the_horizon_of_one_it_did_not_stop():
    # mini's records: the rule stopped seeds 0 and 1 at 1 and 5 blocks; seed 2 reached 10 without it firing
    stop = grow_by_criterion_rows.STOP_RULE
    frame = pd.DataFrame(
        [
            {"policy": "criterion", "seed": 0, "depth_n": 1, "stop": {"why": stop}},
            {"policy": "criterion", "seed": 1, "depth_n": 5, "stop": {"why": stop}},
            {"policy": "criterion", "seed": 2, "depth_n": 10, "stop": {"why": "growth phase over"}},
            {"policy": "cyclic", "seed": 0, "depth_n": 0, "stop": {"why": "growth phase over"}},
        ]
    )
    assert grow_by_criterion_rows.stops(frame) == ({0: 1, 1: 5, 2: None}, 10)
    assert grow_by_criterion_rows.stops(frame[frame["seed"] < 2]) == ({0: 1, 1: 5}, 5)  # all stopped: the deepest


# ----------------------------------------------------------------------------- the regime rule on hand-made values
def test_depth_pays_when_the_deeper_network_is_lower_at_B_and_not_when_the_resnet8_is():
    pays = grow_by_criterion_rules.depth_pays_at_equal_flops([0.30, 0.32, 0.31], [0.10, 0.11], "ResNet-8", "ResNet-13")
    assert pays.verdict == verdicts_rules.HOLDS and "ResNet-13 / ResNet-8 x0.3" in pays.value
    # the committed mini records' numbers (09's none at B against the sweep's ResNet-13, issue 57)
    no = grow_by_criterion_rules.depth_pays_at_equal_flops([0.006089, 0.006705, 0.005144], [0.026287, 0.039317])
    assert no.verdict == verdicts_rules.FAILS and "0.005979 (3 runs)" in no.value and "0.0328 (2 runs)" in no.value


@pytest.mark.parametrize(
    "shallow, deep",
    [
        ([0.3], [0.1]),  # one run a side: nothing to pool
        ([0.30, 0.10, 0.20], [0.21, 0.19]),  # noisy: the interval straddles 0
        ([], [0.1, 0.2]),  # no ResNet-8 run
        ([0.3, 0.0], [0.1]),  # a loss of 0 has no log: one run a side is left
    ],
)
def test_depth_pays_is_not_decidable_without_evidence_either_way(shallow, deep):
    assert grow_by_criterion_rules.depth_pays_at_equal_flops(shallow, deep).verdict == verdicts_rules.UNDECIDABLE


# ----------------------------------------------------------------------------- hand-written 09 and 01 records
BUDGET_DEPTH = 2  # B is the sweep's ResNet-10 run's training FLOPs, counted as the report counts them
BUDGET = float(
    training_flops(
        build_resnet({"depth_n": BUDGET_DEPTH, "model": {"widths": WIDTHS}, "dataset": "digits"}, 10),
        (3, 32, 32),
        10,
        100,
        2,
    )
)


def grow_result(policy: str, seed: int, loss: float, depth: int, why: str, probes: list[dict]) -> dict:
    """A finished 09 run's result, as 09 writes it: every arm on one budget, its probes and why growth stopped."""
    return {
        "dataset": "digits", "policy": policy, "seed": seed, "depth_n": depth, "train_loss": loss,
        "test_loss": 1.0 + 0.1 * depth, "test_acc": 0.5, "train_flops": BUDGET * 0.99, "budget_flops": BUDGET,
        "probe_flops": 1e9 * len(probes), "epochs": 10, "probes": probes,
        "stop": {"why": why, "epoch": probes[-1]["epoch"] if probes else None}, "growth": {"inserted": []},
    }  # fmt: skip


def probes_of(seed: int, depth: int, stopped: str | None) -> list[dict]:
    """One measured probe per block inserted (epochs 1, 2, ...), the last stopping growth; v_max falls below a tenth
    of the first's at the third probe (post-hoc rule (c))."""
    out = []
    for k in range(depth + (1 if stopped else 0)):
        last = stopped and k == depth
        out.append({
            "probe": k, "epoch": k + 1, "depth_n": k, "train_flops": BUDGET * 0.05 * (k + 1),
            "v_max": (1.0, 0.5, 0.05, 0.01, 0.01)[k], "ag_max": 0.02, "v_ref": 0.5, "ratio": 2.0,
            "val_loss": 1.0 - 0.01 * k, "candidates": [], "stopped": stopped if last else None,
            "chosen_candidate": None if last else CANDIDATES[(k + seed) % len(CANDIDATES)],
        })  # fmt: skip
    return out


def sweep_run(n: int, seed: int, loss: float) -> tuple[dict, dict]:
    config = {"preset": "smoke", "dataset": "digits", "depth_n": n, "seed": seed, "model": {"widths": WIDTHS}}
    result = {"train_loss": loss, "test_loss": 0.5 + 0.01 * n, "test_acc": 0.8, "seed": seed, "num_classes": 10,
              "train_size": 100, "epochs": 2}  # fmt: skip
    return config, result


LOSSES = {"criterion": 0.10, "cyclic": 0.20, "random": 0.05, "none": 0.30, "scratch": 0.11}
SWEEP_LOSS = {0: 0.8, 1: 0.5, 2: 0.2, 3: 0.1995, 4: 0.199}  # N* = 2: no deeper mean improves it by 1%
STOP_DEPTH = 2  # the criterion's rule stops it at N* on every seed


def write_grow_records(out, none_loss: float = LOSSES["none"]):
    """09's runs (every arm but ag, 3 seeds; the never-grown ResNet-8 at ``none_loss``) and 01's sweep (N = 0..4) of
    preset smoke: at B the sweep's ResNet-10 is at 0.2 (depth pays where ``none_loss`` is above it)."""
    for seed in (0, 1, 2):
        for policy, loss in {**LOSSES, "none": none_loss}.items():
            if policy in ("none", "scratch"):
                depth = 0 if policy == "none" else STOP_DEPTH
                result = grow_result(policy, seed, loss + 0.002 * seed, depth, "no growth (a control)", [])
            elif policy == "criterion":
                probes = probes_of(seed, STOP_DEPTH, "stop rule")
                result = grow_result(policy, seed, loss + 0.002 * seed, STOP_DEPTH, "stop rule", probes)
            else:
                probes = probes_of(seed, 3, "growth phase over")
                result = grow_result(policy, seed, loss + 0.002 * seed, 3, "growth phase over", probes)
            config = {"preset": "smoke", "dataset": "digits", "policy": policy, "seed": seed}
            path = write_run(out, grow_by_criterion.EXPERIMENT, f"digits-{policy}-seed{seed}", config, result)
            lines = [{"epoch": e, "train_flops": BUDGET * 0.1 * e, "clean_loss": 1.0 - (1.0 - loss) * e / 10,
                      "probe_flops": 0} for e in range(1, 11)]  # fmt: skip
            (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        for n, loss in SWEEP_LOSS.items():
            config, result = sweep_run(n, seed, loss + 0.001 * seed)
            write_run(out, "resnet_sweep", f"digits-resnet{8 + n}-n{n}-seed{seed}", config, result)
    return out


@pytest.fixture(scope="module")
def grow_out(tmp_path_factory):
    return write_grow_records(tmp_path_factory.mktemp("grow-records"))


def claims_only(rows: list[dict]) -> list[dict]:
    """09's claim rows, without the regime row (it stands among them, before the rows it gates)."""
    return [r for r in rows if r["kind"] != REGIME_ROW]


def test_rows_say_not_run_without_09_records_and_name_the_command(tmp_path):
    rows = grow_by_criterion_rows.grow_claims(records.Records(out=tmp_path, preset="smoke"), {})
    assert len(rows) == 7 and {r["verdict"] for r in rows} == {verdicts_rules.NOT_RUN}
    assert all("python 09_grow_by_criterion.py --preset smoke --out" in r["records"] for r in rows)
    assert all(r["claim"].startswith("beyond the paper") for r in claims_only(rows))
    assert [r["kind"] for r in rows].index(REGIME_ROW) == 3  # after the placement rows, before none, scratch, stop


def test_rows_from_records_give_the_verdicts_the_records_show(grow_out):
    rec = records.load_records(grow_out, "smoke")
    rows = claims_only(grow_by_criterion_rows.grow_claims(rec, records.commands("smoke", grow_out)))
    verdicts = {other: r["verdict"] for other, r in zip(grow_by_criterion_rows.COMPARED, rows)}
    assert verdicts == {"cyclic": verdicts_rules.HOLDS, "random": verdicts_rules.FAILS, "ag": verdicts_rules.NOT_RUN, "none": verdicts_rules.HOLDS,
                        "scratch": verdicts_rules.HOLDS}  # fmt: skip
    assert "--policy criterion,ag" in rows[2]["records"] and f"B = {BUDGET:.3g}" in rows[0]["records"]
    stop = rows[-1]
    assert "stop rule" in stop["claim"] and stop["verdict"] == verdicts_rules.HOLDS, stop["reproduced"]
    assert "N* = 2" in stop["reproduced"] and "why growth stopped: stop rule" in stop["reproduced"]


def test_sweep_flops_are_each_runs_architecture_counted_at_its_images_and_epochs(grow_out):
    sweep = records.load_records(grow_out, "smoke").sweep
    counted = grow_by_criterion_rows.sweep_flops(sweep)
    per_depth = counted.groupby("depth_n")["flops"].mean()
    model = build_resnet({"depth_n": 3, "model": {"widths": WIDTHS}, "dataset": "digits"}, 10)
    assert per_depth[3] == training_flops(model, (3, 32, 32), 10, 100, 2)
    assert per_depth.is_monotonic_increasing and per_depth[0] < per_depth[4]


def test_08_draws_figures_10_and_11_and_writes_the_budget_compute_and_post_hoc_tables(grow_out, tmp_path):
    report = make_figures.build(grow_out, tmp_path / "figures", "smoke")
    names = {p.name for p in report.written}
    for stem in ("fig10_grow_vs_compute-digits", "fig11_grow_choices-digits"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    for table in ("grow_at_budget", "grow_compute_to_reach", "grow_stops_post_hoc", "grow_stop_ratio"):
        assert {f"{table}-digits.csv", f"{table}-digits.md"} <= names
    tables = tmp_path / "figures" / "tables"
    stops = pd.read_csv(tables / "grow_stops_post_hoc-digits.csv")
    assert len(stops) == 5 * 3 * 3  # rules a-d and r x policy arms x seeds
    assert not stops[stops["rule"] == "r"]["fired"].any()  # the hand-made ratio, 2, never falls below 1
    c = stops[(stops["rule"] == "c") & (stops["policy"] == "cyclic")]
    assert (c["depth_n"] == 2).all() and (c["depths_from_plateau"] == 0).all()
    budget = pd.read_csv(tables / "grow_at_budget-digits.csv")
    assert list(budget["policy"]) == ["criterion", "cyclic", "random", "none", "scratch"]
    assert budget.set_index("policy").loc["none", "depth_n"] == "0,0,0"
    compute = pd.read_csv(tables / "grow_compute_to_reach-digits.csv")
    assert compute["reached"].all() and (compute["target_depth_n"] == 2).all()
    grown = [r for r in report.claims if r["claim"].startswith("beyond the paper: within one run's FLOPs")]
    assert len(grown) == 5 and all(r["claim"] in report.claims_path.read_text() for r in grown)


def test_the_probe_frame_is_what_the_post_hoc_rules_read(grow_out):
    frame = grow_by_criterion_rows.grow_runs(records.Records(out=grow_out, preset="smoke"))
    probes = grow_by_criterion.probe_frame(frame)
    assert set(probes["policy"]) == {"criterion", "cyclic", "random"}
    assert probes.groupby(["policy", "seed"]).size().to_dict()[("cyclic", 0)] == 4
    stop = grow_by_criterion_stopping.v_max_fallen(probes[(probes["policy"] == "cyclic") & (probes["seed"] == 0)])
    assert stop.fired and stop.depth_n == 2 and math.isclose(stop.flops_cum, 0.15 * BUDGET)
    assert probes["app_g_verdict"].eq("no verdict").all()  # not measured: rule (b) never fires


# ----------------------------------------------------------------------------- the regime gates rows 35-37 (issue 57)
GATED_CLAIMS = ("the ResNet-8 never grown", "trained from scratch", "stop rule")


@pytest.mark.parametrize("none_loss, pays", [(0.30, True), (0.05, False)])
def test_rows_against_none_scratch_and_the_stop_are_judged_only_where_depth_pays_at_equal_flops(
    tmp_path, none_loss, pays
):
    out = write_grow_records(tmp_path, none_loss)
    rec = records.load_records(out, "smoke")
    rows = [
        finish_row(r, claim_power.PowerTable())
        for r in grow_by_criterion_rows.grow_claims(rec, records.commands("smoke", out))
    ]
    [regime] = [r for r in rows if r["kind"] == REGIME_ROW]
    gated = [r for r in rows if any(word in r["claim"] for word in GATED_CLAIMS)]
    cyclic = next(r for r in rows if "than cyclic placement" in r["claim"])
    kind = verdicts_rules.verdict_kind
    assert len(gated) == 3 and kind(cyclic["verdict"]) == verdicts_rules.HOLDS  # placement is judged at any design
    assert "ResNet-10" in regime["reproduced"] and f"B = {BUDGET:.3g}" in regime["records"]
    if pays:
        assert regime["verdict"].startswith("yes: depth pays at equal FLOPs here")
        assert [kind(r["verdict"]) for r in gated] == [verdicts_rules.HOLDS] * 3  # judged by their own rules
    else:
        assert regime["verdict"].startswith("no: depth does not pay at equal FLOPs here")
        for row in gated:
            assert row["verdict"].startswith("not decidable at this design: depth does not pay at equal FLOPs here"), (
                row["verdict"]
            )
            assert kind(row["verdict"]) == verdicts_rules.UNDECIDABLE_AT_DESIGN
            assert "ResNet-8 0.052, ResNet-10 0.201" in row["verdict"]  # both losses, the means over seeds
            assert "its rule reads (not a verdict)" in row["reproduced"] and row["power"] == "-"


def test_without_a_sweep_run_at_B_the_regime_is_not_run_and_the_gated_rows_say_it_is_not_known(tmp_path):
    out = write_grow_records(tmp_path)
    for run in (tmp_path / "resnet_sweep").glob(f"*-n{BUDGET_DEPTH}-*"):
        shutil.rmtree(run)
    rec = records.load_records(out, "smoke")
    rows = grow_by_criterion_rows.grow_claims(rec, records.commands("smoke", out))
    [regime] = [r for r in rows if r["kind"] == REGIME_ROW]
    assert regime["verdict"] == verdicts_rules.NOT_RUN and "no sweep run spent B" in regime["records"]
    scratch = next(r for r in rows if "trained from scratch" in r["claim"])
    assert "whether depth pays at equal FLOPs here is not known" in scratch["_outcome"].verdict
