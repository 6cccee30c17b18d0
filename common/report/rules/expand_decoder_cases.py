"""The simulated worlds of the rule about expanding a decoder by the criterion (:mod:`common.report.rules.expand_decoder`,
script 10): the function :data:`common.report.rules.cases.CASES` simulates it with (docs/claim-rules.md lists the
worlds).

- :func:`sim_expansion`: per run (one per K and seed), the other policy's held-out loss minus the criterion's after
  S steps, the effect (claim true) or 0 (claim false, the boundary of "lower") plus Gaussian noise, paired over the
  design's runs (:attr:`common.report.rules.design.Design.expand_runs`): 09's placement world
  (:func:`common.report.rules.grow_by_criterion_cases.sim_placement`) over runs instead of seeds.
"""

from __future__ import annotations

import numpy as np

from common.report.rules.design import Design
from common.report.rules.expand_decoder import expansion_lower_held_out_loss
from common.report.rules.grow_by_criterion_cases import paired_verdicts


def sim_expansion(design: Design, rng: np.random.Generator, reps: int, k: float, world: str) -> list[str]:
    return paired_verdicts(expansion_lower_held_out_loss, design.expand_runs, rng, reps, k, world)


__all__ = ["sim_expansion"]
