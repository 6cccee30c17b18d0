"""Claim rules about growth against training from scratch: lower means, every architecture, the paper's direction
and size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from common.report.rules.margins import SIZE_FACTOR, TAIL
from common.report.rules.statistics import Estimate, pooled_estimates, region_verdict
from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE, Outcome, fmt, rule


# ----------------------------------------------------------------------------- rules: growth vs scratch
@rule(
    "scratch minus growth loss, per seed (the architectures' mean at each seed), has a 95% Student-t interval over seeds "
    "above 0 (growth significantly lower, two-sided p < 0.05); does not hold when it is below 0; else, or a single "
    "seed, not decidable"
)
def growth_lower_mean(growth: float, scratch: float, reduction: Estimate | None) -> Outcome:
    shown = f"growth {growth:.4f} vs scratch {scratch:.4f}"
    if reduction is None:
        return Outcome(UNDECIDABLE, f"{shown}; one seed: no spread to test")
    low, high = reduction.interval()
    value = f"{shown}; scratch - growth {reduction.text()} over seeds, p = {fmt(reduction.p_value())}"
    return Outcome(HOLDS if low > 0 else FAILS if high < 0 else UNDECIDABLE, value)


@rule(
    "for every architecture the claim names, scratch minus growth loss has a 95% interval above 0 (mean over seeds; "
    "seed spread of the paired differences pooled over the architectures run); does not hold when one of them has "
    "its interval, Bonferroni-corrected over the named architectures, below 0 (scratch significantly lower); else, "
    "one of them not run, or a single seed: not decidable"
)
def growth_wins_everywhere(reductions: Mapping[str, tuple[float, float, int]], required: Sequence[str]) -> Outcome:
    """``reductions``: architecture -> (mean, sample std, seeds) of the per-seed scratch - growth loss."""
    missing = [m for m in required if m not in reductions]
    present = [m for m in required if m in reductions]
    estimates = pooled_estimates(reductions) if reductions else None
    if estimates is None:
        shown = ", ".join(f"{m}: {reductions[m][0]:+.4f}" for m in present)
        return Outcome(
            UNDECIDABLE,
            (shown + "; " if shown else "") + (f"not run: {', '.join(missing)}" if missing else "one seed: no spread"),
        )
    shown = ", ".join(f"{m}: {estimates[m].text()}" for m in present)
    tail = TAIL / max(len(present), 1)
    if any(estimates[m].interval(tail)[1] < 0 for m in present):
        return Outcome(FAILS, shown + (f"; not run: {', '.join(missing)}" if missing else ""))
    if missing:
        return Outcome(UNDECIDABLE, (shown + "; " if shown else "") + f"not run: {', '.join(missing)}")
    return Outcome(HOLDS if all(estimates[m].interval()[0] > 0 for m in present) else UNDECIDABLE, shown)


@rule(
    "the effect is significant in the paper's direction: its 95% Student-t interval over seeds lies on the paper's "
    "side of 0; does not hold when it lies on the other side; else, or a single seed, not decidable"
)
def paper_direction(effect: Estimate | None, paper: float) -> Outcome:
    if effect is None:
        return Outcome(UNDECIDABLE, "one seed: no interval")
    low, high = effect.interval()
    value = f"{effect.text()} over seeds, p = {fmt(effect.p_value())}"
    agree, disagree = (low > 0, high < 0) if paper > 0 else (high < 0, low > 0)
    return Outcome(HOLDS if agree else FAILS if disagree else UNDECIDABLE, value)


@rule(
    f"the effect has the paper's size: its 95% Student-t interval over seeds lies inside (paper / {SIZE_FACTOR:g}, paper x "
    f"{SIZE_FACTOR:g}) (an equivalence test, two one-sided tests); does not hold when it lies outside that range; else, or a "
    "single seed, not decidable"
)
def paper_size(effect: Estimate | None, paper: float) -> Outcome:
    if effect is None:
        return Outcome(UNDECIDABLE, "one seed: no interval")
    low, high = sorted((paper / SIZE_FACTOR, paper * SIZE_FACTOR))
    verdict = region_verdict([effect.interval()], low, high, [effect.interval()])
    return Outcome(verdict, f"{effect.text()} over seeds vs ({fmt(low)}, {fmt(high)})")
