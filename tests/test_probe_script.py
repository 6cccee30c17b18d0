"""02_probe_ag.py end to end on a tiny synthetic sweep trained through common.experiments.train_resnet_sweep."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from common import runs
from common.experiments.train_resnet_sweep import load_sweep_data, load_trained_resnet, sweep_configs, train_resnet_run
from common.launch import launch
from common.runs import make_specs
from tests.helpers import explicit_states_grads

script = importlib.import_module("02_probe_ag")
PROBE = ["--dataset", "synthetic", "--device", "cpu", "--batch-size", "16", "--n-batches", "2"]


@pytest.fixture(scope="module")
def sweep_out(tmp_path_factory) -> Path:
    """Two trained depths (N = 0, 1) of a 16x16 synthetic sweep, one epoch each."""
    out = tmp_path_factory.mktemp("sweep")
    configs = sweep_configs(
        preset="smoke", dataset="synthetic", depths=[0, 1], epochs=1, device="cpu",
        synthetic={"num_train": 128, "num_test": 64, "image_size": 16},
    )  # fmt: skip
    launch(train_resnet_run, make_specs(configs, out))
    return out


def probe_runs(out: Path) -> list[Path]:
    return sorted(p for p in (out / "ag_probe").iterdir() if p.is_dir())


def test_probe_writes_records_and_summary_then_skips_finished_runs(sweep_out, capsys):
    assert script.main([*PROBE, "--exact", "--out", str(sweep_out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "AGmax" in lines[0] and "<5e-03" in lines[0] and "ResNet-9" in "\n".join(lines)
    summary = Path(lines[-1])  # the last line is the summary CSV's path
    table = pd.read_csv(summary)
    required = ["depth_n", "depth_label", "ag_max", "ag_max_candidate", "batch_size", "n_batches", "split", "v_max"]
    assert set(required) <= set(table.columns)
    assert table["depth_n"].tolist() == [0, 1] and table["depth_label"].tolist() == [8, 9]
    assert (table["batch_size"] == 16).all() and (table["n_batches"] == 2).all() and (table["split"] == "train").all()
    assert (table["v_max"] <= table["ag_max"] * (1 + 1e-9)).all()  # V_S,l <= AG_l, per batch

    found = probe_runs(sweep_out)
    assert len(found) == 2
    for run, n in zip(found, [0, 1], strict=True):
        candidates = pd.read_csv(run / "candidates.csv")
        assert len(candidates) == 4 + n  # 4 + N candidates
        assert candidates["ag_norm"].max() == pytest.approx(table.loc[table.depth_n == n, "ag_max"].item())
        assert ((candidates["growth_fraction_pooled"] >= 0) & (candidates["growth_fraction_pooled"] <= 1 + 1e-9)).all()
        assert (candidates[["batch_size", "n_batches"]].values == [16, 2]).all()
        ratio = candidates["ag_norm_normalised"] * candidates["width"].map(math.sqrt) / candidates["ag_norm"]
        assert ratio.to_numpy() == pytest.approx(1.0)
        sat = runs.read_result(run)["saturation"]
        assert (sat["split"], sat["n"], sat["reused_training_data"], sat["delta"]) == ("test", 32, False, 5e-3)
        # The decision, from the App. G statistic recomputed by hand on the recorded sample.
        statistic = max(independent_ag(run, "saturation"))
        assert sat["max_value"] == pytest.approx(statistic, rel=1e-5)
        assert sat["saturated"] == (statistic < 5e-3 + 0.0)

    stamps = [(r / "result.json").stat().st_mtime_ns for r in found]
    assert script.main([*PROBE, "--exact", "--out", str(sweep_out)]) == 0  # everything finished: skipped
    assert [(r / "result.json").stat().st_mtime_ns for r in found] == stamps
    assert Path(capsys.readouterr().out.strip().splitlines()[-1]) == summary


def test_saturation_sample_is_disjoint_from_test_analysis_batches_and_flags_training_reuse(sweep_out):
    assert script.main([*PROBE, "--no-exact", "--split", "test", "--out", str(sweep_out)]) == 0
    run = next(r for r in probe_runs(sweep_out) if "-test-" in r.name and "n1" in r.name)
    result = runs.read_result(run)
    assert "v_max" not in result and result["split"] == "test"
    # 64 test images: 32 for the analysis batches, the other 32 for the App. G sample.
    assert (result["saturation"]["split"], result["saturation"]["n"]) == ("test", 32)
    samples = runs.read_json(run / "samples.json")
    analysis, held_out = set(samples["analysis"]["indices"]), set(samples["saturation"]["indices"])
    assert len(analysis) == len(held_out) == 32 and not analysis & held_out
    assert result["saturation"]["disjoint_from_analysis_batches"] and result["saturation"]["shared_examples_with_analysis"] == 0
    # The recorded indices are the examples probed: AG_l recomputed on them matches the result.
    assert [c["ag_norm"] for c in result["candidates"]] == pytest.approx(independent_ag(run, "analysis"), rel=1e-5)
    assert script.main([*PROBE, "--no-exact", "--saturation-split", "train", "--seeds", "0", "--out", str(sweep_out)]) == 0
    reused = [runs.read_result(r)["saturation"] for r in probe_runs(sweep_out) if runs.read_json(r / "config.json")["saturation"]["split"] == "train"]
    assert len(reused) == 2 and all(s["reused_training_data"] for s in reused)


def independent_ag(run: Path, sample: str) -> list[float]:
    """``AG_l`` per candidate on a recorded sample, by hand: the model run block by block with
    ``retain_grad`` (no probe code), batch by batch as recorded, averaged over the batches."""
    used = runs.read_json(run / "samples.json")[sample]
    sweep_dir = Path(runs.read_json(run / "config.json")["runtime"]["sweep_dir"])
    data = load_sweep_data(runs.read_json(sweep_dir / "config.json"))
    model = load_trained_resnet(sweep_dir)
    images, labels = (data.x_train, data.y_train) if used["split"] == "train" else (data.x_test, data.y_test)
    mean, std = torch.tensor(data.mean).view(1, -1, 1, 1), torch.tensor(data.std).view(1, -1, 1, 1)
    idx = torch.tensor(used["indices"])
    sums = None
    for batch in idx.split(used["batch_size"]):
        x = (images[batch].float() / 255 - mean) / std
        _, grads = explicit_states_grads(model, x, labels[batch])
        norms = [float(g.norm()) for g in grads]
        sums = norms if sums is None else [a + b for a, b in zip(sums, norms, strict=True)]
    return [v / used["n_batches"] for v in sums]


def test_dry_run_plans_without_probing(sweep_out, capsys):
    assert script.main([*PROBE, "--split", "test", "--batch-size", "8", "--dry-run", "--out", str(sweep_out)]) == 0
    out = capsys.readouterr().out
    assert "2 planned runs" in out and "test-b8x2" in out
    assert not any("b8x2" in p.name for p in probe_runs(sweep_out))


def test_no_trained_runs_is_one_line_naming_the_command(tmp_path, capsys):
    assert script.main(["--dataset", "cifar100", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no finished sweep runs" in err[0]
    assert "python 01_train_resnet_sweep.py --dataset cifar100 --out" in err[0]
