"""Growth vs scratch (script 03): zero-output growth of the ResNet with its own block, the chain, the table."""

from __future__ import annotations

import copy
import csv
import functools
import importlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from common import resnet_sweep as sweep
from common import runs
from common.errors import ParamError, UserError
from common.experiments import growth_vs_scratch as gvs
from common.growth import GrowthBrokeFunction, check_function_preserved, function_difference
from common.models.resnet import (
    BasicBlock,
    ResNet,
    ResNetConfig,
    blocks_per_stage,
    extra_block_position,
    grow,
    zero_output_basic_block,
)
from common.paper import GROWTH_MEAN_TEST_LOSS, GROWTH_TEST_ABS_REDUCTION_RANGE, GROWTH_TEST_RELATIVE_REDUCTION
from common.presets.growth import DEFAULT_BUDGETS
from common.train import load_weights
from tests.helpers import tiny_resnet

script = importlib.import_module("03_growth_vs_scratch")

# Where block N goes in ResNet-(8+N) -> ResNet-(8+N+1), written out by hand from B.1's cyclic rule:
# N = 0, 1, 2: right after stage 0's backbone block and after the downsampling blocks of stages 1 and 2;
# N = 3, 4, 5: at the end of stages that already hold extra blocks.
EXPECTED_INDEX = {0: 1, 1: 3, 2: 5, 3: 2, 4: 5, 5: 8}
TINY_DATA = {"num_train": 128, "num_test": 32, "num_classes": 4, "image_size": 8}


def images(n: int = 4, size: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def grown_copy(parent: ResNet, seed: int = 0) -> tuple[ResNet, int, BasicBlock]:
    model = copy.deepcopy(parent)
    index, block = grow(model, torch.Generator().manual_seed(seed))
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
    # Identical architecture: the same keys, shapes and structure as a freshly built ResNet-(8+N+1).
    scratch = ResNet(ResNetConfig(extra_blocks=n + 1, widths=parent.config.widths, num_classes=5))
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in scratch.state_dict().items()}
    assert model.stage_of_block == scratch.stage_of_block and model.config == scratch.config
    assert str(model) == str(scratch)


def test_extra_block_position_rebuilds_the_sweeps_block_order():
    for n in range(12):
        stage, index = extra_block_position(n)
        order = [s for s, count in enumerate(blocks_per_stage(n)) for _ in range(count)]
        order.insert(index, stage)
        assert order == [s for s, count in enumerate(blocks_per_stage(n + 1)) for _ in range(count)], n


def test_run_time_check_catches_a_block_that_is_not_zero_output():
    parent = tiny_resnet(seed=0, extra_blocks=1)
    model, _, block = grown_copy(parent)
    check_function_preserved(parent, model, images())  # passes: zero-gamma
    with torch.no_grad():
        block.residual[-1].bias.fill_(1e-12)  # a tiny shift is enough
    with pytest.raises(GrowthBrokeFunction, match="train mode.*eval mode"):
        check_function_preserved(parent, model, images(), what="test")


def test_new_block_gets_a_nonzero_finite_gradient_on_its_first_step():
    parent = tiny_resnet(seed=3, extra_blocks=2).train()
    model, index, block = grown_copy(parent, seed=3)
    x, y = images(8, seed=3), torch.arange(8) % 5
    F.cross_entropy(model(x), y).backward()
    grads = {name: p.grad for name, p in block.named_parameters()}
    assert all(torch.isfinite(g).all() for g in grads.values())
    gamma, beta = grads["residual.4.weight"], grads["residual.4.bias"]
    assert (gamma != 0).all() and (beta != 0).all()  # every channel of the zero-gamma BN moves
    # Behind gamma = 0 nothing else has a first-order effect: the tangent space is spanned by gamma and beta.
    assert all(
        not grads[k].any() for k in ("residual.0.weight", "residual.1.weight", "residual.1.bias", "residual.3.weight")
    )
    # One SGD step moves the block's output by O(lr): the function changes continuously.
    outputs = []
    for lr in (1e-3, 1e-4):
        stepped = copy.deepcopy(model)
        with torch.no_grad():
            for p, q in zip(stepped.parameters(), model.parameters(), strict=True):
                p -= lr * q.grad
        z = stepped.stem(x)
        for b in stepped.blocks[:index]:
            z = b(z)
        outputs.append(float(stepped.blocks[index].residual(z).detach().norm()))
    assert outputs[0] / outputs[1] == pytest.approx(10.0, rel=1e-6)


def zero_parameter_gradient_norm(block: BasicBlock, z: torch.Tensor, eps: float, name: str) -> float:
    """Gradient norm of a fixed loss w.r.t. the block's zero-initialised parameter ``name``, last BatchNorm at ``eps``, train mode."""
    block = copy.deepcopy(block).train()
    block.residual[-1].eps = eps
    out = block(z)
    assert torch.equal(out, z)  # zero output in train mode at every eps
    target = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    (grad,) = torch.autograd.grad((out * target).sum(), [dict(block.named_parameters())[name]])
    return float(grad.norm())


def test_zero_gamma_avoids_the_inverse_sqrt_eps_amplification_of_a_zero_conv_before_batchnorm():
    torch.manual_seed(0)
    z = F.relu(torch.randn(8, 4, 6, 6, dtype=torch.float64))  # a post-ReLU state
    ours = zero_output_basic_block(4, torch.Generator().manual_seed(0)).double()
    zero_conv = copy.deepcopy(ours)  # the alternative: last conv at 0, its BatchNorm at identity
    with torch.no_grad():
        zero_conv.residual[3].weight.zero_()
        zero_conv.residual[4].weight.fill_(1.0)
    gamma, conv = "residual.4.weight", "residual.3.weight"
    ratio_ours = zero_parameter_gradient_norm(ours, z, 1e-5, gamma) / zero_parameter_gradient_norm(ours, z, 1e-3, gamma)
    ratio_zero_conv = zero_parameter_gradient_norm(zero_conv, z, 1e-5, conv) / zero_parameter_gradient_norm(
        zero_conv, z, 1e-3, conv
    )
    # The zero conv feeds the BN a zero batch (variance 0): its gradient is scaled by exactly 1/sqrt(eps).
    assert ratio_zero_conv == pytest.approx(math.sqrt(1e-3 / 1e-5), rel=1e-9)
    # Zero-gamma: the BN normalises a random conv output (variance of order 1), eps hardly matters.
    assert ratio_ours == pytest.approx(1.0, abs=0.01)
    assert zero_parameter_gradient_norm(zero_conv, z, 1e-5, conv) > 30 * zero_parameter_gradient_norm(
        ours, z, 1e-5, gamma
    )


class Killed(Exception):
    pass


def tiny_plan(**fields) -> gvs.GrowthPlan:
    """A tiny smoke plan; ``fields``: :class:`common.presets.growth.GrowthPreset` fields (the overrides)."""
    overrides = {"depths": [2], "stage_epochs": 2, "scratch_epochs": 1, **fields}
    return gvs.growth_plan(preset="smoke", overrides=overrides, dataset="synthetic", device="cpu", synthetic=TINY_DATA)


def test_killed_chain_resumes_from_the_last_finished_stage_to_the_same_weights(tmp_path, deterministic, monkeypatch):
    plan = tiny_plan(stage_epochs=2)
    [end] = runs.make_specs([plan.stage(0, 2)], tmp_path / "whole")
    whole = gvs.growth_vs_scratch_run(end)
    # The missing parent ResNet-8 was trained by the sweep's own job, in the sweep's run directory.
    parent_dir = runs.run_dir(tmp_path / "whole", plan.parents[0])
    assert parent_dir.parent.name == sweep.EXPERIMENT and runs.is_done(parent_dir)
    assert whole["growth"]["function_check"]["max_abs_diff"] == {"train": 0.0, "eval": 0.0}

    real_train = sweep.train

    def train_killed_in_stage_2(*args, run_dir, **kwargs):
        def kill(epoch, record):
            if epoch == 1:
                raise Killed

        return real_train(*args, run_dir=run_dir, on_epoch_end=kill if "-n2-" in str(run_dir) else None, **kwargs)

    monkeypatch.setattr(sweep, "train", train_killed_in_stage_2)
    [end] = runs.make_specs([plan.stage(0, 2)], tmp_path / "resumed")
    with pytest.raises(Killed):
        gvs.growth_vs_scratch_run(end)
    stage1, stage2 = (runs.run_dir(tmp_path / "resumed", plan.stage(0, n)) for n in (1, 2))
    assert runs.is_done(stage1) and not runs.is_done(stage2) and runs.checkpoint_path(stage2).exists()
    monkeypatch.setattr(sweep, "train", functools.partial(real_train, on_epoch_end=None))
    stage1_metrics = runs.read_metrics(stage1)
    resumed = gvs.growth_vs_scratch_run(end)
    assert runs.read_metrics(stage1) == stage1_metrics  # the finished stage is not trained again
    assert [r["epoch"] for r in runs.read_metrics(stage2)] == [1, 2]
    for n in (1, 2):
        a, b = (load_weights(runs.run_dir(tmp_path / where, plan.stage(0, n))) for where in ("whole", "resumed"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), n
    assert resumed["test_loss"] == whole["test_loss"] and resumed["train_loss"] == whole["train_loss"]


def test_plan_reuses_the_sweeps_runs_at_its_epochs_and_derives_the_scratch_budgets():
    plan = tiny_plan(scratch_epochs=None, depths=[2, 3], stage_epochs=3)
    sweep_epochs = plan.parents[0]["train"]["epochs"]
    # Default arms: the equal-epoch arm first (the verdicts read it), the sweep's fixed-epoch arm beside it.
    assert [a.budget for a in plan.arms] == ["total", "sweep"] == list(DEFAULT_BUDGETS)
    total, fixed = plan.arms
    assert total.epochs == {2: sweep_epochs + 6, 3: sweep_epochs + 9} == {n: plan.growth_epochs(n) for n in (2, 3)}
    assert runs.run_dir("r", total.runs[(0, 3)]).parent.name == gvs.EXPERIMENT  # not a sweep run: kept apart
    for n in (2, 3):
        [own] = sweep.sweep_configs(preset="smoke", dataset="synthetic", synthetic=TINY_DATA, overrides={"depths": [n]})
        assert runs.run_dir("r", fixed.runs[(0, n)]) == runs.run_dir("r", own)  # the sweep's run itself
    [own_parent] = sweep.sweep_configs(
        preset="smoke", dataset="synthetic", synthetic=TINY_DATA, overrides={"depths": [0]}
    )
    assert runs.run_dir("r", plan.parents[0]) == runs.run_dir("r", own_parent)  # at the sweep's epochs: its run
    assert len(plan.jobs()) == 1 + 2 + 2  # the chain, then each arm's runs
    assert tiny_plan(scratch_epochs=None, scratch_budget="per-stage", stage_epochs=3).scratch_epochs == {2: 3}
    assert [a.budget for a in tiny_plan(scratch_epochs=None, scratch_budget="sweep,total").arms] == ["sweep", "total"]
    assert [a.budget for a in tiny_plan(scratch_epochs=4).arms] == ["e4"]
    # A shorter parent (mini's design): a run of this experiment, and growth's epochs in all count it.
    short = tiny_plan(scratch_epochs=None, depths=[2, 3], stage_epochs=1, parent_epochs=sweep_epochs - 3)
    assert runs.run_dir("r", short.parents[0]).parent.name == gvs.EXPERIMENT
    assert short.parents[0]["name"] == f"synthetic-parent-resnet8-n0-seed0-e{sweep_epochs - 3}"
    assert short.arms[0].epochs == {2: sweep_epochs - 1, 3: sweep_epochs}
    assert short.arms[0].runs[(0, 3)] == short.arms[1].runs[(0, 3)]  # equal to the sweep's epochs: the sweep's run
    assert len(short.jobs()) == 1 + 2 + 1  # that run is planned once
    assert short.stage(0, 1)["growth"]["parent"] == runs.run_dir("", short.parents[0]).as_posix()
    stem = f"table-synthetic-parent{sweep_epochs - 3}-stage1-scratch{sweep_epochs - 1}-{sweep_epochs}-seeds0"
    assert gvs.table_stem("synthetic", short) == stem
    assert gvs.table_stem("synthetic", plan, fixed) == f"table-synthetic-stage3-scratch{sweep_epochs}-seeds0"
    # Each stage names its parent's run directory; the chain is the parent ResNet-8 and the earlier stages.
    stage3 = plan.stage(0, 3)
    assert stage3["growth"]["parent"] == runs.run_dir("", plan.stage(0, 2)).as_posix()
    assert [c["depth_n"] for c in stage3["runtime"]["chain"]] == [0, 1, 2]
    assert runs.config_hash(tiny_plan(stage_epochs=4).stage(0, 2)) != runs.config_hash(
        tiny_plan(stage_epochs=3).stage(0, 2)
    )
    with pytest.raises(UserError, match="pass one of them"):
        tiny_plan(scratch_budget="total")
    with pytest.raises(ParamError, match="scratch_budget=total,equal: use one or more of"):
        tiny_plan(scratch_epochs=None, scratch_budget="total,equal")
    with pytest.raises(ParamError, match="depths=0,2: .*N >= 1"):
        tiny_plan(depths=[0, 2])
    with pytest.raises(ParamError, match="parent_epochs=0: must be a positive number of epochs"):
        tiny_plan(parent_epochs=0)


def record(method, n, seed, train_loss, test_loss, test_acc=0.5):
    return {
        "method": method,
        "depth_n": n,
        "seed": seed,
        "train_loss": train_loss,
        "test_loss": test_loss,
        "test_acc": test_acc,
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
    rows = {r["model"]: r for r in gvs.growth_table(records)}
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
    # Paper columns: only what the paper reports, from common/paper.py.
    assert r10["paper_test_loss_reduction"] == GROWTH_TEST_ABS_REDUCTION_RANGE["ResNet-10"]
    assert (r12["paper_train_winner"], r12["paper_test_winner"]) == ("scratch", "growth")
    assert r10["paper_growth_test_loss"] is None and mean["paper_growth_test_loss"] == GROWTH_MEAN_TEST_LOSS["growth"]
    assert mean["paper_test_loss_reduction_rel"] == GROWTH_TEST_RELATIVE_REDUCTION
    # Paired training-loss reductions per seed (0.01 and -0.01 at ResNet-10), as the claims test them.
    assert r10["train_loss_reduction"] == pytest.approx(0.0) and r10["train_loss_reduction_std"] == pytest.approx(
        math.sqrt(2e-4)
    )
    text = gvs.markdown_table(list(rows.values()))
    assert "| ResNet-10 | - | 0.0200 ± 0.0141 | 0.0200 ± 0.0000 | tie (growth) |" in text  # no budgets in these records
    budgets = [{**r, "total_epochs": 6 + 2 * r["depth_n"] if r["method"] == "growth" else 2} for r in records]
    rows = {r["model"]: r for r in gvs.growth_table(budgets)}
    assert (rows["ResNet-12"]["growth_epochs"], rows["ResNet-12"]["scratch_epochs"]) == (14, 2)
    assert rows["mean"]["growth_epochs"] is None
    assert "| ResNet-12 | 14 / 2 |" in gvs.markdown_table(list(rows.values()))
    with pytest.raises(ValueError, match="seeds"):
        gvs.growth_table(records[1:])


def tiny_npz(path):
    rng = np.random.default_rng(0)
    labels = {"y_train": rng.integers(0, 4, 64), "y_test": rng.integers(0, 4, 32)}
    images = {
        k.replace("y", "x"): (rng.integers(0, 64, (len(y), 8, 8, 3)) + 48 * y[:, None, None, None]).astype(np.uint8)
        for k, y in labels.items()
    }
    np.savez(path, **labels, **images)
    return path


def test_script_runs_chain_and_scratch_prints_the_table_and_skips_finished_runs(tmp_path, capsys):
    data = tiny_npz(tmp_path / "tiny.npz")  # 64 training images of 8x8: one step per epoch
    argv = [
        "--preset",
        "smoke",
        "--dataset",
        "npz",
        "--data-root",
        str(data),
        "--depths",
        "2",
        "--stage-epochs",
        "2",
        "--scratch-budget",
        "per-stage",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "runs"),
    ]
    assert script.main(argv) == 0
    out = capsys.readouterr().out
    assert "| ResNet-10 |" in out and "| mean |" in out
    csv_path = tmp_path / "runs" / gvs.EXPERIMENT / "table-npz-stage2-scratch2-seeds0.csv"
    assert str(csv_path) in out and csv_path.with_suffix(".md").is_file()
    with open(csv_path) as handle:
        rows = list(csv.DictReader(handle))
    assert [r["model"] for r in rows] == ["ResNet-10", "mean"] and float(rows[0]["growth_test_loss"]) > 0
    # Each side's total epochs: the parent ResNet-8's (the smoke sweep's 6) and two 2-epoch stages, against scratch's 2.
    assert (float(rows[0]["growth_epochs"]), float(rows[0]["scratch_epochs"])) == (
        10,
        2,
    ) and "| ResNet-10 | 10 / 2 |" in out
    folder = tmp_path / "runs" / gvs.EXPERIMENT
    finished = sorted(p.name.rsplit("-", 1)[0] for p in folder.iterdir() if runs.is_done(p))
    assert finished == ["npz-grown-resnet10-n2-seed0", "npz-grown-resnet9-n1-seed0", "npz-scratch-resnet10-n2-seed0-e2"]
    assert len(sweep.finished_sweep_runs(tmp_path / "runs", "npz")) == 1  # the parent ResNet-8, by the sweep's job
    metrics = {p: runs.read_metrics(p) for p in folder.iterdir() if p.is_dir()}
    assert script.main(argv) == 0  # everything finished: only the table again
    assert {p: runs.read_metrics(p) for p in metrics} == metrics


def test_paper_preset_dry_run_plans_resnet10_to_13_and_creates_nothing(tmp_path, capsys):
    assert script.main(["--dry-run", "--out", str(tmp_path / "never")]) == 0
    out = capsys.readouterr().out
    assert "ResNet-8 (todo, sweep run) -> ResNet-9 (todo) -> ResNet-10" in out and "ResNet-13 (todo)" in out
    assert (
        "9 planned runs" in out  # the chain, the equal-epoch arm's 4 runs, the sweep's 4
        and "cifar10-grown-resnet13-n5-seed0" in out
        and "growth_vs_scratch/cifar10-scratch-resnet13-n5-seed0-e1200-" in out
        and "resnet_sweep/cifar10-resnet11-n3-seed0-6e4f1e46" in out
    )
    assert not (tmp_path / "never").exists()
