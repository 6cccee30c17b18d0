"""07_weight_scaling.py end to end: the fc-tanh smoke training, and the sweep family on stored sweep runs.

The sweep tests store sweep runs the way script 01 leaves them (``config.json``, ``model.pt``,
``result.json``) from untrained models with random BatchNorm statistics: the analysis reads weights,
and untrained weights with non-trivial BatchNorms exercise the same path in a fraction of the time.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from common.data.neural_ode import make_neural_ode_data
from common.experiments.shared.resnet_sweep import build_resnet, sweep_configs
from common.experiments.weight_scaling import FC_FAMILIES, fc_configs
from common.experiments.weight_scaling_fits import JOINT_INTERVAL
from common.models.fc_resnet import FCResNet, FCResNetConfig
from common.models.resnet import blocks_per_stage
from common.presets.weight_scaling import FC_PRESETS
from common.runs import record_io, run_store
from common.science import scaling
from common.training.checkpoints import WEIGHTS, load_weights

script = importlib.import_module("07_weight_scaling")


@pytest.fixture(scope="module")
def fc_tanh_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fc")
    assert script.main(["--family", "fc-tanh", "--preset", "smoke", "--device", "cpu", "--out", str(out)]) == 0
    return out


def fc_runs(out: Path) -> list[Path]:
    return sorted(
        (p for p in (out / "weight_scaling").iterdir() if p.is_dir()), key=lambda p: run_store.read_result(p)["depth"]
    )


def test_fc_tanh_smoke_training_lowers_the_loss_at_every_depth(fc_tanh_out):
    found = fc_runs(fc_tanh_out)
    results = [run_store.read_result(p) for p in found]
    assert [r["depth"] for r in results] == list(FC_PRESETS["smoke"].depths) == [4, 8, 16, 32, 64]
    for r in results:
        assert r["train_loss"] < r["initial_train_loss"], r
    # The recorded initial loss is that of the run's fresh initialisation (an independent evaluation).
    config = record_io.read_json(found[0] / run_store.CONFIG)
    torch.manual_seed(config["seed"])
    fresh = FCResNet(FCResNetConfig(**config["model"]))
    d = config["data"]
    data = make_neural_ode_data(dim=d["dim"], num_train=d["num_train"], num_test=d["num_test"], seed=d["data_seed"])
    with torch.no_grad():
        assert torch.nn.functional.mse_loss(fresh(data.x_train), data.y_train).item() == pytest.approx(
            results[0]["initial_train_loss"], rel=1e-5
        )
        # The regression hook of common.training.loop: the recorded test loss is the MSE of the saved weights.
        fresh.load_state_dict(load_weights(found[0]))
        assert torch.nn.functional.mse_loss(fresh(data.x_test), data.y_test).item() == pytest.approx(
            results[0]["test_loss"], rel=1e-5
        )
    metrics = run_store.read_metrics(found[0])
    assert len(metrics) == FC_PRESETS["smoke"].recipe.epochs and all(
        m["train_acc"] is None and "test_acc" not in m for m in metrics
    )


@pytest.mark.parametrize(("activation", "delta"), [("tanh", "shared"), ("relu", "per_layer")])
def test_fc_resnet_applies_the_residual_update_layer_by_layer(activation, delta):
    torch.manual_seed(7)
    model = FCResNet(FCResNetConfig(depth=5, dim=4, activation=activation, delta=delta, init_scale=3.0)).double()
    with torch.no_grad():
        model.delta.normal_(0, 1)
        model.delta[0] = -0.7  # a negative factor: the shared one enters as |delta|, a per-layer one as it is
        model.A.mul_(50)
    x = torch.randn(3, 4, dtype=torch.float64)
    sigma = torch.tanh if activation == "tanh" else torch.relu
    z = x.clone()
    for k in range(5):
        d_k = model.delta.abs()[0] if delta == "shared" else model.delta[k]
        z = z + d_k * sigma(torch.stack([model.A[k] @ row + model.b[k] for row in z]))
    with torch.no_grad():  # the same O(d) float64 sums layer by layer: no solve, rtol 1e-12
        assert torch.allclose(model(x), z, rtol=1e-12, atol=1e-12)


def test_records_and_exponents_come_from_the_saved_weights(fc_tanh_out, capsys):
    folder = fc_tanh_out / "weight_scaling"
    records = pd.read_csv(folder / "records-fc-tanh.csv")
    exponents = pd.read_csv(folder / "exponents-fc-tanh.csv")
    # Per-depth records recomputed from each run's model.pt by plain torch.
    for run in fc_runs(fc_tanh_out):
        state = load_weights(run)
        a, delta = state["A"].double(), state["delta"].double().abs()
        row = records[(records.run == run.name) & (records.tensor == "A") & (records.norm == "fro")].iloc[0]
        assert row.depth == len(a)
        assert row.max_norm == pytest.approx(a.flatten(1).norm(dim=1).max().item(), rel=1e-9)
        assert row.cumsum_norm == pytest.approx(a.cumsum(0).flatten(1).norm(dim=1).max().item(), rel=1e-9)
        spectral = records[(records.run == run.name) & (records.tensor == "A") & (records.norm == "spectral")].iloc[0]
        assert spectral.max_norm == pytest.approx(torch.linalg.matrix_norm(a, 2).max().item(), rel=1e-9)
        d_row = records[(records.run == run.name) & (records.tensor == "delta")].iloc[0]
        assert d_row.max_norm == pytest.approx(delta.item(), rel=1e-9)
        layers = pd.read_csv(run / "layers.csv")
        assert len(layers[layers.tensor == "A"]) == len(a)
    # The table: beta = 1 - slope of log cumsum, alpha = -slope of log |delta|, beside Cohen et al.'s values.
    fro = records[(records.tensor == "A") & (records.norm == "fro")].sort_values("depth")
    beta_row = exponents[(exponents.tensor == "A") & (exponents.norm == "fro") & (exponents.exponent == "beta")].iloc[0]
    assert beta_row.estimate == pytest.approx(1 - scaling.fit_power_law(fro.depth, fro.cumsum_norm).slope)
    assert beta_row.ci_low < beta_row.estimate < beta_row.ci_high and beta_row.paper == 0.3 and beta_row.status == "ok"
    alpha_row = exponents[exponents.exponent == "alpha"].iloc[0]
    deltas = records[records.tensor == "delta"].sort_values("depth")
    assert alpha_row.estimate == pytest.approx(-scaling.fit_power_law(deltas.depth, deltas.max_norm).slope)
    assert alpha_row.paper == 0.7
    # Step 3 with either beta: nu = -(beta + slope of the max increment); the max norm's is the verdict's.
    increment = scaling.fit_power_law(fro.depth, fro.max_increment).slope
    row = {
        e: exponents[(exponents.tensor == "A") & (exponents.norm == "fro") & (exponents.exponent == e)].iloc[0]
        for e in ("beta", "max_norm_exponent", "nu", "nu_max_norm")
    }
    assert row["nu"].estimate == pytest.approx(-(row["beta"].estimate + increment))
    assert row["nu_max_norm"].estimate == pytest.approx(-(row["max_norm_exponent"].estimate + increment))
    assert [row[e].estimator for e in row] == [scaling.STEP2_ESTIMATOR, scaling.MAX_NORM_ESTIMATOR] * 2
    # nu's interval carries beta's uncertainty: the t interval of the slope of log(max_increment / max_norm);
    # the interval with beta held at its estimate stays beside it.
    joint = scaling.fit_power_law(fro.depth, fro.max_increment / fro.max_norm)
    nu_row = row["nu_max_norm"]
    assert (nu_row.interval, nu_row.statistic) == (JOINT_INTERVAL, "max_increment / max_norm")
    assert (nu_row.ci_low, nu_row.ci_high) == pytest.approx((-joint.ci_high, -joint.ci_low), rel=1e-9)
    fixed = scaling.fit_power_law(fro.depth, fro.max_increment)
    beta_max = row["max_norm_exponent"].estimate
    assert (nu_row.ci_low_beta_fixed, nu_row.ci_high_beta_fixed) == pytest.approx(
        (-beta_max - fixed.ci_high, -beta_max - fixed.ci_low), rel=1e-9
    )
    assert row["beta"].interval == "slope" and row["nu"].statistic == "max_increment / cumsum_norm"
    table = (folder / "exponents-fc-tanh.md").read_text()
    assert f"| fc-tanh | neural-ode | all | A | fro | beta | {scaling.STEP2_ESTIMATOR} |" in table
    assert f"| fc-tanh | neural-ode | all | A | fro | max_norm_exponent | {scaling.MAX_NORM_ESTIMATOR} |" in table
    # A second call skips every finished run and rewrites the same table.
    stamps = [(r / "result.json").stat().st_mtime_ns for r in fc_runs(fc_tanh_out)]
    capsys.readouterr()
    assert script.main(["--family", "fc-tanh", "--preset", "smoke", "--device", "cpu", "--out", str(fc_tanh_out)]) == 0
    assert [(r / "result.json").stat().st_mtime_ns for r in fc_runs(fc_tanh_out)] == stamps
    assert capsys.readouterr().out.strip().splitlines()[-3:] == [
        str(folder / f) for f in ("exponents-fc-tanh.csv", "exponents-fc-tanh.md", "records-fc-tanh.csv")
    ]


def test_paper_preset_is_cohen_et_al_protocol_and_smoke_run_identities_stay():
    paper = fc_configs("fc-relu", preset="paper", overrides={"depths": [4]})[0]["train"]
    assert (paper["lr"], paper["batch_size"], paper["epochs"], paper["decay"]) == (1e-3, 50, 200, "constant")
    assert paper["early_stopping"] == {"below": 1e-3, "patience": 5, "min_improvement": 0.01}
    cosine = fc_configs("fc-relu", preset="paper", overrides={"depths": [4], "schedule": "cosine"})[0]["train"]
    assert "decay" not in cosine and "early_stopping" not in cosine  # the option: cosine to 0, every epoch
    # The smoke preset stays on the cosine schedule, with the run directories it had before the option existed.
    hashes = {
        family: run_store.config_hash(fc_configs(family, preset="smoke", overrides={"depths": [4]})[0])
        for family in ("fc-tanh", "fc-relu")
    }
    assert hashes == {"fc-tanh": "583057bd", "fc-relu": "d66707d2"}


def test_constant_schedule_records_the_schedule_and_the_stopping_state(tmp_path, capsys):
    argv = [
        "--family",
        "fc-relu",
        "--preset",
        "smoke",
        "--schedule",
        "constant",
        "--depths",
        "4,8",
        "--epochs",
        "4",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
    ]
    assert script.main(argv) == 0
    printed = capsys.readouterr().out
    for run in fc_runs(tmp_path):
        result, metrics = run_store.read_result(run), run_store.read_metrics(run)
        assert result["schedule"] == "constant" and result["epochs"] == len(metrics) <= 4
        assert result["stopping"]["best"] == min(m["train_loss"] for m in metrics if m["stopping"]["bad_epochs"] == 0)
        assert result["stopping"]["stopped"] in ("converged", "no improvement", "epoch limit")
        assert {m["lr"] for m in metrics} == {1e-2}  # constant
        assert f" constant {result['epochs']:>6} {result['stopping']['stopped']}" in printed


# ----------------------------------------------------------------------------- the sweep family
def store_sweep_runs(out: Path, depths: list[int]) -> None:
    """Finished sweep runs as script 01 leaves them, with untrained weights and random BatchNorms."""
    for config in sweep_configs(
        preset="smoke", dataset="synthetic", device="cpu", synthetic={"image_size": 8}, overrides={"depths": depths}
    ):
        path = run_store.prepare_run(out, config)
        torch.manual_seed(config["depth_n"])
        model = build_resnet(config, num_classes=10)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_var.uniform_(0.2, 3.0)
                m.running_mean.normal_(0, 0.3)
                m.weight.data.uniform_(0.3, 2.0)
        run_store.save_checkpoint(path / WEIGHTS, {"model": model.state_dict()})
        run_store.write_result(path, {"depth_n": config["depth_n"], "train_loss": 2.0, "test_loss": 2.1})


SWEEP = ["--family", "sweep", "--dataset", "synthetic", "--device", "cpu"]


def test_sweep_statistics_fold_batchnorm_per_stage_without_the_downsampling_block(tmp_path):
    depths = [9, 12, 15]  # every stage keeps >= 3 blocks besides its downsampling block
    store_sweep_runs(tmp_path, depths)
    assert script.main([*SWEEP, "--out", str(tmp_path)]) == 0
    records = pd.read_csv(tmp_path / "weight_scaling" / "records-sweep-synthetic.csv")
    exponents = pd.read_csv(tmp_path / "weight_scaling" / "exponents-sweep-synthetic.csv")
    for n in depths:
        counts = blocks_per_stage(n)
        kept = [counts[0], counts[1] - 1, counts[2] - 1]  # stages 2 and 3 lose their downsampling block
        rows = records[(records.depth_n == n) & (records.tensor == "A") & (records.norm == "fro")].sort_values("stage")
        assert rows.depth.tolist() == kept and rows.input_size.tolist() == [8, 4, 2]
    # Stage 2's A statistics by hand: first conv of each non-downsampling block, times gamma / sqrt(var + eps).
    sweep_dir = next(p for p in (tmp_path / "resnet_sweep").iterdir() if "-n12-" in p.name)
    state = load_weights(sweep_dir)
    model = build_resnet(record_io.read_json(sweep_dir / run_store.CONFIG), num_classes=10)
    model.load_state_dict(state)
    stage2 = [b for b, s in zip(model.blocks, model.stage_of_block, strict=True) if s == 1][1:]
    folded = torch.stack(
        [
            b.psi[0].weight.double()
            * (b.psi[1].weight.double() / (b.psi[1].running_var.double() + b.psi[1].eps).sqrt()).view(-1, 1, 1, 1)
            for b in stage2
        ]
    ).detach()
    row = records[(records.depth_n == 12) & (records.stage == 2) & (records.tensor == "A")]
    fro, spectral = row[row.norm == "fro"].iloc[0], row[row.norm == "spectral"].iloc[0]
    assert fro.max_norm == pytest.approx(folded.flatten(1).norm(dim=1).max().item(), rel=1e-9)
    assert fro.root_sum_squares == pytest.approx(folded.norm().item(), rel=1e-9)
    assert spectral.max_norm == pytest.approx(scaling.conv_spectral_norms(folded, 4).max(), rel=1e-9)
    # Every stage and tensor is fitted over three depths; the downsampling block appears only in layers.csv.
    ok = exponents[exponents.status == "ok"]
    assert set(zip(ok.stage, ok.tensor, strict=True)) == {(s, t) for s in (1, 2, 3) for t in ("A", "delta")}
    assert (ok.n_depths == 3).all()
    analysis = next(p for p in (tmp_path / "weight_scaling").iterdir() if p.is_dir() and "-n12-" in p.name)
    layers = pd.read_csv(analysis / "layers.csv")
    assert layers[layers.downsample].groupby("tensor").stage.apply(sorted).tolist() == [[2, 3], [2, 3]]


def test_too_few_blocks_per_stage_reports_insufficient_depths_and_fits_nothing(tmp_path, capsys):
    store_sweep_runs(tmp_path, [0, 1, 2, 4])  # the smoke sweep's depths: at most 3 blocks in one stage, at N = 4
    assert script.main([*SWEEP, "--out", str(tmp_path)]) == 0
    exponents = pd.read_csv(tmp_path / "weight_scaling" / "exponents-sweep-synthetic.csv")
    assert (exponents.status == "insufficient depths").all() and exponents.estimate.isna().all()
    assert "insufficient depths" in capsys.readouterr().out


def test_sweep_family_without_runs_is_one_line_naming_script_01(tmp_path, capsys):
    assert script.main(["--family", "sweep", "--dataset", "cifar10", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "no finished sweep runs" in err[0] and "01_train_resnet_sweep.py --dataset cifar10" in err[0]
    )


def test_mini_fc_families_reach_cohen_et_als_deepest_depth_and_keep_the_committed_runs():
    # Issue 29: L = 512 and 1,024 added; the depths run before keep their configs (results/mini's run hashes).
    assert FC_PRESETS["mini"].depths == (4, 8, 16, 32, 64, 128, 256, 512, 1024)
    hashes = {
        family: run_store.config_hash(fc_configs(family, preset="mini", overrides={"depths": [256]})[0])
        for family in FC_FAMILIES
    }
    assert hashes == {"fc-tanh": "b1b8b346", "fc-relu": "184fdae7"}
