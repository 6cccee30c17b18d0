"""05_gpt2_ascend.py end to end on a tiny decoder; AdamW training through common.training.loop; DDP; devices."""

from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import requests
import tiktoken.load
import torch
import torch.multiprocessing as mp

from common.errors import ParamError
from common.experiments.gpt2_ascend import gpt_configs, peak_flops, train_gpt_run
from common.experiments.shared import decoder_runs
from common.experiments.shared.decoder_runs import prepare_data
from common.launch.launcher import launch
from common.models.gpt import GPT, GPTConfig
from common.presets.gpt2_ascend import PAPER_DEPTHS
from common.report.rules.margins import PROJECTION_SLACK
from common.runs import atomic, run_store
from common.runs.run_store import make_specs
from common.training import device as devices
from common.training.checkpoints import WEIGHTS, load_weights
from common.training.epoch import classification_loss, train_epoch
from common.training.recipes import AdamWRecipe, Schedule, SGDRecipe, TrainSettings, cosine_lr
from tests.helpers.gpt_jobs import RECIPE, tiny_data, tiny_train, torchrun_script_worker
from tests.helpers.script_checks import free_port, one_error_line

script = importlib.import_module("05_gpt2_ascend")
TINY = [
    "--preset",
    "smoke",
    "--n-embd",
    "32",
    "--n-head",
    "2",
    "--block-size",
    "32",
    "--batch-tokens",
    "256",
    "--micro-batch-size",
    "4",
    "--steps",
    "12",
    "--n-evals",
    "2",
    "--val-tokens",
    "1024",
    "--probe-batch-size",
    "4",
    "--probe-batches",
    "2",
    "--lr",
    "0.01",
    "--warmup-steps",
    "2",
    "--device",
    "cpu",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """~12 KB of learnable text: a few sentences repeated in a seeded order."""
    rng = np.random.default_rng(0)
    sentences = [
        "the cat sat on the mat. ",
        "a dog ran in the park. ",
        "we add one more block. ",
        "depth helps until it does not. ",
    ]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("".join(rng.choice(sentences, 400)))
    return path


def test_sweep_trains_probes_reports_and_skips_finished_runs(corpus, tmp_path, capsys):
    args = [
        *TINY,
        "--text-file",
        str(corpus),
        "--depths",
        "1,2",
        "--data-root",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "runs"),
    ]
    assert script.main(args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = pd.read_csv(out[-1])  # the last line is the summary CSV's path
    assert "val_loss" in out[0] and "AGmax" in out[0] and "tokens/s" in out[0]
    assert summary["n_layer"].tolist() == [1, 2]
    assert {"ag_max", "ag_max_per_example", "ag_max_blocks", "val_loss", "tokens_per_s", "mfu"} <= set(summary.columns)

    found = sorted((tmp_path / "runs" / "gpt2_ascend").glob("*-L*"))
    for run, depth in zip(found, [1, 2], strict=True):
        result = run_store.read_result(run)
        candidates = pd.read_csv(run / "candidates.csv")
        assert candidates["name"].tolist() == [*(f"block{i}.in" for i in range(depth)), "ln_f.in"]  # L + 1
        assert result["ag_max"] == pytest.approx(candidates["ag_norm"].max())
        assert result["ag_max_per_example"] == pytest.approx(candidates["per_example_rms"].max())
        assert result["ag_max_blocks"] == pytest.approx(candidates["ag_norm"][:-1].max())
        assert (
            candidates["growth_value"] <= candidates["ag_norm"] * (1 + PROJECTION_SLACK)
        ).all()  # --exact, smoke (AG_l float32: the report's slack)
        metrics = run_store.read_metrics(run)
        assert len(metrics) == 2 and metrics[-1]["step"] == 12
        # Two evaluation rounds of 6 steps (not epochs), each round's rate in tokens per second (not images).
        assert result["eval_rounds"] == 2 and "epochs" not in result and all("images_per_s" not in m for m in metrics)
        assert result["tokens_per_s_rounds"] == [m["tokens_per_s"] for m in metrics]
        # A few steps lower the loss: from ln(vocab) at initialisation, well below it on held-out text.
        assert (
            metrics[-1]["val_loss"] < metrics[0]["val_loss"] < math.log(257)
            and metrics[-1]["train_loss"] < metrics[0]["train_loss"]
        )
        assert result["mfu"] is None and result["tokens_per_s"] > 0 and result["train_tokens_seen"] == 12 * 256
        assert not run_store.checkpoint_path(run).exists() and (run / WEIGHTS).is_file()

    stamps = [(r / "result.json").stat().st_mtime_ns for r in found]
    assert script.main(args) == 0  # finished: skipped
    assert [(r / "result.json").stat().st_mtime_ns for r in found] == stamps

    # Other probe settings are other runs, but the training is reused, not repeated; also from a record written
    # before evaluation rounds had their name.
    older = {("epochs" if k == "eval_rounds" else k): v for k, v in run_store.read_result(found[1]).items()}
    atomic.atomic_write_json(found[1] / "result.json", older)
    assert script.main([*args, "--depths", "2", "--probe-batches", "1"]) == 0
    reprobed = [r for r in (tmp_path / "runs" / "gpt2_ascend").glob("*-L2-*") if r != found[1]]
    assert len(reprobed) == 1 and not run_store.read_metrics(reprobed[0])
    result = run_store.read_result(reprobed[0])
    assert (
        result["trained_in"] == found[1].name
        and result["n_batches"] == 1
        and result["val_loss"] == run_store.read_result(found[1])["val_loss"]
    )
    assert result["eval_rounds"] == 2 and "epochs" not in result


def test_token_rates_read_metrics_written_before_tokens_per_s(tmp_path):
    # Older metrics lines of a token model hold sequences per second as images_per_s; newer ones tokens_per_s.
    for line in (
        {"epoch": 1, "images_per_s": 10.0},
        {"epoch": 2, "images_per_s": 30.0},
        {"epoch": 3, "tokens_per_s": 500.0},
    ):
        run_store.append_metrics(tmp_path, line)
    assert decoder_runs.token_rates(tmp_path, block_size=16) == (
        490.0,
        [160.0, 480.0, 500.0],
    )  # median of the rounds after the first


def test_paper_preset_plans_the_sweep_without_touching_data(tmp_path, capsys):
    configs = gpt_configs(preset="paper")
    assert [c["n_layer"] for c in configs] == list(PAPER_DEPTHS) == [1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24]
    c = configs[0]
    assert c["model"] == {
        "n_embd": 768,
        "n_head": 12,
        "n_inner": 3072,
        "block_size": 1024,
        "vocab_size": 50257,
        "dropout": 0.0,
        "bias": True,
    }
    assert GPTConfig(n_layer=12, **c["model"]).padded_vocab_size == 50304
    assert (
        c["data"]["source"] == "fineweb-edu"
        and c["data"]["subset"] == "sample-10BT"
        and c["data"]["train_tokens"] == 310_000_347
    )
    recipe = AdamWRecipe.from_config(c["train"])
    assert (
        c["train"]["batch_tokens"] == 131072 and recipe.steps == 2360 and recipe.eval_interval == 236
    )  # 310,000,347 // 131,072 = 2365
    assert (recipe.lr, recipe.beta2, recipe.weight_decay, recipe.grad_clip, recipe.warmup_steps) == (
        6e-4,
        0.95,
        0.1,
        1.0,
        100,
    )
    assert (
        peak_flops("NVIDIA H100 80GB HBM3") == 989e12
        and peak_flops("NVIDIA H100 PCIe") == 756e12
        and peak_flops("cpu") is None
    )
    assert script.main(["--dry-run", "--out", str(tmp_path / "never"), "--data-root", str(tmp_path / "no-data")]) == 0
    assert "12 planned runs" in capsys.readouterr().out
    assert not (tmp_path / "never").exists() and not (tmp_path / "no-data").exists()


# Run directories the presets planned before scripts 04 and 05 shared common/experiments/shared/decoder_runs.py: a refactor
# must not move them (finished runs would train again).
PINNED_RUN_DIRS = {
    "smoke": [
        "python-docs-byte-L1-d64-seed0-87d733a9",
        "python-docs-byte-L2-d64-seed0-a3db6a63",
        "python-docs-byte-L4-d64-seed0-d7adeedc",
    ],
    "paper": [
        "fineweb-edu-gpt2-L1-d768-seed0-4f42a630",
        "fineweb-edu-gpt2-L2-d768-seed0-648b1b15",
        "fineweb-edu-gpt2-L3-d768-seed0-f8c714cc",
        "fineweb-edu-gpt2-L4-d768-seed0-e4ff7ce1",
        "fineweb-edu-gpt2-L6-d768-seed0-2c6e6774",
        "fineweb-edu-gpt2-L8-d768-seed0-a720cc86",
        "fineweb-edu-gpt2-L10-d768-seed0-f9724664",
        "fineweb-edu-gpt2-L12-d768-seed0-e5c4a80f",
        "fineweb-edu-gpt2-L14-d768-seed0-4f6dca0a",
        "fineweb-edu-gpt2-L16-d768-seed0-5d48ac32",
        "fineweb-edu-gpt2-L20-d768-seed0-2a73f498",
        "fineweb-edu-gpt2-L24-d768-seed0-49ae50bc",
    ],
}


@pytest.mark.parametrize("preset", sorted(PINNED_RUN_DIRS))
def test_the_run_identities_of_the_presets_are_pinned(preset):
    assert [run_store.run_dir("runs", c).name for c in gpt_configs(preset=preset)] == PINNED_RUN_DIRS[preset]


def test_npu_without_torch_npu_is_one_line_and_exit_2(corpus, tmp_path, capsys):
    try:
        devices.import_torch_npu()
        pytest.skip("torch_npu imports here")
    except Exception:
        pass
    argv = [
        *TINY,
        "--device",
        "npu",
        "--text-file",
        str(corpus),
        "--data-root",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path),
    ]
    assert script.main(argv) == 2
    line = one_error_line(capsys)
    assert "torch_npu" in line and "requirements-npu.txt" in line
    assert not (tmp_path / "gpt2_ascend").exists()


def test_gpt2_tokenizer_offline_is_one_line_naming_byte_and_exit_2(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(
        tiktoken.load, "read_file", lambda url: (_ for _ in ()).throw(requests.ConnectionError("offline (test)"))
    )
    argv = [
        *TINY,
        "--tokenizer",
        "gpt2",
        "--text-file",
        str(corpus),
        "--data-root",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path),
    ]
    assert script.main(argv) == 2
    assert "--tokenizer byte" in one_error_line(capsys)


# ----------------------------------------------------------------------------- training through common.training.loop
class Killed(Exception):
    pass


def test_adamw_schedule_and_a_killed_run_resumes_bit_identical(corpus, tmp_path):
    lrs = [RECIPE.schedule(2).lr(s) for s in range(6)]
    assert lrs[:2] == [0.005, 0.01] and lrs[-1] == pytest.approx(cosine_lr(5, 6, 0.01, 2, 0.001)) and min(lrs) >= 0.001
    data = tiny_data(tmp_path / "tok", corpus)
    previous = torch.are_deterministic_algorithms_enabled()
    devices.set_deterministic(True)
    try:
        whole = tiny_train(tmp_path / "whole", data)

        def kill(epoch, record):
            if epoch == 2:
                raise Killed

        with pytest.raises(Killed):
            tiny_train(tmp_path / "resumed", data, on_epoch_end=kill)
        resumed = tiny_train(tmp_path / "resumed", data, model_seed=99)  # the checkpoint must win over a new init
    finally:
        torch.use_deterministic_algorithms(previous)
    a, b = load_weights(tmp_path / "whole"), load_weights(tmp_path / "resumed")
    assert all(torch.equal(a[k], b[k]) for k in a) and resumed["train_loss"] == whole["train_loss"]
    assert [r["step"] for r in run_store.read_metrics(tmp_path / "resumed")] == [2, 4, 6]


@dataclass(frozen=True)
class ClippedSGD(SGDRecipe):
    """Plain SGD with clipping: its update is the (clipped) gradient itself, so the test sees its scale."""

    grad_clip: float | None = None


@pytest.mark.parametrize("clip", [False, True])
def test_an_accumulated_step_follows_the_clipped_mean_gradient_of_the_whole_batch(clip):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_embd=16, n_head=2, block_size=8, vocab_size=50)).double()
    w = torch.randint(0, 50, (4, 9))
    x, y = w[:, :-1], w[:, 1:]
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(classification_loss(model(x), y), list(params.values()))  # the mean loss of all 4
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    # The clip is half the gradient norm; clip_grad_norm_ scales by max_norm / (norm + 1e-6) (its documented eps).
    scale = 0.5 * norm.item() / (norm.item() + 1e-6) if clip else 1.0
    expected = {k: p.detach() - 0.1 * scale * g for (k, p), g in zip(params.items(), grads, strict=True)}
    recipe = ClippedSGD(epochs=1, lr=0.1, momentum=0.0, weight_decay=0.0, grad_clip=0.5 * norm.item() if clip else None)
    optimizer = recipe.make_optimizer(model)
    halves = [(x[:2], y[:2]), (x[2:], y[2:])]  # two micro-batches of 2 sequences, one step
    stats = train_epoch(
        model,
        optimizer,
        halves,
        schedule=Schedule(0.1, 1, 0),
        step=0,
        settings=TrainSettings(recipe, accum_steps=2),
        device=torch.device("cpu"),
    )
    assert stats.step == 1
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), expected[k], rtol=1e-10, atol=1e-14)


def test_under_torchrun_rank_0_plans_and_both_ranks_train_each_run_together(corpus, tmp_path):
    common_args = [
        *TINY,
        "--text-file",
        str(corpus),
        "--depths",
        "1",
        "--data-root",
        str(tmp_path / "tok"),
        "--no-exact",
    ]
    alone = tmp_path / "alone"
    assert script.main([*common_args, "--micro-batch-size", "4", "--out", str(alone)]) == 0  # 8 sequences: 2 x 4
    shared = tmp_path / "torchrun"
    shared.mkdir()
    argv = [*common_args, "--micro-batch-size", "4", "--out", str(shared)]  # 8 sequences: 4 on each rank
    mp.spawn(torchrun_script_worker, args=(free_port(), argv, str(shared)), nprocs=2, join=True)
    ranks = [json.loads((shared / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["code"] for r in ranks] == [0, 0]
    assert "val_loss" in ranks[0]["stdout"] and ranks[1]["stdout"] == ""  # rank 1 neither plans nor reports
    [one], [two] = (list((out / "gpt2_ascend").glob("*-L1-*")) for out in (alone, shared))
    assert one.name == two.name  # the micro-batch size is not part of the run's identity
    assert len(run_store.read_metrics(two)) == 2 and run_store.read_result(two)["world_size"] == 2
    # Same global batch, same mean gradient (DDP's all-reduce vs accumulation): only float32 summation order differs.
    for key in ("val_loss", "train_loss"):  # train_loss: averaged over both ranks' micro-batches
        assert run_store.read_result(two)[key] == pytest.approx(run_store.read_result(one)[key], rel=1e-5), key
    a, b = load_weights(one), load_weights(two)
    # ~1e-8 everywhere but the attention key bias: its true gradient is 0 (softmax ignores a per-query
    # constant), and Adam scales the rounding noise up to ~lr * |g| / eps ~ 1e-6.
    assert all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-5) for k in a)
    assert max((a[k] - b[k]).abs().max().item() for k in a if "c_attn.bias" not in k) < 1e-6


def test_a_two_task_submitit_job_trains_one_run_through_ddp(corpus, tmp_path):
    """What a multi-task SLURM job does (submitit's local executor, 2 tasks): both tasks train the same run."""
    [config] = gpt_configs(
        preset="smoke",
        depths=[1],
        text_path=corpus,
        data_root=tmp_path / "tok",
        device="cpu",
        overrides={
            "n_embd": 32,
            "n_head": 2,
            "block_size": 32,
            "batch_tokens": 256,
            "micro_batch_size": 4,
            "steps": 4,
            "n_evals": 2,
            "val_tokens": 1024,
            "probe_batches": 1,
            "exact": False,
        },
    )
    prepare_data(config, progress=False)  # as the script does before submitting
    [result] = launch(
        train_gpt_run,
        make_specs([config], tmp_path / "runs"),
        launcher="local",
        executor_params={"tasks_per_node": 2, "timeout_min": 5},
    )
    assert result["world_size"] == 2 and result["steps"] == 4 and len(result["candidates"]) == 2
    [run] = (tmp_path / "runs" / "gpt2_ascend").glob("*-L1-*")
    assert len(run_store.read_metrics(run)) == 2  # one line per evaluation: only rank 0 wrote


def test_a_bad_value_from_python_names_the_parameter_and_the_command_line_names_its_flag(tmp_path, capsys):
    cases = [
        ({"overrides": {"n_embd": 64, "n_head": 5}}, "n_head=5: must divide the width n_embd 64"),
        ({"overrides": {"warmup_steps": -1}}, "warmup_steps=-1: must be >= 0"),
        ({"overrides": {"lr": 0.0}}, "lr=0.0: must be positive"),
        ({"depths": [0, 1]}, "depths=[0, 1]: give decoder depths L >= 1"),
        ({"overrides": {"steps": 2}}, "n_evals=3: 2 optimizer steps cannot hold 3 evaluations"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ParamError) as info:
            gpt_configs(preset="smoke", **kwargs)
        assert str(info.value).startswith(message), kwargs
    assert script.main(["--preset", "smoke", "--steps", "2", "--dry-run", "--out", str(tmp_path)]) == 2
    assert "--n-evals 3: 2 optimizer steps cannot hold 3 evaluations" in one_error_line(capsys)
