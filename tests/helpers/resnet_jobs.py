"""The sweep's real job function, held mid-run so a test interrupts it there (test_slurm.py, test_bad_inputs.py).

Its own module, apart from ``tests/helpers/jobs.py``: importing the sweep pulls in the data stack
(torchvision, scikit-learn), which the many small jobs of ``tests/helpers/jobs.py`` do not need.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys

from common.experiments.shared import resnet_sweep as sweep
from common.runs import run_store
from tests.helpers.jobs import hold_for_a_signal


def held_resnet_run(spec) -> dict:
    """:func:`common.experiments.shared.resnet_sweep.train_resnet_run` unchanged, its first execution held after
    epoch ``runtime.hold_after``'s checkpoint until a signal ends it (a resumed execution, which finds a checkpoint,
    is not held), so a test interrupts it mid-run however fast the epochs are.

    The hold is runtime (not identity): the run directory and the weights are those of an unheld run of the same
    config, which the job is handed (the sweep's typed config has no ``hold_after``).
    """
    runtime = dict(spec.config["runtime"])
    hold_after = runtime.pop("hold_after", 0)
    fresh = not run_store.checkpoint_path(spec.dir).exists()
    train = sweep.train
    sweep.train = functools.partial(train, on_epoch_end=functools.partial(_hold_at, hold_after if fresh else 0))
    try:
        return sweep.train_resnet_run(dataclasses.replace(spec, config={**spec.config, "runtime": runtime}))
    finally:
        sweep.train = train


def _hold_at(hold_after: int, epoch: int, record: dict) -> None:
    if epoch == hold_after:
        hold_for_a_signal(epoch)


def main_held_after_first_epoch(argv: list[str]) -> int:
    """01's ``main(argv)`` whose training prints ``held`` after its first epoch's checkpoint and waits for a kill:
    what a process killed mid-training leaves, at a point a test knows (no race with the training's speed)."""
    script = importlib.import_module("01_train_resnet_sweep")
    train = sweep.train
    sweep.train = functools.partial(train, on_epoch_end=functools.partial(_hold_at, 1))
    try:
        return script.main(argv)
    finally:
        sweep.train = train


if __name__ == "__main__":
    raise SystemExit(main_held_after_first_epoch(sys.argv[1:]))
