"""A step count inside its bound but long to run is announced once with its estimate (common/training/long_run.py)."""

import itertools
import logging

import pytest
import torch
from torch import nn

from common.training import long_run
from common.training.loop import train
from common.training.recipes import AdamWRecipe, SGDRecipe, TrainSettings


class FakeClock:
    """``time.perf_counter`` that advances ``tick`` seconds at every call."""

    def __init__(self, tick: float):
        self.calls = itertools.count()
        self.tick = tick

    def perf_counter(self) -> float:
        return next(self.calls) * self.tick


def token_run(run_dir, recipe):
    torch.manual_seed(0)
    batches = [(torch.randint(0, 11, (4, 6)), torch.randint(0, 11, (4, 6))) for _ in range(3)]
    model = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 11))
    return train(model, batches, {}, run_dir=run_dir, settings=TrainSettings(recipe), device=torch.device("cpu"))


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == long_run.__name__ and r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    ("recipe", "flag", "left"),
    [(SGDRecipe(epochs=4, lr=0.1), "--epochs", 9), (AdamWRecipe(steps=12, lr=1e-3, eval_interval=3), "--steps", 9)],
)
def test_a_run_longer_than_an_hour_at_its_first_steps_is_announced_once(
    tmp_path, monkeypatch, caplog, recipe, flag, left
):
    # Every clock reading 1,000 s after the last: the first sync (after the first round's 3 steps) reads 1,000 s
    # for 3 steps, and the 9 steps left make 3,000 s: under the hour, quiet. At 4,000 s a reading, 12,000 s: announced.
    monkeypatch.setattr(long_run, "time", FakeClock(1000.0))
    with caplog.at_level(logging.WARNING):
        token_run(tmp_path / "quiet", recipe)
    assert warnings_of(caplog) == []
    monkeypatch.setattr(long_run, "time", FakeClock(4000.0))
    with caplog.at_level(logging.WARNING):
        token_run(tmp_path / "long", recipe)
    [line] = warnings_of(caplog)  # one warning, though every round ends with a sync
    assert line.startswith(f"train: {left:,} steps to go, about 3 hours at the 1333.333 s per step of the first 3")
    assert "an estimate" in line and f"pass a smaller {flag}" in line and "resumes from its last checkpoint" in line


def test_the_warning_names_the_flag_and_the_estimate_and_stays_quiet_under_an_hour(caplog):
    with caplog.at_level(logging.WARNING):
        assert long_run.warn_if_long("--steps 5000000", 5_000_000, 0.01, 25, "fix it") is True  # 50,000 s
        assert long_run.warn_if_long("--steps 300", 300, 0.01, 25, "fix it") is False  # 3 s
    [line] = warnings_of(caplog)
    assert (
        line
        == "--steps 5000000: 5,000,000 steps to go, about 14 hours at the 0.010 s per step of the first 25 (an estimate); fix it"
    )
    assert [long_run.duration_words(s) for s in (45, 150, 7200, 3 * 86400, 800 * 86400)] == [
        "45 s", "2 minutes", "2 hours", "3 days", "2 years",
    ]  # fmt: skip


def test_a_job_s_own_loop_is_timed_over_its_first_steps(monkeypatch, caplog):
    monkeypatch.setattr(long_run, "time", FakeClock(1000.0))
    clock = long_run.StepClock(100, "--gd-steps 100", "fix it", min_steps=3)
    clock.start(0)  # reads 0 s
    with caplog.at_level(logging.WARNING):
        for step in range(100):
            clock.tick(step)  # steps 0-2: not yet timed, no clock read; step 3 reads 1,000 s
    [line] = warnings_of(caplog)
    assert line.startswith("--gd-steps 100: 97 steps to go, about 9 hours at the 333.333 s per step of the first 3")
