"""common/train.py: schedule, bit-identical resume, NaN handling, token-shaped batches."""

import json

import pytest
import torch
from torch import nn

from common import device, runs
from common.data.vision import TensorLoader, make_synthetic
from common.models.resnet import ResNet, ResNetConfig
from common.train import WEIGHTS, NonFiniteLossError, SGDRecipe, TrainSettings, cosine_lr, load_weights, train

SETTINGS = TrainSettings(SGDRecipe(epochs=3, lr=0.05, warmup_epochs=1), channels_last=True)


def tiny_run(run_dir, *, model_seed=0, on_epoch_end=None, settings=SETTINGS):
    data = make_synthetic(num_train=64, num_test=32, num_classes=4, image_size=8, seed=0)
    loader_keys = {"mean": data.mean, "std": data.std, "channels_last": True}
    device.seed_everything(model_seed)
    model = ResNet(ResNetConfig(extra_blocks=1, widths=(4, 8, 8), num_classes=4))
    return train(
        model,
        TensorLoader(data.x_train, data.y_train, 16, train=True, seed=7, **loader_keys),
        {"test": TensorLoader(data.x_test, data.y_test, 32, train=False, **loader_keys)},
        final_eval_loaders={"train": TensorLoader(data.x_train, data.y_train, 32, train=False, **loader_keys)},
        run_dir=run_dir,
        settings=settings,
        device=torch.device("cpu"),
        on_epoch_end=on_epoch_end,
    )


class Killed(Exception):
    pass


def test_cosine_schedule_warms_up_linearly_then_decays_to_zero():
    lrs = [cosine_lr(s, 10, 1.0, warmup_steps=2) for s in range(10)]
    assert lrs[:3] == [0.5, 1.0, 1.0] and lrs[-1] == pytest.approx(0.5 * (1 + torch.cos(torch.tensor(7 / 8 * torch.pi)).item()))
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))
    assert cosine_lr(10, 10, 1.0) == 0.0


def test_killed_run_resumes_to_bit_identical_weights(tmp_path, deterministic):
    whole = tiny_run(tmp_path / "whole")

    def kill_after_first_epoch(epoch, record):
        if epoch == 1:
            raise Killed

    with pytest.raises(Killed):
        tiny_run(tmp_path / "resumed", on_epoch_end=kill_after_first_epoch)
    assert not (tmp_path / "resumed" / WEIGHTS).exists()
    # a crash after a metrics line but before its checkpoint leaves a stale line behind
    runs.append_metrics(tmp_path / "resumed", {"epoch": 2, "stale": True})
    resumed = tiny_run(tmp_path / "resumed", model_seed=123)  # fresh init: the checkpoint must win

    a, b = load_weights(tmp_path / "whole"), load_weights(tmp_path / "resumed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["epoch"] for r in runs.read_metrics(tmp_path / "resumed")] == [1, 2, 3]
    for key in ("train_loss", "train_acc", "test_loss", "test_acc", "steps"):
        assert resumed[key] == whole[key], key


def test_nan_loss_stops_naming_the_step_and_nothing_is_finished(tmp_path):
    class NaNFromStep(nn.Module):
        def __init__(self, step):
            super().__init__()
            self.step, self.calls, self.fc = step, 0, nn.Linear(3 * 8 * 8, 4)

        def forward(self, x):
            out = self.fc(x.flatten(1))
            if self.training:
                self.calls += 1
                if self.calls > self.step:
                    out = out * float("nan")
            return out

    data = make_synthetic(num_train=64, num_test=16, num_classes=4, image_size=8)
    loader = TensorLoader(data.x_train, data.y_train, 16, train=True, mean=data.mean, std=data.std)
    with pytest.raises(NonFiniteLossError, match=r"nan at step 5 \(epoch 2, batch 1\)"):
        train(NaNFromStep(5), loader, {}, run_dir=tmp_path, settings=SETTINGS, device=torch.device("cpu"))
    assert not (tmp_path / WEIGHTS).exists() and not runs.is_done(tmp_path)
    assert runs.resume_state(tmp_path)["epoch"] == 1  # the last good epoch stays resumable


def test_token_shaped_batches_train_and_evaluate(tmp_path):
    torch.manual_seed(0)
    vocab, batches = 11, [(torch.randint(0, 11, (4, 6)), torch.randint(0, 11, (4, 6))) for _ in range(3)]
    model = nn.Sequential(nn.Embedding(vocab, 8), nn.Linear(8, vocab))  # (B, T) -> (B, T, V)
    summary = train(model, batches, {"val": batches}, run_dir=tmp_path, settings=TrainSettings(SGDRecipe(epochs=2, lr=0.1)), device=torch.device("cpu"))
    assert summary["epochs"] == 2 and summary["steps"] == 6 and 0 <= summary["val_acc"] <= 1
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    assert {"lr", "train_loss", "train_acc", "val_loss", "images_per_s"} <= json.loads(lines[0]).keys()
