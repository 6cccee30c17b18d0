"""The sweep's real job function, paced so a SLURM test can interrupt it mid-run (test_slurm.py).

Its own module, apart from ``tests/helpers/jobs.py``: importing the sweep pulls in the data stack
(torchvision, scikit-learn), which the many small jobs of ``tests/helpers/jobs.py`` do not need.
"""

from __future__ import annotations

import dataclasses
import functools
import time

from common.experiments.shared import resnet_sweep as sweep


def paced_resnet_run(spec) -> dict:
    """:func:`common.experiments.shared.resnet_sweep.train_resnet_run` unchanged, pausing ``runtime.pause_s`` after each
    epoch's checkpoint, so a test can interrupt it mid-run even when epochs take milliseconds.

    The pause is runtime (not identity): the run directory and the weights are those of an
    unpaced run of the same config, which the job is handed (the sweep's typed config has no ``pause_s``).
    """
    runtime = dict(spec.config["runtime"])
    pause_s = runtime.pop("pause_s", 0)
    train = sweep.train
    sweep.train = functools.partial(train, on_epoch_end=lambda epoch, record: time.sleep(pause_s))
    try:
        return sweep.train_resnet_run(dataclasses.replace(spec, config={**spec.config, "runtime": runtime}))
    finally:
        sweep.train = train
