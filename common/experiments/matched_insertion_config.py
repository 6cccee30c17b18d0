"""A matched-insertion run's config of script 06, typed: what
:func:`~common.experiments.matched_insertion.matched_insertion_run` reads.

:class:`MatchedRun` holds the keys :func:`~common.experiments.matched_insertion.matched_config` writes, ``runtime``
as :class:`MatchedRuntime`; the job reads it once (:meth:`MatchedRun.from_config`: an unknown or missing key is
refused by name). Every setting's default is its preset's (:mod:`common.presets.matched_insertion`);
docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

from dataclasses import dataclass

from common.experiments.shared.resnet_sweep_config import SweepRunRef
from common.runs.typed_config import optional


@dataclass(frozen=True)
class MatchedRuntime:
    """``runtime``: the device, the sweep run's directory, where its data is found (None: where it was) and the
    images per evaluation batch."""

    device: str
    sweep_dir: str
    data_root: str | None
    batch_size: int


@dataclass(frozen=True)
class MatchedRun(SweepRunRef):
    """One matched-insertion run's config, typed: the sweep run it reads
    (:class:`~common.experiments.shared.resnet_sweep_config.SweepRunRef`), its ``candidates`` (by ``candidate_rule``),
    ``alphas``, ``fit`` and ``U_l``'s ``block_seed``; ``split``, ``targets`` and ``loss_dtype`` say what is fitted and
    measured, as text."""

    candidate_rule: str
    candidates: tuple[int, ...]
    alphas: tuple[float, ...]
    fit: str
    block_seed: int
    split: str
    targets: str
    loss_dtype: str
    runtime: MatchedRuntime
    gd_steps: int | None = optional()  # written with the gradient-descent fit only


__all__ = ["MatchedRun", "MatchedRuntime"]
