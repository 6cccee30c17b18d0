"""06_matched_insertion.py end to end on a tiny synthetic sweep trained through the sweep's own job."""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd
import pytest

from common.experiments.shared.resnet_sweep import sweep_configs, train_resnet_run
from common.launch.launcher import launch
from common.runs import run_store
from common.runs.run_store import make_specs

script = importlib.import_module("06_matched_insertion")
ARGS = ["--dataset", "synthetic", "--device", "cpu", "--depths", "0,1"]


@pytest.fixture(scope="module")
def sweep_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    configs = sweep_configs(
        preset="smoke",
        dataset="synthetic",
        device="cpu",
        synthetic={"num_train": 96, "num_test": 32, "image_size": 16},
        overrides={"depths": [0, 1], "epochs": 1},
    )
    launch(train_resnet_run, make_specs(configs, out))
    return out


def test_matched_insertion_table_has_every_candidate_and_alpha_with_the_paper_beside_it(sweep_out, capsys):
    assert (
        script.main([*ARGS, "--candidate", "all", "--alpha", "1e-3", "--alpha", "1e-4", "--out", str(sweep_out)]) == 0
    )
    out = capsys.readouterr().out.strip().splitlines()
    summary = Path(out[-1])
    assert summary.suffix == ".md" and summary.is_file() and "| ResNet-8 |" in summary.read_text()
    table = pd.read_csv(summary.with_suffix(".csv"))
    assert len(table) == (4 + 5) * 2  # ResNet-8 and -9 have 4 and 5 candidates, two alphas each
    assert (table["predicted_change"] < 0).all() and (table["measured_change"] < 0).all()
    small = table[table["alpha"] == 1e-4]
    # First order at small alpha; the float32 forward pass blurs changes of ~1e-7 by a few per cent
    # (the float64 tests in test_matched_insertion.py check the ratio to 1e-4).
    assert ((small["ratio"] - 1).abs() < 0.2).all()
    paper = table[(table["depth_label"] == 8) & (table["alpha"] == 1e-3)]["paper_change"]
    assert (paper == -7e-4).all() and table[table["depth_label"] == 9]["paper_change"].isna().all()
    ratio = table["measured_change"] / table["predicted_change"]
    assert ratio.to_numpy() == pytest.approx(table["ratio"].to_numpy())
    run_dirs = sorted(p for p in (sweep_out / "matched_insertion").iterdir() if p.is_dir())
    assert len(run_dirs) == 2 and all((d / "rows.csv").is_file() and run_store.is_done(d) for d in run_dirs)


def test_default_candidate_is_the_end_of_stage_1_at_every_depth_and_the_summary_keeps_every_finished_run(sweep_out):
    assert script.main([*ARGS, "--out", str(sweep_out)]) == 0
    found = run_store.collect(str(sweep_out / "matched_insertion" / "*"))
    chosen = found[found["candidate_rule"] == "stage1-end"].set_index("depth_n")["candidates"].to_dict()
    # ResNet-8 has one stage-1 block, ResNet-9 two (the first extra block goes to stage 1): the input of stage 2.
    assert chosen == {0: [1], 1: [2]}
    table = pd.read_csv(sweep_out / "matched_insertion" / "summary-synthetic.csv")
    # The other readings of H.1's scale are predicted beside ours: no projection is the largest, pooled the smallest.
    assert (table["predicted_change_exact_targets"] <= table["predicted_change"]).all()
    assert (table["predicted_change"] <= table["predicted_change_pooled_targets"]).all()
    assert len(table) == sum(len(rows) for rows in found["rows"])  # earlier calls' runs (--candidate all) stay listed


def test_missing_sweep_run_is_one_line_naming_the_training_command(sweep_out, capsys):
    assert script.main([*ARGS[:4], "--depths", "0,6", "--out", str(sweep_out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "N = 6" in err[0]
    assert "python 01_train_resnet_sweep.py --dataset synthetic --depths 6" in err[0]
