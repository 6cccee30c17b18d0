"""``benchmarks/bench_depth_regime.py`` at a toy size (issue 57, item 3): ResNet-8 against a deeper ResNet at equal
training FLOPs, each on its own schedule, through script 01's job function; resumable; one-line refusals."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import torch

from common.experiments.shared.resnet_sweep import sweep_run_cost
from common.runs import run_store
from tests.helpers.script_checks import one_error_line

bench = importlib.import_module("benchmarks.bench_depth_regime")
TOY = ["--dataset", "synthetic", "--images", "64", "--deep-n", "1", "--deep-epochs", "3", "--threads", "1"]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    out = tmp_path_factory.mktemp("regime")
    threads = torch.get_num_threads()
    assert bench.main([*TOY, "--out", str(out)]) == 0
    # --threads 1 held only for the call: a later test in this process (one comparing bits with a SLURM job) would
    # otherwise train on one thread
    assert torch.get_num_threads() == threads
    (summary,) = out.glob("depth_regime-*.json")
    return out, json.loads(summary.read_text())


def test_the_shallow_run_spends_the_deeper_runs_flops_to_a_whole_epoch(toy):
    out, summary = toy
    deep, shallow = bench.regime_configs(bench.parse_args([*TOY, "--out", str(out)]))
    assert (deep["depth_n"], deep["train"]["epochs"]) == (1, 3)
    assert shallow["depth_n"] == 0 and shallow["train"]["epochs"] == summary["shallow"]["epochs"]
    per_epoch = sweep_run_cost(shallow) / shallow["train"]["epochs"]
    # the nearest whole epoch: one epoch less or more would be further from the deeper run's FLOPs
    gap = abs(sweep_run_cost(shallow) - sweep_run_cost(deep))
    assert gap <= per_epoch / 2
    assert summary["flops_ratio_shallow_over_deep"] == pytest.approx(sweep_run_cost(shallow) / sweep_run_cost(deep))
    assert summary["deep"]["epochs"] == 3 and summary["shallow"]["epochs"] > 3  # ResNet-8 is cheaper per epoch


def test_images_all_trains_on_every_image_of_the_file_and_a_count_on_that_many(tmp_path):
    rng = np.random.default_rng(0)
    labels = {k: np.repeat(np.arange(10), n // 10) for k, n in (("y_train", 200), ("y_test", 50))}
    images = {f"x{k[1:]}": rng.integers(0, 256, (len(y), 32, 32, 3), dtype=np.uint8) for k, y in labels.items()}
    np.savez(tmp_path / "tiny.npz", **images, **labels)
    base = ["--data-root", str(tmp_path / "tiny.npz"), "--deep-n", "1", "--out", str(tmp_path / "out")]
    every = bench.regime_configs(bench.parse_args([*base, "--images", "all"]))
    counted = bench.regime_configs(bench.parse_args([*base, "--images", "100"]))
    assert all("train_subset" not in run["data"] for run in every)  # not the mini preset's 1,000
    assert all(run["data"]["train_subset"]["k"] == 100 for run in counted)


def test_the_ratio_is_read_from_the_two_runs_own_results(toy):
    out, summary = toy
    folders = sorted((out / "resnet_sweep").iterdir())
    results = {run_store.read_result(f)["depth_n"]: run_store.read_result(f) for f in folders}
    assert set(results) == {0, 1}
    for side, n in (("shallow", 0), ("deep", 1)):
        for key in ("train_loss", "test_loss", "test_acc", "epochs"):
            assert summary[side][key] == results[n][key]
    ratio = results[0]["train_loss"] / results[1]["train_loss"]
    assert summary["train_loss_ratio_shallow_over_deep"] == pytest.approx(ratio, rel=1e-12)
    assert summary["depth_pays"] == (ratio > 1)


def test_a_second_call_reads_the_finished_runs_back(toy, capsys):
    out, summary = toy
    metrics = {f.name: (f / "metrics.jsonl").read_bytes() for f in (out / "resnet_sweep").iterdir()}
    assert bench.main([*TOY, "--out", str(out)]) == 0
    assert {f.name: (f / "metrics.jsonl").read_bytes() for f in (out / "resnet_sweep").iterdir()} == metrics
    (again,) = out.glob("depth_regime-*.json")
    assert (
        json.loads(again.read_text())["train_loss_ratio_shallow_over_deep"]
        == (summary["train_loss_ratio_shallow_over_deep"])
    )


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--dataset", "npz"], "--data-root"),
        (["--dataset", "synthetic", "--data-root", "x.npz"], "--data-root"),
        (["--images", "5"], "--images"),
        (["--deep-n", "0", "--dataset", "synthetic"], "--deep-n"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(argv, flag, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([*argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith("bench_depth_regime.py: error:") and flag in line
    assert not (tmp_path / "out").exists()
