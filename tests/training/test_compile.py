"""Regional compilation (common/training/compile.py, issue 33 item 2): the blocks are compiled, not the model, so the compile
work of a run does not grow with its depth; a compiled run computes what the eager run computes.

On the CPU with dynamo's ``eager`` backend (``torch.compile`` patched, as tests/benchmarks/test_gpu_check.py
does): dynamo captures and guards exactly as with inductor, so the counts are those a GPU run compiles; the
captured graphs then run the same operations in the same order as the eager model, so the results are equal
bit for bit (docs/design.md, section "Numerical precision": a compiled run with the ``eager`` backend equals the
eager run exactly; inductor's fused kernels only to float32 rounding, which needs a GPU to measure).
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch._dynamo
from torch import nn

from common.data.loader import TensorLoader
from common.data.vision import make_synthetic
from common.models.gpt import GPT, GPTConfig
from common.models.resnet import ResNet, ResNetConfig
from common.training import compile as regional
from common.training.loop import train
from common.training.recipes import AdamWRecipe, SGDRecipe, TrainSettings

CPU = torch.device("cpu")
WIDTHS = (2, 4, 8)  # toy widths: every stage changes the channels, so the five block types differ in shape


@pytest.fixture(autouse=True)
def eager_backend(monkeypatch):
    """``torch.compile`` with the ``eager`` backend, one thread, and dynamo's default limit of 8 versions made fatal:
    a run that needed more than :data:`common.training.compile.RECOMPILE_LIMIT` would fail here instead of training eagerly."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield
    torch.set_num_threads(threads)


def resnet_run(tmp_path, n: int, *, compile: bool) -> tuple[dict, ResNet]:
    """ResNet-(8+N), one epoch of 3 batches of 8 with an evaluation (a batch of 8 and a partial one of 4)."""
    data = make_synthetic(num_train=24, num_test=12, num_classes=3, image_size=8, seed=0)
    keys = {"mean": data.mean, "std": data.std, "channels_last": True}
    torch.manual_seed(n)
    model = ResNet(ResNetConfig(extra_blocks=n, widths=WIDTHS, num_classes=3)).to(memory_format=torch.channels_last)
    summary = train(
        model,
        TensorLoader(data.x_train, data.y_train, 8, train=True, seed=1, **keys),
        {"test": TensorLoader(data.x_test, data.y_test, 8, train=False, **keys)},
        final_eval_loaders={"train": TensorLoader(data.x_train, data.y_train, 8, train=False, **keys)},
        run_dir=tmp_path / f"n{n}-{compile}",
        settings=TrainSettings(SGDRecipe(epochs=1, lr=0.05), compile=compile, channels_last=True),
        device=CPU,
    )
    return summary, model


def same_results(compiled: dict, eager: dict, a: nn.Module, b: nn.Module, keys: tuple[str, ...]) -> None:
    """The ``keys`` of the two summaries and the two models' weights: equal bit for bit (the eager backend)."""
    for key in keys:
        assert compiled[key] == eager[key], key
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_resnet_compile_counts_do_not_grow_with_depth_and_the_results_are_the_eager_runs(tmp_path):
    """ResNet-11 and ResNet-17 (N = 3 and 9: all five block types) compile the same frames, graphs and operations:
    five types x three input shapes (the training batch in train mode; the evaluation batch of 8 and its partial
    last batch of 4 in eval mode). ResNet-8 has three of the types (no stride-1 block in stages 2 and 3)."""
    counts = {}
    for n in (3, 9):
        summary, model = resnet_run(tmp_path, n, compile=True)
        counts[n] = summary["compile"]
        eager, plain = resnet_run(tmp_path, n, compile=False)
        same_results(summary, eager, model, plain, ("train_loss", "train_acc", "test_loss", "test_acc", "steps"))
        assert "compile" not in eager
    assert (counts[3].pop("regions"), counts[9].pop("regions")) == (3 + 3, 3 + 9)  # every block is a region
    assert counts[3] == counts[9], counts  # what is compiled: the same at both depths
    types, shapes = 5, 3
    assert counts[9] == {
        "mode": "regional",
        "frames": types * shapes,
        "frames_not_compiled": 0,
        "graphs": types * shapes,
        "ops": counts[9]["ops"],
    }
    small = resnet_run(tmp_path, 0, compile=True)[0]["compile"]
    assert small["graphs"] == 3 * shapes and small["ops"] < counts[3]["ops"]


def test_a_compiled_run_leaves_plain_blocks_and_the_same_checkpoint_keys(tmp_path):
    summary, model = resnet_run(tmp_path, 1, compile=True)
    assert all("forward" not in vars(block) for block in model.blocks)  # the final evaluation and the probe: eager
    saved = torch.load(tmp_path / "n1-True" / "model.pt", weights_only=True)["model"]
    assert list(saved) == list(ResNet(ResNetConfig(extra_blocks=1, widths=WIDTHS, num_classes=3)).state_dict())
    assert summary["cudnn_benchmark"] is False  # the CPU has no cuDNN (common.training.device.cudnn_benchmark)


def gpt_run(tmp_path, layers: int, *, compile: bool) -> tuple[dict, GPT]:
    """A 16-wide GPT of ``layers`` blocks, 2 AdamW steps on batches of 2 x 8 tokens, one validation of 2 batches."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 64, (2, 8), generator=g), torch.randint(0, 64, (2, 8), generator=g)) for _ in "ab"]
    torch.manual_seed(layers)
    model = GPT(GPTConfig(n_layer=layers, n_embd=16, n_head=2, block_size=8, vocab_size=64))
    recipe = AdamWRecipe(steps=2, eval_interval=2, lr=1e-3)
    summary = train(
        model,
        batches,
        {"val": batches},
        run_dir=tmp_path / f"l{layers}-{compile}",
        settings=TrainSettings(recipe, compile=compile),
        device=CPU,
        counts="tokens",
    )
    return summary, model


def test_gpt_compile_counts_do_not_grow_with_depth_and_the_results_are_the_eager_runs(tmp_path):
    """One block type: a graph for training and one for evaluation, at 1 layer as at 4."""
    counts = {}
    for layers in (1, 4):
        summary, model = gpt_run(tmp_path, layers, compile=True)
        counts[layers] = summary["compile"]
        eager, plain = gpt_run(tmp_path, layers, compile=False)
        same_results(summary, eager, model, plain, ("val_loss", "val_acc", "train_loss", "steps"))
    assert (counts[1].pop("regions"), counts[4].pop("regions")) == (1, 4)
    assert counts[1] == counts[4], counts
    assert (counts[1]["mode"], counts[1]["graphs"], counts[1]["frames_not_compiled"]) == ("regional", 2, 0)


def test_a_model_without_blocks_is_compiled_whole(tmp_path):
    torch.manual_seed(0)
    batches = [(torch.randint(0, 7, (4, 5)), torch.randint(0, 7, (4, 5)))]
    model = nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 7))
    settings = TrainSettings(SGDRecipe(epochs=1, lr=0.1), compile=True)
    summary = train(model, batches, {}, run_dir=tmp_path, settings=settings, device=CPU)
    assert regional.repeated_blocks(model) is None
    assert summary["compile"]["mode"] == "whole" and summary["compile"]["regions"] == 0
    assert summary["compile"]["frames"] >= 1 and summary["compile"]["frames_not_compiled"] == 0
