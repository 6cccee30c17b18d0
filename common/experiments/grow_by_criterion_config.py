"""A run's config of script 09, typed: the sweep's run (:class:`~common.experiments.shared.resnet_sweep_config.SweepRun`)
with its ``policy``, ``growth`` and ``probe`` sections (:func:`~common.experiments.grow_by_criterion.run_config` writes
them) and, for the calibration run of :mod:`common.experiments.grow_by_criterion_calibration`, ``calibration``. The
job reads it once (:meth:`CriterionRun.from_config`); every value's default is its preset's
(:mod:`common.presets.grow_by_criterion`). docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

from dataclasses import dataclass

from common.experiments.shared.resnet_sweep_config import SweepRun
from common.runs.typed_config import optional


@dataclass(frozen=True)
class CriterionGrowth:
    """``growth``: the budget (the sweep's ResNet-(8+``budget_depth_n``) for ``budget_epochs``), the probe cadence
    ``every``, the growth phase (``grow_until`` of the budget), the depth ``cap`` and the stop rule (``ratio_below``
    on ``in_a_row`` probes); ``block`` says which block, as text. A scratch run also names its criterion run
    (``scratch_of``) and its ``V_l`` (``scratch_v``)."""

    budget_depth_n: int
    budget_epochs: int
    every: int
    grow_until: float
    cap: int
    ratio_below: float
    in_a_row: int
    block: str
    scratch_of: str | None = optional()  # the scratch arm only
    scratch_v: str | None = optional()  # the scratch arm only


@dataclass(frozen=True)
class CriterionProbe:
    """``probe``: ``n_batches`` analysis batches of ``batch_size``, ``held_out`` images held apart, and App. G's
    interval (``app_g``: at ``alpha``, ``delta``, on a ``cal_fraction`` calibration part)."""

    batch_size: int
    n_batches: int
    held_out: int
    app_g: bool
    alpha: float
    cal_fraction: float
    delta: float | None


@dataclass(frozen=True)
class Calibration:
    """``calibration``: the calibration run's ``images``, drawn with ``data_seed``."""

    images: int
    data_seed: int


@dataclass(frozen=True)
class CriterionRun(SweepRun):
    """One (arm, seed) run of script 09: a sweep run's keys and its arm (``policy``), growth and probe."""

    policy: str
    growth: CriterionGrowth
    probe: CriterionProbe
    calibration: Calibration | None = optional()  # the calibration run only


__all__ = ["Calibration", "CriterionGrowth", "CriterionProbe", "CriterionRun"]
