"""02_probe_ag.py end to end on a tiny synthetic sweep trained through common.experiments.shared.resnet_sweep."""

from __future__ import annotations

import copy
import importlib
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from common.data.vision import class_balanced_indices
from common.experiments.shared.resnet_sweep import (
    load_source,
    load_sweep_data,
    sweep_configs,
    train_resnet_run,
)
from common.experiments.shared.resnet_sweep_records import load_trained_resnet
from common.launch.launcher import launch
from common.report.rules.margins import PROJECTION_SLACK
from common.runs import record_io, run_store
from common.runs.run_store import make_specs
from common.science.growth import insert_zero_block
from common.science.projection import PAIR_BUFFER
from common.science.saturation import bonferroni_z, linear_variance_estimate
from tests.helpers import explicit_states_grads

script = importlib.import_module("02_probe_ag")
PROBE = ["--dataset", "synthetic", "--device", "cpu", "--batch-size", "16", "--n-batches", "2"]


@pytest.fixture(scope="module")
def sweep_out(tmp_path_factory) -> Path:
    """Two trained depths (N = 0, 1) of a 16x16 synthetic sweep, one epoch each."""
    out = tmp_path_factory.mktemp("sweep")
    configs = sweep_configs(
        preset="smoke",
        dataset="synthetic",
        device="cpu",
        synthetic={"num_train": 128, "num_test": 64, "image_size": 16},
        overrides={"depths": [0, 1], "epochs": 1},
    )
    launch(train_resnet_run, make_specs(configs, out))
    return out


def probe_runs(out: Path) -> list[Path]:
    return sorted(p for p in (out / "ag_probe").iterdir() if p.is_dir())


def test_probe_writes_records_and_summary_then_skips_finished_runs(sweep_out, capsys):
    assert script.main([*PROBE, "--exact", "--out", str(sweep_out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    header = lines[0].split()
    assert header[:9] == ["N", "model", "seed", "AGmax", "argmax", "<5e-03", "AGmax/ex", "argmax", "<5e-03"]
    assert header[-10:] == [
        "max||C_l||",
        "Gamma",
        "interval",
        "t",
        "asymptotic",
        "interval",
        "cands",
        "App.",
        "G",
        "verdict",
    ] and "ResNet-9" in "\n".join(lines)
    summary = Path(lines[-1])  # the last line is the summary CSV's path
    table = pd.read_csv(summary)
    required = [
        "depth_n",
        "depth_label",
        "ag_max",
        "ag_max_candidate",
        "ag_max_per_example",
        "ag_max_per_example_candidate",
        "ag_max_blocks",
        "ag_max_blocks_candidate",
        "batch_size",
        "n_batches",
        "split",
        "v_max",
        "saturation_verdict",
        "saturation_gamma_hat",
        "saturation_lower",
        "saturation_upper",
        "saturation_delta",
        "saturation_t",
        "saturation_n_candidates",
        "saturation_n_cal",
        "saturation_n_test",
        "saturation_split_seed",
        "saturation_sources",
        "saturation_n_test_to_exclude_zero",
        "saturation_asymptotic_lower",
        "saturation_asymptotic_upper",
        "saturation_asymptotic_verdict",
        "saturation_asymptotic_n_test_to_exclude_zero",
    ]
    assert set(required) <= set(table.columns)
    for line, row in zip(lines[2:4], table.itertuples(), strict=True):  # the printed rows show both readings
        assert f" {row.ag_max:.3e} {row.ag_max_candidate} " in line
        assert f" {row.ag_max_per_example:.3e} {row.ag_max_per_example_candidate} " in line
        assert (
            f" {row.saturation_gamma_hat:.3e} [{row.saturation_lower:.3e}, {row.saturation_upper:.3e}] {row.saturation_t:.3e} "
            f"[{row.saturation_asymptotic_lower:.3e}, {row.saturation_asymptotic_upper:.3e}] " in line
        )
        assert line.endswith(f" {row.saturation_n_candidates} {row.saturation_verdict}")
    assert table["depth_n"].tolist() == [0, 1] and table["depth_label"].tolist() == [8, 9]
    assert (table["batch_size"] == 16).all() and (table["n_batches"] == 2).all() and (table["split"] == "train").all()
    assert (
        table["v_max"] <= table["ag_max"] * (1 + PROJECTION_SLACK)
    ).all()  # V_S,l <= AG_l, per batch (AG_l is float32: the report's slack)

    found = probe_runs(sweep_out)
    assert len(found) == 2
    for run, n in zip(found, [0, 1], strict=True):
        candidates = pd.read_csv(run / "candidates.csv")
        assert len(candidates) == 4 + n  # 4 + N candidates
        row = table.loc[table.depth_n == n].iloc[0]
        assert candidates["ag_norm"].max() == pytest.approx(row["ag_max"])
        assert candidates["per_example_rms"].max() == pytest.approx(row["ag_max_per_example"])
        assert candidates.loc[candidates.block_input, "ag_norm"].max() == pytest.approx(row["ag_max_blocks"])
        assert candidates["block_input"].tolist() == [True] * (3 + n) + [False]  # the head's input is last
        assert ((candidates["growth_fraction_pooled"] >= 0) & (candidates["growth_fraction_pooled"] <= 1 + 1e-9)).all()
        assert (candidates[["batch_size", "n_batches"]].values == [16, 2]).all()
        ratio = candidates["ag_norm_normalised"] * candidates["width"].map(math.sqrt) / candidates["ag_norm"]
        assert ratio.to_numpy() == pytest.approx(1.0)
        sat = run_store.read_result(run)["saturation"]
        # No training subset: the held-out images are the test split's, all of them.
        assert (sat["split"], sat["reused_training_data"], sat["delta"]) == ("held-out", False, None)
        assert sat["sources"] == {"train_unused": 0, "test": 64}
        assert sat["statistic"] == record_io.read_json(run / "config.json")["saturation"]["statistic"]
        # Every test example, split with the recorded seed: 16 calibrate the traces, 48 give C_l.
        assert (sat["n_cal"], sat["n_test"], sat["n_candidates"], sat["statistic_source"]) == (
            16,
            48,
            4 + n,
            "calibration split",
        )
        samples = record_io.read_json(run / "samples.json")
        cal, test = (samples[k]["indices"] for k in ("calibration", "test"))
        assert sorted(cal + test) == sorted(samples["saturation"]["indices"]) and not set(cal) & set(test)
        assert samples["saturation"]["n"] == 64 and sat["split_seed"] is not None
        # The interval and verdict, from C_l and c_i(l) recomputed by hand on the recorded parts:
        # C_l on the test part, the traces on the calibration part, and t from n_test (not the whole n = 64).
        test_each, cal_each = independent_contributions(run, "test"), independent_contributions(run, "calibration")
        norms, _ = norms_and_traces(test_each)
        _, cal_traces = norms_and_traces(cal_each)
        assert list(sat["values"].values()) == pytest.approx(norms, rel=1e-4)
        assert list(sat["covariance_traces"].values()) == pytest.approx(cal_traces, rel=1e-4)
        t = math.sqrt(sum(cal_traces) / (48 * 0.05))
        assert sat["t"] == pytest.approx(t, rel=1e-4) and sat["alpha"] == 0.05 and sat["alpha_source"] == "given"
        assert sat["gamma_hat"] == pytest.approx(max(norms), rel=1e-4)
        assert (sat["lower"], sat["upper"]) == pytest.approx((max(0.0, max(norms) - t), max(norms) + t), rel=1e-4)
        assert sat["verdict"] == ("not saturated" if max(norms) - t > 0 else "undecided")  # no delta: never "saturated"
        # The asymptotic interval beside it, from U_l, tr(Sigma_l^2) and v1_l recomputed by hand.
        asym, hand = sat["asymptotic"], independent_asymptotic(test_each, cal_each)
        assert asym["label"].startswith("asymptotic") and (asym["n"], asym["dof"]) == (48, 15)
        assert asym["z"] == pytest.approx(bonferroni_z(0.05, 4 + n, dof=15), rel=1e-12)
        assert list(asym["norm_sq"].values()) == pytest.approx(
            hand["norm_sq"], rel=1e-3, abs=1e-4 * max(cal_traces) / 48
        )
        assert list(asym["cov_sq_trace"].values()) == pytest.approx(hand["cov_sq_trace"], rel=1e-3)
        v1 = linear_variance_estimate(hand["direction_variance"], hand["cov_sq_trace"], 48)
        assert list(asym["linear_variance"].values()) == pytest.approx(
            list(v1), rel=1e-3, abs=1e-3 * max(hand["direction_variance"])
        )
        assert asym["n_test_to_exclude_zero"] is None or asym["n_test_to_exclude_zero"] >= 2
        assert sat["n_test_to_exclude_delta"] is None and sat["n_test_to_exclude_delta_side"] is None  # no delta

    stamps = [(r / "result.json").stat().st_mtime_ns for r in found]
    assert script.main([*PROBE, "--exact", "--out", str(sweep_out)]) == 0  # everything finished: skipped
    assert [(r / "result.json").stat().st_mtime_ns for r in found] == stamps
    assert Path(capsys.readouterr().out.strip().splitlines()[-1]) == summary


def test_saturation_sample_is_disjoint_from_test_analysis_batches_and_flags_training_reuse(sweep_out):
    assert script.main([*PROBE, "--no-exact", "--split", "test", "--out", str(sweep_out)]) == 0
    run = next(r for r in probe_runs(sweep_out) if "-test-" in r.name and "n1" in r.name)
    result = run_store.read_result(run)
    assert "v_max" not in result and result["split"] == "test"
    # 64 test images: 32 for the analysis batches, the other 32 for the App. G sample.
    samples = record_io.read_json(run / "samples.json")
    # The held-out pool is the test split here (no training subset), less the analysis batches' 32.
    assert (result["saturation"]["split"], samples["saturation"]["n"]) == ("held-out", 32)
    assert result["saturation"]["sources"] == {"train_unused": 0, "test": 32}
    assert (result["saturation"]["n_cal"], result["saturation"]["n_test"]) == (8, 24)
    analysis, held_out = set(samples["analysis"]["indices"]), set(samples["saturation"]["indices"])
    assert len(analysis) == len(held_out) == 32 and not analysis & held_out
    assert (
        result["saturation"]["disjoint_from_analysis_batches"]
        and result["saturation"]["shared_examples_with_analysis"] == 0
    )
    # The recorded indices are the examples probed: AG_l recomputed on them matches the result.
    assert [c["ag_norm"] for c in result["candidates"]] == pytest.approx(independent_ag(run, "analysis"), rel=1e-5)
    assert (
        script.main([*PROBE, "--no-exact", "--saturation-split", "train", "--seeds", "0", "--out", str(sweep_out)]) == 0
    )
    reused = [
        run_store.read_result(r)["saturation"]
        for r in probe_runs(sweep_out)
        if record_io.read_json(r / "config.json")["saturation"]["split"] == "train"
    ]
    assert len(reused) == 2 and all(s["reused_training_data"] for s in reused)


def test_held_out_sample_is_every_image_the_training_subset_left_out_and_the_test_split(tmp_path):
    # A sweep trained on a class-balanced subset of 40 of 128 images: App. G's default sample is the other 88
    # training images and the 48 test images, recorded by source; the analysis batches (32 of the 40) stay apart.
    rng = np.random.default_rng(0)
    labels = {k: np.repeat(np.arange(4), n // 4) for k, n in (("y_train", 128), ("y_test", 48))}
    images = {f"x{k[1:]}": rng.integers(0, 256, (len(y), 16, 16, 3), dtype=np.uint8) for k, y in labels.items()}
    np.savez(tmp_path / "tiny.npz", **images, **labels)
    configs = sweep_configs(
        preset="smoke",
        dataset="npz",
        data_root=str(tmp_path / "tiny.npz"),
        device="cpu",
        overrides={"depths": [0], "epochs": 1, "batch_size": 20},
    )
    configs[0]["data"]["train_subset"] = {"k": 40, "seed": 0}  # as --train-subset 40 stores it
    launch(train_resnet_run, make_specs(configs, tmp_path))
    assert script.main([*PROBE[2:], "--dataset", "npz", "--no-exact", "--out", str(tmp_path)]) == 0
    [run] = probe_runs(tmp_path)
    sat, samples = run_store.read_result(run)["saturation"], record_io.read_json(run / "samples.json")
    sweep_config = record_io.read_json(
        Path(record_io.read_json(run / "config.json")["runtime"]["sweep_dir"]) / "config.json"
    )
    subset = sweep_config["data"]["train_subset"]
    trained = set(class_balanced_indices(load_source(sweep_config).y_train, subset["k"], subset["seed"]).tolist())
    assert samples["held_out_pool"] == {"train_unused": sorted(set(range(128)) - trained), "test": 48}
    assert (sat["split"], sat["sources"], sat["n_cal"] + sat["n_test"]) == (
        "held-out",
        {"train_unused": 88, "test": 48},
        136,
    )
    for part in ("calibration", "test"):
        assert sat[f"{part}_sources"] == samples[part]["counts"] and sum(samples[part]["counts"].values()) == len(
            samples[part]["indices"]
        )
    assert sat["test_sources"]["train_unused"] > 0 and sat["test_sources"]["test"] > 0  # both sources in the test part
    assert sat["shared_examples_with_analysis"] == 0 and sat["disjoint_from_analysis_batches"]
    # The recorded positions are the images probed: C_l by hand on the recorded test part equals the record.
    norms, _ = independent_app_g(run, "test")
    assert list(sat["values"].values()) == pytest.approx(norms, rel=1e-4)


def test_given_t_uses_the_whole_sample_and_reports_the_implied_alpha(sweep_out, capsys):
    t = 1e-3
    assert (
        script.main(
            [*PROBE, "--no-exact", "--saturation-t", str(t), "--saturation-delta", "0.5", "--out", str(sweep_out)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "t given, no split" in out
    for run in probe_runs(sweep_out):
        if (record_io.read_json(run / "config.json")["saturation"] or {}).get("t") != t:
            continue
        sat = run_store.read_result(run)["saturation"]
        assert (sat["n_cal"], sat["n_test"], sat["split_seed"], sat["statistic_source"]) == (
            0,
            64,
            None,
            "given t, whole sample",
        )
        assert "calibration" not in record_io.read_json(run / "samples.json")
        norms, traces = independent_app_g(run, "saturation")
        assert sat["alpha_source"] == "implied by t" and sat["alpha"] == pytest.approx(
            sum(traces) / (64 * t * t), rel=1e-4
        )
        assert sat["gamma_hat"] == pytest.approx(max(norms), rel=1e-4) and sat["t"] == t and sat["delta"] == 0.5
        assert sat["verdict"] == (
            "saturated within delta"
            if max(norms) + t <= 0.5
            else "not saturated"
            if max(norms) - t > 0.5
            else "undecided"
        )


def test_train_mode_batchnorm_gives_no_interval_and_no_verdict(sweep_out):
    assert script.main([*PROBE, "--no-exact", "--bn-mode", "train", "--seeds", "0", "--out", str(sweep_out)]) == 0
    found = [r for r in probe_runs(sweep_out) if record_io.read_json(r / "config.json")["bn_mode"] == "train"]
    assert len(found) == 2
    for run in found:
        sat = run_store.read_result(run)["saturation"]
        assert (sat["verdict"], sat["lower"], sat["upper"], sat["examples_independent"]) == (
            "no verdict",
            None,
            None,
            False,
        )


def independent_ag(run: Path, sample: str) -> list[float]:
    """``AG_l`` per candidate on a recorded sample, by hand: the model run block by block with
    ``retain_grad`` (no probe code), batch by batch as recorded, averaged over the batches."""
    used = record_io.read_json(run / "samples.json")[sample]
    sweep_dir = Path(record_io.read_json(run / "config.json")["runtime"]["sweep_dir"])
    data = load_sweep_data(record_io.read_json(sweep_dir / "config.json"))
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


def independent_app_g(run: Path, part: str) -> tuple[list[float], list[float]]:
    """``||C_l||`` and ``tr(Sigma_hat_l)`` per candidate on one recorded part of the App. G sample, by hand in
    float64 (:func:`independent_contributions`)."""
    return norms_and_traces(independent_contributions(run, part))


def norms_and_traces(contributions: list[torch.Tensor]) -> tuple[list[float], list[float]]:
    """``||C_l||`` and ``tr(Sigma_hat_l)`` per candidate from per-example contributions."""
    norms, traces = [], []
    for each in contributions:
        pooled = each.mean(0)
        norms.append(float(pooled.norm()))
        traces.append(float((each - pooled).square().sum()) / (len(each) - 1))
    return norms, traces


def recorded_images(run: Path, part: str) -> tuple[torch.Tensor, torch.Tensor, tuple]:
    """The images and labels of a recorded sample part in their recorded order, and the data's normalisation.

    A held-out part indexes the pool recorded in samples.json: the unused training images (indices into the whole
    training split), then the test split."""
    samples = record_io.read_json(run / "samples.json")
    used = samples[part]
    sweep_dir = Path(record_io.read_json(run / "config.json")["runtime"]["sweep_dir"])
    sweep_config = record_io.read_json(sweep_dir / "config.json")
    data = load_sweep_data(sweep_config)
    if used["split"] == "held-out":
        whole = load_source(sweep_config)
        unused = torch.tensor(samples["held_out_pool"]["train_unused"], dtype=torch.long)
        images = torch.cat([whole.x_train[unused], data.x_test])
        labels = torch.cat([whole.y_train[unused], data.y_test])
    else:
        images, labels = (data.x_train, data.y_train) if used["split"] == "train" else (data.x_test, data.y_test)
    idx = torch.tensor(used["indices"])
    return images[idx], labels[idx], (data.mean, data.std)


def independent_contributions(run: Path, part: str) -> list[torch.Tensor]:
    """Per candidate the per-example ``c_i(l)`` of one recorded part, by hand in float64: the protocol's zero block
    really inserted at ``l``, ``c_i(l)`` = autograd of example ``i``'s loss alone w.r.t. ``V_l``, vectorised over
    the examples with ``torch.func.vmap`` (no probe code); their mean is checked against the autograd of the
    mean loss."""
    config = record_io.read_json(run / "config.json")
    model = load_trained_resnet(Path(config["runtime"]["sweep_dir"])).double()
    images, y, (mean, std) = recorded_images(run, part)
    mean, std = torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)
    x = ((images.float() / 255 - mean) / std).double()
    out = []
    for index in range(len(model.candidates())):
        grown = copy.deepcopy(model)
        v = insert_zero_block(grown, index, seed=config["probe_seed"]).terminal.weight  # V_l
        pooled = torch.autograd.grad(F.cross_entropy(grown(x), y), v)[0].detach()
        name = f"blocks.{index}.terminal.weight"

        def example_loss(w, xi, yi, grown=grown, name=name):
            return F.cross_entropy(functional_call(grown, {name: w}, (xi[None],)), yi[None])

        each = vmap(grad(example_loss), in_dims=(None, 0, 0))(v.detach(), x, y).detach()
        assert torch.allclose(each.mean(0), pooled, rtol=1e-9, atol=1e-14)  # C_l = mean_i c_i(l)
        out.append(each)
    return out


def independent_asymptotic(test: list[torch.Tensor], cal: list[torch.Tensor]) -> dict[str, list[float]]:
    """App. G's asymptotic interval's ingredients by hand: per candidate ``U_l`` and the pair estimate of
    ``tr(Sigma_l^2)`` on the test part (consecutive examples paired in the recorded order, every pair of their
    differences within blocks of PAIR_BUFFER), and ``v1_l``: the calibration part's variance along the test part's
    ``C_hat_l`` less ``tr(Sigma^2) / n_test``."""
    found = {"norm_sq": [], "cov_sq_trace": [], "direction_variance": []}
    for t_each, c_each in zip(test, cal, strict=True):
        n, flat = len(t_each), t_each.reshape(len(t_each), -1)
        pooled = flat.mean(0)
        found["norm_sq"].append(float(pooled @ pooled) - float((flat - pooled).square().sum()) / (n - 1) / n)
        diffs = flat[0 : n - n % 2 : 2] - flat[1 : n - n % 2 : 2]
        total, count = 0.0, 0
        for block in diffs.split(PAIR_BUFFER):
            products = [float(block[a] @ block[b]) ** 2 for a in range(len(block)) for b in range(len(block)) if a != b]
            total, count = total + sum(products), count + len(products)
        found["cov_sq_trace"].append(total / (4 * count))
        found["direction_variance"].append(float((c_each.reshape(len(c_each), -1) @ pooled).var()))
    return found


def test_saturation_depths_deepest_runs_app_g_on_the_deepest_depth_only(sweep_out, capsys):
    """``--saturation-depths deepest``: N = 1 (the deepest) keeps App. G's record; N = 0 has none, no App. G sample in
    samples.json, a '-' row in the table, and the same AG_l as the run with App. G everywhere (same analysis batches)."""
    tag = ["--no-exact", "--n-batches", "1", "--seeds", "0", "--out", str(sweep_out)]
    assert script.main([*PROBE, *tag, "--saturation-depths", "all"]) == 0
    capsys.readouterr()
    assert script.main([*PROBE, *tag, "--saturation-depths", "deepest"]) == 0
    table = capsys.readouterr().out
    assert "not run (deepest depth only)" in table
    found = {}
    for run in probe_runs(sweep_out):
        config = record_io.read_json(run / "config.json")
        if config["n_batches"] == 1 and not config["exact"] and config["bn_mode"] == "eval":
            found[(config["depth_n"], config["saturation"] is None)] = run
    assert set(found) == {(0, False), (1, False), (0, True)}  # N = 1's deepest-only run is the all-depths one
    bare = found[(0, True)]
    assert run_store.read_result(bare)["saturation"] is None
    assert set(record_io.read_json(bare / "samples.json")) == {"analysis"}
    assert run_store.read_result(found[(1, False)])["saturation"]["verdict"] in ("not saturated", "undecided")
    with_app_g = run_store.read_result(found[(0, False)])
    assert run_store.read_result(bare)["ag_max"] == with_app_g["ag_max"]  # App. G does not touch the analysis batches
    summary = pd.read_csv(sweep_out / "ag_probe" / "summary-synthetic-train-b16x1.csv")
    assert len(summary) == 3 and summary["saturation_verdict"].isna().sum() == 1  # every matching run is listed


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
