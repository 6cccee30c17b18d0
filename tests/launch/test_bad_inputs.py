"""Nothing a user types loses data or prints a traceback: one table of bad inputs over all eight scripts.

Each case is one command line (plus, for some, a record made bad first) on a copy of a small tree of
records: a finished synthetic sweep run of script 01 and summary files of scripts 02, 06 and 07. For
every case the script must exit with code 2 and print exactly one stderr line starting with
``<script>: error:`` that names the flag or file, print no ``Traceback``, finish no run, and leave every
record that was there before byte-identical (sha256), and create no run directory (validate before
creating). Most cases call the script's ``main(argv)`` in this
process; :data:`PROCESS_CASES` runs one case per script as ``__main__`` in one real interpreter, as a shell would.

A new input class is a new :class:`Case` in :data:`CASES`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from transformers import BertConfig, GPTNeoXConfig

from common.data.text_sources import TextDataSpec
from common.errors import UserError
from common.experiments import gpt2_ascend
from common.experiments.growth_vs_scratch import growth_plan
from common.experiments.shared import resnet_sweep
from common.experiments.shared.resnet_sweep import sweep_configs
from common.experiments.shared.resnet_sweep_config import SweepRun
from common.launch import cli
from common.launch.launcher import check_before_creating, launch_from_args
from common.models.resnet import ResNet, ResNetConfig
from common.runs import atomic, locks, run_store
from common.runs.run_store import RunSpec
from common.training.device import npu_available, rng_state
from common.training.flops import training_flops_per_image
from tests.helpers import hf_tiny
from tests.helpers.script_checks import main_error

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in ROOT.glob("[0-9][0-9]_*.py"))
SWEEP = ["--preset", "smoke", "--dataset", "synthetic", "--device", "cpu"]  # the records' sweep: 01's flags
SWEEP_FLAGS = [*SWEEP, "--depths", "0", "--epochs", "1"]
PROBE = [*SWEEP, "--batch-size", "16", "--n-batches", "2"]
PYTHIA = ["--preset", "smoke", "--device", "cpu", "--data-root", "{tmp}/tokens"]
GPT = ["--preset", "smoke", "--device", "cpu", "--tokenizer", "byte", "--depths", "1", "--data-root", "{tmp}/tokens"]
BASE = {
    "01": SWEEP,
    "02": PROBE,
    "03": SWEEP,
    "04": PYTHIA,
    "05": GPT,
    "06": SWEEP,
    "07": SWEEP,
    "08": ["--preset", "smoke"],
    "09": SWEEP,
    "10": ["--preset", "smoke", "--device", "cpu"],
    "11": ["--preset", "smoke", "--device", "cpu"],
}
SUMMARIES = (
    "ag_probe/summary-synthetic-train-b16x2.csv",
    "matched_insertion/summary-synthetic.csv",
    "weight_scaling/records-fc-tanh.csv",
    "weight_scaling/exponents-fc-tanh.csv",
)


# ----------------------------------------------------------------------------- the records
@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """A finished sweep run (ResNet-8 on synthetic images, one epoch) made by script 01, summary files beside it,
    a small text file and a tiny GPT-NeoX folder for scripts 04 and 05."""
    out = tmp_path_factory.mktemp("records") / "runs"
    assert importlib.import_module("01_train_resnet_sweep").main([*SWEEP_FLAGS, "--out", str(out)]) == 0
    for name in SUMMARIES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("depth_n,value\n0,1.0\n")
    (out.parent / "small.txt").write_text("A few words of plain text.\n" * 4000)  # more than 05's smoke --val-tokens
    model = out.parent / "neox"
    model.mkdir()
    GPTNeoXConfig(
        hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=32, vocab_size=256
    ).to_json_file(model / "config.json")
    (model / "model.safetensors").write_bytes(noise(4096))
    return out


def noise(size: int, seed: int = 0) -> bytes:
    return (
        torch.randint(0, 256, (size,), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)
        .numpy()
        .tobytes()
    )


def sweep_dir(out: Path) -> Path:
    return next((out / "resnet_sweep").glob("synthetic-resnet8-n0-*"))


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ----------------------------------------------------------------------------- ways to make a record bad
def write(relative: str | Callable[[Path], Path], data: bytes) -> Callable[[Path], None]:
    """Set-up: write ``data`` to a file under the records (a path, or a function of the records root)."""

    def setup(out: Path) -> None:
        path = relative(out) if callable(relative) else out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return setup


def bert_folder(out: Path) -> None:
    """A BERT config (a masked LM, not a causal one) beside the records."""
    folder = out.parent / "bert"
    folder.mkdir()
    BertConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=32).to_json_file(
        folder / "config.json"
    )
    (folder / "model.safetensors").write_bytes(noise(64))


def gptj_folder(out: Path) -> None:
    """A tiny GPT-J saved with its tokenizer: a causal LM whose MLP projects back with fc_out (no expansion rule)."""
    hf_tiny.save("gptj", out.parent / "gptj")


def write_other(relative: str) -> Callable[[Path], None]:
    """A small file ``relative`` beside the records (some text: another folder's content, or a text too short)."""

    def setup(out: Path) -> None:
        path = out.parent / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("Too few words.\n")

    return setup


def in_sweep(name: str) -> Callable[[Path], Path]:
    return lambda out: sweep_dir(out) / name


def without_depth_n(out: Path) -> None:
    for name in ("config.json", "result.json"):
        path = sweep_dir(out) / name
        record = json.loads(path.read_text())
        del record["depth_n"]
        path.write_text(json.dumps(record))


def edit_json(name: str, **changes) -> Callable[[Path], None]:
    """Set-up: change keys of the finished sweep run's ``name`` (``config.json`` or ``result.json``) by hand."""

    def setup(out: Path) -> None:
        path = sweep_dir(out) / name
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    return setup


def replace_with_folder(name: str) -> Callable[[Path], None]:
    """Set-up: the finished sweep run's ``name`` is a directory, not a file."""

    def setup(out: Path) -> None:
        (sweep_dir(out) / name).unlink()
        (sweep_dir(out) / name).mkdir()

    return setup


def delete(name: str) -> Callable[[Path], None]:
    return lambda out: (sweep_dir(out) / name).unlink()


def npz(**arrays) -> Callable[[Path], None]:
    """Set-up: ``{tmp}/bad.npz`` holding 8x8 images for ``y_train`` / ``y_test`` and any ``arrays`` given."""

    def setup(out: Path) -> None:
        labels = {"y_train": np.arange(16) % 4, "y_test": np.arange(8) % 4, **arrays}
        images = {f"x{k[1:]}": np.zeros((len(labels[k]), 8, 8, 3), np.uint8) for k in ("y_train", "y_test")}
        np.savez(out.parent / "bad.npz", **{**images, **labels})

    return setup


def foreign_checkpoint(**state) -> Callable[[Path], None]:
    """Set-up: the unfinished run of ``--depths 1`` holding its config and a ``checkpoint.pt`` of ResNet-8 (N = 0),
    with ``state`` replacing keys (``model=None`` drops the key)."""

    def setup(out: Path) -> None:
        model = ResNet(ResNetConfig(extra_blocks=0, num_classes=10))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        full = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": {"step": 8},
            "rng": rng_state(),
            "epoch": 1,
            "wall_s": 1.0,
        }
        full = {k: v for k, v in {**full, **state}.items() if v is not None}
        unfinished_run(SWEEP_N1, "config.json", json.dumps(SWEEP_N1).encode())(out)
        path = RunSpec(SWEEP_N1, str(out)).dir / "checkpoint.pt"
        torch.save(full, path)

    return setup


def unfinished_run(config: dict, name: str, data: bytes) -> Callable[[Path], None]:
    """Set-up: the run directory of ``config`` holding only ``name`` = ``data`` (an interrupted or corrupt run)."""
    return write(lambda out: RunSpec(config, str(out)).dir / name, data)


SWEEP_N1 = sweep_configs(preset="smoke", dataset="synthetic", overrides={"depths": [1], "epochs": 1})[
    0
]  # what 01 --depths 1 plans
GROWTH = growth_plan(preset="smoke", dataset="synthetic", overrides={"depths": [2]}).jobs()[
    0
]  # 03's first job with --depths 2


def absent_device() -> str | None:
    """A ``--device`` this machine lacks (None: it has them all)."""
    have = {"cuda": torch.cuda.is_available(), "npu": npu_available(), "mps": torch.backends.mps.is_available()}
    return next((d for d, ok in have.items() if not ok), None)


# ----------------------------------------------------------------------------- the table
@dataclass
class Case:
    """``script`` run with ``argv`` (``{out}``: the records; ``{tmp}``: a scratch folder beside them) after
    ``setup(out)``; the error line must contain ``names`` (formatted the same way)."""

    id: str
    script: str
    argv: list[str]
    names: str
    setup: Callable[[Path], None] | None = None
    skip: Callable[[], str | None] = field(default=lambda: None)

    def resolve(self, text: str, out: Path) -> str:
        return text.format(out=out, tmp=out.parent, sweep=sweep_dir(out) if (out / "resnet_sweep").is_dir() else "")


def script_of(number: str) -> str:
    return next(s for s in SCRIPTS if s.startswith(number))


def each(numbers: str, id: str, extra: list[str], names: str, **keys) -> list[Case]:
    """One case per script number in ``numbers`` ("01 02 ..."): its usual flags (:data:`BASE`), then ``extra``."""
    return [Case(f"{n}-{id}", script_of(n), [*BASE[n], *extra], names, **keys) for n in numbers.split()]


def with_device(case: Case, device: str) -> Case:
    return Case(case.id, case.script, [device if a == "cpu" else a for a in case.argv], "--device", skip=NO_DEVICE)


def no_device() -> str | None:
    return None if absent_device() else "this machine has every device"


DEVICE = absent_device() or "cuda"
NO_DEVICE = no_device
SWEEP_READERS = {  # 08 under --strict: without it a malformed run is one warning and a report without it (tested below)
    "02": PROBE,
    "06": SWEEP,
    "07": [*SWEEP, "--family", "sweep"],
    "08": ["--preset", "smoke", "--strict"],
}
NOT_AN_OBJECT = [
    ("config-list", "config.json", b"[]"),
    ("result-string", "result.json", b'"done"'),
    ("config-number", "config.json", b"5"),
    ("result-empty", "result.json", b"{}"),
]
SMALL_TEXT = ["--text-file", "{tmp}/small.txt"]

CASES: list[Case] = [
    # unknown choices, and values the parser refuses
    *each("01 02 03 04 05 06 07 08 09 10 11", "unknown-preset", ["--preset", "huge"], "--preset"),
    *each("01 02 03 06 07 09", "unknown-dataset", ["--dataset", "imagenet1k"], "--dataset"),
    *each("01 02 03 04 05 06 07 09 10", "seeds-comma", ["--seeds", ","], "--seeds"),
    *each("01 03 05 06 07", "depths-empty-range", ["--depths", "5:1"], "'5:1'"),
    *each("01", "lr-nan", ["--lr", "nan", "--dry-run"], "--lr"),
    *each("04", "warmup-negative", ["--warmup-steps", "-5"], "'-5'"),
    *each("08", "device-flag", ["--device", "cuda"], "--device"),
    *each("08", "seed-flag", ["--seed", "3"], "--seed"),
    *each("08", "slurm-flag", ["--partition", "gpu"], "--partition"),
    # non-positive or inconsistent sizes
    *each("01 02 07", "batch-size-zero", ["--batch-size", "0"], "--batch-size"),
    *each("02", "n-batches-zero", ["--n-batches", "0"], "--n-batches"),
    *each("03", "insert-at-too-few", ["--depths", "2,4", "--insert-at", "0.2,0.4"], "--insert-at 0.2,0.4"),
    *each("03", "insert-at-same-epoch", ["--insert-at", "0.1,0.12,0.5,0.7"], "--insert-at 0.1,0.12,0.5,0.7"),
    *each("03", "ablation-depth-not-planned", ["--ablation-depths", "7"], "--ablation-depths 7"),
    *each("04 05", "block-size-zero", ["--block-size", "0"], "--block-size"),
    *each("06", "gd-steps-zero", ["--gd-steps", "0"], "--gd-steps"),
    *each("09", "rounds-zero", ["--rounds", "0"], "--rounds"),
    *each("09", "epochs-per-round-zero", ["--epochs-per-round", "0"], "--epochs-per-round"),
    *each("09", "unknown-policy", ["--policy", "criterion,greedy"], "--policy"),
    *each("05", "heads-do-not-divide-width", ["--n-embd", "64", "--n-head", "5"], "--n-head 5"),
    *each("02", "more-batches-than-the-split", ["--split", "test", "--n-batches", "100"], "--n-batches 100"),
    # unwritable --out (under a file) and --figures-dir
    *each("01 02 03 04 05 06 07 08 09 10 11", "out-under-a-file", ["--out", "{tmp}/small.txt/runs"], "--out"),
    *each("08", "figures-dir-under-a-file", ["--figures-dir", "{tmp}/small.txt/figs"], "--figures-dir"),
    # missing data, runs or models
    *each("01 03 09", "missing-npz", ["--dataset", "npz", "--data-root", "{tmp}/no.npz"], "no.npz"),
    *each("02 06", "no-sweep-for-the-dataset", ["--dataset", "digits"], "01_train_resnet_sweep.py"),
    *each("07", "no-sweep-for-the-dataset", ["--dataset", "digits", "--family", "sweep"], "01_train_resnet_sweep.py"),
    *each("02", "seed-not-trained", ["--seeds", "7"], "--seeds 7"),
    *each("06", "depth-not-trained", ["--depths", "3"], "--depths 3"),
    *each("04", "model-path-not-a-folder", ["--model-path", str(ROOT / "README.md")], "--model-path"),
    *each("04", "garbage-safetensors", ["--model-path", "{tmp}/neox", "--tokenizer", "byte"], "model.safetensors"),
    *each("05", "missing-text-file", ["--text-file", "{tmp}/no.txt"], "--text-file"),
    # 10: the model, the number of layers, the save folder, the text
    *each("10", "blocks-zero", ["--blocks", "0"], "--blocks"),
    *each("10", "blocks-negative", ["--blocks", "-1"], "--blocks"),
    *each("10", "blocks-more-than-layers", ["--blocks", "9"], "--blocks 9"),
    *each("10", "unknown-policy", ["--policy", "criterion,deepest"], "--policy"),
    *each("10", "model-path-missing", ["--model-path", "{tmp}/no-model"], "--model-path"),
    *each("10", "model-path-not-causal", ["--model-path", "{tmp}/bert"], "not a causal LM", setup=bert_folder),
    *each(
        "10",
        "garbage-safetensors",
        ["--model-path", "{tmp}/neox", "--text-file", "{tmp}/small.txt"],
        "model.safetensors",
    ),
    *each("10", "unexpandable-layout", ["--model-path", "{tmp}/gptj"], "GPTJForCausalLM", setup=gptj_folder),
    *each("10", "two-models", ["--model-path", "{tmp}/neox", "--from-run", "{tmp}"], "give one model"),
    *each("10", "save-with-other-content", ["--save", "{tmp}/save"], "--save", setup=write_other("save/notes.txt")),
    *each("10", "text-too-short", ["--text-file", "{tmp}/short.txt"], "too short", setup=write_other("short.txt")),
    *each("10", "missing-text-file", ["--text-file", "{tmp}/no.txt"], "--text-file"),
    *each("11", "unknown-model", ["--model", "resnet_huge"], "--model resnet_huge"),
    *each("11", "missing-weights", ["--weights", "{tmp}/no.pt"], "--weights"),
    *each("11", "batch-size-zero", ["--batch-size", "0"], "--batch-size"),
    *each("11", "images-for-a-language-model", ["--model-path", "{tmp}/neox"], "--text-file"),
    *each(
        "04 05",
        "binary-text-file",
        ["--text-file", "{tmp}/noise.txt"],
        "--text-file",
        setup=write(lambda out: out.parent / "noise.txt", noise(200_000)),
    ),
    *each(
        "04 05",
        "empty-text-file",
        ["--text-file", "{tmp}/empty.txt"],
        "empty",
        setup=write(lambda out: out.parent / "empty.txt", b""),
    ),
    *each("04 05", "text-too-short", ["--text-file", "{tmp}/short.txt"], "too short", setup=write_other("short.txt")),
    # an absent device
    *[
        with_device(c, DEVICE)
        for c in (
            *each("01 03", "absent-device", ["--depths", "1"], ""),
            *each("02 04 06", "absent-device", [], ""),
            *each("05", "absent-device", SMALL_TEXT, ""),
            *each("07", "absent-device", ["--depths", "4"], ""),
        )
    ],
    # corrupt records: random bytes, truncated JSON, not an object, a missing key, garbage weights and checkpoints
    *each(
        "01",
        "config-random-bytes",
        ["--depths", "1", "--epochs", "1"],
        "config.json",
        setup=unfinished_run(SWEEP_N1, "config.json", noise(300)),
    ),
    *each(
        "03",
        "config-random-bytes",
        ["--depths", "2"],
        "config.json",
        setup=unfinished_run(GROWTH, "config.json", noise(300)),
    ),
    *each(
        "05",
        "config-random-bytes",
        SMALL_TEXT,
        "config.json",
        setup=lambda out: unfinished_run(gpt_config(out), "config.json", noise(300))(out),
    ),
    *[
        Case(
            f"{n}-sweep-config-random-bytes",
            script_of(n),
            argv,
            "config.json",
            setup=write(in_sweep("config.json"), noise(300)),
        )
        for n, argv in SWEEP_READERS.items()
    ],
    *[
        Case(
            f"{n}-sweep-config-truncated",
            script_of(n),
            argv,
            "config.json",
            setup=write(in_sweep("config.json"), b'{"dataset": "synth'),
        )
        for n, argv in SWEEP_READERS.items()
    ],
    *[
        Case(f"{n}-sweep-{what}", script_of(n), argv, name, setup=write(in_sweep(name), data))
        for n, argv in SWEEP_READERS.items()
        for what, name, data in NOT_AN_OBJECT
    ],
    *[
        Case(f"{n}-sweep-config-without-depth-n", script_of(n), argv, "depth_n", setup=without_depth_n)
        for n, argv in SWEEP_READERS.items()
    ],
    *[
        Case(f"{n}-garbage-model-pt", script_of(n), argv, "model.pt", setup=write(in_sweep("model.pt"), noise(500)))
        for n, argv in SWEEP_READERS.items()
        if n != "08"
    ],
    *each(
        "01",
        "garbage-checkpoint",
        ["--depths", "1", "--epochs", "1"],
        "checkpoint.pt",
        setup=lambda out: [
            unfinished_run(SWEEP_N1, "config.json", json.dumps(SWEEP_N1).encode())(out),
            unfinished_run(SWEEP_N1, "checkpoint.pt", noise(500))(out),
        ],
    ),
    # the same record classes, for every reader: edited, emptied, NaN, deleted, a folder where a file must be
    *[
        Case(f"{n}-sweep-{what}", script_of(n), argv, name, setup=setup)
        for n, argv in SWEEP_READERS.items()
        for what, name, setup in (
            ("config-edited", "config.json", edit_json("config.json", train={"lr": 9.0})),
            ("result-nan-train-loss", "result.json", edit_json("result.json", train_loss=float("nan"))),
            ("config-deleted", "config.json", delete("config.json")),
            ("result-is-a-folder", "result.json", replace_with_folder("result.json")),
        )
    ],
    *each(
        "01", "finished-config-edited", SWEEP_FLAGS[len(SWEEP) :], "config.json", setup=edit_json("config.json", seed=5)
    ),
    *each(
        "01",
        "finished-result-is-a-folder",
        SWEEP_FLAGS[len(SWEEP) :],
        "result.json",
        setup=replace_with_folder("result.json"),
    ),
    # 08: a --preset the records do not hold would replace their report; a mistyped --out
    *each("08", "preset-not-in-the-records", ["--preset", "paper"], "--preset paper"),
    *each("08", "out-missing", ["--out", "{tmp}/no-such-runs"], "--out"),
    # repeated or negative values: the same run planned twice, a seed numpy refuses
    *each("01 02 03 04 05 06 07", "seeds-repeated", ["--seeds", "0,0"], "--seeds"),
    *each("01 03 05 06 07", "depths-repeated", ["--depths", "1,1"], "--depths"),
    *each("01 02 03 04 05 06 07", "seed-negative", ["--seed", "-1"], "--seed"),
    # degenerate or unsafe .npz data
    *[
        Case(
            f"{n}-npz-{what}",
            script_of(n),
            [*BASE[n], "--dataset", "npz", "--data-root", "{tmp}/bad.npz"],
            names,
            setup=setup,
        )
        for n in ("01", "03")
        for what, names, setup in (
            ("one-class", "y_train holds 1 class", npz(y_train=np.zeros(16, np.int64))),
            ("label-only-in-test", "only in y_test", npz(y_test=np.arange(8) % 5)),
            ("object-arrays", "object arrays", npz(y_train=np.array([0, 1, "x"] * 5 + [0], dtype=object))),
        )
    ],
    # a checkpoint of another run, or without what train() saves; metrics lines that are not JSON objects
    *each(
        "01",
        "checkpoint-of-another-depth",
        ["--depths", "1", "--epochs", "1"],
        "checkpoint.pt",
        setup=foreign_checkpoint(),
    ),
    *each(
        "01",
        "checkpoint-without-model",
        ["--depths", "1", "--epochs", "1"],
        "lacks the keys model",
        setup=foreign_checkpoint(model=None),
    ),
    *[
        Case(
            f"01-metrics-{what}",
            script_of("01"),
            [*SWEEP, "--depths", "1", "--epochs", "1"],
            "metrics.jsonl",
            setup=lambda out, data=data: [
                unfinished_run(SWEEP_N1, "config.json", json.dumps(SWEEP_N1).encode())(out),
                unfinished_run(SWEEP_N1, "metrics.jsonl", data)(out),
            ],
        )
        for what, data in (("binary", b'{"epoch": 1}\n' + noise(300) + b"\n"), ("not-an-object", b"[1, 2]\n"))
    ],
    *each(
        "05",
        "corrupt-token-meta",
        SMALL_TEXT,
        "meta.json",
        setup=lambda out: write(token_dir(gpt_config(out)) / "meta.json", b"{oops")(out),
    ),
]


def token_dir(config: dict) -> Path:
    return Path(config["runtime"]["data_root"]) / TextDataSpec(**config["data"]).dirname()


def gpt_config(out: Path) -> dict:
    """The config 05 plans for :data:`GPT` with the small text file."""
    return gpt2_ascend.gpt_configs(
        preset="smoke",
        depths=[1],
        overrides={"tokenizer": "byte"},
        text_path=out.parent / "small.txt",
        data_root=out.parent / "tokens",
    )[0]


PROCESS_CASES = {  # one case per script, run as __main__ in a real interpreter: what a shell sees
    "01": "01-depths-empty-range",
    "02": "02-seed-not-trained",
    "03": "03-ablation-depth-not-planned",
    "04": "04-model-path-not-a-folder",
    "05": "05-heads-do-not-divide-width",
    "06": "06-garbage-model-pt",
    "07": "07-seeds-comma",
    "08": "08-sweep-config-random-bytes",
    "09": "09-rounds-zero",
    "10": "10-blocks-zero",
    "11": "11-unknown-model",
}
BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "case ids must be unique"


# ----------------------------------------------------------------------------- running a case
@dataclass
class Outcome:
    code: int
    stderr: str
    before: dict[str, str]
    after: dict[str, str]


def prepared(case: Case, records: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    out = tmp_path / "runs"
    shutil.copytree(records, out)
    for extra in ("small.txt", "neox"):
        source = records.parent / extra
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / extra)
    if case.setup is not None:
        case.setup(out)
    argv = [case.resolve(a, out) for a in case.argv]
    return out, argv if "--out" in argv else [*argv, "--out", str(out)]


def in_process(case: Case, out: Path, argv: list[str], capsys) -> Outcome:
    before = digests(out)
    main = importlib.import_module(case.script).main
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    return Outcome(code, capsys.readouterr().err, before, digests(out))


def check(case: Case, outcome: Outcome, out: Path) -> None:
    prefix = f"{case.script}.py: error:"
    lines = [line for line in outcome.stderr.splitlines() if line.startswith(prefix)]
    assert outcome.code == 2, outcome.stderr
    assert len(lines) == 1, outcome.stderr
    assert case.resolve(case.names, out) in lines[0], lines[0]
    assert "Traceback" not in outcome.stderr
    changed = [p for p, h in outcome.before.items() if outcome.after.get(p) != h]
    assert not changed, f"records changed: {changed}"
    new = set(outcome.after) - set(outcome.before)
    assert not [p for p in new if p.endswith(run_store.RESULT)], f"new results: {new}"
    assert not [p for p in new if p.endswith(run_store.CONFIG)], f"run directories created: {new}"


@pytest.mark.parametrize("case", [c for c in CASES if c.id not in PROCESS_CASES.values()], ids=lambda c: c.id)
def test_a_bad_input_gives_one_line_exit_2_and_changes_no_record(case, records, tmp_path, capsys):
    if reason := case.skip():
        pytest.skip(reason)
    out, argv = prepared(case, records, tmp_path)
    check(case, in_process(case, out, argv, capsys), out)


@pytest.fixture(scope="module")
def process_outcomes(records, tmp_path_factory) -> dict[str, tuple[Case, Path, Outcome]]:
    """Every script's process case, each run as ``__main__`` by one real interpreter (:mod:`tests.helpers.as_shell`):
    the script's own ``__main__`` block, its exit code and whatever reaches file descriptor 2."""
    planned = {}
    for number, case_id in PROCESS_CASES.items():
        case = BY_ID[case_id]
        tmp = tmp_path_factory.mktemp(case_id)
        out, argv = prepared(case, records, tmp)
        planned[number] = (case, out, digests(out), [f"{case.script}.py", argv, str(tmp / "stderr.txt")])
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.as_shell"],
        cwd=ROOT,
        input=json.dumps([job for *_, job in planned.values()]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        number: (case, out, Outcome(code, Path(job[2]).read_text(), before, digests(out)))
        for (number, (case, out, before, job)), code in zip(planned.items(), codes, strict=True)
    }


@pytest.mark.parametrize("number", sorted(PROCESS_CASES))
def test_a_bad_input_in_a_real_process_gives_one_line_exit_2_and_changes_no_record(number, process_outcomes):
    case, out, outcome = process_outcomes[number]
    check(case, outcome, out)


@pytest.mark.parametrize("number", ["04", "05", "10"])
def test_a_text_too_short_for_its_validation_split_is_one_line_and_creates_nothing(number, tmp_path, capsys):
    """A one-line ``--text-file``: one line naming it and the flags its split needs, before any folder exists (04
    and 05 once left an empty ``<data-root>/text-byte-<hash>/``; issue 59). The one check of all three:
    ``common.data.text_sources.require_tokens``."""
    (tmp_path / "one.txt").write_text("A single line.\n")
    data_root = [] if number == "10" else ["--data-root", str(tmp_path / "tokens")]
    argv = ["--preset", "smoke", "--device", "cpu", "--text-file", str(tmp_path / "one.txt"), *data_root]
    code, line = main_error(script_of(number), [*argv, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "one.txt: " in line and "tokens, too short for --" in line, line
    assert [p.name for p in tmp_path.iterdir()] == ["one.txt"]


def test_every_script_has_cases_and_one_process_case():
    assert {c.script for c in CASES} == set(SCRIPTS)
    assert sorted(PROCESS_CASES) == [s[:2] for s in SCRIPTS] and all(
        BY_ID[i].script.startswith(n) for n, i in PROCESS_CASES.items()
    )


# ----------------------------------------------------------------------------- every flag
def parsers() -> dict[str, argparse.ArgumentParser]:
    return {s: importlib.import_module(s).build_parser() for s in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_flag_has_exactly_one_consumer_and_help_ends_with_the_usage_examples(script, capsys):
    module = importlib.import_module(script)
    parser = module.build_parser()  # check_flag_use raises if a flag has no consumer, or two
    consumers = cli.flag_consumers(
        parser, planner=getattr(module, "PLANNER_FLAGS", ()), script=module.SCRIPT_FLAGS, launches=script[:2] != "08"
    )
    assert consumers and all(len(who) == 1 for who in consumers.values()), consumers
    assert not set(module.SCRIPT_FLAGS) & set(getattr(module, "PLANNER_FLAGS", ()))
    parser.print_help()
    text = capsys.readouterr().out
    examples = [line.strip() for line in module.__doc__.splitlines() if line.startswith("    ") and line.strip()]
    assert examples and text.rstrip().endswith(examples[-1]) and all(e in text for e in examples)


def test_a_flag_nobody_consumes_is_a_programming_error():
    parser = cli.make_parser("demo")
    parser.add_argument("--unused", type=int)
    with pytest.raises(TypeError, match="unused: no consumer"):
        cli.check_flag_use(parser, planner=["preset", "seed", "device"])
    with pytest.raises(TypeError, match="preset: planner and script"):
        cli.check_flag_use(parser, planner=["preset", "seed", "device", "unused"], script=["preset"])


NUMBER_TYPES = (
    cli.positive_int,
    cli.non_negative_int,
    cli.positive_float,
    cli.non_negative_float,
    cli.finite_float,
    cli.unit_interval,
    cli.fraction,
    int,
)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_number_flag_refuses_nan_and_infinities(value, capsys):
    checked = 0
    for script, parser in parsers().items():
        for action in parser._actions:
            if action.type is float:
                pytest.fail(
                    f"{script} {action.option_strings[0]}: type=float accepts nan; use a common.launch.cli number type"
                )
            if action.type in NUMBER_TYPES:
                with pytest.raises(SystemExit) as refused:
                    parser.parse_args([action.option_strings[-1], value])
                assert refused.value.code == 2 and action.option_strings[-1] in capsys.readouterr().err
                checked += 1
    assert checked > 40


# ----------------------------------------------------------------------------- advice that works when followed
def test_deleting_the_run_directory_of_a_garbage_model_pt_as_advised_retrains_it(records, tmp_path, capsys):
    out = tmp_path / "runs"
    shutil.copytree(records, out)
    (sweep_dir(out) / "model.pt").write_bytes(noise(500))
    probe = importlib.import_module("02_probe_ag").main
    assert probe([*PROBE, "--out", str(out)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "delete the run directory" in line
    gone = sweep_dir(out)
    shutil.rmtree(gone)  # what the message says
    assert importlib.import_module("01_train_resnet_sweep").main([*SWEEP_FLAGS, "--out", str(out), "--dry-run"]) == 0
    assert (
        f"[todo] {gone}" in capsys.readouterr().out
    )  # 01 trains it again (a deleted model.pt alone: result.json says done)


def test_restarting_after_deleting_a_corrupt_checkpoint_starts_metrics_afresh(records, tmp_path, capsys):
    out = tmp_path / "runs"
    train = importlib.import_module("01_train_resnet_sweep").main
    path = RunSpec(SWEEP_N1, str(out)).dir
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(SWEEP_N1))
    (path / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "train_loss": 9.9}) + "\n")  # from the broken attempt
    (path / "checkpoint.pt").write_bytes(noise(500))
    argv = [*SWEEP, "--depths", "1", "--epochs", "1", "--out", str(out)]
    assert train(argv) == 2 and "delete it to restart" in capsys.readouterr().err
    (path / "checkpoint.pt").unlink()  # what the message says
    assert train(argv) == 0
    metrics = run_store.read_metrics(path)
    assert [m["epoch"] for m in metrics] == [1] and metrics[0]["train_loss"] != 9.9


# ----------------------------------------------------------------------------- records never overwritten by less
def test_a_narrower_request_never_shrinks_a_summary(records, tmp_path, capsys):
    out = tmp_path / "runs"
    shutil.copytree(records, out)
    weights = importlib.import_module("07_weight_scaling").main
    fc = [
        "--preset",
        "smoke",
        "--family",
        "fc-tanh",
        "--depths",
        "4,8,16",
        "--epochs",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    assert weights([*fc, "--seeds", "0,1"]) == 0
    folder = out / "weight_scaling"
    both = (folder / "records-fc-tanh.csv").read_bytes()
    assert weights([*fc, "--seeds", "0"]) == 0  # finished runs only: nothing trains, the summary keeps seed 1
    assert (folder / "records-fc-tanh.csv").read_bytes() == both
    capsys.readouterr()


def test_a_data_root_that_the_dataset_does_not_read_is_warned_about(records, tmp_path, capsys):
    main = importlib.import_module("01_train_resnet_sweep").main
    assert main(["--preset", "smoke", "--dataset", "digits", "--data-root", str(tmp_path), "--dry-run"]) == 0
    assert "--data-root" in capsys.readouterr().err


# ----------------------------------------------------------------------------- validate before creating
def test_an_empty_run_set_is_an_error_and_the_device_is_checked_where_the_job_runs(tmp_path):
    args = argparse.Namespace(launcher="inline", dry_run=False, wait=False, slurm_profile=None)
    with pytest.raises(UserError, match="select no runs"):
        launch_from_args(lambda spec: {}, [], args)
    with pytest.raises(UserError, match="no summaries"):
        run_store.write_summary([(tmp_path / "summary.csv", b"x\n")], runs_found=0)
    assert not (tmp_path / "summary.csv").exists()
    device = absent_device()
    if device is None:
        pytest.skip("this machine has every device")
    specs = run_store.make_specs([{"experiment": "demo", "name": "x", "runtime": {"device": device}}], tmp_path)
    with pytest.raises(UserError, match="--device"):
        check_before_creating(specs, "inline")
    check_before_creating(specs, "slurm")  # the login node need not have the compute node's device
    assert not (tmp_path / "demo").exists()


# ----------------------------------------------------------------------------- what 08 reads, and what it leaves out
def second_sweep_run(out: Path, **changes) -> Path:
    """A second finished sweep run beside the records' one: its config with ``changes`` (in its own, correctly hashed
    directory) and its result, whose keys ``result.<key>`` changes replace."""
    good = sweep_dir(out)
    config = json.loads((good / "config.json").read_text())
    result = json.loads((good / "result.json").read_text())
    config.update({k: v for k, v in changes.items() if not k.startswith("result.")})
    result.update({k.removeprefix("result."): v for k, v in changes.items() if k.startswith("result.")})
    path = run_store.run_dir(out, config)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "result.json").write_text(json.dumps(result))
    return path


def read_only(root: Path, writable: bool = False) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod((0o755 if path.is_dir() else 0o644) if writable else (0o555 if path.is_dir() else 0o444))


def test_08_names_each_run_it_cannot_use_in_one_warning_and_the_banner_and_only_reads_the_records(
    records, tmp_path, capsys
):
    out = tmp_path / "runs"
    shutil.copytree(records, out)
    bad = second_sweep_run(out, seed=7, **{"result.train_loss": float("nan")})
    main = importlib.import_module("08_make_figures").main
    before = digests(out)
    read_only(out)  # 08 only reads --out (a real refusal to write for a user who is not root)
    try:
        capsys.readouterr()
        assert main(["--out", str(out), "--figures-dir", str(tmp_path / "figs")]) == 0  # no --preset: the records'
        printed = capsys.readouterr()
        strict = main(["--out", str(out), "--figures-dir", str(tmp_path / "strict"), "--strict"])
        refused = capsys.readouterr().err
    finally:
        read_only(out, writable=True)
    warnings = [line for line in printed.err.splitlines() if "could not be used" in line]
    assert len(warnings) == 1 and bad.name in warnings[0] and "train_loss is nan" in warnings[0], printed.err
    assert "read the smoke records" in printed.out and "1 finished runs left out" in printed.out
    report = tmp_path / "figs" / "claims.md"
    text = report.read_text()
    assert "**Smoke scale.**" in text and "**Runs left out.**" in text and bad.name in text
    assert report.stat().st_mode & 0o777 == atomic.file_mode()  # the umask's mode, not mkstemp's 0600
    lines = [line for line in refused.splitlines() if line.startswith("08_make_figures.py: error:")]
    assert strict == 2 and len(lines) == 1 and bad.name in lines[0] and not (tmp_path / "strict").exists()
    assert digests(out) == before  # nothing under --out written, changed or added


def test_08_takes_the_records_preset_and_refuses_records_that_mix_presets(records, tmp_path, capsys):
    out = tmp_path / "runs"
    shutil.copytree(records, out)
    second_sweep_run(out, preset="mini")
    main = importlib.import_module("08_make_figures").main
    capsys.readouterr()
    assert main(["--out", str(out)]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("08_make_figures.py: error:")]
    assert "mix the presets mini, smoke" in line and "--preset" in line
    assert not (out / "figures").exists()


def test_a_mistyped_out_or_a_failed_download_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    for script, argv in (("08_make_figures", ["--preset", "smoke"]), ("02_probe_ag", PROBE)):
        typo = tmp_path / f"typo-{script}"
        assert importlib.import_module(script).main([*argv, "--out", str(typo)]) == 2
        assert not typo.exists(), script
    capsys.readouterr()

    def offline(*args, **kwargs):
        raise OSError("<urlopen error [Errno -3] Temporary failure in name resolution>")

    monkeypatch.setattr(torchvision.datasets, "CIFAR100", offline)
    data, out = tmp_path / "data", tmp_path / "runs"
    argv = ["--preset", "smoke", "--dataset", "cifar100", "--data-root", str(data), "--depths", "0", "--out", str(out)]
    assert importlib.import_module("01_train_resnet_sweep").main(argv) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("01_train_resnet_sweep.py: error:")]
    assert "download failed" in line
    assert not data.exists() and not out.exists()  # no .cifar100.lock, no empty data/ or runs/


def test_an_unreadable_record_is_never_advised_deleted(records, tmp_path, capsys, monkeypatch):
    out = tmp_path / "runs"
    shutil.copytree(records, out)
    read_bytes = Path.read_bytes

    def denied(path: Path) -> bytes:
        if path.name == "config.json" and path.parent.parent.name == "resnet_sweep":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", denied)
    capsys.readouterr()
    assert importlib.import_module("02_probe_ag").main([*PROBE, "--out", str(out)]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("02_probe_ag.py: error:")]
    assert "permission denied" in line and "delete its run directory" not in line
    monkeypatch.setattr(torch, "load", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    with pytest.raises(UserError, match="permission denied") as refused:
        run_store.load_checkpoint(sweep_dir(out) / "model.pt")
    assert "delete it" not in str(refused.value)


def test_records_take_the_umasks_mode(records, tmp_path):
    for name in ("config.json", "result.json", "model.pt"):  # written by 01 under this process's umask
        assert (sweep_dir(records) / name).stat().st_mode & 0o777 == atomic.file_mode(), name
    previous = os.umask(0o007)  # a group sharing a cluster folder
    try:
        atomic.atomic_write_json(tmp_path / "config.json", {"a": 1})
        assert atomic.file_mode() == 0o660 and (tmp_path / "config.json").stat().st_mode & 0o777 == 0o660
    finally:
        os.umask(previous)


# ----------------------------------------------------------------------------- the launcher and the plan
def test_slurm_without_a_cluster_answering_is_one_line(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "srun", "squeue", "sacct"):  # installed, but no slurmctld answers
        (bin_dir / tool).write_text(
            "#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Unable to contact slurm controller "
            "(connect failure)' >&2\nexit 1\n"
        )
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    argv = [*SWEEP, "--depths", "1", "--epochs", "1", "--launcher", "slurm", "--out", str(tmp_path / "runs")]
    capsys.readouterr()
    assert importlib.import_module("01_train_resnet_sweep").main(argv) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("01_train_resnet_sweep.py: error:")]
    assert "Unable to contact slurm controller" in line and "--launcher local" in line
    assert "Traceback" not in err and not [x for x in err.splitlines() if x.startswith("sbatch:")]
    assert not list((tmp_path / "runs").rglob(run_store.RESULT))


def test_the_paper_preset_on_a_cpu_warns_with_an_estimated_time_from_flop_counts(monkeypatch, caplog):
    configs = sweep_configs(
        preset="paper", dataset="synthetic", device="cpu", overrides={"depths": [0, 40], "epochs": 2, "batch_size": 64}
    )
    first = SweepRun.from_config(configs[0])
    assert resnet_sweep._measured_step_s(first, (3, 32, 32), 4, 10, 1) > 0  # the measurement itself runs
    monkeypatch.setattr(resnet_sweep, "_measured_step_s", lambda *args: 0.5)
    with caplog.at_level(logging.WARNING):
        resnet_sweep.warn_cpu_time(configs)
        resnet_sweep.warn_cpu_time(sweep_configs(preset="smoke", dataset="synthetic", device="cpu"))  # no word
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "--preset paper on a CPU: 2 runs" in warning and "an estimate" in warning
    flops = {}
    for n in (0, 40):  # training FLOPs counted on the model itself, not by the cached shortcut the estimate takes
        with torch.device("meta"):
            model = ResNet(ResNetConfig(extra_blocks=n, num_classes=10))
        flops[n] = training_flops_per_image(model, (3, 32, 32), 10)
    total, step_s, batch = resnet_sweep.estimate_training_s(configs)
    assert (step_s, batch) == (0.5, 64)
    assert total == pytest.approx(0.5 * 2 * (512 // 64) * (1 + flops[40] / flops[0]))


# ----------------------------------------------------------------------------- faults of real processes
def tiny_sweep(tmp_path: Path, epochs: int, depths: str = "1") -> tuple[list[str], Path]:
    """01's flags for a sweep on 64 training images of 8x8 pixels (one step an epoch: the faults, not the training,
    take the time) under ``tmp_path/runs``, and the run directory of its first depth."""
    rng = np.random.default_rng(0)
    labels = {"y_train": np.arange(64) % 4, "y_test": np.arange(32) % 4}
    images = {f"x{k[1:]}": rng.integers(0, 256, (len(y), 8, 8, 3)).astype(np.uint8) for k, y in labels.items()}
    data = tmp_path / "tiny.npz"
    np.savez(data, **images, **labels)
    out = tmp_path / "runs"
    flags = ["--preset", "smoke", "--dataset", "npz", "--data-root", str(data), "--device", "cpu", "--out", str(out)]
    first = int(depths.split(",")[-1])
    config = sweep_configs(
        preset="smoke", dataset="npz", data_root=data, overrides={"depths": [first], "epochs": epochs}
    )[0]
    return [*flags, "--depths", depths, "--epochs", str(epochs)], RunSpec(config, str(out)).dir


def test_a_run_a_live_process_holds_is_refused_skipped_in_a_sweep_and_taken_over_once_it_is_gone(tmp_path, capsys):
    one, run = tiny_sweep(tmp_path, 1)
    sweep = [*one[:-4], "--depths", "0,1", "--epochs", "1"]
    holder = subprocess.Popen(  # another process holding the run's lock, as a training process does
        [
            sys.executable,
            "-c",
            "import sys; from common.runs.locks import RunLock; RunLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); sys.stdin.read()",
            str(run),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    train = importlib.import_module("01_train_resnet_sweep").main
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert train(one) == 2  # that one run: refused while its holder lives
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("01_train_resnet_sweep.py: error:")]
        assert "another process is training this run" in line and f"pid {holder.pid}" in line
        assert train(sweep) == 2  # a sweep: skips it, trains the other, and says which it left
        err = capsys.readouterr().err
        assert "skipped here" in err and "1 of 2 planned runs are being trained by another process" in err
        assert not run_store.is_done(run) and not run_store.read_metrics(run)
    finally:
        holder.kill()
        holder.wait()
    assert (run / locks.LOCK).is_file()  # a killed holder cannot remove its lock: the next call takes it over
    assert train(sweep) == 0
    assert "taking over the lock" in capsys.readouterr().err
    assert [m["epoch"] for m in run_store.read_metrics(run)] == [1] and not (run / locks.LOCK).exists()


def test_a_full_disk_is_one_line_and_leaves_a_run_that_resumes(tmp_path, capsys):
    argv, run = tiny_sweep(tmp_path, 2)
    limit = 100_000  # bytes: config.json and a metrics line fit, the first checkpoint does not (ulimit -f)
    proc = subprocess.run(
        [sys.executable, "01_train_resnet_sweep.py", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )
    lines = [x for x in proc.stderr.splitlines() if x.startswith("01_train_resnet_sweep.py: error:")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "checkpoint.pt could not be written (File too large)" in lines[0] and "resume" in lines[0]
    assert not run_store.is_done(run) and not list(run.glob("*.tmp")) and not (run / locks.LOCK).exists()
    assert importlib.import_module("01_train_resnet_sweep").main(argv) == 0  # space again: the same command
    assert [m["epoch"] for m in run_store.read_metrics(run)] == [1, 2] and run_store.is_done(run)


def test_a_torn_metrics_line_after_a_kill_is_cut_once_and_the_resumed_run_has_every_epoch_once(tmp_path, capsys):
    """01 held after its first epoch's checkpoint (``tests/helpers/resnet_jobs.py``), then killed there: mid-training
    on any machine, fast or slow (issue 59: the kill once raced the training)."""
    epochs = 10
    argv, run = tiny_sweep(tmp_path, epochs)
    held = [sys.executable, "-m", "tests.helpers.resnet_jobs", *argv]
    proc = subprocess.Popen(held, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = iter(proc.stdout.readline, "")  # ends when the process does
        assert any(line.startswith("holding after epoch 1") for line in lines), "it never reached its first epoch"
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-training, after a first checkpoint
        proc.wait()
    assert run_store.checkpoint_path(run).exists() and not run_store.is_done(run)
    done = len(run_store.read_metrics(run))
    with open(run / run_store.METRICS, "a") as handle:  # what a kill mid-append leaves: a line without its end
        handle.write(f'{{"epoch": {done + 1}, "step": {done + 1}, "train_lo')
    capsys.readouterr()
    assert importlib.import_module("01_train_resnet_sweep").main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("torn last line") == 1, err
    assert [m["epoch"] for m in run_store.read_metrics(run)] == list(range(1, epochs + 1))
