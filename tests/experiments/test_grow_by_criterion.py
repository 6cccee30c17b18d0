"""Growth by the criterion (script 09): the controller inside one run on a FLOP budget. It stops exactly when the
rule says, or at the cap; every arm gets the same budget and schedule; insertions preserve the function; a killed
run resumes to the same insertions and numbers; the policies choose as documented; the constants are the committed
ones; bad flags are one line."""

from __future__ import annotations

import functools
import importlib
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from common.experiments import grow_by_criterion as gbc
from common.experiments import grow_by_criterion_controller as gc
from common.experiments.shared import resnet_sweep as sweep_module
from common.models.resnet import ResNet, ResNetConfig, extra_block_position
from common.presets.grow_by_criterion import PRESETS
from common.runs import run_store
from common.science.growth import insert_zero_block
from common.science.probe import probe_activation_gradients
from common.science.terminal_value import terminal_values
from common.training.flops import training_flops, training_flops_per_image
from common.training.growing import BudgetSchedule, GrowthState
from common.training.recipes import Schedule
from tests.helpers.script_checks import one_error_line

script = importlib.import_module("09_grow_by_criterion")

TINY_DATA = {"num_train": 128, "num_test": 64, "num_classes": 4, "image_size": 8}
TINY = {"budget_depth_n": 2, "every": 1, "cap": 2, "probe_batch_size": 32, "probe_batches": 2, "held_out": 32}
COMPARED = ("depth_n", "train_loss", "test_loss", "train_flops", "probe_flops", "stop")


def tiny_plan(policies=("criterion", "none", "scratch"), **overrides) -> gbc.GrowPlan:
    given = {**TINY, "policies": tuple(policies), **overrides}
    return gbc.grow_plan(
        preset="smoke", overrides=given, seeds=(0,), dataset="synthetic", synthetic=TINY_DATA, device="cpu"
    )


def run_all(plan: gbc.GrowPlan, out) -> dict[str, dict]:
    for spec in run_store.make_specs(plan.jobs(), out):
        gbc.grow_run(spec)
    return {r["policy"]: r for r in gbc.collect_records(plan, out)}


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    out = tmp_path_factory.mktemp("grow")
    plan = tiny_plan()
    return plan, out, run_all(plan, out)


# ----------------------------------------------------------------------------- the runs
def test_every_insertion_preserves_the_function_in_float64_and_is_the_block_probed(grown):
    _, _, records = grown
    criterion = records["criterion"]
    inserted = criterion["growth"]["inserted"]
    assert criterion["depth_n"] == len(inserted) == TINY["cap"]  # the tiny run grows to its cap
    chosen = [p for p in criterion["probes"] if p.get("chosen_index") is not None]
    for record, probe in zip(inserted, chosen, strict=True):
        assert record["function_check"] == {"train": 0.0, "eval": 0.0}
        assert (record["place"], record["seed"]) == (probe["chosen_index"], probe["probe_seed"])
        assert record["epoch"] == probe["epoch"] and probe["chosen_v_s"] == max(c["v_s"] for c in probe["candidates"])
    assert criterion["stop"]["why"] == gc.STOP_CAP


def test_none_and_scratch_get_the_same_budget_and_schedule(grown):
    plan, out, records = grown
    budgets = {r["budget_flops"] for r in records.values()}
    assert len(budgets) == 1
    for r in records.values():  # whole epochs while they fit: within one epoch of B, never above it
        per_epoch = r["growth"]["flops_per_example"] * TINY_DATA["num_train"]
        assert r["budget_flops"] - per_epoch < r["train_flops"] <= r["budget_flops"]
    settings = {k: {**c["growth"], "scratch_of": None, "scratch_v": None} for k, c in plan.configs.items()}
    assert len({str(sorted(s.items())) for s in settings.values()}) == 1
    none = records["none"]
    assert none["depth_n"] == 0 and none["probes"] == [] and none["stop"]["why"] == "no growth (a control)"
    scratch = records["scratch"]
    assert scratch["depth_n"] == records["criterion"]["depth_n"] and scratch["probes"] == []
    assert scratch["architecture"] == [
        {"place": r["place"], "seed": r["seed"]} for r in records["criterion"]["growth"]["inserted"]
    ]
    for arm in ("none", "scratch"):  # the learning rate of every step: the one schedule at the FLOPs spent
        lines = run_store.read_metrics(run_store.run_dir(out, plan.configs[(arm, 0)]))
        per_step = records[arm]["growth"]["flops_per_example"] * 64  # two steps of 64 images an epoch
        base = Schedule(0.05, 6 * 2, 2)  # the smoke recipe: lr 0.05, 1 warm-up epoch, over B's 6 epochs
        for line in lines:
            step = line["step"] - 1  # the epoch's last step
            expected = BudgetSchedule(base, records[arm]["budget_flops"], 0, 0, per_step).lr(step)
            assert line["lr"] == pytest.approx(expected, rel=1e-12)


def test_the_curve_and_the_table_read_back(grown):
    plan, out, records = grown
    frame = gbc.read_runs(out)
    assert sorted(frame["policy"]) == ["criterion", "none", "scratch"] and set(gbc.RECORD_KEYS) <= set(frame.columns)
    for arm, r in records.items():
        points = gbc.curve(run_store.run_dir(out, plan.configs[(arm, 0)]), r)
        assert points[-1]["train_flops"] == r["train_flops"] and points[-1]["train_loss"] == r["train_loss"]
        assert [p["train_flops"] for p in points] == sorted(p["train_flops"] for p in points)
    rows = gbc.run_table(list(records.values()))
    assert {row["policy"]: row["depth_n"] for row in rows}["none"] == 0
    assert gbc.read_runs(out / "nothing").empty


class Interrupted(Exception):
    pass


def test_a_run_killed_mid_growth_resumes_to_the_same_insertions_and_numbers(grown, tmp_path, monkeypatch):
    plan, _, records = grown
    plan = tiny_plan(policies=("criterion",))
    train = sweep_module.train

    def killed(*args, **kwargs):
        def stop(epoch, record):
            if epoch == 2:  # one block in, the second still to come
                raise Interrupted("killed after epoch 2")

        return train(*args, on_epoch_end=stop, **kwargs)

    monkeypatch.setattr(sweep_module, "train", killed)
    (spec,) = run_store.make_specs(plan.jobs(), tmp_path)
    with pytest.raises(Interrupted):
        gbc.grow_run(spec)
    saved = run_store.resume_state(spec.dir)
    assert len(saved["growth"]["inserted"]) == 1 and not run_store.is_done(spec.dir)
    monkeypatch.setattr(sweep_module, "train", train)
    resumed = gbc.grow_run(spec)
    whole = records["criterion"]
    assert {k: resumed[k] for k in COMPARED} == {k: whole[k] for k in COMPARED}
    assert resumed["probes"] == whole["probes"] and resumed["growth"]["inserted"] == whole["growth"]["inserted"]


# ----------------------------------------------------------------------------- the controller on scripted statistics
def scripted(ratios, *, cap=10, in_a_row=2, grow_until=1.0, every=1, monkeypatch):
    """A controller whose measurements are ``ratios`` in turn (one candidate, V_S,l = the ratio, V_b = 1)."""
    sequence = iter(ratios)

    def measure(model, config, examples, u_seed):
        r = next(sequence)
        candidates = [{"candidate": "c0", "index": 0, "v_s": r, "ag": r}]
        return {"candidates": candidates, "branches": [], "v_max": r, "ag_max": r, "v_ref": 1.0, "ratio": r,
                "probe_seed": u_seed, "val_loss": 1.0, "grams": []}  # fmt: skip

    monkeypatch.setattr(gc, "measure", measure)
    growth = SimpleNamespace(every=every, grow_until=grow_until, cap=cap, ratio_below=0.5, in_a_row=in_a_row)
    probe = SimpleNamespace(batch_size=1, n_batches=1, held_out=1, app_g=False)
    run = SimpleNamespace(growth=growth, seed=0, policy="criterion", probe=probe)  # the fields the controller reads
    return gc.Controller(run, examples=None, budget=1000)


def drive(controller, epochs, flops_per_epoch=10):
    state = GrowthState(per_example=1)
    for epoch in range(1, epochs + 1):
        state.flops = epoch * flops_per_epoch
        chosen = controller(None, epoch, state)
        if chosen is not None:
            state.inserted.append({"epoch": epoch, "place": chosen.place, "seed": chosen.seed})
    return state


@pytest.mark.parametrize(
    ("ratios", "inserted", "stop_probe"),
    [
        ([0.9, 0.4, 0.9, 0.4, 0.3, 0.9], 4, 4),  # two in a row first at the 5th probe: it stops there
        ([0.4, 0.3, 0.9], 1, 1),  # at the second probe: the first low one still grows
        ([0.9, 0.49999, 0.5, 0.2, 0.1, 0.9], 4, 4),  # 0.5 is not below 0.5: the streak restarts
    ],
)
def test_the_controller_stops_exactly_when_the_scripted_statistics_cross_the_rule(
    ratios, inserted, stop_probe, monkeypatch
):
    state = drive(scripted(ratios, monkeypatch=monkeypatch), epochs=len(ratios) + 3)
    assert len(state.inserted) == inserted
    assert [p["stopped"] for p in state.probes] == [None] * stop_probe + [gc.STOP_RULE]  # no probe after it
    assert state.probes[-1]["low_streak"] == 2


def test_the_cap_and_the_growth_phase_stop_it(monkeypatch):
    state = drive(scripted([0.9] * 10, cap=3, monkeypatch=monkeypatch), epochs=10)
    assert len(state.inserted) == 3 and state.probes[-1]["stopped"] == gc.STOP_CAP and len(state.probes) == 4
    state = drive(scripted([0.9] * 10, grow_until=0.045, monkeypatch=monkeypatch), epochs=10)  # 10 FLOPs an epoch
    assert len(state.inserted) == 4 and state.probes[-1]["stopped"] == gc.STOP_PHASE
    state = drive(scripted([0.9] * 10, every=3, monkeypatch=monkeypatch), epochs=9)
    assert [p["epoch"] for p in state.probes] == [3, 6, 9]


def test_the_stop_constants_are_the_committed_ones():
    mini = PRESETS["mini"]
    committed = {"budget_depth_n": 5, "every": 5, "grow_until": 0.5, "cap": 12, "ratio_below": 1.0, "in_a_row": 2}
    assert {k: getattr(mini, k) for k in committed} == committed
    assert mini.policies == ("criterion", "ag", "cyclic", "random", "none", "scratch") and mini.seeds == 3


# ----------------------------------------------------------------------------- the policies and the measurements
def head_only_model() -> ResNet:
    """A ResNet-8 whose states are exactly 0 at every candidate but the head's input: the stem's BatchNorm outputs 0,
    so every block's branch and shortcut see 0 (``V relu(BN(U 0)) = V relu(beta) = 0`` at beta = 0), and block 2's
    BatchNorm bias makes its branch ``V relu(0.5)``, a non-zero head input. Zero states give zero tangent features
    (``psi(0) = relu(BN(conv 0)) = 0`` in a fresh block), so ``V_S,l = 0`` exactly at candidates 0..2 and
    ``V_S,head > 0``: the criterion must pick the head's input."""
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(extra_blocks=0, widths=(4, 8, 16), num_classes=4)).double().eval()
    nn.init.zeros_(model.stem[1].weight)
    nn.init.zeros_(model.stem[1].bias)
    nn.init.constant_(model.blocks[2].psi[1].bias, 0.5)
    return model


def test_criterion_picks_the_candidate_whose_growth_value_is_known_to_be_largest():
    model = head_only_model()
    x = torch.randn(16, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.arange(16) % 4
    probe = probe_activation_gradients(model, [(x[:8], y[:8]), (x[8:], y[8:])], exact=True, seed=3)
    candidates = [{"candidate": s.name, "index": s.index, "v_s": s.growth_value, "ag": s.ag_norm} for s in probe.scores]
    assert [c["v_s"] for c in candidates[:3]] == [0.0, 0.0, 0.0] and candidates[3]["v_s"] > 0
    chosen = gc.choose("criterion", candidates, seed=0, probe=0, depth_n=0)
    assert chosen["chosen_candidate"] == "head.in" and chosen["chosen_rank_v"] == 1
    assert gc.choose("cyclic", candidates, seed=0, probe=0, depth_n=0)["chosen_index"] == extra_block_position(0)[1]


def test_ag_picks_the_largest_ag_and_ranks_count_from_one():
    candidates = [
        {"candidate": f"c{i}", "index": i, "v_s": v, "ag": a} for i, (v, a) in enumerate([(3, 1), (1, 5), (2, 2)])
    ]
    ag = gc.choose("ag", candidates, seed=0, probe=0, depth_n=0)
    assert (ag["chosen_index"], ag["chosen_rank_ag"], ag["chosen_rank_v"]) == (1, 1, 3)
    assert gc.choose("criterion", candidates, seed=0, probe=0, depth_n=0)["chosen_index"] == 0


def test_random_is_reproducible_from_its_seed_and_varies_with_seed_and_probe():
    candidates = [{"candidate": f"c{i}", "index": i, "v_s": 0.0, "ag": 0.0} for i in range(6)]
    pick = functools.partial(gc.choose, "random", candidates, depth_n=0)
    draws = {(s, r): pick(seed=s, probe=r)["chosen_index"] for s in range(4) for r in range(4)}
    assert draws == {(s, r): pick(seed=s, probe=r)["chosen_index"] for s in range(4) for r in range(4)}
    assert len(set(draws.values())) > 1


def test_an_inserted_blocks_terminal_value_is_the_growth_value_the_probe_gave_it():
    """A zero-output block is the identity, so the gradient at its branch's output is the parent's activation gradient
    at its candidate, and its terminal features are the probe's Psi: V_b of the grown model = V_S,l of the parent.
    Float64, two routes to one projection (the probe's structured Gram, here the explicit rows): they differ by the
    rounding of a pseudo-inverse, float64's 1e-16 times the Gram's condition number (about 1e7 on these 6-image
    batches of 36 features): 1e-7 relative bounds it."""
    torch.manual_seed(0)
    parent = ResNet(ResNetConfig(extra_blocks=0, widths=(4, 8, 8), num_classes=4)).double().eval()
    x = torch.randn(12, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    y = torch.arange(12) % 4
    batches = [(x[:6], y[:6]), (x[6:], y[6:])]
    scores = probe_activation_gradients(parent, batches, exact=True, seed=5).scores
    for index in (0, 1, 3):
        child = ResNet(parent.config).double()
        child.load_state_dict(parent.state_dict())
        insert_zero_block(child, index, seed=5)
        child.double().eval()
        values = {t.index: t.value for t in terminal_values(child, batches)}
        assert values[index] == pytest.approx(scores[index].growth_value, rel=1e-7)
        assert set(values) == set(range(len(child.blocks)))  # the original blocks' terminal values beside it


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


# ----------------------------------------------------------------------------- the command line
@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--policy", "greedy"], "--policy"),
        (["--policy", ""], "--policy"),
        (["--ratio-below", "-1"], "--ratio-below"),
        (["--ratio-below", "1e9"], "--ratio-below"),
        (["--grow-until", "1.5"], "--grow-until"),
        (
            ["--preset", "smoke", "--every", "7"],
            "--every",
        ),  # the smoke budget is 6 epochs: smaller than one probe period
        (["--cap", "0"], "--cap"),  # below the start depth's one block
        (["--budget-depth", "-1"], "--budget-depth"),
        (["--preset", "huge"], "--preset"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(argv, flag, tmp_path, capsys):
    try:
        code = script.main([*argv, "--out", str(tmp_path / "runs")])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    assert code == 2
    line = one_error_line(capsys)
    assert line.startswith("09_grow_by_criterion.py: error: ") and flag in line
    assert not (tmp_path / "runs").exists()


def test_dry_run_plans_every_arm_and_creates_nothing(tmp_path, capsys):
    assert script.main(["--preset", "smoke", "--dry-run", "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert all(f"{p} seed 0: todo" in out for p in ("criterion", "ag", "cyclic", "random", "none", "scratch"))
    assert not (tmp_path / "runs").exists()


def test_paper_preset_plans_cifar10_on_resnet13s_budget_and_scratch_brings_the_criterion(tmp_path, capsys):
    plan = gbc.grow_plan(preset="paper", overrides={"policies": "scratch"}, dataset="cifar10")
    assert sorted(plan.configs) == [("criterion", 0), ("scratch", 0)]
    config = plan.configs[("scratch", 0)]
    assert config["growth"]["budget_depth_n"] == 5 and config["growth"]["budget_epochs"] == 200
    assert config["train"]["epochs"] > 200 and config["dataset"] == "cifar10"  # the loop's bound; B ends the run
    assert [c["policy"] for c in plan.jobs()] == ["criterion", "scratch"]
