"""The simulated worlds of the rules about growth by the criterion (:mod:`common.report.rules.grow_by_criterion`, script 09): the
functions :data:`common.report.rules.cases.CASES` simulates them with (docs/claim-rules.md lists the worlds).

- :func:`sim_placement`: per seed, the other placement's training loss minus the criterion's at round K, the effect
  (claim true) or 0 (claim false, the boundary of "lower") plus Gaussian noise, paired over the design's seeds;
- :func:`sim_stop`: per seed, a largest ``V_S,l`` falling geometrically, ``V(r) = V(0) 10^(-r / c)``, so that rule
  (c) (``V < V(0) / 10``) fires at the first round past ``c``: ``max(1, floor(c) + 1)``, or not within K rounds. The
  sweep's N* is the middle round ``ceil(K / 2)``; ``c = N* - 1/2 + gap + noise`` puts the noiseless stop at
  ``N* + gap``: gap 0 (claim true), ``k + 1`` (claim false: the nearest whole depth outside ``±k``);
- :func:`sim_regime`: the regime of the design, per seed a log training loss at B of the ResNet-8 and of the deeper
  network, the deeper one lower by the effect (depth pays) or equal (the boundary of "pays"), Gaussian noise on the
  log scale, the design's seeds on each side.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from common.report.rules.design import Design
from common.report.rules.grow_by_criterion import (
    STOP_TOLERANCE,
    depth_pays_at_equal_flops,
    placement_lower_train_loss,
    stop_within_depths,
)
from common.report.rules.verdicts import Outcome

STOP_EFFECT = STOP_TOLERANCE + 1  # depths from the true world's gap (0) to the false world's (k + 1)


def paired_verdicts(
    rule: Callable[..., Outcome], pairs: int, rng: np.random.Generator, reps: int, k: float, world: str
) -> list[str]:
    """The verdicts of ``reps`` simulated sets of ``pairs`` paired differences (other - criterion, one per seed or
    run), each the effect (claim true) or 0 (false) plus Gaussian noise ``k`` times the effect, through ``rule``
    (called as ``rule(criterion, other, "other")``, a paired rule of :mod:`common.report.rules.grow_by_criterion`'s form)."""
    effect = 1.0 if world == "true" else 0.0
    d = effect + k * rng.normal(size=(reps, pairs))  # the effect is the noise unit
    criterion = dict.fromkeys(range(pairs), 0.0)
    return [rule(criterion, dict(enumerate(row.tolist())), "other").verdict for row in d]


def sim_placement(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    return paired_verdicts(placement_lower_train_loss, design.grow_seeds, rng, reps, k, world)


def stop_plateau(rounds: int) -> int:
    """The simulated sweep's N*: the middle round, so that the window ``N* ± k`` lies inside the rounds run."""
    return max(1, math.ceil(rounds / 2))


def sim_stop(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    rounds, plateau = design.grow_rounds, stop_plateau(design.grow_rounds)
    gap = 0.0 if world == "true" else float(STOP_EFFECT)
    crossing = plateau - 0.5 + gap + k * STOP_EFFECT * rng.normal(size=(reps, design.grow_seeds))
    stop = np.maximum(1, np.floor(crossing) + 1).astype(int)
    verdicts = []
    for row in stop:
        stops = {s: (int(d) if d <= rounds else None) for s, d in enumerate(row)}
        verdicts.append(stop_within_depths(stops, plateau, rounds).verdict)
    return verdicts


def sim_regime(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    n = design.grow_seeds
    gap = 1.0 if world == "true" else 0.0  # log(ResNet-8's loss / the deeper one's): the effect is the noise unit
    shallow = np.exp(k * rng.normal(size=(reps, n)))
    deep = np.exp(-gap + k * rng.normal(size=(reps, n)))
    return [depth_pays_at_equal_flops(a.tolist(), b.tolist()).verdict for a, b in zip(shallow, deep, strict=True)]


__all__ = ["STOP_EFFECT", "paired_verdicts", "sim_placement", "sim_regime", "sim_stop", "stop_plateau"]
