"""Claim rules about the matched insertion's drops, judged on the log scale: not increasing with depth, the paper's
values at its precision."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from common.report.rules.margins import PRECISION_UNITS, TAIL
from common.report.rules.statistics import Estimate, group_spread
from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE, Outcome, clauses, rule

# ----------------------------------------------------------------------------- rules: matched insertion
BELOW_FLOOR = "below measurement precision"  # a drop within the run's measurement floor (06's record): no sign
WRONG_SIGN = "wrong sign"  # a rise of the loss where the rule compares drops: no logarithm


def precision_unit(value: float) -> float:
    """A unit of the leading digit of ``value`` (the paper reports one significant digit: 7e-4 -> 1e-4)."""
    return 10.0 ** math.floor(math.log10(abs(value))) if value else 0.0


def log_band(value: float) -> tuple[float, float]:
    """The paper's precision around a positive ``value`` on the log scale: ``value ± PRECISION_UNITS`` units of its
    leading digit, ``(log(value - u/2), log(value + u/2))``. The same band as on the linear scale, so its relative
    width depends on the leading digit: 7e-4 gives (-0.074, +0.069) around log 7e-4, 2e-4 gives (-0.29, +0.22)."""
    half = PRECISION_UNITS * precision_unit(value)
    return math.log(value - half), math.log(value + half)


@dataclass(frozen=True)
class LogDrops:
    """Per-seed matched-insertion drops (minus the loss change) on the log scale, per depth, and the values left out
    of the log pool: a drop within the run's measurement floor (:data:`BELOW_FLOOR`) or of the wrong sign."""

    logs: dict[int, list[float]]  # depth -> log drop of each usable seed
    left_out: dict[int, list[str]]  # depth -> why each left-out value was left out ("seed 1: below ...")
    depths: tuple[int, ...]  # every depth run, ascending

    def drop(self, d: int) -> float:
        """The geometric mean of depth ``d``'s usable drops (exp of their mean log)."""
        return math.exp(sum(self.logs[d]) / len(self.logs[d]))

    def mean_log(self, d: int) -> float:
        return sum(self.logs[d]) / len(self.logs[d])

    def spread(self) -> tuple[float, int] | None:
        """The seed spread of log drops pooled over the depths (:func:`group_spread`)."""
        return group_spread(self.logs.values())

    def note(self) -> str:
        """``left out of the log pool: ResNet-17 seed 1 (below measurement precision); ...`` ("" when none)."""
        parts = [f"ResNet-{d} {why}" for d in self.depths for why in self.left_out.get(d, [])]
        return f"left out of the log pool: {'; '.join(parts)}" if parts else ""


def log_drops(
    changes: Mapping[int, Sequence[float] | Mapping[int, float] | float],
    below_floor: Mapping[int, Sequence[bool] | Mapping[int, bool] | bool] | None = None,
) -> LogDrops:
    """The usable drops of ``changes`` (depth -> per-seed loss changes: a list, ``{seed: change}``, or one number) on
    the log scale. ``below_floor`` (the same shape, True where 06 found the change within its measurement floor)
    and a change >= 0 (a drop of the wrong sign) leave a value out, named in :meth:`LogDrops.note`."""

    def items(v) -> list[tuple[str, object]]:
        if isinstance(v, Mapping):
            return [(f"seed {k}", x) for k, x in sorted(v.items())]
        return [(f"value {i + 1}", x) for i, x in enumerate([v] if np.ndim(v) == 0 else list(v))]

    logs: dict[int, list[float]] = {}
    left: dict[int, list[str]] = {}
    for d in sorted(changes):
        values = items(changes[d])
        flags = dict(items(below_floor[d])) if below_floor is not None and d in below_floor else {}
        logs[int(d)] = []
        for label, change in values:
            change = float(change)
            if bool(flags.get(label, False)):
                left.setdefault(int(d), []).append(f"{label}: {BELOW_FLOOR} (change {change:+.1e})")
            elif not change < 0:
                left.setdefault(int(d), []).append(f"{label}: {WRONG_SIGN} (change {change:+.1e})")
            else:
                logs[int(d)].append(math.log(-change))
    return LogDrops(logs, left, tuple(sorted(int(d) for d in changes)))


@rule(
    "ordering the depths run, no deeper depth's drop (minus the change; geometric mean over seeds) exceeds the previous "
    f"depth's by more than the paper's precision ({PRECISION_UNITS:g} unit of the larger drop's leading digit: 1.9e-4 "
    "then 2.1e-4 is no rise), judged on the log scale, where the drops of different depths span orders of magnitude: "
    "a rise from a to b is within it when log b - log a < log(1 + tolerance / a); holds when each rise's 95% interval "
    "(seed spread of the log drops pooled over the depths) is below that bound; does not hold when one rise's interval, "
    "Bonferroni-corrected over the pairs, is above it; else not decidable. A drop within the run's measurement floor or "
    "of the wrong sign has no logarithm: it is left out of the pool and named, and a depth without a drop left is "
    "skipped. One seed per depth: the rises compared at the paper's precision alone (no error rate); fewer than 2 "
    "depths: not decidable"
)
def drop_not_increasing(
    changes: Mapping[int, Sequence[float] | Mapping[int, float] | float],
    below_floor: Mapping[int, Sequence[bool] | Mapping[int, bool] | bool] | None = None,
) -> Outcome:
    drops = log_drops(changes, below_floor)
    note = drops.note()
    if len(drops.depths) < 2:
        return Outcome(UNDECIDABLE, f"{len(drops.depths)} depth(s) run")
    usable = [d for d in drops.depths if drops.logs[d]]
    if len(usable) < 2:
        return Outcome(UNDECIDABLE, clauses(f"{len(usable)} depth(s) with a usable drop", note))
    shown = ", ".join(f"ResNet-{d}: {drops.drop(d):.1e}" for d in usable)
    pairs = list(zip(usable, usable[1:]))
    rises = {(a, b): drops.mean_log(b) - drops.mean_log(a) for a, b in pairs}
    tolerance = {(a, b): PRECISION_UNITS * precision_unit(max(drops.drop(a), drops.drop(b))) for a, b in pairs}
    bound = {(a, b): math.log1p(tolerance[(a, b)] / drops.drop(a)) for a, b in pairs}
    spread = drops.spread()
    if spread is None:
        over = [f"ResNet-{b} > ResNet-{a}" for a, b in pairs if rises[(a, b)] > bound[(a, b)]]
        return Outcome(
            FAILS if over else HOLDS,
            clauses(
                shown + "; one seed: at the paper's precision only" + (f" (rises: {'; '.join(over)})" if over else ""),
                note,
            ),
        )
    s, dof = spread
    est = {
        k: Estimate(r, s * math.sqrt(1 / len(drops.logs[k[0]]) + 1 / len(drops.logs[k[1]])), dof)
        for k, r in rises.items()
    }
    upper = {k: e.interval()[1] for k, e in est.items()}
    lower = {k: e.interval(TAIL / len(est))[0] for k, e in est.items()}
    if all(upper[k] < bound[k] for k in est):
        verdict = HOLDS
    elif any(lower[k] > bound[k] for k in est):
        verdict = FAILS
    else:
        verdict = UNDECIDABLE
    worst = max(est, key=lambda k: upper[k] - bound[k])
    a, b = worst
    return Outcome(
        verdict,
        clauses(
            f"{shown} (geometric means); largest rise ResNet-{a} -> {b}: x{math.exp(rises[worst]):.3g}, upper bound "
            f"x{math.exp(upper[worst]):.3g} vs tolerance x{math.exp(bound[worst]):.3g} ({tolerance[worst]:.1e} on "
            f"{drops.drop(a):.1e}); seed spread of log drops {s:.2f} ({dof} dof)",
            note,
        ),
    )


@rule(
    f"each depth's drop (geometric mean over seeds) agrees with the paper's value to the paper's precision (one "
    f"significant digit: within {PRECISION_UNITS:g} unit of that digit, [v - u/2, v + u/2], judged on the log scale as "
    "[log(v - u/2), log(v + u/2)]: the same band, ±u/(2v) of v, from ±5.6% for a leading digit 9 to ±50% for a "
    "leading digit 1) at every depth the paper reports and we ran: holds when every such depth's 95% interval of the mean log "
    "drop (seed spread of the log drops pooled over the depths) is inside that band; does not hold when one depth's "
    "interval, Bonferroni-corrected over the depths, is outside it; else not decidable. A drop within the run's "
    "measurement floor or of the wrong sign is left out of the pool and named; a paper depth left without a drop cannot "
    "hold. One seed per depth: the point values against the band (no error rate); none of the paper's depths run: not "
    "decidable"
)
def matches_paper_precision(
    changes: Mapping[int, Sequence[float] | Mapping[int, float] | float],
    paper: Mapping[int, float],
    below_floor: Mapping[int, Sequence[bool] | Mapping[int, bool] | bool] | None = None,
) -> Outcome:
    drops = log_drops(changes, below_floor)
    note = drops.note()
    run = sorted(set(drops.depths) & set(paper))
    if not run:
        return Outcome(UNDECIDABLE, f"none of ResNet-{', -'.join(map(str, sorted(paper)))} run")
    judged = [d for d in run if drops.logs[d]]
    unjudged = [d for d in run if not drops.logs[d]]
    missing = f"no usable drop at ResNet-{', -'.join(map(str, unjudged))}" if unjudged else ""
    if not judged:
        return Outcome(UNDECIDABLE, clauses(missing, note))
    band = {d: log_band(paper[d]) for d in judged}
    shown = ", ".join(
        f"ResNet-{d}: {drops.drop(d):.1e} (paper {paper[d]:.0e}, band [{math.exp(band[d][0]):.2g}, "
        f"{math.exp(band[d][1]):.2g}])"
        for d in judged
    )
    spread = group_spread(drops.logs.values())
    if spread is None:
        off = [d for d in judged if not band[d][0] < drops.mean_log(d) < band[d][1]]
        verdict = FAILS if off else UNDECIDABLE if unjudged else HOLDS
        return Outcome(verdict, clauses(shown + "; one seed: point values only", missing, note))
    s, dof = spread
    est = {d: Estimate(drops.mean_log(d), s / math.sqrt(len(drops.logs[d])), dof) for d in judged}
    inside = not unjudged and all(
        band[d][0] < est[d].interval()[0] and est[d].interval()[1] < band[d][1] for d in judged
    )
    tail = TAIL / len(run)
    outside = any(est[d].interval(tail)[1] < band[d][0] or est[d].interval(tail)[0] > band[d][1] for d in judged)
    verdict = HOLDS if inside else FAILS if outside else UNDECIDABLE
    return Outcome(verdict, clauses(shown + f"; seed spread of log drops {s:.2f} ({dof} dof)", missing, note))
