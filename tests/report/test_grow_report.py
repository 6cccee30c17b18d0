"""Growth by the criterion (09) in the report: its claim rules on hand-made values, its rows ("not run" without 09
records, verdicts from hand-written 09 and 01 records), 08's figures 10 and 11 and its tables of the stopping rules
and of the trajectories against the sweep."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from common import claims, growth_stopping
from common.experiments import grow_by_criterion, grow_rows, make_figures, records
from common.flops import training_flops
from common.resnet_sweep import build_resnet
from tests.helpers.figure_records import write_run

WIDTHS = [4, 8, 16]  # a tiny ResNet: its FLOPs are counted for real, in milliseconds
CANDIDATES = ("block0.in", "block1.in", "block2.in", "head.in")


# ----------------------------------------------------------------------------- the rules on hand-made values
def test_placement_holds_when_the_criterion_is_lower_at_every_seed():
    out = claims.placement_lower_train_loss({0: 0.10, 1: 0.12, 2: 0.11}, {0: 0.20, 1: 0.23, 2: 0.21}, "cyclic", 5)
    assert out.verdict == claims.HOLDS
    assert "round K = 5" in out.value and "cyclic - criterion" in out.value


def test_placement_does_not_hold_when_the_other_is_significantly_lower():
    out = claims.placement_lower_train_loss({0: 0.30, 1: 0.31, 2: 0.29}, {0: 0.20, 1: 0.22, 2: 0.21}, "random")
    assert out.verdict == claims.FAILS


@pytest.mark.parametrize(
    "criterion, other",
    [
        ({0: 0.1}, {0: 0.2}),  # one paired seed: no spread
        ({0: 0.10, 1: 0.30, 2: 0.20}, {0: 0.20, 1: 0.18, 2: 0.22}),  # noisy: the interval straddles 0
        ({0: 0.1, 1: 0.2}, {2: 0.3, 3: 0.4}),  # no seed in common
    ],
)
def test_placement_is_not_decidable_without_evidence_either_way(criterion, other):
    assert claims.placement_lower_train_loss(criterion, other).verdict == claims.UNDECIDABLE


def test_stop_rule_holds_when_every_seed_stops_at_the_plateau_and_fails_far_from_it():
    assert claims.stop_within_depths({0: 3, 1: 3, 2: 3}, 3, 5).verdict == claims.HOLDS
    assert claims.stop_within_depths({0: 5, 1: 5, 2: 5}, 2, 5).verdict == claims.FAILS
    assert claims.stop_within_depths({0: 1, 1: 1, 2: 1}, 5, 6).verdict == claims.FAILS  # far too early


def test_stop_rule_gives_seeds_at_one_depth_the_rounding_spread_and_never_holds_with_a_seed_that_did_not_stop():
    # three seeds one depth off: the mean is exactly +1, but with the rounding's spread its interval leaves [-1, 1]
    assert claims.stop_within_depths({0: 4, 1: 4, 2: 4}, 3, 5).verdict == claims.UNDECIDABLE
    assert claims.stop_within_depths({0: 3, 1: 3, 2: None}, 3, 3).verdict == claims.UNDECIDABLE
    out = claims.stop_within_depths({0: None, 1: None, 2: None}, 1, 5)  # not stopped by 5: at 6 or later, N* = 1
    assert out.verdict == claims.FAILS and "3 not stopped within 5 rounds" in out.value
    assert claims.stop_within_depths({0: 3, 1: 3}, None, 5).verdict == claims.UNDECIDABLE  # no N*
    assert claims.stop_within_depths({0: 3}, 3, 5).verdict == claims.UNDECIDABLE  # one seed


# ----------------------------------------------------------------------------- hand-written 09 and 01 records
def trajectory(policy: str, seed: int, rounds: int, train_loss, v_max) -> list[tuple[dict, dict]]:
    """(config, result) of every round of one trajectory, as 09 writes them (round 0 shared by the seed's policies)."""
    out = []
    for r in range(rounds + 1):
        config = {"preset": "smoke", "dataset": "digits", "policy": policy if r else "shared", "seed": seed,
                  "round": r, "depth_n": r}  # fmt: skip
        chosen = CANDIDATES[(r + seed) % len(CANDIDATES)] if r else None
        result = {
            **{k: config[k] for k in ("dataset", "policy", "seed", "round", "depth_n")},
            "chosen_candidate": chosen, "chosen_index": (r + seed) % len(CANDIDATES) if r else None,
            "chosen_v_s": 0.1 if r else None, "chosen_ag": 0.2 if r else None, "chosen_rank_v": 1 if r else None,
            "chosen_rank_ag": 1 if r else None, "candidates": [], "v_max": v_max(r), "ag_max": 0.02,
            "app_g_verdict": "positive", "app_g_lower": 0.01, "app_g_upper": 0.05, "val_loss": 1.0 - 0.01 * r,
            "train_loss": train_loss(r, seed), "test_loss": 1.0, "test_acc": 0.5, "epochs_cum": 6 + 2 * r,
            "flops_cum": 1e9 * (1 + r), "wall_s": 1.0,
        }  # fmt: skip
        out.append((config, result))
    return out


def sweep_run(n: int, seed: int, loss: float) -> tuple[dict, dict]:
    config = {"preset": "smoke", "dataset": "digits", "depth_n": n, "seed": seed, "model": {"widths": WIDTHS}}
    result = {"train_loss": loss, "test_loss": 0.5 + 0.01 * n, "test_acc": 0.8, "seed": seed, "num_classes": 10,
              "train_size": 100, "epochs": 2}  # fmt: skip
    return config, result


LOSSES = {"criterion": 0.10, "cyclic": 0.20, "random": 0.05}  # at the last round: criterion < cyclic, > random
SWEEP_LOSS = {0: 0.8, 1: 0.5, 2: 0.3, 3: 0.299, 4: 0.298}  # N* = 2: no deeper mean improves it by 1%


@pytest.fixture(scope="module")
def grow_out(tmp_path_factory):
    """09's trajectories (criterion, cyclic, random; 3 seeds, K = 3) and 01's sweep (N = 0..4) of preset smoke."""
    out = tmp_path_factory.mktemp("grow-records")
    for seed in (0, 1, 2):
        for policy, last in LOSSES.items():
            rounds = trajectory(
                policy, seed, 3, lambda r, s, last=last: 0.8 - (0.8 - last) * r / 3 + 0.002 * s,
                lambda r: (1.0, 0.5, 0.05, 0.01)[r],  # rule (c) fires at round 2 (below 0.1 x round 0's)
            )  # fmt: skip
            for config, result in rounds:
                kind = "r0" if not config["round"] else f"{policy}-r{config['round']}"
                write_run(out, grow_by_criterion.EXPERIMENT, f"digits-{kind}-seed{seed}", config, result)
        for n, loss in SWEEP_LOSS.items():
            config, result = sweep_run(n, seed, loss + 0.001 * seed)
            write_run(out, "resnet_sweep", f"digits-resnet{8 + n}-n{n}-seed{seed}", config, result)
    return out


def test_rows_say_not_run_without_09_records_and_name_the_command(tmp_path):
    rows = grow_rows.grow_claims(records.Records(out=tmp_path, preset="smoke"), {})
    assert len(rows) == 3 and {r["verdict"] for r in rows} == {claims.NOT_RUN}
    assert all("python 09_grow_by_criterion.py --preset smoke --out" in r["records"] for r in rows)
    assert all(r["claim"].startswith("beyond the paper") for r in rows)


def test_rows_from_records_give_the_verdicts_the_records_show(grow_out):
    rec = records.load_records(grow_out, "smoke")
    rows = {r["claim"]: r for r in grow_rows.grow_claims(rec, records.commands("smoke", grow_out))}
    cyclic, random_, stop = (rows[c] for c in rows)
    assert "cyclic" in cyclic["claim"] and cyclic["verdict"] == claims.HOLDS
    assert "random" in random_["claim"] and random_["verdict"] == claims.FAILS
    assert "stop rule (c)" in stop["claim"] and stop["verdict"] == claims.HOLDS, stop["reproduced"]
    assert "K = 3" in cyclic["records"] and "N* = 2" in stop["reproduced"]


def test_sweep_flops_are_each_runs_architecture_counted_at_its_images_and_epochs(grow_out):
    sweep = records.load_records(grow_out, "smoke").sweep
    counted = grow_rows.sweep_flops(sweep)
    per_depth = counted.groupby("depth_n")["flops"].mean()
    model = build_resnet({"depth_n": 3, "model": {"widths": WIDTHS}, "dataset": "digits"}, 10)
    assert per_depth[3] == training_flops(model, (3, 32, 32), 10, 100, 2)
    assert per_depth.is_monotonic_increasing and per_depth[0] < per_depth[4]


def test_08_draws_figures_10_and_11_and_writes_the_stop_and_sweep_tables(grow_out, tmp_path):
    report = make_figures.build(grow_out, tmp_path / "figures", "smoke")
    names = {p.name for p in report.written}
    for stem in ("fig10_grow_vs_compute-digits", "fig11_grow_choices-digits"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    for table in ("grow_stops", "grow_vs_sweep_train_loss", "grow_vs_sweep_test_loss", "grow_vs_sweep_compute"):
        assert {f"{table}-digits.csv", f"{table}-digits.md"} <= names
    stops = pd.read_csv(tmp_path / "figures" / "tables" / "grow_stops-digits.csv")
    assert len(stops) == 4 * 3 * 3  # rules a-d x policies x seeds
    c = stops[stops["rule"] == "c"]
    assert (c["depth_n"] == 2).all() and (c["depths_from_plateau"] == 0).all()
    grown = [r for r in report.claims if r["claim"].startswith(("beyond the paper: placing", "beyond the paper: stop"))]
    assert len(grown) == 3 and not any(r["verdict"].startswith(claims.NOT_RUN) for r in grown)
    assert all(r["claim"] in report.claims_path.read_text() for r in grown)


def test_hand_written_trajectories_are_what_the_stopping_rules_read(grow_out):
    frame = grow_rows.grow_trajectories(records.Records(out=grow_out, preset="smoke"))
    assert set(frame["policy"]) == set(LOSSES) and frame.groupby(["policy", "seed"]).size().eq(4).all()
    stop = growth_stopping.v_max_fallen(frame[(frame["policy"] == "criterion") & (frame["seed"] == 0)])
    assert stop.fired and stop.depth_n == 2 and math.isclose(stop.flops_cum, 3e9)
