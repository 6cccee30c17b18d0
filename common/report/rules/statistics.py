"""The claim rules' statistics: Student-t estimates and intervals, pooled seed spreads, Spearman and partial
Spearman correlations, runs grouped by depth (:mod:`common.report.rules`, "Statistics")."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from common.report.rules.margins import EXACT_MAX_N, SPEARMAN_Z_VARIANCE, TAIL
from common.report.rules.verdicts import FAILS, HOLDS, UNDECIDABLE


# ----------------------------------------------------------------------------- estimates and intervals
@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """Student-t quantile (normal for ``df = inf``), cached: the rules ask for the same few many times."""
    return float(stats.norm.ppf(q)) if math.isinf(df) else float(stats.t.ppf(q, df))


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error and the degrees of freedom of that error (Student-t intervals)."""

    mean: float
    se: float
    df: float

    def interval(self, tail: float = TAIL) -> tuple[float, float]:
        """``mean ± t(1 - tail, df) se``: the two one-sided bounds at level ``tail`` each."""
        half = t_quantile(1.0 - tail, self.df) * self.se
        return self.mean - half, self.mean + half

    def p_value(self) -> float:
        """Two-sided p-value of ``mean = 0``."""
        if self.se <= 0:
            return 0.0 if self.mean != 0 else 1.0
        return t_two_sided(self.mean / self.se, self.df)

    def text(self, digits: int = 4) -> str:
        low, high = self.interval()
        return f"{self.mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def over_seeds(mean: float, std: float, n: int) -> Estimate | None:
    """The estimate of a mean over ``n`` seeds from its sample std (None for one seed or no std)."""
    if n < 2 or std is None or not math.isfinite(std):
        return None
    return Estimate(float(mean), float(std) / math.sqrt(n), n - 1)


def pooled_spread(groups: Iterable[tuple[float, int]]) -> tuple[float, int] | None:
    """Pooled standard deviation and its degrees of freedom from ``(sample std, n)`` per group (None if no dof)."""
    ss, dof = 0.0, 0
    for std, n in groups:
        if n >= 2 and std is not None and math.isfinite(std):
            ss += (n - 1) * std * std
            dof += n - 1
    return (math.sqrt(ss / dof), dof) if dof else None


def pooled_estimates(summaries: Mapping[str, tuple[float, float, int]]) -> dict[str, Estimate] | None:
    """Each group's mean with the spread pooled over every group: ``{name: (mean, std, n)}`` -> estimates."""
    spread = pooled_spread((s, n) for _, s, n in summaries.values())
    if spread is None:
        return None
    s, dof = spread
    return {k: Estimate(float(m), s / math.sqrt(n), dof) for k, (m, _, n) in summaries.items()}


def region_verdict(
    intervals: Sequence[tuple[float, float]], low: float, high: float, negation: Sequence[tuple[float, float]]
) -> str:
    """Holds when every interval lies inside ``(low, high)``; does not hold when one of ``negation`` (the same
    parts' intervals, Bonferroni-corrected by the caller where it computes them) lies outside it; else not decidable."""
    if all(low < a and b < high for a, b in intervals):
        return HOLDS
    if any(b < low or a > high for a, b in negation):
        return FAILS
    return UNDECIDABLE


# ----------------------------------------------------------------------------- correlations
def ranks(x: Sequence[float]) -> np.ndarray:
    """Average ranks from 1 (ties share the mean of their ranks), as :func:`scipy.stats.rankdata`, without its wrappers."""
    x = np.asarray(x, float)
    order = np.argsort(x, kind="mergesort")
    ordered = x[order]
    starts = np.concatenate(([0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1))
    ends = np.concatenate((starts[1:], [len(x)]))
    out = np.empty(len(x))
    out[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return out


def t_two_sided(t: float, dof: float) -> float:
    """Two-sided p-value of Student's t (the normal for ``dof = inf``)."""
    return float(2.0 * (special.ndtr(-abs(t)) if math.isinf(dof) else special.stdtr(dof, -abs(t))))


def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Spearman's rho (:func:`scipy.stats.spearmanr`) and its two-sided p-value; NaNs when undefined.

    With at most :data:`EXACT_MAX_N` points the p-value is exact, from every one of the n! pairings
    (:func:`scipy.stats.permutation_test`); spearmanr's t approximation would call 4 depths in order
    "p = 0" where the exact value is 2/24. Above that, spearmanr's t approximation (n - 2 dof).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    if (
        len(x) > EXACT_MAX_N
    ):  # spearmanr's own formula without its wrappers (the claim-rate simulations call this often)
        rx, ry = ranks(x) - (len(x) + 1) / 2, ranks(y) - (len(y) + 1) / 2
        r = float(np.clip(rx @ ry / math.sqrt((rx @ rx) * (ry @ ry)), -1.0, 1.0))
        dof = len(x) - 2
        return r, 0.0 if abs(r) == 1.0 else t_two_sided(r * math.sqrt(dof / (1.0 - r * r)), dof)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.spearmanr(x, y)
    ry = stats.rankdata(y) - (len(y) + 1) / 2

    def rho(rx: np.ndarray, axis: int = -1) -> np.ndarray:
        rx = rx - rx.mean(axis=axis, keepdims=True)
        return (rx @ ry) / np.sqrt((rx * rx).sum(axis=axis) * (ry @ ry))

    exact = stats.permutation_test(
        (stats.rankdata(x),),
        rho,
        permutation_type="pairings",
        vectorized=True,
        n_resamples=math.factorial(len(x)),
        alternative="two-sided",
    )
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
    rx, ry, rz = (ranks(v) for v in (x, y, z))
    cz = rz - rz.mean()
    resid = [
        (r - r.mean()) - cz * (cz @ (r - r.mean()) / (cz @ cz)) if cz @ cz > 0 else r - r.mean() for r in (rx, ry)
    ]  # least-squares line
    norms = [float(np.linalg.norm(e)) for e in resid]
    scale = float(np.linalg.norm(rx - rx.mean()) + np.linalg.norm(ry - ry.mean()))
    if min(norms) <= 1e-12 * max(scale, 1.0):
        return math.nan, math.nan
    r = float(np.clip(resid[0] @ resid[1] / (norms[0] * norms[1]), -1.0, 1.0))
    dof = n - 3
    if abs(r) == 1.0:
        return r, 0.0
    return r, t_two_sided(r * math.sqrt(dof / (1.0 - r * r)), dof)


def partial_half_width(n: int, tail: float = TAIL) -> float:
    """The half-width in z = atanh(r) of Fisher's interval of :func:`partial_interval` at ``n`` points (inf below 5)."""
    return t_quantile(1.0 - tail, math.inf) * math.sqrt(SPEARMAN_Z_VARIANCE / (n - 4)) if n > 4 else math.inf


def partial_min_runs(margin: float, tail: float = TAIL) -> int:
    """The fewest points at which Fisher's interval (:func:`partial_interval`) fits inside ``±margin`` at all (at r = 0):
    below it no partial correlation can be shown within the margin, whatever the records."""
    z = t_quantile(1.0 - tail, math.inf)
    return 4 + math.floor(SPEARMAN_Z_VARIANCE * (z / math.atanh(margin)) ** 2) + 1


def partial_interval(r: float, n: int, tail: float = TAIL) -> tuple[float, float]:
    """Fisher's interval of a partial Spearman correlation with one controlling variable (module docstring)."""
    if n <= 4 or abs(r) >= 1.0:
        return (r, r)
    half = t_quantile(1.0 - tail, math.inf) * math.sqrt(SPEARMAN_Z_VARIANCE / (n - 4))
    z = math.atanh(r)
    return math.tanh(z - half), math.tanh(z + half)


# ----------------------------------------------------------------------------- depth groups
@dataclass(frozen=True)
class DepthGroups:
    """Runs grouped by depth (several seeds per depth): per distinct depth, ascending, the count, mean and the sum
    of squared deviations from that mean (numpy group sums: the claim-rate simulations call this often)."""

    depths: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    ss: np.ndarray

    def first_below(self, line: float) -> int | None:
        """Index of N*: the first depth whose mean is below ``line`` (None if none)."""
        below = np.flatnonzero(self.mean < line)
        return int(below[0]) if len(below) else None

    def spread(self, mask: np.ndarray) -> tuple[float, int] | None:
        """The seed spread pooled over the depths in ``mask`` (:func:`pooled_spread`; None without a repeated seed)."""
        dof = int((self.n[mask] - 1).sum())
        return (math.sqrt(float(self.ss[mask].sum()) / dof), dof) if dof else None


def depth_groups(depths: Sequence[float], values: Sequence[float]) -> DepthGroups:
    d, v = np.asarray(depths, float), np.asarray(values, float)
    if d.shape != v.shape:
        raise ValueError(f"depths and values differ in length: {d.shape} and {v.shape}")
    uniq, inverse = np.unique(d, return_inverse=True)
    n = np.bincount(inverse, minlength=len(uniq)).astype(float)
    mean = np.bincount(inverse, v, len(uniq)) / n
    dev = v - mean[inverse]
    return DepthGroups(uniq, n, mean, np.bincount(inverse, dev * dev, len(uniq)))


def first_below(depths: Sequence[float], values: Sequence[float], line: float) -> float | None:
    """N*: the first depth whose mean value over seeds is below ``line`` (None if none)."""
    groups = depth_groups(depths, values)
    i = groups.first_below(line)
    return None if i is None else float(groups.depths[i])


def group_spread(groups: Iterable[Sequence[float]]) -> tuple[float, int] | None:
    """The seed spread pooled over groups of per-seed values (:func:`pooled_spread`; plain Python: groups are small)."""
    ss, dof = 0.0, 0
    for g in groups:
        if len(g) > 1:
            m = sum(g) / len(g)
            ss += sum((x - m) * (x - m) for x in g)
            dof += len(g) - 1
    return (math.sqrt(ss / dof), dof) if dof else None
