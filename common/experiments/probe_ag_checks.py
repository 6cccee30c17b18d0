"""The sample-size checks of script 02 (:mod:`common.experiments.probe_ag`): refused before any run starts.

:func:`check_sample_sizes` refuses analysis batches a sweep run's split cannot fill and an App. G sample of fewer
than 2 examples, from the sweep run's recorded split sizes; :func:`check_batches_fit` is the one check of ``B``
batches of ``b`` examples, which the job repeats on the images it reads (docs/decisions.md).
"""

from __future__ import annotations

from pathlib import Path

from common.errors import ParamError
from common.runs import run_store


def check_sample_sizes(
    sweep_dir: Path, split: str, batch_size: int, n_batches: int, saturation_split: str | None
) -> None:
    """Refuse analysis batches the split cannot fill, and an App. G sample of fewer than 2 examples (docs/decisions.md),
    before any run starts.

    The split sizes come from the sweep run's ``result.json`` (``train_size``, ``test_size``); a run without
    them is checked by the job itself, on the images it reads (:func:`check_batches_fit`).
    """
    result = run_store.read_result(sweep_dir)
    size = result.get(f"{split}_size")
    if not isinstance(size, int):
        return
    check_batches_fit(size, batch_size, n_batches, f"the {split} split of {sweep_dir.name}")
    if saturation_split is None:  # no App. G sample (saturation_depths "deepest", a shallower depth)
        return
    left = result.get(f"{saturation_split}_size")
    if saturation_split == split and isinstance(left, int) and left - batch_size * n_batches < 2:
        raise ParamError(
            "saturation_split",
            saturation_split,
            f"the analysis batches take {batch_size * n_batches} of its {left} examples, leaving fewer than 2 for the "
            "App. G sample; use test, or fewer n_batches",
        )


def check_batches_fit(available: int, batch_size: int, n_batches: int, where: str) -> None:
    """Refuse ``n_batches`` batches of ``batch_size`` when ``where`` (a split) holds only ``available`` examples: never
    fewer or smaller batches than the run's name says (docs/decisions.md), which would change ``AG_l``'s meaning (an
    average over B batches of size b) under a record named after the request."""
    if available >= batch_size * n_batches:
        return
    holds = f"{where} holds {available} examples"
    if available < batch_size:
        raise ParamError("batch_size", batch_size, f"{holds}, fewer than one batch; use {available} or less")
    raise ParamError(
        "n_batches",
        n_batches,
        f"{n_batches} batches of batch_size {batch_size} need {batch_size * n_batches} examples and {holds}; use at "
        f"most {available // batch_size} (or another split)",
    )
