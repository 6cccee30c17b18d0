"""11_probe_network.py end to end, in this process: the smoke preset (a small torchvision ResNet on synthetic images),
a model from pkg.module:function with a state_dict and an .npz, a hand-written nn.Sequential probed at --places, and
every bad input of issue 58 (model, weights, model folder, data, text, sizes, memory) refused in one line naming
script 11's own flag, with nothing created."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import torch
from torch import nn

from common.models import probe_network_plan
from common.models.places.torchvision_resnet import small_resnet
from common.runs import run_store
from tests.helpers.script_checks import main_error, one_error_line

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


# ----------------------------------------------------------------------------- issue 58: every input before anything
MODELS = """
import torch
from torch import nn


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU())

    def forward(self, z):
        return z + self.f(z)


class Head(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.fc = nn.Linear(width, classes)

    def forward(self, z):
        return self.fc(z.mean((2, 3)))


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), Residual(8), Residual(8), Head(8, 4))


def plain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), Head(8, 4))


def broken():
    raise RuntimeError("boom")
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A folder of inputs, good and bad, and an importable module of model factories (``probe11_models``)."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "probe11_models.py").write_text(MODELS)
    g = np.random.default_rng(0)
    ok = {
        "x_train": g.integers(0, 256, (16, 16, 16, 3), dtype=np.uint8),
        "y_train": np.arange(16) % 4,
        "x_test": g.integers(0, 256, (16, 16, 16, 3), dtype=np.uint8),
        "y_test": np.arange(16) % 4,
    }
    np.savez(d / "ok.npz", **ok)
    bad = {
        "nokeys": {"a": np.zeros(3)},
        "object": {**ok, "y_train": np.array([object()] * 16)},
        "floatimages": {**ok, "x_train": ok["x_train"].astype(np.float32)},
        "negative": {**ok, "y_train": -np.ones(16, dtype=np.int64)},
        "oneclass": {**ok, "y_train": np.zeros(16, dtype=np.int64)},
        "testonly": {**ok, "y_test": np.arange(16) % 5},
        "twelve": {**ok, "y_train": np.arange(16) % 12, "y_test": np.arange(16) % 12},
    }
    for name, arrays in bad.items():
        np.savez(d / f"{name}.npz", **arrays)
    data = (d / "ok.npz").read_bytes()
    (d / "truncated.npz").write_bytes(data[: len(data) // 2])
    (d / "notzip.npz").write_bytes(b"hello world")
    (d / "empty.txt").write_text("")
    (d / "binary.txt").write_bytes(bytes(range(256)) * 10)
    (d / "text.txt").write_text("some text " * 50)
    torch.manual_seed(0)
    torch.save(small_resnet().state_dict(), d / "net10.pt")
    weights = (d / "net10.pt").read_bytes()
    (d / "truncated.pt").write_bytes(weights[: len(weights) // 2])
    torch.save(nn.Linear(3, 3).state_dict(), d / "foreign.pt")
    (d / "emptydir").mkdir()
    (d / "corrupt").mkdir()
    (d / "corrupt" / "config.json").write_text("{not json")
    (d / "corrupt" / "model.safetensors").write_bytes(b"junk")
    for cls in ("a", "b"):
        (d / "images" / cls).mkdir(parents=True)
        (d / "images" / cls / "x.png").write_bytes(b"not a png")
    return d


SMALL = "common.models.places.torchvision_resnet:small_resnet"
ELEVENS_FLAGS = (
    "--model",
    "--weights",
    "--places",
    "--data ",
    "--text-file",
    "--batch-size",
    "--n-batches",
    "--app-g-n",
)
BAD_INPUTS = [
    (
        "missing-module",
        ["--model", "nosuchmodule_58:build", "--data", "{d}/ok.npz"],
        "--model nosuchmodule_58:build: cannot import",
    ),
    ("math-sqrt", ["--model", "math:sqrt", "--data", "{d}/ok.npz"], "--model math:sqrt: sqrt() failed (TypeError"),
    ("colon", ["--model", ":", "--data", "{d}/ok.npz"], "--model :: not pkg.module:function"),
    ("no-function", ["--model", "probe11_models:nothing", "--data", "{d}/ok.npz"], "has no function nothing"),
    (
        "factory-fails",
        ["--model", "probe11_models:broken", "--data", "{d}/ok.npz"],
        "broken() failed (RuntimeError: boom)",
    ),
    ("not-a-module", ["--model", "os:getcwd", "--data", "{d}/ok.npz"], "--model os:getcwd returned a str"),
    (
        "no-rule",
        ["--model", "probe11_models:build", "--data", "{d}/ok.npz"],
        "(--places NAMES: module names or patterns",
    ),
    (
        "places-none",
        ["--model", "probe11_models:build", "--places", "blocks.*", "--data", "{d}/ok.npz"],
        "'blocks.*' names no module",
    ),
    (
        "places-twice",
        ["--model", "probe11_models:build", "--places", "1,1", "--data", "{d}/ok.npz"],
        "places names 1 twice",
    ),
    (
        "places-empty",
        ["--model", "probe11_models:build", "--places", ",", "--data", "{d}/ok.npz"],
        "--places ',' names nothing",
    ),
    (
        "truncated-weights",
        ["--model", SMALL, "--weights", "{d}/truncated.pt", "--data", "{d}/ok.npz"],
        "--weights {d}/truncated.pt is not a state_dict",
    ),
    (
        "foreign-weights",
        ["--model", "resnet18", "--weights", "{d}/foreign.pt", "--data", "{d}/ok.npz"],
        "does not fit --model resnet18",
    ),
    (
        "labels-beyond-the-head",
        ["--model", SMALL, "--weights", "{d}/net10.pt", "--data", "{d}/twelve.npz"],
        "--data twelve.npz: batch 1: labels run from 0 to 11 but the model gives 10 logits",
    ),
    (
        "empty-model-folder",
        ["--model-path", "{d}/emptydir", "--text-file", "{d}/text.txt"],
        "--model-path {d}/emptydir: no *.safetensors",
    ),
    (
        "corrupt-model-folder",
        ["--model-path", "{d}/corrupt", "--text-file", "{d}/text.txt"],
        "--model-path {d}/corrupt: {d}/corrupt/model.safetensors is not a readable",
    ),
    (
        "weights-for-a-folder",
        ["--model-path", "{d}/emptydir", "--weights", "{d}/net10.pt", "--text-file", "{d}/text.txt"],
        "--weights is for --model",
    ),
    (
        "empty-text",
        ["--model-path", "{d}/emptydir", "--text-file", "{d}/empty.txt"],
        "--text-file {d}/empty.txt: the file is empty",
    ),
    (
        "binary-text",
        ["--model-path", "{d}/emptydir", "--text-file", "{d}/binary.txt"],
        "that is a binary file, not text",
    ),
    ("text-folder", ["--model-path", "{d}/emptydir", "--text-file", "{d}/emptydir"], "is a folder; give one text file"),
    (
        "text-missing",
        ["--model-path", "{d}/emptydir", "--text-file", "{d}/none.txt"],
        "none.txt: no such file; give one text file",
    ),
    ("unreadable-image", ["--model", "resnet18", "--data", "{d}/images"], "--data {d}/images: cannot read"),
    ("app-g-n-bound", ["--app-g-n", "100000000"], "--app-g-n: 100,000,000 is above the highest value, 1,000,000"),
    ("batch-size-bound", ["--batch-size", "1000000"], "--batch-size: 1,000,000 is above the highest value, 4,096"),
    ("n-batches-bound", ["--n-batches", "100000000"], "--n-batches: 100,000,000 is above the highest value, 10,000"),
    ("sample-memory", ["--batch-size", "4096", "--n-batches", "10000"], "40,960,024 images of 3x32x32 need about"),
    (
        "app-g-memory",
        ["--app-g-n", "1000000", "--image-size", "1024"],
        "--app-g-n 1000000: 1,000,016 images of 3x1024x1024",
    ),
    *(
        (f"npz-{name}", ["--model", "resnet18", "--data", f"{{d}}/{name}.npz"], text)
        for name, text in (
            ("nokeys", "lacks the keys x_train"),
            ("object", "holds object arrays"),
            ("floatimages", "x_train has dtype float32"),
            ("negative", "y_train has dtype int64 and shape (16,), expected 16 labels >= 0"),
            ("oneclass", "y_train holds 1 class"),
            ("testonly", "appears only in y_test"),
            ("truncated", "is not a readable .npz file"),
            ("notzip", "is not a readable .npz file"),
        )
    ),
]


@pytest.mark.parametrize(("argv", "needle"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_each_bad_input_is_one_line_naming_elevens_flag_and_creates_nothing(
    argv, needle, inputs, tmp_path, capsys, monkeypatch
):
    monkeypatch.syspath_prepend(str(inputs))
    out = tmp_path / "runs"
    argv = [a.replace("{d}", str(inputs)) for a in argv]
    code, line = main_error(
        "11_probe_network", ["--preset", "smoke", "--device", "cpu", *argv, "--out", str(out)], capsys
    )
    assert code == 2 and needle.replace("{d}", str(inputs)) in line, line
    assert "--data-root" not in line and not out.exists()
    assert any(flag in line for flag in ELEVENS_FLAGS), line  # named by one of script 11's own flags


def test_an_exact_probe_that_would_not_fit_names_elevens_flags_before_anything_exists(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(probe_network_plan, "available_bytes", lambda device=None: (10 * 2**10, "a test's 10 KiB"))
    out = tmp_path / "runs"
    code, line = main_error("11_probe_network", ["--preset", "smoke", "--device", "cpu", "--out", str(out)], capsys)
    assert code == 2 and "the exact probe needs about" in line and not out.exists()
    assert (
        "--no-exact (AG_l only), fewer places (--places NAMES" in line
        and "a smaller --batch-size or fewer --n-batches" in line
    )


def test_a_hand_written_sequential_is_probed_at_the_places_named_and_a_plain_cnn_is_warned_about(
    inputs, tmp_path, capsys, monkeypatch
):
    monkeypatch.syspath_prepend(str(inputs))
    flags = [
        "--data",
        str(inputs / "ok.npz"),
        "--batch-size",
        "4",
        "--n-batches",
        "2",
        "--app-g-n",
        "8",
        "--device",
        "cpu",
    ]
    assert main(["--model", "probe11_models:build", "--places", "1,2,3", *flags, "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "1.in" in printed and "3.in" in printed and "a block would help most at " in printed
    [run] = run_store.run_dirs(tmp_path / "a" / "probe_network")
    result = run_store.read_result(run)
    assert [r["place"] for r in sorted(result["places"], key=lambda r: r["index"])] == ["1.in", "2.in", "3.in"]
    assert result["best_place"] in {"1.in", "2.in", "3.in"} and result["app_g"]["n_test"] == 6
    assert main(["--model", "probe11_models:plain", "--places", "2,3", *flags, "--out", str(tmp_path / "b")]) == 0
    assert "warning: none of the places is the input of a module that adds its input" in capsys.readouterr().out
