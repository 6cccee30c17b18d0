"""11_probe_network.py end to end, in this process: the smoke preset (a small torchvision ResNet on synthetic images),
a model from pkg.module:function with a state_dict and an .npz, and a bad input refused in one line."""

from __future__ import annotations

import importlib
import json

import numpy as np
import torch

from common.models.places.torchvision_resnet import small_resnet
from common.runs import run_store
from tests.helpers.script_checks import one_error_line

main = importlib.import_module("11_probe_network").main


def test_the_smoke_preset_prints_the_ranking_app_g_and_the_best_place_and_writes_its_records(tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(["--preset", "smoke", "--device", "cpu", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "avgpool.in" in printed and "layer1.0.in" in printed and "rows vs features" in printed
    assert "Theorem 3: Gamma in [" in printed and "asymptotic (normal, Bonferroni" in printed
    assert "a block would help most at " in printed and "normalisation: AG_l per batch mean" in printed
    [run] = run_store.run_dirs(out / "probe_network")
    assert {"places.csv", "places.png", "places.pdf", "config.json", "result.json"} <= {p.name for p in run.iterdir()}
    result = json.loads((run / "result.json").read_text())
    assert len(result["places"]) == 5 and result["app_g"]["theorem3"]["verdict"]
    assert all(r["growth_value_pooled"] <= r["ag_norm_pooled"] * (1 + 1e-6) for r in result["places"])
    assert main(["--preset", "smoke", "--device", "cpu", "--out", str(out)]) == 0  # finished: skipped, reported again
    assert capsys.readouterr().out.splitlines()[0] == printed.splitlines()[0]


def test_a_model_from_a_function_with_its_state_dict_on_an_npz(tmp_path, capsys):
    torch.manual_seed(3)
    torch.save(small_resnet().state_dict(), tmp_path / "net.pt")
    g = np.random.default_rng(0)
    images = {k: g.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8) for k, n in (("x_train", 8), ("x_test", 8))}
    labels = {"y_train": np.arange(8) % 4, "y_test": np.arange(8) % 4}
    np.savez(tmp_path / "data.npz", **images, **labels)
    argv = ["--model", "common.models.places.torchvision_resnet:small_resnet", "--weights", str(tmp_path / "net.pt")]
    flags = ["--data", str(tmp_path / "data.npz"), "--batch-size", "4", "--n-batches", "2", "--app-g-n", "8"]
    assert main([*argv, *flags, "--preset", "mini", "--device", "cpu", "--out", str(tmp_path / "runs")]) == 0
    [run] = run_store.run_dirs(tmp_path / "runs" / "probe_network")
    result = run_store.read_result(run)
    assert result["model"]["source"] == "callable" and result["samples"]["n_test"] == 6
    assert "a block would help most" in capsys.readouterr().out
    torch.save(small_resnet(num_classes=4).state_dict(), tmp_path / "net.pt")  # another head: refused, naming both
    assert main([*argv, *flags, "--preset", "mini", "--out", str(tmp_path / "other")]) == 2
    assert "size mismatch for fc.weight" in one_error_line(capsys)


def test_a_bad_model_name_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(["--preset", "smoke", "--model", "resnet_huge", "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert line.startswith("11_probe_network.py: error: --model resnet_huge: not a torchvision image classifier")
    assert not out.exists()
