"""A probe run's config of script 02, typed: what :func:`~common.experiments.probe_ag.probe_sweep_run` reads.

:class:`ProbeRun` holds the keys :func:`~common.experiments.probe_ag.probe_config` writes, App. G's settings as the
nested :class:`Saturation` (None: no App. G test at this depth) and ``runtime`` as :class:`ProbeRuntime`; the job
reads it once (:meth:`ProbeRun.from_config`: an unknown or missing key is refused by name). Every setting's default
is its preset's (:mod:`common.presets.probe_ag`); docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

from dataclasses import dataclass

from common.experiments.shared.resnet_sweep_config import SweepRunRef


@dataclass(frozen=True)
class Saturation:
    """``saturation``: App. G's test (its ``statistic`` and ``protocol``, as text) on ``n`` examples of ``split``
    (None: every one left), at ``alpha`` with a calibration part of ``cal_fraction`` (both None with a given ``t``),
    ``delta`` the tolerance (None: none)."""

    statistic: str
    protocol: str
    delta: float | None
    t: float | None
    alpha: float | None
    n: int | None
    split: str
    cal_fraction: float | None


@dataclass(frozen=True)
class ProbeRuntime:
    """``runtime``: the device, the sweep run's directory and where its data is found (None: where it was)."""

    device: str
    sweep_dir: str
    data_root: str | None


@dataclass(frozen=True)
class ProbeRun(SweepRunRef):
    """One probe run's config (:func:`~common.experiments.probe_ag.probe_config`), typed: the sweep run it probes
    (:class:`~common.experiments.shared.resnet_sweep_config.SweepRunRef`) and the probe's settings."""

    split: str
    batch_size: int
    n_batches: int
    exact: bool
    bn_mode: str
    probe_seed: int
    loss: str
    saturation: Saturation | None
    runtime: ProbeRuntime


__all__ = ["ProbeRun", "ProbeRuntime", "Saturation"]
