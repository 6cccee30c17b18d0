"""Claim rules about Cohen et al.'s weight-scaling exponents: within the tolerance of theirs, their sign."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from common.report.rules.margins import EXPONENT_TOLERANCE
from common.report.rules.statistics import region_verdict
from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE, Outcome, rule


# ----------------------------------------------------------------------------- rules: weight scaling
@rule(
    f"every fitted exponent's interval (07's fit, 95%) lies within ±{EXPONENT_TOLERANCE} of the paper's (Cohen et al.; an "
    "equivalence test); does not hold when one interval lies outside that band; else not decidable; none fitted (too few "
    "depths): not decidable"
)
def exponent_within_tolerance(estimates: Mapping[str, tuple[float, float, float]], paper: float) -> Outcome:
    """``estimates``: label -> (estimate, interval low, interval high); NaN estimates were not fitted."""
    fitted = {k: v for k, v in estimates.items() if v[0] is not None and not math.isnan(v[0])}
    if not fitted:
        return Outcome(UNDECIDABLE, "not fitted (too few depths)")
    intervals = [(v[1], v[2]) for v in fitted.values()]
    verdict = region_verdict(intervals, paper - EXPONENT_TOLERANCE, paper + EXPONENT_TOLERANCE, intervals)
    shown = ", ".join((f"{k}: " if k else "") + f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]" for k, v in fitted.items())
    return Outcome(verdict, shown)


@rule(
    f"every fitted exponent has the sign Cohen et al. report, within the same ±{EXPONENT_TOLERANCE}: '<= 0' holds when "
    f"each interval's upper end is below +{EXPONENT_TOLERANCE} and does not hold when one interval's lower end is above "
    f"it; '>= 0' the mirror image at -{EXPONENT_TOLERANCE}; else not decidable. Given estimates without intervals, the "
    "point estimates are compared (no error rate); none fitted (too few depths): not decidable"
)
def sign_within_tolerance(estimates: Mapping[str, float | tuple[float, float, float]], side: str) -> Outcome:
    """``estimates``: label -> (estimate, interval low, interval high), or a bare estimate (no interval)."""
    if side not in ("<= 0", ">= 0"):
        raise ValueError(f"side {side!r}: use '<= 0' or '>= 0'")
    triples = {k: tuple(v) if np.ndim(v) else (v, v, v) for k, v in estimates.items()}
    fitted = {k: v for k, v in triples.items() if v[0] is not None and not math.isnan(v[0])}
    if not fitted:
        return Outcome(UNDECIDABLE, "not fitted (too few depths)")
    bare = all(np.ndim(v) == 0 for v in estimates.values())
    low, high = (-math.inf, EXPONENT_TOLERANCE) if side == "<= 0" else (-EXPONENT_TOLERANCE, math.inf)
    intervals = [(v[1], v[2]) for v in fitted.values()]
    if bare:  # no interval: the old point comparison
        verdict = HOLDS if all(low <= v[0] <= high for v in fitted.values()) else FAILS
    else:
        verdict = region_verdict(intervals, low, high, intervals)
    shown = ", ".join(f"{k}: {v[0]:+.3f}" + ("" if bare else f" [{v[1]:+.3f}, {v[2]:+.3f}]") for k, v in fitted.items())
    return Outcome(verdict, shown + ("; no intervals given: point estimates only" if bare else ""))
