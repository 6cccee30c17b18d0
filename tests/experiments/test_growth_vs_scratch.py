"""Growth vs scratch (script 03): zero-output growth of the ResNet with its own block, the plan of growth runs
against the sweep's own runs, the tables, the script end to end and its bad inputs."""

from __future__ import annotations

import copy
import csv
import importlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from common.errors import ParamError
from common.experiments import growth_vs_scratch as gvs
from common.experiments import growth_vs_scratch_tables as gvs_tables
from common.experiments.shared import resnet_sweep as sweep
from common.experiments.shared import resnet_sweep_records as sweep_records
from common.launch import cli
from common.models.resnet import ResNet, ResNetConfig, blocks_per_stage, extra_block_position, grow
from common.presets.paper import GROWTH_MEAN_TEST_LOSS, GROWTH_TEST_ABS_REDUCTION_RANGE, GROWTH_TEST_RELATIVE_REDUCTION
from common.runs import run_store
from common.science.growth import GrowthBrokeFunction, check_function_preserved, function_difference, insert_zero_block
from common.science.probe import probe_activation_gradients
from common.science.tangent import ZeroOutputBlock, make_zero_block
from common.training.checkpoints import load_weights
from common.training.flops import training_flops_per_image
from tests.helpers import tiny_resnet
from tests.helpers.script_checks import one_error_line

script = importlib.import_module("03_growth_vs_scratch")

# Where block N goes in ResNet-(8+N) -> ResNet-(8+N+1), written out by hand from B.1's cyclic rule:
# N = 0, 1, 2: right after stage 0's backbone block and after the downsampling blocks of stages 1 and 2;
# N = 3, 4, 5: at the end of stages that already hold extra blocks.
EXPECTED_INDEX = {0: 1, 1: 3, 2: 5, 3: 2, 4: 5, 5: 8}
TINY_DATA = {"num_train": 128, "num_test": 32, "num_classes": 4, "image_size": 8}
SYNTHETIC = {"dataset": "synthetic", "synthetic": TINY_DATA, "device": "cpu"}


def images(n: int = 4, size: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def grown_copy(parent: ResNet, seed: int = 0) -> tuple[ResNet, int, ZeroOutputBlock]:
    model = copy.deepcopy(parent)
    index, block = grow(model, seed)
    return model, index, block


@pytest.mark.parametrize("n", sorted(EXPECTED_INDEX))
def test_growth_preserves_the_function_bitwise_in_float64_at_every_cyclic_position(n):
    parent = tiny_resnet(seed=n, extra_blocks=n)  # float64, random BN statistics and affine parameters
    x = images(seed=n)
    model, index, block = grown_copy(parent, seed=n)
    assert index == EXPECTED_INDEX[n] and model.blocks[index] is block
    stage = n % 3
    assert (
        model.stage_of_block[index] == stage and model.stage_of_block[index - 1] == stage
    )  # after a block of its stage
    assert index + 1 == len(model.blocks) or model.stage_of_block[index + 1] == stage + 1  # ... and last of it
    for mode in ("train", "eval"):
        before, after = copy.deepcopy(parent).train(mode == "train"), copy.deepcopy(model).train(mode == "train")
        with torch.no_grad():
            assert torch.equal(before(x), after(x)), mode  # no tolerance
    assert function_difference(parent, model, x) == {"train": 0.0, "eval": 0.0}
    # Identical architecture: the same keys, shapes and block order as a freshly built ResNet-(8+N+1).
    scratch = ResNet(ResNetConfig(extra_blocks=n + 1, widths=parent.config.widths, num_classes=5))
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in scratch.state_dict().items()}
    assert model.stage_of_block == scratch.stage_of_block and model.config == scratch.config


def test_extra_block_position_rebuilds_the_sweeps_block_order():
    for n in range(12):
        stage, index = extra_block_position(n)
        order = [s for s, count in enumerate(blocks_per_stage(n)) for _ in range(count)]
        order.insert(index, stage)
        assert order == [s for s, count in enumerate(blocks_per_stage(n + 1)) for _ in range(count)], n


@pytest.mark.parametrize("place", range(5))
def test_insertion_at_any_candidate_preserves_the_function_in_both_batchnorm_modes(place):
    # Every candidate of a ResNet-9, the stem's output and the head's input included: the protocol's block with V = 0.
    parent = tiny_resnet(seed=place, extra_blocks=1)
    model = copy.deepcopy(parent)
    insert_zero_block(model, place, seed=7)
    assert function_difference(parent, model, images(seed=place)) == {"train": 0.0, "eval": 0.0}


def test_the_grown_block_is_the_probes_candidate_at_that_place():
    # The same layers, U from the same (seed, place), V = 0: the block whose tangent space V_S,l projects onto.
    parent = tiny_resnet(seed=1, extra_blocks=1)
    model, index, block = grown_copy(parent, seed=11)
    width = parent.config.widths[1 % 3]
    candidate = make_zero_block("conv3x3", width, 11, index, like=next(parent.parameters()))
    assert block.state_dict().keys() == candidate.state_dict().keys()
    assert all(torch.equal(v, candidate.state_dict()[k]) for k, v in block.state_dict().items())
    assert not block.terminal.weight.any()
    # ... and the architecture's own stride-1 block has the same module names (psi = U, BN, ReLU; terminal = V).
    own = next(b for b in parent.blocks if isinstance(b.shortcut, torch.nn.Identity))
    assert own.state_dict().keys() == block.state_dict().keys()


def test_probe_growth_value_is_the_inverse_gram_norm_of_the_inserted_blocks_v_gradient():
    """V_S,l from the probe (one batch, eval mode, pooled) against, after inserting the block there, the gradient of
    the same mean loss w.r.t. the inserted V in the inverse Gram metric of its own tangent features:
    V^2 = tr(grad_V^T (Psi^T Psi)^+ grad_V). 16 x 16 images of 6 examples give at least 384 rows against k = 9 x 4 = 36
    to 9 x 16 = 144 columns; a channel of psi that is zero everywhere (ReLU) makes exact zero eigenvalues, which the
    pseudo-inverse's relative cut of 1e-10 drops (the others are above ~1e-4 of the largest). Tolerance 1e-10: two
    float64 routes through Gram matrices of condition number below ~1e4 on their range."""
    model = tiny_resnet(seed=5, extra_blocks=2)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 3, 16, 16, generator=g, dtype=torch.float64)
    y = torch.randint(0, 5, (6,), generator=g)
    probe = probe_activation_gradients(model, [(x, y)], exact=True, seed=3)
    checked = 0
    for place in range(len(model.blocks) + 1):
        grown = copy.deepcopy(model)
        block = insert_zero_block(grown, place, seed=3)
        inputs = {}
        handle = block.register_forward_pre_hook(lambda m, a, inputs=inputs: inputs.__setitem__("z", a[0]))
        loss = F.cross_entropy(grown(x), y)
        handle.remove()
        (grad,) = torch.autograd.grad(loss, [block.terminal.weight])
        grad = grad.reshape(grad.shape[0], -1).T  # (k, d): Psi's columns follow V.weight.reshape(d, -1)
        with torch.no_grad():
            psi = block.tangent_features(inputs["z"])
        gram = psi.T @ psi
        value = float(torch.trace(grad.T @ torch.linalg.pinv(gram, rtol=1e-10, hermitian=True) @ grad).sqrt())
        score = probe.scores[place]
        assert score.growth_value_pooled == pytest.approx(value, rel=1e-10), place
        assert value > 0
        checked += 1
    assert checked == 6


def test_run_time_check_catches_a_block_that_is_not_zero_output():
    parent = tiny_resnet(seed=0, extra_blocks=1)
    model, _, block = grown_copy(parent)
    check_function_preserved(parent, model, images())  # passes: V = 0
    with torch.no_grad():
        block.terminal.weight[0, 0, 1, 1] = 1e-12  # a tiny weight is enough
    with pytest.raises(GrowthBrokeFunction, match="train mode.*eval mode"):
        check_function_preserved(parent, model, images(), what="test")


def test_new_block_moves_at_first_order_through_v_only_and_continuously():
    parent = tiny_resnet(seed=3, extra_blocks=2).train()
    model, index, block = grown_copy(parent, seed=3)
    x, y = images(8, seed=3), torch.arange(8) % 5
    F.cross_entropy(model(x), y).backward()
    grads = {name: p.grad for name, p in block.named_parameters()}
    assert all(torch.isfinite(g).all() for g in grads.values())
    # V: the cross-gradient C_l = Psi^T G, non-zero; behind V = 0, U and its BatchNorm have exactly zero gradient.
    assert grads["terminal.weight"].abs().sum() > 0
    assert all(not grads[k].any() for k in ("psi.0.weight", "psi.1.weight", "psi.1.bias"))
    # One SGD step moves the block's output by O(lr): the function changes continuously. The branch after the step is
    # -lr grad_V applied to psi of an input the step also moved by O(lr), so the ratio is 10 up to O(lr) = 1e-3.
    outputs = []
    for lr in (1e-3, 1e-4):
        stepped = copy.deepcopy(model)
        with torch.no_grad():
            for p, q in zip(stepped.parameters(), model.parameters(), strict=True):
                p -= lr * q.grad
        z = stepped.stem(x)
        for b in stepped.blocks[:index]:
            z = b(z)
        branch = stepped.blocks[index]
        outputs.append(float(branch.terminal(branch.psi(z)).detach().norm()))
    assert outputs[0] / outputs[1] == pytest.approx(10.0, rel=1e-3)


# ----------------------------------------------------------------------------- the plan
def test_plan_pairs_each_growth_run_with_the_sweeps_own_run_and_restarts_only_at_the_ablation_depths(tmp_path):
    """Scratch is exactly the sweep's config of ResNet-(8+N) (01's run, reused); the growth run is that config with
    a growth plan (the same data, recipe, seed and epochs), its blocks in before the epochs its fractions round to;
    the restart ablation exists at ``ablation_depths`` only and differs from growth by its schedule alone."""
    overrides = {"depths": [3, 2], "insert_at": "0.2,0.5,0.8", "ablation_depths": [3]}
    plan = gvs.growth_plan(preset="smoke", overrides=overrides, seeds=[0, 1], **SYNTHETIC)
    own = sweep.sweep_configs(preset="smoke", overrides={"depths": [2, 3]}, seeds=[0, 1], **SYNTHETIC)
    assert plan.scratch == {(c["seed"], c["depth_n"]): c for c in own}
    assert (plan.depths, plan.seeds, plan.insert_at, plan.epochs) == ((2, 3), (0, 1), (0.2, 0.5, 0.8), 6)
    assert sorted(plan.growth) == sorted(plan.scratch) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    for (seed, n), config in plan.growth.items():
        scratch = plan.scratch[(seed, n)]
        assert {k: v for k, v in config.items() if k not in ("experiment", "name", "growth")} == {
            k: v for k, v in scratch.items() if k not in ("experiment", "name")
        }
        assert config["name"] == f"synthetic-grown-resnet{8 + n}-n{n}-seed{seed}"
        # 0.2, 0.5 and 0.8 of 6 epochs: blocks before (0-based) epochs 1, 3 and 5
        assert config["growth"]["epochs"] == [1, 3, 5][:n] and config["growth"]["insert_at"] == [0.2, 0.5, 0.8][:n]
        assert (config["growth"]["start_depth_n"], config["growth"]["schedule"]) == (0, "one")
        assert run_store.run_dir("r", config).parent.name == gvs.EXPERIMENT
        assert run_store.run_dir("r", scratch).parent.name == sweep.EXPERIMENT
    assert sorted(plan.ablation) == [(0, 3), (1, 3)]
    for key, restart in plan.ablation.items():
        assert restart["name"] == plan.growth[key]["name"] + "-restart" and gvs.is_restart(restart)
        assert {**restart, "name": None, "growth": {**restart["growth"], "schedule": None}} == {
            **plan.growth[key],
            "name": None,
            "growth": {**plan.growth[key]["growth"], "schedule": None},
        }
    jobs = plan.jobs()
    assert jobs == [*plan.growth.values(), *plan.ablation.values(), *plan.scratch.values()]
    assert len({run_store.run_dir("r", c) for c in jobs}) == len(jobs) == 4 + 2 + 4
    assert "ResNet-11: blocks in before epochs 1, 3, 5; seed 0 growth todo / scratch todo / restart todo" in (
        plan.describe(tmp_path)
    )
    assert gvs.table_stem("synthetic", plan) == "table-synthetic-e6-at20-50-80-seeds0-1"
    # ablation_depths left out with depths given: the preset's among them (smoke: 4), else the deepest
    assert sorted(gvs.growth_plan(preset="smoke", overrides={"depths": [2, 3]}, **SYNTHETIC).ablation) == [(0, 3)]
    assert sorted(gvs.growth_plan(preset="smoke", overrides={"depths": [2, 4]}, **SYNTHETIC).ablation) == [(0, 4)]
    with pytest.raises(ParamError, match="depths=0,2: .*N >= 1"):
        gvs.growth_plan(preset="smoke", overrides={"depths": [0, 2]}, **SYNTHETIC)


# ----------------------------------------------------------------------------- the tables
def record(method, n, seed, train_loss, test_loss, test_acc=0.5, **extra):
    return {
        "method": method,
        "depth_n": n,
        "seed": seed,
        "train_loss": train_loss,
        "test_loss": test_loss,
        "test_acc": test_acc,
        **extra,
    }


def test_table_builder_computes_means_relative_reduction_and_winners():
    records = [
        record("growth", 2, 0, 0.010, 0.20),
        record("growth", 2, 1, 0.030, 0.40),
        record("scratch", 2, 0, 0.020, 0.50),
        record("scratch", 2, 1, 0.020, 0.50),
        record("growth", 4, 0, 0.100, 0.30),
        record("growth", 4, 1, 0.100, 0.30),
        record("scratch", 4, 0, 0.050, 0.20),
        record("scratch", 4, 1, 0.050, 0.20),
    ]
    rows = {r["model"]: r for r in gvs_tables.growth_table(records)}
    assert list(rows) == ["ResNet-10", "ResNet-12", "mean"]
    r10, r12, mean = rows["ResNet-10"], rows["ResNet-12"], rows["mean"]
    assert r10["growth_test_loss"] == pytest.approx(0.30) and r10["growth_test_loss_std"] == pytest.approx(
        math.sqrt(0.02)
    )
    assert r10["scratch_test_loss_std"] == 0.0 and r10["seeds"] == 2
    assert r10["test_loss_reduction"] == pytest.approx(0.20) and r10["test_loss_reduction_rel"] == pytest.approx(0.40)
    assert (r10["train_winner"], r10["test_winner"]) == ("tie", "growth")  # train: 0.02 vs 0.02
    assert (r12["train_winner"], r12["test_winner"]) == ("scratch", "scratch")
    assert r12["test_loss_reduction"] == pytest.approx(-0.10)
    # mean row: per seed over the architectures (growth test 0.25 and 0.35), then over seeds
    assert mean["growth_test_loss"] == pytest.approx(0.30) and mean["growth_test_loss_std"] == pytest.approx(
        math.sqrt(0.005)
    )
    assert mean["scratch_test_loss"] == pytest.approx(0.35) and mean["scratch_test_loss_std"] == 0.0
    assert mean["test_loss_reduction_rel"] == pytest.approx(0.05 / 0.35)
    assert mean["growth_train_loss"] == pytest.approx(0.06) and mean["train_winner"] == "scratch"
    # Paper columns: only what the paper reports, from common/presets/paper.py.
    assert r10["paper_test_loss_reduction"] == GROWTH_TEST_ABS_REDUCTION_RANGE["ResNet-10"]
    assert (r12["paper_train_winner"], r12["paper_test_winner"]) == ("scratch", "growth")
    assert r10["paper_growth_test_loss"] is None and mean["paper_growth_test_loss"] == GROWTH_MEAN_TEST_LOSS["growth"]
    assert mean["paper_test_loss_reduction_rel"] == GROWTH_TEST_RELATIVE_REDUCTION
    assert gvs_tables.paper_columns("ResNet-9")["paper_train_winner"] is None  # not one of the paper's architectures
    # Paired training-loss reductions per seed (0.01 and -0.01 at ResNet-10), as the claims test them.
    assert r10["train_loss_reduction"] == pytest.approx(0.0) and r10["train_loss_reduction_std"] == pytest.approx(
        math.sqrt(2e-4)
    )
    text = gvs.markdown_table(list(rows.values()))
    assert "| ResNet-10 | - | - / - | 0.0200 ± 0.0141 | 0.0200 ± 0.0000 | tie (growth) |" in text  # no epochs, FLOPs
    # the epochs and FLOPs each side's records hold (any values: the table reports them, growth first)
    more = [
        {
            **r,
            "total_epochs": 14 if r["method"] == "growth" else 2,
            "train_flops": 1e3 if r["method"] == "growth" else 2e3,
        }
        for r in records
    ]
    rows = {r["model"]: r for r in gvs_tables.growth_table(more)}
    assert (rows["ResNet-12"]["growth_epochs"], rows["ResNet-12"]["scratch_epochs"]) == (14, 2)
    assert rows["mean"]["growth_epochs"] is None
    assert "| ResNet-12 | 14 / 2 | 1e+03 / 2e+03 |" in gvs.markdown_table(list(rows.values()))
    with pytest.raises(ValueError, match="seeds"):
        gvs_tables.growth_table(records[1:])


def test_the_ablation_costs_restart_minus_growth_paired_by_seed():
    """``restart - growth`` per seed, then mean and sample std: the pairing shows in the std (0.05 and 0.02: std
    0.0212; unpaired across seeds it would be 0.26). Only depths with restart runs get a row; a missing arm fails."""
    extra = {"train_flops": 10.0, "train_loss_slope": -0.001, "train_loss_tail_fall": 0.01}
    scratch = [record("scratch", n, s, 0.20, 0.55 + 0.2 * s, **extra) for n in (2, 5) for s in (0, 1)]
    growth = [
        record("growth", 5, 0, 0.10, 0.50, **extra),
        record("growth", 5, 1, 0.30, 0.70, **extra),
        *(record("growth", 2, s, 0.4, 0.9, **extra) for s in (0, 1)),  # no restart at ResNet-10: no row
        *scratch,
    ]
    restart = [  # collect_records(plan, out, "restart") labels the restarted runs "growth"; seeds in another order
        record("growth", 5, 1, 0.32, 0.65, **{**extra, "train_flops": 12.0}),
        record("growth", 5, 0, 0.15, 0.60, **{**extra, "train_flops": 8.0}),
        *scratch[2:],
    ]
    [row] = gvs_tables.ablation_table(growth, restart)
    assert (row["model"], row["depth_n"], row["seeds"]) == ("ResNet-13", 5, 2)
    assert row["restart_cost_train_loss"] == pytest.approx(0.035)
    assert row["restart_cost_train_loss_std"] == pytest.approx(0.03 / math.sqrt(2))
    assert row["restart_cost_test_loss"] == pytest.approx(0.025)
    assert row["restart_cost_test_loss_std"] == pytest.approx(0.15 / math.sqrt(2))
    assert row["growth_train_loss"] == pytest.approx(0.2) and row["restart_train_loss"] == pytest.approx(0.235)
    assert row["scratch_test_loss"] == pytest.approx(0.65) and row["restart_train_flops"] == pytest.approx(10.0)
    text = gvs.ablation_markdown([row])
    assert "| ResNet-13 | 0.2000 ± 0.1414 | 0.2350 ± 0.1202 | 0.2000 ± 0.0000 | 0.0350 ± 0.0212 |" in text
    with pytest.raises(ValueError, match="no growth records"):
        gvs_tables.ablation_table(growth[1:], restart)


def test_tail_slope_fits_a_line_to_the_last_tenth_of_the_epochs():
    """40 epochs: a fall of 0.1 per epoch, then of 0.02 over the last 4 (10%): the slope is the last epochs' alone;
    the fall is the line's drop over those epochs as a fraction of its last value (0.06 / 0.72)."""
    history = [{"epoch": e, "train_loss": 0.8 + 0.1 * (36 - e)} for e in range(1, 37)]
    history += [{"epoch": e, "train_loss": 0.8 - 0.02 * (e - 36)} for e in range(37, 41)]
    history.append({"epoch": 40, "test_loss": 0.3})  # a record without the running training loss: not a point
    assert gvs_tables.tail_slope(history) == pytest.approx(-0.02, abs=1e-12)
    assert gvs_tables.tail_fall(history) == pytest.approx(0.06 / 0.72, rel=1e-9)
    assert gvs_tables.tail_slope(history, tail=0.5) < -0.03  # over 20 epochs the steeper fall enters
    level = [{"epoch": e, "train_loss": 0.25} for e in range(1, 21)]
    assert gvs_tables.tail_slope(level) == pytest.approx(0.0, abs=1e-12) and gvs_tables.tail_fall(
        level
    ) == pytest.approx(0.0)
    assert math.isnan(gvs_tables.tail_slope(history[:1])) and math.isnan(gvs_tables.tail_fall([]))
    assert gvs_tables.tail_slope(history[:2]) == pytest.approx(-0.1)  # at least 2 points, even where 10% is fewer


# ----------------------------------------------------------------------------- the script
def tiny_npz(path):
    rng = np.random.default_rng(0)
    labels = {"y_train": rng.integers(0, 4, 64), "y_test": rng.integers(0, 4, 32)}
    images = {
        k.replace("y", "x"): (rng.integers(0, 64, (len(y), 8, 8, 3)) + 48 * y[:, None, None, None]).astype(np.uint8)
        for k, y in labels.items()
    }
    np.savez(path, **labels, **images)
    return path


def test_script_grows_inside_one_run_against_the_sweeps_run_and_skips_finished_runs(tmp_path, capsys):
    """ResNet-8 grown to ResNet-10 in one 6-epoch run (blocks before epochs 1 and 2, in the cyclic order, each
    preserving the function exactly), its restarted twin, and the sweep's own ResNet-10 as scratch: the tables
    printed and written; the grown weights load as the sweep's ResNet-10; growth's counted FLOPs (epochs 1, 2 and
    3-6 at ResNet-8, -9 and -10) below scratch's; a second call trains nothing."""
    data = tiny_npz(tmp_path / "tiny.npz")  # 64 training images of 8x8: one step per epoch
    out = tmp_path / "runs"
    argv = ["--preset", "smoke", "--dataset", "npz", "--data-root", str(data), "--depths", "2", "--device", "cpu"]
    assert script.main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| ResNet-10 |" in printed and "| mean |" in printed and "restart ablation:" in printed
    for stem in ("table-npz-e6-at15-30-seeds0", "ablation-npz-e6-at15-30-seeds0"):
        path = out / gvs.EXPERIMENT / f"{stem}.csv"
        assert str(path) in printed and path.with_suffix(".md").is_file()
    with open(out / gvs.EXPERIMENT / "table-npz-e6-at15-30-seeds0.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["model"] for r in rows] == ["ResNet-10", "mean"] and float(rows[0]["growth_test_loss"]) > 0
    assert (float(rows[0]["growth_epochs"]), float(rows[0]["scratch_epochs"])) == (6, 6)

    plan = gvs.growth_plan(preset="smoke", overrides={"depths": [2]}, dataset="npz", data_root=str(data), device="cpu")
    grown, restarted, scratch = (run_store.run_dir(out, c) for c in plan.jobs())
    assert all(run_store.is_done(d) for d in (grown, restarted, scratch)) and restarted.name.startswith(
        "npz-grown-resnet10-n2-seed0-restart-"
    )
    assert sweep_records.finished_sweep_runs(out, "npz") == [scratch]  # scratch: the sweep's run, by the sweep's job
    result = run_store.read_result(grown)
    inserted = result["growth"]["inserted"]
    assert [(r["epoch"], r["place"], r["seed"]) for r in inserted] == [
        (1, EXPECTED_INDEX[0], gvs.block_seed(0, 1)),
        (2, EXPECTED_INDEX[1], gvs.block_seed(0, 2)),
    ]
    assert all(r["function_check"] == {"train": 0.0, "eval": 0.0} for r in inserted)
    assert result["growth"]["restart"] is False and run_store.read_result(restarted)["growth"]["restart"] is True

    model = sweep_records.load_trained_resnet(grown)  # as the sweep's ResNet-10: its config, strict state_dict
    assert model.config.extra_blocks == 2 and len(model.blocks) == 5
    assert model.stage_of_block == sweep_records.load_trained_resnet(scratch).stage_of_block
    assert {k: v.shape for k, v in load_weights(grown).items()} == {
        k: v.shape for k, v in load_weights(scratch).items()
    }

    widths = tuple(plan.scratch[(0, 2)]["model"]["widths"])
    per_image = [
        training_flops_per_image(ResNet(ResNetConfig(extra_blocks=n, widths=widths, num_classes=4)), (3, 8, 8), 4)
        for n in range(3)
    ]
    assert result["train_flops"] == 64 * (per_image[0] + per_image[1] + 4 * per_image[2])
    records = {r["method"]: r for r in gvs.collect_records(plan, out)}
    assert records["scratch"]["train_flops"] == 6 * 64 * per_image[2]
    assert records["growth"]["train_flops"] == result["train_flops"] < records["scratch"]["train_flops"]
    assert float(rows[0]["growth_train_flops"]) < float(rows[0]["scratch_train_flops"])

    metrics = {p: run_store.read_metrics(p) for p in (grown, restarted, scratch)}
    assert [r["insertions"] for r in metrics[grown]] == [0, 1, 2, 2, 2, 2]
    assert script.main([*argv, "--out", str(out)]) == 0  # everything finished: only the tables again
    assert {p: run_store.read_metrics(p) for p in metrics} == metrics


def test_paper_preset_dry_run_plans_resnet10_to_13_and_creates_nothing(tmp_path, capsys):
    assert script.main(["--dry-run", "--out", str(tmp_path / "never")]) == 0
    out = capsys.readouterr().out
    assert "ResNet-13: blocks in before epochs 20, 40, 60, 80, 100; seed 0 growth todo / scratch todo" in out
    assert (
        "8 planned runs" in out  # 4 growth runs, the sweep's 4
        and "growth_vs_scratch/cifar10-grown-resnet13-n5-seed0-" in out
        and "resnet_sweep/cifar10-resnet11-n3-seed0-c6139158" in out
        and "-restart" not in out  # the paper preset has no ablation
    )
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    "extra, shown",
    [
        pytest.param(["--insert-at", "0,0.5"], "--insert-at 0,0.5", id="fraction-zero"),
        pytest.param(["--insert-at", "0.5,0.2"], "--insert-at 0.5,0.2", id="decreasing"),
        pytest.param(["--insert-at", "1.2"], "--insert-at 1.2", id="above-one"),
        pytest.param(["--depths", "2,3", "--insert-at", "0.1,0.2"], "--insert-at 0.1,0.2", id="too-few"),
        pytest.param(["--insert-at", "0.1,0.15"], "--insert-at 0.1,0.15", id="same-epoch"),  # 0.6, 0.9 of 6: 1, 1
        pytest.param(["--ablation-depths", "7"], "--ablation-depths 7", id="ablation-not-a-depth"),
    ],
)
def test_a_bad_growth_plan_is_one_line_naming_the_flag_and_creates_nothing(extra, shown, tmp_path, capsys, monkeypatch):
    """Exit 2 and one line ``03_growth_vs_scratch.py: error: --flag value: ...`` before any directory exists. The
    flags of a script parsed earlier in this process are cleared first: the line must not depend on the test order."""
    monkeypatch.setattr(cli, "_FLAGS", {})  # as in a fresh process
    argv = ["--preset", "smoke", "--dataset", "synthetic", "--device", "cpu", "--depths", "2", *extra]
    capsys.readouterr()
    assert script.main([*argv, "--out", str(tmp_path / "runs")]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"03_growth_vs_scratch.py: error: {shown}: "), line
    assert not (tmp_path / "runs").exists()
