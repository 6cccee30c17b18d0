"""common/training/loop.py and common/training/recipes.py: schedules, bit-identical resume, NaN handling, token-shaped batches, early stopping."""

import json

import pytest
import torch
from torch import nn

from common.data.loader import TensorLoader
from common.data.neural_ode import BatchLoader
from common.data.vision import make_synthetic
from common.models.resnet import ResNet, ResNetConfig
from common.runs import run_store
from common.training import device
from common.training.checkpoints import WEIGHTS, load_weights
from common.training.epoch import NonFiniteLossError
from common.training.loop import train
from common.training.recipes import AdamRecipe, EarlyStopping, Schedule, SGDRecipe, TrainSettings, cosine_lr

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
    assert lrs[:3] == [0.5, 1.0, 1.0] and lrs[-1] == pytest.approx(
        0.5 * (1 + torch.cos(torch.tensor(7 / 8 * torch.pi)).item())
    )
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
    run_store.append_metrics(tmp_path / "resumed", {"epoch": 2, "stale": True})
    resumed = tiny_run(tmp_path / "resumed", model_seed=123)  # fresh init: the checkpoint must win

    a, b = load_weights(tmp_path / "whole"), load_weights(tmp_path / "resumed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["epoch"] for r in run_store.read_metrics(tmp_path / "resumed")] == [1, 2, 3]
    for key in ("train_loss", "train_acc", "test_loss", "test_acc", "steps"):
        assert resumed[key] == whole[key], key


def test_sparse_eval_and_checkpoints_resume_bit_identically_and_train_as_every_epoch(tmp_path, deterministic):
    """eval_every = checkpoint_every = 2 over 5 epochs: the test set at epochs 2, 4 and 5 (the last), checkpoints
    at 2, 4 and 5; killed after epoch 3 the run resumes from epoch 2's checkpoint, and its weights and final
    losses are those of the uninterrupted run and of the run that evaluates and checkpoints every epoch."""
    recipe = SGDRecipe(epochs=5, lr=0.05, warmup_epochs=1)
    every = tiny_run(tmp_path / "every", settings=TrainSettings(recipe, channels_last=True))
    sparse = TrainSettings(recipe, channels_last=True, eval_every=2, checkpoint_every=2)
    whole = tiny_run(tmp_path / "whole", settings=sparse)
    saved = []

    def kill_after_third_epoch(epoch, record):
        path = run_store.checkpoint_path(tmp_path / "resumed")
        saved.append(torch.load(path, weights_only=False)["epoch"] if path.exists() else None)
        if epoch == 3:
            raise Killed

    with pytest.raises(Killed):
        tiny_run(tmp_path / "resumed", settings=sparse, on_epoch_end=kill_after_third_epoch)
    assert saved == [None, 2, 2]  # epoch 1 wrote no checkpoint, epoch 3 kept epoch 2's
    resumed = tiny_run(tmp_path / "resumed", settings=sparse, model_seed=123)
    weights = [load_weights(tmp_path / name) for name in ("every", "whole", "resumed")]
    assert all(w.keys() == weights[0].keys() and all(torch.equal(weights[0][k], w[k]) for k in w) for w in weights)
    records = run_store.read_metrics(tmp_path / "resumed")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["epoch"] for r in records if "test_loss" in r] == [2, 4, 5]
    for key in ("train_loss", "train_acc", "test_loss", "test_acc", "steps"):
        assert resumed[key] == whole[key] == every[key], key


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
    assert not (tmp_path / WEIGHTS).exists() and not run_store.is_done(tmp_path)
    assert run_store.resume_state(tmp_path)["epoch"] == 1  # the last good epoch stays resumable


def test_token_shaped_batches_train_and_evaluate(tmp_path):
    torch.manual_seed(0)
    vocab, batches = 11, [(torch.randint(0, 11, (4, 6)), torch.randint(0, 11, (4, 6))) for _ in range(3)]
    model = nn.Sequential(nn.Embedding(vocab, 8), nn.Linear(8, vocab))  # (B, T) -> (B, T, V)
    summary = train(
        model,
        batches,
        {"val": batches},
        run_dir=tmp_path,
        settings=TrainSettings(SGDRecipe(epochs=2, lr=0.1)),
        device=torch.device("cpu"),
    )
    assert summary["epochs"] == 2 and summary["steps"] == 6
    # The last evaluation saw the trained model: accuracy is the fraction of the 3 x 4 x 6 tokens whose argmax
    # over the vocabulary is the target, the loss the mean token cross-entropy (float32 sums, hence 1e-6).
    with torch.no_grad():
        logits, targets = torch.cat([model(x) for x, _ in batches]), torch.cat([y for _, y in batches])
    assert summary["val_acc"] == (logits.argmax(-1) == targets).sum().item() / targets.numel()
    assert summary["val_loss"] == pytest.approx(
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item(), rel=1e-6
    )
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    assert {"lr", "train_loss", "train_acc", "val_loss", "images_per_s"} <= json.loads(lines[0]).keys()


# ----------------------------------------------------------------------------- Cohen et al.'s protocol
def test_constant_schedule_keeps_the_peak_rate_after_warm_up():
    lrs = [Schedule(1.0, 10, 2, decay="constant").lr(s) for s in range(10)]
    assert lrs == [0.5] + [1.0] * 9
    assert AdamRecipe(epochs=3, lr=0.1, decay="constant").schedule(4).lr(11) == 0.1
    assert AdamRecipe(epochs=3, lr=0.1).schedule(4).lr(11) < 0.01  # cosine: near 0 at the last step
    with pytest.raises(ValueError):
        AdamRecipe(epochs=3, lr=0.1, decay="step")
    # The decay is a config key only when it is not the cosine every earlier run used: their identities stay.
    assert "decay" not in AdamRecipe(epochs=3, lr=0.1).to_config()
    assert AdamRecipe.from_config(AdamRecipe(epochs=3, lr=0.1, decay="constant").to_config()).decay == "constant"
    assert (
        AdamRecipe.from_config(
            {
                "epochs": 3,
                "lr": 0.1,
                "beta1": 0.9,
                "beta2": 0.999,
                "eps": 1e-8,
                "weight_decay": 0.0,
                "warmup_epochs": 0.0,
            }
        ).decay
        == "cosine"
    )


def test_early_stopping_counts_epochs_without_a_one_percent_gain_and_stops_below_the_threshold():
    rule = EarlyStopping(below=1e-3, patience=2, min_improvement=0.01)
    state, trace = rule.initial_state(), []
    for loss in (1.0, 0.995, 0.98, 0.975, 0.9705):  # 0.995 is not below 0.99 * 1.0; 0.98 is; 0.9705 is not below 0.9702
        state = rule.update(state, loss)
        trace.append((state["best"], state["bad_epochs"], state["stopped"]))
    assert trace == [(1.0, 0, None), (1.0, 1, None), (0.98, 0, None), (0.98, 1, None), (0.98, 2, "no improvement")]
    assert rule.update(rule.initial_state(), 9e-4)["stopped"] == "converged"  # the first epoch already below 1e-3
    assert rule.update(rule.initial_state(), 1e-3)["stopped"] is None  # strictly below


def regression_run(run_dir, *, on_epoch_end=None, model_seed=0):
    """A linear regression under Cohen et al.'s protocol (constant Adam rate, early stopping) that stops early."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g)
    y = x @ torch.randn(3, 3, generator=g) + 0.3 * torch.randn(64, 3, generator=g)  # noise: the loss levels off
    device.seed_everything(model_seed)
    model = nn.Linear(3, 3)
    settings = TrainSettings(
        AdamRecipe(epochs=60, lr=0.05, decay="constant"),
        amp=False,
        loss="mse",
        stopping=EarlyStopping(below=1e-4, patience=3, min_improvement=0.05),
    )
    return train(
        model,
        BatchLoader(x, y, 16, shuffle=True, seed=1),
        {},
        run_dir=run_dir,
        settings=settings,
        device=torch.device("cpu"),
        on_epoch_end=on_epoch_end,
    )


def test_killed_run_resumes_and_stops_at_the_same_epoch(tmp_path, deterministic):
    whole = regression_run(tmp_path / "whole")
    stop_epoch = whole["epochs"]
    assert 3 < stop_epoch < 60 and whole["stopping"]["stopped"] == "no improvement", whole["stopping"]
    assert [r["epoch"] for r in run_store.read_metrics(tmp_path / "whole")] == list(range(1, stop_epoch + 1))

    def kill_at(epoch_to_kill):
        def hook(epoch, record):
            if epoch == epoch_to_kill:
                raise Killed

        return hook

    # Killed in the middle (the stopping state must come back from the checkpoint, or the count restarts) and
    # right after the stopping epoch's checkpoint (a resumed run must not train on).
    for name, at in (("middle", stop_epoch - 2), ("at-stop", stop_epoch)):
        with pytest.raises(Killed):
            regression_run(tmp_path / name, on_epoch_end=kill_at(at))
        resumed = regression_run(tmp_path / name, model_seed=123)
        assert resumed["epochs"] == stop_epoch and resumed["stopping"] == whole["stopping"], name
        assert [r["epoch"] for r in run_store.read_metrics(tmp_path / name)] == list(range(1, stop_epoch + 1))
        a, b = load_weights(tmp_path / "whole"), load_weights(tmp_path / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name
