"""Growth by the criterion (script 09): rounds preserve the function, trajectories resume, the policies choose as
documented, the FLOP counter equals a hand count, bad flags are one line."""

from __future__ import annotations

import functools
import importlib

import pytest
import torch
from torch import nn

from common import runs
from common.experiments import grow_by_criterion as gbc
from common.experiments import grow_rounds
from common.flops import training_flops, training_flops_per_image
from common.models.resnet import ResNet, ResNetConfig, extra_block_position
from common.probe import probe_activation_gradients
from tests.helpers.script_checks import one_error_line

script = importlib.import_module("09_grow_by_criterion")

TINY_DATA = {"num_train": 128, "num_test": 64, "num_classes": 4, "image_size": 8}
TINY = {"rounds": 2, "epochs_per_round": 2, "probe_batch_size": 32, "probe_batches": 2, "held_out": 32}
COMPARED = ("chosen_candidate", "chosen_v_s", "v_max", "ag_max", "candidates", "val_loss", "train_loss", "test_loss")


def tiny_plan(policies=("criterion", "random"), seeds=(0,)) -> gbc.GrowPlan:
    overrides = {**TINY, "policies": tuple(policies)}
    return gbc.grow_plan(
        preset="smoke", overrides=overrides, seeds=seeds, dataset="synthetic", synthetic=TINY_DATA, device="cpu"
    )


def run_all(plan: gbc.GrowPlan, out) -> list[dict]:
    for spec in runs.make_specs(plan.jobs(), out):
        gbc.grow_trajectory_run(spec)
    return gbc.collect_records(plan, out)


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory):
    out = tmp_path_factory.mktemp("grow")
    plan = tiny_plan()
    return plan, out, run_all(plan, out)


def test_every_round_is_function_preserving_in_float64_in_both_batchnorm_modes(trajectories):
    _, _, records = trajectories
    grown = [r for r in records if r["round"] > 0]
    assert len(grown) == 4
    for r in grown:
        assert r["function_check"]["dtype"] == "float64"
        assert r["function_check"]["max_abs_diff"] == {"train": 0.0, "eval": 0.0}
        assert len(r["chain"]) == r["round"] and r["depth_n"] == r["round"]


def test_every_round_records_the_keys_the_stopping_rules_read(trajectories):
    _, _, records = trajectories
    for r in records:
        assert set(gbc.RECORD_KEYS) <= set(r)
        assert {tuple(sorted(c)) for c in r["candidates"]} == {("ag", "candidate", "index", "v_s")}
        assert r["v_max"] == max(c["v_s"] for c in r["candidates"])
        assert r["app_g_verdict"] in ("saturated within delta", "not saturated", "undecided")
    rounds = sorted((r for r in records if r["policy"] == "criterion"), key=lambda r: r["round"])
    assert [r["epochs_cum"] for r in rounds] == [6, 8, 10]  # the smoke sweep's 6 epochs, then 2 per round
    assert all(b["flops_cum"] > a["flops_cum"] for a, b in zip(rounds, rounds[1:], strict=False))


def test_insertion_at_every_candidate_of_a_grown_model_preserves_the_function(trajectories):
    plan, out, records = trajectories
    last = max((r for r in records if r["policy"] == "random"), key=lambda r: r["round"])
    config = plan.trajectories[("random", 0)][-1]
    model = grow_rounds.load_round_model(runs.run_dir(out, config), config, last["chain"], 4)
    data = gbc.load_sweep_data(config["runtime"]["sweep"])
    for index in range(len(model.candidates())):
        _, check = grow_rounds.insert_chosen(model, index, 7, data, f"candidate {index}")
        assert check["max_abs_diff"] == {"train": 0.0, "eval": 0.0}


class Interrupted(RuntimeError):
    pass


def test_a_trajectory_killed_mid_round_resumes_and_equals_an_uninterrupted_one(trajectories, tmp_path, monkeypatch):
    plan, out, records = trajectories
    plan = tiny_plan(policies=("criterion",))
    train = grow_rounds.train

    def killed(model, *args, run_dir, **kwargs):
        def stop(epoch, record):
            if "-r2-" in str(run_dir) and epoch == 1:
                raise Interrupted("killed after epoch 1 of round 2")

        return train(model, *args, run_dir=run_dir, on_epoch_end=stop, **kwargs)

    monkeypatch.setattr(grow_rounds, "train", killed)
    (spec,) = runs.make_specs(plan.jobs(), tmp_path)
    with pytest.raises(Interrupted):
        gbc.grow_trajectory_run(spec)
    assert runs.checkpoint_path(spec.dir).exists() and not runs.is_done(spec.dir)
    finished = {
        c["round"]: runs.read_result(runs.run_dir(tmp_path, c)) for c in plan.trajectories[("criterion", 0)][:2]
    }
    monkeypatch.setattr(grow_rounds, "train", train)
    gbc.grow_trajectory_run(spec)
    for c in plan.trajectories[("criterion", 0)][:2]:  # a finished round is never redone
        assert runs.read_result(runs.run_dir(tmp_path, c)) == finished[c["round"]]
    resumed = gbc.collect_records(plan, tmp_path)
    whole = [r for r in records if r["policy"] == "criterion"]
    assert [{k: r[k] for k in COMPARED} for r in resumed] == [{k: r[k] for k in COMPARED} for r in whole]


def head_only_model() -> ResNet:
    """A ResNet-8 whose states are exactly 0 at every candidate but the head's input: the stem's BatchNorm outputs 0,
    so every block's residual and shortcut see 0, and block 2's last BatchNorm bias makes the head's input
    ``relu(bias) > 0``. Zero states give zero tangent features (``psi(0) = relu(BN(conv 0)) = 0`` in a fresh block),
    so ``V_S,l = 0`` exactly at candidates 0..2 and ``V_S,head > 0``: the criterion must pick the head's input."""
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(extra_blocks=0, widths=(4, 8, 16), num_classes=4)).double().eval()
    nn.init.zeros_(model.stem[1].weight)
    nn.init.zeros_(model.stem[1].bias)
    nn.init.constant_(model.blocks[2].residual[-1].bias, 0.5)
    return model


def test_criterion_picks_the_candidate_whose_growth_value_is_known_to_be_largest():
    model = head_only_model()
    x = torch.randn(16, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.arange(16) % 4
    probe = probe_activation_gradients(model, [(x[:8], y[:8]), (x[8:], y[8:])], exact=True, seed=3)
    candidates = [{"candidate": s.name, "index": s.index, "v_s": s.growth_value, "ag": s.ag_norm} for s in probe.scores]
    assert [c["v_s"] for c in candidates[:3]] == [0.0, 0.0, 0.0] and candidates[3]["v_s"] > 0
    chosen = grow_rounds.choose("criterion", candidates, seed=0, round_=1)
    assert chosen["chosen_candidate"] == "head.in" and chosen["chosen_rank_v"] == 1
    assert grow_rounds.choose("cyclic", candidates, seed=0, round_=1)["chosen_index"] == extra_block_position(0)[1]


def test_ag_picks_the_largest_ag_and_ranks_count_from_one():
    candidates = [
        {"candidate": f"c{i}", "index": i, "v_s": v, "ag": a} for i, (v, a) in enumerate([(3, 1), (1, 5), (2, 2)])
    ]
    ag = grow_rounds.choose("ag", candidates, seed=0, round_=1)
    assert (ag["chosen_index"], ag["chosen_rank_ag"], ag["chosen_rank_v"]) == (1, 1, 3)
    assert grow_rounds.choose("criterion", candidates, seed=0, round_=1)["chosen_index"] == 0


def test_random_is_reproducible_from_its_seed_and_varies_with_seed_and_round():
    candidates = [{"candidate": f"c{i}", "index": i, "v_s": 0.0, "ag": 0.0} for i in range(6)]
    pick = functools.partial(grow_rounds.choose, "random", candidates)
    draws = {(s, r): pick(seed=s, round_=r)["chosen_index"] for s in range(4) for r in range(1, 5)}
    assert draws == {(s, r): pick(seed=s, round_=r)["chosen_index"] for s in range(4) for r in range(1, 5)}
    assert len(set(draws.values())) > 1


def test_flop_counter_equals_a_hand_count_on_a_tiny_resnet():
    """ResNet-8 (widths 4, 8, 16) on one 1x8x8 image, multiply-adds by hand: stem 1->4 at 8x8: 64*4*1*9 = 2,304;
    block 0 (4->4, 8x8): 2 * 64*4*4*9 = 18,432; block 1 (4->8, stride 2, 4x4): 16*8*4*9 + 16*8*8*9 = 13,824;
    block 2 (8->16, 2x2): 4*16*8*9 + 4*16*16*9 = 13,824; head 16->10: 160. Forward: 2 FLOPs per multiply-add;
    backward: every weight gradient (as many) and every input gradient but the stem's (the image needs none)."""
    model = ResNet(ResNetConfig(extra_blocks=0, widths=(4, 8, 16), num_classes=10, in_channels=1))
    macs = 2304 + 18432 + 13824 + 13824 + 160
    forward = 2 * macs
    expected = forward + forward + (forward - 2 * 2304)
    assert training_flops_per_image(model, (1, 8, 8), 10) == expected == 286_656
    assert training_flops(model, (1, 8, 8), 10, images=100, epochs=3) == 300 * expected


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--policy", "greedy"], "--policy"),
        (["--policy", ""], "--policy"),
        (["--rounds", "0"], "--rounds"),
        (["--epochs-per-round", "-1"], "--epochs-per-round"),
        (["--preset", "huge"], "--preset"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(argv, flag, tmp_path, capsys):
    try:
        code = script.main([*argv, "--out", str(tmp_path)])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    assert code == 2
    line = one_error_line(capsys)
    assert line.startswith("09_grow_by_criterion.py: error: ") and flag in line


def test_dry_run_plans_every_policy_and_creates_nothing(tmp_path, capsys):
    assert script.main(["--preset", "smoke", "--dry-run", "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert all(f"trajectory {p} seed 0" in out for p in ("criterion", "ag", "cyclic", "random"))
    assert not (tmp_path / "runs").exists()


def test_paper_preset_dry_run_plans_cifar10_with_the_sweeps_epochs_and_creates_nothing(tmp_path, capsys):
    argv = ["--preset", "paper", "--policy", "criterion,cyclic", "--seeds", "0,1", "--dry-run"]
    assert script.main([*argv, "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "trajectory criterion seed 1" in out and "trajectory ag" not in out
    assert not (tmp_path / "runs").exists()
    plan = gbc.grow_plan(preset="paper", overrides={"policies": "cyclic"}, dataset="cifar10")
    (rounds,) = plan.trajectories.values()
    assert [c["train"]["epochs"] for c in rounds[:2]] == [200, 200] and rounds[0]["dataset"] == "cifar10"
    assert gbc.table_stem("cifar10", plan).endswith("-esweep-seeds0")


def test_the_trajectories_read_back_as_one_frame_of_rounds(trajectories):
    _, out, records = trajectories
    frame = gbc.read_trajectories(out)
    assert len(frame) == len(records) == 6 and set(gbc.RECORD_KEYS) <= set(frame.columns)
    assert list(frame["round"]) == [0, 1, 2, 0, 1, 2] and list(frame["policy"].unique()) == ["criterion", "random"]
    assert gbc.read_trajectories(out / "nothing").empty


def test_round_zero_is_one_run_per_seed_that_every_policy_starts_from(trajectories):
    plan, out, records = trajectories
    firsts = {runs.run_dir(out, rounds[0]) for rounds in plan.trajectories.values()}
    assert len(firsts) == 1 and len(list((out / gbc.EXPERIMENT).glob("*-r0-seed0-*"))) == 1
    assert runs.read_result(firsts.pop())["policy"] == gbc.SHARED
    starts = [r for r in records if r["round"] == 0]
    assert [r["policy"] for r in starts] == ["criterion", "random"]  # read back as each trajectory's first row
    assert starts[0]["candidates"] == starts[1]["candidates"]


def test_app_g_records_theorem_3s_interval_and_the_asymptotic_one_beside_it(trajectories):
    _, _, records = trajectories
    for r in records:
        assert r["app_g"]["n_cal"] + r["app_g"]["n_test"] == TINY["held_out"]
        assert r["app_g"]["sources"] == {"train_unused": 0, "test": TINY["held_out"]}  # synthetic trains on every image
        assert 0 <= r["app_g_lower"] <= r["app_g"]["gamma_hat"] <= r["app_g_upper"]
        asymptotic = r["app_g_asymptotic"]
        assert asymptotic["dof"] == r["app_g"]["n_cal"] - 1 and asymptotic["verdict"] in ("not saturated", "undecided")
        assert (r["app_g_asymptotic_lower"], r["app_g_asymptotic_upper"]) == (asymptotic["lower"], asymptotic["upper"])


def test_a_longer_trajectory_reuses_the_rounds_of_a_shorter_one(trajectories):
    plan, out, _ = trajectories
    longer = gbc.grow_plan(
        preset="smoke",
        overrides={**TINY, "rounds": 3, "policies": ("criterion",)},
        dataset="synthetic",
        synthetic=TINY_DATA,
        device="cpu",
    )
    shorter, extended = plan.trajectories[("criterion", 0)], longer.trajectories[("criterion", 0)]
    assert [runs.run_dir(out, c) for c in extended[:3]] == [runs.run_dir(out, c) for c in shorter]
