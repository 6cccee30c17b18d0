"""The rules that turn run records into verdicts on the paper's claims (``figures/claims.md``).

Each rule is a pure function of plain numbers (depths, scores, losses; no files, no runs) that
returns an :class:`Outcome`: a verdict and the reproduced value in words. Its rule text, the
sentence printed in the claims report, is attached by :func:`rule` and is ``fn.rule``. The
verdicts:

- ``holds`` / ``does not hold``: the rule decided;
- ``not decidable``: the records are there but cannot decide the rule (one seed where a seed
  spread is needed, too few runs for a test, a constant input);
- ``not run``: no records (set by the report builder, never by a rule).

Nothing here is tuned to make a claim hold: the thresholds are the paper's (its 5e-3 line, its
values), the conventional 5% significance level, and the ±0.1 the issue fixed for exponents.

Statistics:

- Spearman correlations come from :func:`scipy.stats.spearmanr`; their two-sided p-values are
  exact (every pairing, :func:`scipy.stats.permutation_test`) up to 8 points, and spearmanr's t
  approximation with n - 2 degrees of freedom above (:func:`spearman`).
- :func:`partial_spearman` is the Spearman correlation of x and y given z: each variable is
  rank-transformed (average ranks for ties), the ranks of x and of y are each regressed on the
  ranks of z by least squares with an intercept, and the Pearson correlation of the two residual
  vectors is the partial correlation r. Its p-value is two-sided from Student's t with n - 3
  degrees of freedom, ``t = r sqrt((n - 3) / (1 - r^2))``, the usual test for a partial
  correlation with one controlling variable (it treats the ranks like normal scores, as the
  t approximation of Spearman's test does).
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from common.projection import NOT_SATURATED, SATURATED

HOLDS = "holds"
FAILS = "does not hold"
UNDECIDABLE = "not decidable"
NOT_RUN = "not run"
VERDICTS = (HOLDS, FAILS, UNDECIDABLE, NOT_RUN)

SIGNIFICANCE = 0.05  # p-value threshold of every test below
EXPONENT_TOLERANCE = 0.1  # "exponent within ±0.1 of the paper" (issue 16)
CONFIDENCE = 0.95  # Student-t intervals over seeds
PROJECTION_SLACK = 1e-9  # relative float64 slack of V_S,l <= AG_l
EXACT_MAX_N = 8  # up to 8 points (8! = 40,320 pairings) Spearman's p-value is exact, by permutation


@dataclass(frozen=True)
class Outcome:
    """What a rule found: its verdict and the reproduced value in words."""

    verdict: str
    value: str


def rule(text: str) -> Callable[[Callable[..., Outcome]], Callable[..., Outcome]]:
    """Attach ``text`` (the rule as the claims report prints it) to a rule function as ``fn.rule``."""

    def attach(fn: Callable[..., Outcome]) -> Callable[..., Outcome]:
        fn.rule = text  # type: ignore[attr-defined]
        return fn

    return attach


def fmt(x: float | None) -> str:
    """A number in 3 significant digits ("-" for None / NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3g}"


# ----------------------------------------------------------------------------- statistics
def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Spearman's rho (:func:`scipy.stats.spearmanr`) and its two-sided p-value; NaNs when undefined.

    With at most :data:`EXACT_MAX_N` points the p-value is exact, from every one of the n! pairings
    (:func:`scipy.stats.permutation_test`); spearmanr's t approximation would call 4 depths in order
    "p = 0" where the exact value is 2/24. Above that, spearmanr's t approximation (n - 2 dof).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.spearmanr(x, y)
    if len(x) > EXACT_MAX_N:
        return float(res.statistic), float(res.pvalue)
    ry = stats.rankdata(y) - (len(y) + 1) / 2

    def rho(rx: np.ndarray, axis: int = -1) -> np.ndarray:
        rx = rx - rx.mean(axis=axis, keepdims=True)
        return (rx @ ry) / np.sqrt((rx * rx).sum(axis=axis) * (ry @ ry))

    exact = stats.permutation_test((stats.rankdata(x),), rho, permutation_type="pairings", vectorized=True,
                                   n_resamples=math.factorial(len(x)), alternative="two-sided")  # fmt: skip
    return float(res.statistic), float(exact.pvalue)


def partial_spearman(x: Sequence[float], y: Sequence[float], z: Sequence[float]) -> tuple[float, float]:
    """Partial Spearman correlation of ``x`` and ``y`` given ``z``, and its two-sided p-value (module docstring).

    Ranks, then the Pearson correlation of the residuals of rank(x) and rank(y) after a least-squares
    line on rank(z); p from Student's t with n - 3 degrees of freedom. NaNs when n < 4 or a residual
    vector is zero (x or y a monotone function of z).

    >>> r, p = partial_spearman([1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 6, 5], [1, 2, 3, 4, 5, 6])
    >>> math.isnan(r)  # x is z itself: nothing left once z is accounted for
    True
    """
    x, y, z = (np.asarray(v, float) for v in (x, y, z))
    n = len(x)
    if n < 4:
        return math.nan, math.nan
    rx, ry, rz = (stats.rankdata(v) for v in (x, y, z))
    design = np.column_stack([np.ones(n), rz])
    resid = [r - design @ np.linalg.lstsq(design, r, rcond=None)[0] for r in (rx, ry)]
    norms = [float(np.linalg.norm(e)) for e in resid]
    scale = float(np.linalg.norm(rx - rx.mean()) + np.linalg.norm(ry - ry.mean()))
    if min(norms) <= 1e-12 * max(scale, 1.0):
        return math.nan, math.nan
    r = float(np.clip(resid[0] @ resid[1] / (norms[0] * norms[1]), -1.0, 1.0))
    dof = n - 3
    if abs(r) == 1.0:
        return r, 0.0
    t = r * math.sqrt(dof / (1.0 - r * r))
    return r, float(2.0 * stats.t.sf(abs(t), dof))


def by_depth(depths: Sequence[float], values: Sequence[float]) -> dict[float, list[float]]:
    """Values grouped by depth (several seeds per depth), depths ascending."""
    groups: dict[float, list[float]] = defaultdict(list)
    for d, v in zip(depths, values, strict=True):
        groups[d].append(float(v))
    return dict(sorted(groups.items()))


def first_below(depths: Sequence[float], values: Sequence[float], line: float) -> float | None:
    """N*: the first depth whose mean value over seeds is below ``line`` (None if none)."""
    for depth, vals in by_depth(depths, values).items():
        if float(np.mean(vals)) < line:
            return depth
    return None


# ----------------------------------------------------------------------------- rules: AG across depth
@rule("Spearman's rho between depth and AGmax over every run present (each depth and seed a point) is < 0 "
      f"with two-sided p < {SIGNIFICANCE} (exact permutation p up to 8 runs, else scipy.stats.spearmanr's t); fewer than 3 runs, a constant input, or too few "
      "runs for even a perfect fall to reach p < 0.05 (4 distinct depths: p = 1/12): not decidable")
def falls_with_depth(depths: Sequence[float], ag_max: Sequence[float]) -> Outcome:
    rho, p = spearman(depths, ag_max)
    if math.isnan(rho):
        return Outcome(UNDECIDABLE, f"{len(depths)} runs: no correlation defined")
    best = spearman(np.sort(depths), -np.sort(ag_max))[1]  # a perfectly falling AGmax with these ties
    if best >= SIGNIFICANCE:
        return Outcome(UNDECIDABLE, f"rho = {rho:+.2f}, p = {fmt(p)} over {len(depths)} runs: even a perfect fall gives p = {fmt(best)}")
    verdict = HOLDS if rho < 0 and p < SIGNIFICANCE else FAILS
    return Outcome(verdict, f"rho = {rho:+.2f}, p = {fmt(p)} over {len(depths)} runs")


@rule("N* = the first depth whose AGmax (mean over seeds) is below the paper's 5e-3 line; holds when every "
      "deeper depth's mean AGmax stays below it; no depth below the line, or none deeper than N*: not decidable")
def stays_below_line(depths: Sequence[float], ag_max: Sequence[float], line: float) -> Outcome:
    groups = {d: float(np.mean(v)) for d, v in by_depth(depths, ag_max).items()}
    star = first_below(depths, ag_max, line)
    if star is None:
        return Outcome(UNDECIDABLE, f"AGmax never below {line:g} (lowest {fmt(min(groups.values()))})")
    after = {d: v for d, v in groups.items() if d > star}
    if not after:
        return Outcome(UNDECIDABLE, f"N* = {star:g} is the deepest depth run")
    above = [d for d, v in after.items() if v >= line]
    value = f"N* = {star:g}; {len(after) - len(above)} of {len(after)} deeper depths below the line"
    return Outcome(FAILS if above else HOLDS, value + (f" (above at N = {', '.join(f'{d:g}' for d in above)})" if above else ""))


@rule("N* as above; from N* on, the best mean test loss improves on N*'s by no more than the seed spread (the "
      "pooled sample standard deviation over seeds of the test loss at depths >= N*); one seed per depth, no N*, "
      "or no depth after N*: not decidable")
def plateau_within_seed_spread(depths: Sequence[float], ag_max: Sequence[float], test_loss: Sequence[float],
                               line: float) -> Outcome:  # fmt: skip
    star = first_below(depths, ag_max, line)
    if star is None:
        return Outcome(UNDECIDABLE, f"AGmax never below {line:g}")
    losses = {d: v for d, v in by_depth(depths, test_loss).items() if d >= star}
    if len(losses) < 2:
        return Outcome(UNDECIDABLE, f"N* = {star:g} is the deepest depth run")
    variances = [np.var(v, ddof=1) for v in losses.values() if len(v) > 1]
    if not variances:
        return Outcome(UNDECIDABLE, f"N* = {star:g}; a single seed per depth, so no seed spread")
    spread = math.sqrt(float(np.mean(variances)))
    means = {d: float(np.mean(v)) for d, v in losses.items()}
    gain = means[star] - min(means.values())
    verdict = HOLDS if gain <= spread else FAILS
    return Outcome(verdict, f"N* = {star:g}; test-loss gain after N* {fmt(gain)} vs seed spread {fmt(spread)}")


@rule(f"holds when Spearman's rho of AGmax with the final training loss has p < {SIGNIFICANCE} and the partial "
      f"Spearman correlation of AGmax with depth given the training loss has p >= {SIGNIFICANCE} (ranks, residuals "
      "on the training loss's ranks, t with n - 3 dof; common/claims.py); fewer than 4 runs: not decidable")
def explained_by_training_loss(depths: Sequence[float], ag_max: Sequence[float], train_loss: Sequence[float]) -> Outcome:
    rho, p = spearman(ag_max, train_loss)
    partial, p_partial = partial_spearman(ag_max, depths, train_loss)
    depth_rho, depth_p = spearman(depths, ag_max)
    value = (f"rho(AGmax, train loss) = {fmt(rho)} (p = {fmt(p)}); partial rho(AGmax, N | train loss) = {fmt(partial)} "
             f"(p = {fmt(p_partial)}); beside it rho(N, AGmax) = {fmt(depth_rho)} (p = {fmt(depth_p)}); n = {len(depths)}")
    if math.isnan(rho) or math.isnan(p_partial):
        why = "fewer than 4 runs" if len(depths) < 4 else "AGmax's or N's ranks are a straight line in the training loss's ranks"
        return Outcome(UNDECIDABLE, f"{value}; partial correlation undefined: {why}")
    return Outcome(HOLDS if p < SIGNIFICANCE and p_partial >= SIGNIFICANCE else FAILS, value)


@rule(f"every candidate of every exact run has V_S,l <= AG_l (relative slack {PROJECTION_SLACK:g} for float64 rounding)")
def projection_never_exceeds(growth_value: Sequence[float], ag_norm: Sequence[float]) -> Outcome:
    v, ag = np.asarray(growth_value, float), np.asarray(ag_norm, float)
    if len(v) == 0:
        return Outcome(UNDECIDABLE, "no candidate with V_S,l")
    over = v > ag * (1 + PROJECTION_SLACK) + 1e-300
    ratio = float(np.max(v / np.where(ag > 0, ag, np.inf)))
    return Outcome(FAILS if over.any() else HOLDS, f"max V_S,l / AG_l = {ratio:.4f} over {len(v)} candidates; {int(over.sum())} above")


# ----------------------------------------------------------------------------- rule: App. G
@rule("App. G's separated test (Theorem 3) on every seed of the deepest depth probed: Gamma = max_l ||C_l|| lies in "
      "[max(0, Gamma_hat - t), Gamma_hat + t] with probability >= 1 - alpha (t = sqrt(sum_l tr_l / (n_test alpha)), traces "
      "from a calibration part); holds when every upper end is <= delta ('saturated within delta'); a lower end above "
      "delta ('not saturated'): does not hold; otherwise ('undecided', no delta given, no verdict): not decidable")
def saturated_within_delta(intervals: Mapping[str, Mapping]) -> Outcome:
    """``intervals``: label -> App. G numbers (``lower``, ``upper``, ``t``, ``n_candidates``, ``delta``, ``verdict``)."""
    if not intervals:
        return Outcome(UNDECIDABLE, "no App. G interval recorded")
    shown = "; ".join(f"{k}: {app_g_text(v)}" for k, v in intervals.items())
    verdicts = [v["verdict"] for v in intervals.values()]
    if NOT_SATURATED in verdicts:
        return Outcome(FAILS, shown)
    return Outcome(HOLDS if all(v == SATURATED for v in verdicts) else UNDECIDABLE, shown)


def app_g_text(r: Mapping) -> str:
    """``Gamma in [lo, hi], t = .., 7 candidates, delta = ..: verdict`` (t and the candidates beside every verdict)."""
    where = "-" if r.get("lower") is None else f"[{fmt(r['lower'])}, {fmt(r['upper'])}]"
    delta = "none" if r.get("delta") is None else fmt(r["delta"])
    return f"Gamma in {where}, t = {fmt(r['t'])}, {r['n_candidates']} candidates, delta = {delta}: {r['verdict']}"


# ----------------------------------------------------------------------------- rules: growth vs scratch
@rule("growth's mean over architectures and seeds is lower than scratch's")
def growth_lower_mean(growth: float, scratch: float) -> Outcome:
    return Outcome(HOLDS if growth < scratch else FAILS, f"growth {growth:.4f} vs scratch {scratch:.4f}")


@rule("growth's loss (mean over seeds) is lower than scratch's at every architecture the claim names; "
      "scratch lower at one of them: does not hold; else one of them not run: not decidable")
def growth_wins_everywhere(winners: Mapping[str, str], required: Sequence[str]) -> Outcome:
    shown = ", ".join(f"{m}: {winners[m]}" for m in required if m in winners)
    missing = [m for m in required if m not in winners]
    losers = [m for m in required if m in winners and winners[m] != "growth"]
    if losers:
        return Outcome(FAILS, shown + (f"; not run: {', '.join(missing)}" if missing else ""))
    if missing:
        return Outcome(UNDECIDABLE, (shown + "; " if shown else "") + f"not run: {', '.join(missing)}")
    return Outcome(HOLDS, shown)


@rule("the paper's value lies inside the 95% Student-t interval over seeds of the reproduced mean "
      "(mean ± t(0.975, n - 1) std / sqrt(n)); a single seed: not decidable")
def paper_value_in_interval(mean: float, std: float, n: int, paper: float) -> Outcome:
    if n < 2 or std is None or math.isnan(std):
        return Outcome(UNDECIDABLE, f"{fmt(mean)} from {n} seed(s): no interval")
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * std / math.sqrt(n)
    low, high = mean - half, mean + half
    return Outcome(HOLDS if low <= paper <= high else FAILS, f"{fmt(mean)} [{fmt(low)}, {fmt(high)}] over {n} seeds")


# ----------------------------------------------------------------------------- rules: matched insertion
@rule("at the paper's alpha, the measured training-loss change (mean over seeds) is < 0 at every depth run")
def lowers_loss_everywhere(changes: Mapping[int, float]) -> Outcome:
    if not changes:
        return Outcome(UNDECIDABLE, "no depth at the paper's alpha")
    shown = ", ".join(f"ResNet-{d}: {c:+.1e}" for d, c in sorted(changes.items()))
    return Outcome(HOLDS if all(c < 0 for c in changes.values()) else FAILS, shown)


@rule("ordering the depths run, each depth's drop (minus the mean change) is no larger than the previous depth's; "
      "fewer than 2 depths: not decidable")
def drop_not_increasing(changes: Mapping[int, float]) -> Outcome:
    drops = [(-c, d) for d, c in sorted(changes.items())]
    if len(drops) < 2:
        return Outcome(UNDECIDABLE, f"{len(drops)} depth(s) run")
    rises = [f"ResNet-{b[1]} > ResNet-{a[1]}" for a, b in zip(drops, drops[1:]) if b[0] > a[0]]
    shown = ", ".join(f"ResNet-{d}: {x:.1e}" for x, d in drops)
    return Outcome(FAILS if rises else HOLDS, shown + (f" (rises: {'; '.join(rises)})" if rises else ""))


@rule("each depth's drop agrees with the paper's value to the paper's precision (one significant digit: "
      "|drop - paper| <= half a unit of that digit) at every depth the paper reports and we ran; none: not decidable")
def matches_paper_precision(changes: Mapping[int, float], paper: Mapping[int, float]) -> Outcome:
    common_depths = sorted(set(changes) & set(paper))
    if not common_depths:
        return Outcome(UNDECIDABLE, f"none of ResNet-{', -'.join(map(str, sorted(paper)))} run")
    off = []
    for d in common_depths:
        unit = 10.0 ** math.floor(math.log10(paper[d]))
        if abs(-changes[d] - paper[d]) > unit / 2:
            off.append(d)
    shown = ", ".join(f"ResNet-{d}: {-changes[d]:.1e} (paper {paper[d]:.0e})" for d in common_depths)
    return Outcome(FAILS if off else HOLDS, shown)


# ----------------------------------------------------------------------------- rules: weight scaling
@rule(f"every fitted exponent is within ±{EXPONENT_TOLERANCE} of the paper's (Cohen et al.); none fitted "
      "(too few depths): not decidable")
def exponent_within_tolerance(estimates: Mapping[str, tuple[float, float, float]], paper: float) -> Outcome:
    """``estimates``: label -> (estimate, interval low, interval high); NaN estimates were not fitted."""
    fitted = {k: v for k, v in estimates.items() if v[0] is not None and not math.isnan(v[0])}
    if not fitted:
        return Outcome(UNDECIDABLE, "not fitted (too few depths)")
    close = all(abs(v[0] - paper) <= EXPONENT_TOLERANCE for v in fitted.values())
    shown = ", ".join((f"{k}: " if k else "") + f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]" for k, v in fitted.items())
    return Outcome(HOLDS if close else FAILS, shown)


@rule(f"every fitted exponent has the sign Cohen et al. report, within the same ±{EXPONENT_TOLERANCE}: "
      f"'<= 0' holds when each estimate is <= +{EXPONENT_TOLERANCE}, '>= 0' when each is >= -{EXPONENT_TOLERANCE}; "
      "none fitted (too few depths): not decidable")
def sign_within_tolerance(estimates: Mapping[str, float], side: str) -> Outcome:
    if side not in ("<= 0", ">= 0"):
        raise ValueError(f"side {side!r}: use '<= 0' or '>= 0'")
    fitted = {k: v for k, v in estimates.items() if v is not None and not math.isnan(v)}
    if not fitted:
        return Outcome(UNDECIDABLE, "not fitted (too few depths)")
    ok = [v <= EXPONENT_TOLERANCE if side == "<= 0" else v >= -EXPONENT_TOLERANCE for v in fitted.values()]
    return Outcome(HOLDS if all(ok) else FAILS, ", ".join(f"{k}: {v:+.3f}" for k, v in fitted.items()))


RULES = (
    falls_with_depth, stays_below_line, plateau_within_seed_spread, explained_by_training_loss, projection_never_exceeds,
    growth_lower_mean, growth_wins_everywhere, paper_value_in_interval, lowers_loss_everywhere, drop_not_increasing,
    matches_paper_precision, exponent_within_tolerance, sign_within_tolerance,
)  # fmt: skip
