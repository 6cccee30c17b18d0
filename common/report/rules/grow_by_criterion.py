"""Claim rules about growth by the criterion (script 09), beyond the paper: the paper never grows a network by
``V_S,l``, so these rules have no paper value to compare with (docs/decisions.md, section "Claims about growth by
the criterion (09)", fixed before any 09 record existed; reworded for issue 44's design, where every run spends
one budget B of training FLOPs).

- :func:`placement_lower_train_loss`: growing where ``V_S,l`` is largest reaches a lower clean training loss at B
  than another arm (cyclic, random, ag placement; the ResNet-8 never grown; the criterion's architecture from
  scratch), paired over seeds;
- :func:`stop_within_depths`: the controller's online stop rule (:mod:`common.experiments.grow_by_criterion_controller`) stops
  growth within ``±STOP_TOLERANCE`` depths of ``N*``, the depth where the fixed sweep's training loss stops
  improving (:func:`common.report.grow_by_criterion_stopping.sweep_plateau`);
- :func:`depth_pays_at_equal_flops`, the regime of the design (issue 57), which the claims about the ResNet-8 never
  grown, the criterion's architecture from scratch and the stop rule need before they can be judged: at the budget B,
  does the sweep's deeper network reach a lower clean training loss than the ResNet-8 trained on the same FLOPs?
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from common.report.rules.statistics import Estimate
from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE, Outcome, fmt, rule

STOP_TOLERANCE = 1
"""k of "stop rule (c) stops within ±k depths of N*": one block. A trajectory adds one block per round, so a stop
one block early or late is the controller's own resolution; and the mini sweep's grid is one block apart over the
depths the mini trajectories reach (N = 2, 3, 4, 5), so N* is not known more finely there. Fixed before any 09
record."""

ROUNDING_SD = 1.0 / math.sqrt(12.0)
"""The least spread a stop depth is given: stops are whole depths, so seeds that all stop at one depth do not show
that the mean stop is known exactly; the spread of a value rounded to a whole block is at least that of the
rounding, 1/sqrt(12) block (a uniform rounding error). Without it three seeds at one depth would give a
zero-width interval, and "holds" one depth off N* + k + 1 by rounding alone."""


def mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample std (ddof 1) of a few values in plain Python (the claim-rate simulations call the rules
    often, with 2-10 seeds: numpy's per-call cost would dominate)."""
    n = len(values)
    m = sum(values) / n
    return m, math.sqrt(sum((v - m) * (v - m) for v in values) / (n - 1)) if n > 1 else math.nan


def paired_differences(criterion: Mapping[int, float], other: Mapping[int, float]) -> dict[int, float]:
    """Per seed both have (finite values): ``other - criterion`` (positive: the criterion's loss is lower)."""
    seeds = sorted(set(criterion) & set(other))
    out = {}
    for s in seeds:
        a, b = float(criterion[s]), float(other[s])
        if math.isfinite(a) and math.isfinite(b):
            out[s] = b - a
    return out


@rule(
    "beyond the paper: per seed, the other arm's clean training loss minus the criterion's at the end of the budget B "
    "(both runs spent B training FLOPs), paired over the seeds both have; holds when its 95% Student-t "
    "interval over seeds is above 0 (the criterion significantly lower); does not hold when it is below 0; else, or "
    "fewer than 2 paired seeds, not decidable"
)
def placement_lower_train_loss(
    criterion: Mapping[int, float], other: Mapping[int, float], other_name: str = "other", rounds: int | None = None
) -> Outcome:
    """``criterion`` and ``other``: seed -> clean training loss at the end of the budget (``rounds``: shown as K when
    given)."""
    d = paired_differences(criterion, other)
    at = f" at round K = {rounds}" if rounds is not None else " at B"
    if not d:
        return Outcome(UNDECIDABLE, f"no seed with both trajectories{at}")
    mean_c = sum(criterion[s] for s in d) / len(d)
    mean_o = sum(other[s] for s in d) / len(d)
    shown = f"train loss{at}: criterion {mean_c:.4f} vs {other_name} {mean_o:.4f} (means over {len(d)} seeds)"
    if len(d) < 2:
        return Outcome(UNDECIDABLE, f"{shown}; one paired seed: no spread to test")
    return paired_verdict(d, shown, other_name, "seeds")


def paired_verdict(d: Mapping, shown: str, other_name: str, over: str) -> Outcome:
    """The paired Student-t verdict of the differences ``d`` (other - criterion, two or more): holds when the 95%
    interval is above 0, does not hold when below 0, else not decidable; ``shown`` leads the value, ``over`` names
    the pairs (seeds, runs)."""
    mean, sd = mean_sd(list(d.values()))
    est = Estimate(mean, sd / math.sqrt(len(d)), len(d) - 1)
    low, high = est.interval()
    value = f"{shown}; {other_name} - criterion {est.text()} over {over}, p = {fmt(est.p_value())}"
    return Outcome(HOLDS if low > 0 else FAILS if high < 0 else UNDECIDABLE, value)


@rule(
    f"beyond the paper: per seed, the depth where the controller's stop rule stopped growth minus N*, the depth where the "
    f"sweep's mean training loss stops improving; holds when the 95% Student-t interval of its mean over seeds "
    f"(spread at least 1/sqrt(12) depth, the rounding of a whole depth) lies inside [-{STOP_TOLERANCE}, "
    f"+{STOP_TOLERANCE}] and every seed stopped; does not hold when the interval lies above +{STOP_TOLERANCE} (a seed "
    f"the rule did not stop, K blocks reached, counts at K + 1, a lower bound) or, every seed stopped, below "
    f"-{STOP_TOLERANCE}; else, fewer than 2 seeds, or no N*, not decidable"
)
def stop_within_depths(
    stops: Mapping[int, int | None], plateau: int | None, rounds: int, tolerance: int = STOP_TOLERANCE
) -> Outcome:
    """``stops``: seed -> depth where the rule stopped (None: it did not, within ``rounds`` blocks, the fewest any
    run reached, so the stop is at ``rounds + 1`` or later); ``plateau``: the sweep's N* (None: still improving)."""
    if plateau is None:
        return Outcome(UNDECIDABLE, "the sweep's training loss still improves at its deepest depth: no N*")
    open_ = sorted(s for s, d in stops.items() if d is None)
    depths = {s: (float(d) if d is not None else float(rounds + 1)) for s, d in stops.items()}
    listed = ", ".join(f"seed {s}: {int(d) if d is not None else f'>{rounds}'}" for s, d in sorted(stops.items()))
    shown = f"N* = {plateau}; the stop rule stops at {listed or 'no seed'}"
    if len(depths) < 2:
        return Outcome(UNDECIDABLE, f"{shown}; one seed: no spread to test")
    mean, sd = mean_sd([d - plateau for d in depths.values()])
    est = Estimate(mean, max(sd, ROUNDING_SD) / math.sqrt(len(depths)), len(depths) - 1)
    low, high = est.interval()
    value = f"{shown}; stop - N* {est.text(2)} over seeds" + (
        f" ({len(open_)} not stopped within {rounds} blocks, counted at {rounds + 1})" if open_ else ""
    )
    if -tolerance <= low and high <= tolerance and not open_:
        return Outcome(HOLDS, value)
    if low > tolerance or (high < -tolerance and not open_):
        return Outcome(FAILS, value)
    return Outcome(UNDECIDABLE, value)


@rule(
    "the regime of 09's design (beyond the paper): the log of each run's clean training loss at the budget B, the "
    "ResNet-8 never grown (09's none arm) against the sweep's run whose training FLOPs are B (the deeper network that "
    "defines B); the difference of their means (ResNet-8 minus the deeper network) with a two-sample Student-t "
    "interval, the two sides' spreads pooled on the log scale; yes (depth pays at equal FLOPs) when its 95% interval "
    "is above 0, no when it is below 0; else, or with no spread to pool (a side without a run, fewer than 3 runs), "
    "not decidable"
)
def depth_pays_at_equal_flops(
    shallow: Sequence[float], deep: Sequence[float], shallow_name: str = "ResNet-8", deep_name: str = "deeper"
) -> Outcome:
    """``shallow``, ``deep``: the clean training losses at B of the never-grown ResNet-8's runs and of the deeper
    network's (one per seed, unpaired: different architectures share no initialisation). On the log scale, as the
    matched insertion's drops: losses at one budget differ by factors, and a spread in absolute units is set by the
    larger one. HOLDS means "yes, depth pays", FAILS "no"."""
    a = [math.log(v) for v in map(float, shallow) if math.isfinite(v) and v > 0]
    b = [math.log(v) for v in map(float, deep) if math.isfinite(v) and v > 0]
    if not a or not b:
        missing = shallow_name if not a else deep_name
        return Outcome(UNDECIDABLE, f"no run of the {missing} network with a positive training loss at B")
    shown = (
        f"clean training loss at B: {shallow_name} {sum(map(math.exp, a)) / len(a):.4g} ({len(a)} runs) vs "
        f"{deep_name} {sum(map(math.exp, b)) / len(b):.4g} ({len(b)} runs) (means)"
    )
    dof = len(a) + len(b) - 2
    if dof < 1:
        return Outcome(UNDECIDABLE, f"{shown}; one run a side: no spread to test")
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    pooled = math.sqrt((sum((x - ma) ** 2 for x in a) + sum((y - mb) ** 2 for y in b)) / dof)
    est = Estimate(ma - mb, pooled * math.sqrt(1 / len(a) + 1 / len(b)), dof)
    low, high = est.interval()
    value = (
        f"{shown}; {deep_name} / {shallow_name} x{math.exp(-est.mean):.3g} [x{math.exp(-high):.3g}, "
        f"x{math.exp(-low):.3g}] (geometric means, log spread pooled over {dof} dof), p = {fmt(est.p_value())}"
    )
    return Outcome(HOLDS if low > 0 else FAILS if high < 0 else UNDECIDABLE, value)


__all__ = [
    "ROUNDING_SD",
    "depth_pays_at_equal_flops",
    "mean_sd",
    "STOP_TOLERANCE",
    "paired_differences",
    "paired_verdict",
    "placement_lower_train_loss",
    "stop_within_depths",
]
