"""Claim rules about AGmax across depth: it falls, stays below the line, the low-signal plateau, the training loss
alone."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from common.report.rules.margins import (
    EXPLAINED_MARGIN,
    LINE_FACTOR,
    PLATEAU_BLOCKS,
    PLATEAU_MARGIN,
    SIGNIFICANCE,
    TAIL,
)
from common.report.rules.statistics import (
    DepthGroups,
    depth_groups,
    partial_half_width,
    partial_interval,
    partial_min_runs,
    partial_spearman,
    spearman,
    t_quantile,
)
from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE, Outcome, fmt, rule


# ----------------------------------------------------------------------------- rules: AG across depth
@rule(
    "Spearman's rho between depth and AGmax over every run present (each depth and seed a point): holds when rho < 0 "
    f"with two-sided p < {SIGNIFICANCE} (exact permutation p up to 8 runs, else scipy.stats.spearmanr's t); does not "
    "hold when rho > 0 with p < 0.05 (AGmax rises); no significant trend either way, fewer than 3 runs, a constant "
    "input, or too few runs for even a perfect fall to reach p < 0.05 (the value then gives that best p): not decidable"
)
def falls_with_depth(depths: Sequence[float], ag_max: Sequence[float]) -> Outcome:
    rho, p = spearman(depths, ag_max)
    if math.isnan(rho):
        return Outcome(UNDECIDABLE, f"{len(depths)} runs: no correlation defined")
    value = f"rho = {rho:+.2f}, p = {fmt(p)} over {len(depths)} runs"
    if p < SIGNIFICANCE:
        return Outcome(HOLDS if rho < 0 else FAILS, value)
    best = spearman(np.sort(depths), -np.sort(ag_max))[1]  # a perfectly falling AGmax with these ties
    if best >= SIGNIFICANCE:
        return Outcome(UNDECIDABLE, f"{value}: even a perfect fall gives p = {fmt(best)}")
    return Outcome(UNDECIDABLE, f"{value}: no significant trend")


def _below_verdict(
    logs: DepthGroups, deeper: np.ndarray, spread: tuple[float, int], ceiling: float
) -> tuple[str, float, float]:
    """Every deeper depth's mean log value significantly below ``log ceiling`` (verdict, highest upper bound, its depth)."""
    s, dof = spread
    t_one, t_bonf = t_quantile(1 - TAIL, dof), t_quantile(1 - TAIL / int(deeper.sum()), dof)
    se = s / np.sqrt(logs.n[deeper])
    upper, lower = logs.mean[deeper] + t_one * se, logs.mean[deeper] - t_bonf * se
    top = int(np.argmax(upper))
    c = math.log(ceiling)
    verdict = HOLDS if upper[top] < c else FAILS if lower.max() > c else UNDECIDABLE
    return verdict, math.exp(upper[top]), float(logs.depths[deeper][top])


@rule(
    f"N* = the first depth whose AGmax (mean over seeds) is below the paper's 5e-3 line; holds when every deeper depth's "
    f"AGmax is below {LINE_FACTOR:g}x the line (the paper's 'approximately') at the 5% level: the upper end of each depth's "
    "95% interval of mean log AGmax (seed spread pooled over the depths from N* on) is below it; does not hold when one "
    "depth's interval, Bonferroni-corrected over the deeper depths, is above it; else not decidable. The same verdict at "
    "1x the line is shown beside it. No depth below the line, none deeper than N*, or one seed per depth: not decidable"
)
def stays_below_line(depths: Sequence[float], ag_max: Sequence[float], line: float) -> Outcome:
    groups = depth_groups(depths, ag_max)
    i = groups.first_below(line)
    if i is None:
        return Outcome(UNDECIDABLE, f"AGmax never below {line:g} (lowest {fmt(float(groups.mean.min()))})")
    star = float(groups.depths[i])
    if i == len(groups.depths) - 1:
        return Outcome(UNDECIDABLE, f"N* = {star:g} is the deepest depth run")
    values = np.asarray(ag_max, float)
    if (values[np.asarray(depths, float) >= star] <= 0).any():
        return Outcome(UNDECIDABLE, f"N* = {star:g}; a non-positive AGmax has no logarithm")
    logs = depth_groups(depths, np.log(np.maximum(values, 1e-300)))
    spread = logs.spread(logs.depths >= star)
    if spread is None:
        return Outcome(UNDECIDABLE, f"N* = {star:g}; a single seed per depth, so no seed spread")
    deeper = logs.depths > star
    verdict, top, at = _below_verdict(logs, deeper, spread, LINE_FACTOR * line)
    strict, _, _ = _below_verdict(logs, deeper, spread, line)
    return Outcome(
        verdict,
        f"N* = {star:g}; {int(deeper.sum())} deeper depths, highest upper bound {fmt(top)} (N = {at:g}) vs "
        f"{LINE_FACTOR:g}x line {fmt(LINE_FACTOR * line)}; at 1x the line: {strict}",
    )


def plateau_blocks(depths: Sequence[float], n_blocks: int = PLATEAU_BLOCKS) -> list[list[float]]:
    """The depths from N* on, in order, split into ``n_blocks`` consecutive blocks of near-equal size."""
    return [list(b) for b in np.array_split(np.asarray(depths, float), min(n_blocks, len(depths)))]


@rule(
    f"N* as above; the depths from N* on are split into {PLATEAU_BLOCKS} consecutive blocks (quarters); the gain of a "
    "block is the first block's mean test loss minus its own. Holds (an equivalence test, two one-sided tests, on the best "
    f"gain) when every block's gain is below {PLATEAU_MARGIN:.0%} of the first block's loss at the 2.5% level (the best is "
    "below the margin only if each is: no correction needed) and the best gain, its bound Bonferroni-corrected over the "
    "blocks for the selection of the best, is above minus the margin; does not hold when a block's corrected gain is "
    "above the margin, or every gain is below minus it; else not decidable. Seed spread pooled over the depths; "
    "one seed per depth, no N*, or no depth after N*: not decidable"
)
def plateau_within_margin(
    depths: Sequence[float], ag_max: Sequence[float], test_loss: Sequence[float], line: float
) -> Outcome:
    ag = depth_groups(depths, ag_max)
    i = ag.first_below(line)
    if i is None:
        return Outcome(UNDECIDABLE, f"AGmax never below {line:g}")
    star = float(ag.depths[i])
    losses = depth_groups(depths, test_loss)
    post = losses.depths >= star
    if post.sum() < 2:
        return Outcome(UNDECIDABLE, f"N* = {star:g} is the deepest depth run")
    spread = losses.spread(post)
    if spread is None:
        return Outcome(UNDECIDABLE, f"N* = {star:g}; a single seed per depth, so no seed spread")
    s, dof = spread
    parts = np.array_split(np.flatnonzero(post), min(PLATEAU_BLOCKS, int(post.sum())))
    counts = np.array([losses.n[p].sum() for p in parts])
    means = np.array([(losses.n[p] * losses.mean[p]).sum() for p in parts]) / counts
    base = float(means[0])
    margin = PLATEAU_MARGIN * abs(base)
    gains = base - means[1:]
    ses = s * np.sqrt(1 / counts[0] + 1 / counts[1:])
    upper = gains + t_quantile(1 - TAIL, dof) * ses
    lower = gains - t_quantile(1 - TAIL / len(gains), dof) * ses
    if upper.max() < margin and lower.max() > -margin:
        verdict = HOLDS
    elif lower.max() > margin or upper.max() < -margin:
        verdict = FAILS
    else:
        verdict = UNDECIDABLE
    best = int(np.argmax(gains))
    return Outcome(
        verdict,
        f"N* = {star:g}; {len(parts)} blocks of the {int(post.sum())} depths from N*; best gain "
        f"{fmt(float(gains[best]))} (block {best + 2}), upper bound {fmt(float(upper.max()))} vs margin "
        f"{fmt(margin)} ({PLATEAU_MARGIN:.0%} of {fmt(base)}); seed spread {fmt(s)}",
    )


@rule(
    f"holds when Spearman's rho of AGmax with the final training loss is > 0 with p < {SIGNIFICANCE} and the partial Spearman "
    f"correlation of AGmax with depth given the training loss is within ±{EXPLAINED_MARGIN} (its 95% Fisher interval, "
    "atanh(r) ± 1.96 sqrt(1.06 / (n - 4)), inside the margin: depth adds little beyond the training loss); does not hold "
    "when that interval lies outside the margin or rho < 0 with p < 0.05; else not decidable (ranks, residuals on the "
    "training loss's ranks; common/report/rules/); fewer than 5 runs: not decidable"
)
def explained_by_training_loss(
    depths: Sequence[float], ag_max: Sequence[float], train_loss: Sequence[float]
) -> Outcome:
    rho, p = spearman(ag_max, train_loss)
    partial, p_partial = partial_spearman(ag_max, depths, train_loss)
    depth_rho, depth_p = spearman(depths, ag_max)
    n = len(depths)
    value = (
        f"rho(AGmax, train loss) = {fmt(rho)} (p = {fmt(p)}); partial rho(AGmax, N | train loss) = {fmt(partial)} "
        f"(p = {fmt(p_partial)}); beside it rho(N, AGmax) = {fmt(depth_rho)} (p = {fmt(depth_p)}); n = {n}"
    )
    if math.isnan(rho) or math.isnan(partial) or n < 5:
        why = "fewer than 5 runs" if n < 5 else "AGmax's or N's ranks are a straight line in the training loss's ranks"
        return Outcome(UNDECIDABLE, f"{value}; partial correlation undefined: {why}")
    low, high = partial_interval(partial, n)
    value += f"; partial's 95% interval [{low:+.2f}, {high:+.2f}] vs ±{EXPLAINED_MARGIN}"
    if partial_half_width(n) >= math.atanh(EXPLAINED_MARGIN):  # no r could give "holds" at this n
        value += (
            f" (its half-width in z, {partial_half_width(n):.2f} at n = {n}, exceeds the margin's "
            f"{math.atanh(EXPLAINED_MARGIN):.2f}: 'holds' cannot occur below {partial_min_runs(EXPLAINED_MARGIN)} runs)"
        )
    if (p < SIGNIFICANCE and rho < 0) or low > EXPLAINED_MARGIN or high < -EXPLAINED_MARGIN:
        return Outcome(FAILS, value)
    if p < SIGNIFICANCE and rho > 0 and low > -EXPLAINED_MARGIN and high < EXPLAINED_MARGIN:
        return Outcome(HOLDS, value)
    return Outcome(UNDECIDABLE, value)
