"""A growth run's config of script 03, typed: the sweep's run (:class:`~common.experiments.shared.resnet_sweep_config.SweepRun`)
and its ``growth`` section (:func:`~common.experiments.growth_vs_scratch.growth_config` writes it); the job reads it
once (:meth:`GrowthRun.from_config`). docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

from dataclasses import dataclass

from common.experiments.shared.resnet_sweep_config import SweepRun


@dataclass(frozen=True)
class GrowthSection:
    """``growth``: from ResNet-(8+``start_depth_n``), block ``k`` inserted before epoch ``epochs[k - 1]`` (the preset's
    fractions ``insert_at``); ``schedule``: "one", or the ablation's restart at every insertion; ``insertion`` and
    ``zero_init`` say where and how, as text."""

    start_depth_n: int
    insert_at: tuple[float, ...]
    epochs: tuple[int, ...]
    insertion: str
    zero_init: str
    schedule: str

    @property
    def restart(self) -> bool:
        """The ablation: optimizer and schedule restarted at every insertion."""
        return self.schedule != "one"


@dataclass(frozen=True)
class GrowthRun(SweepRun):
    """A growth run of script 03: a sweep run's keys and its ``growth``."""

    growth: GrowthSection


__all__ = ["GrowthRun", "GrowthSection"]
