"""The rules that turn run records into verdicts on the paper's claims (``figures/claims.md``).

Each rule is a pure function of plain numbers (depths, scores, losses, per-seed values or their
summaries; no files, no runs) that returns an :class:`Outcome`: a verdict and the reproduced value
in words. Its rule text, the sentence printed in the claims report, is attached by :func:`rule`
and is ``fn.rule``. The verdicts:

- ``holds``: the records show the claim at the 5% level (a 95% interval inside the claim's region);
- ``does not hold``: the records show the claim's negation at the same level (the interval outside it);
- ``not decidable``: neither, or the records cannot decide the rule (one seed where a seed spread
  is needed, too few runs for a test, a constant input). Failing to reject never gives "holds";
- ``not decidable at this design``: the same, where the rule cannot reach :data:`POWER_TARGET` at the
  records' own design (depths, seeds, sample sizes), measured by simulation in the claim's own world
  (:mod:`common.experiments.claim_rates`); the report says how many runs, seeds or test examples it
  would need. Set by the report builder, never by a rule;
- ``not comparable``: the paper's value cannot be compared with the records as it stands (the 5e-3
  line: the paper gives no normalisation, :data:`NOT_COMPARABLE_WHY`). Set by the report builder;
- ``not run``: no records (set by the report builder, never by a rule).

:data:`RULES` are the paper's claims; their error rates are measured by simulation
(:mod:`common.experiments.claim_rates`, ``tests/test_claim_rates.py``, ``docs/claim-rules.md``).
:data:`IDENTITY_CHECKS` are identities that hold by construction (``V_S,l <= AG_l``; a matched
insertion lowers the loss at small alpha): the report shows them apart and never counts them among
reproduced claims.

Every margin and threshold is fixed below, each with its reason, before any mini or paper record
was looked at; nothing is tuned to make a claim hold.

Statistics:

- Intervals are Student-t intervals ``mean ± t(0.975, df) se`` (:class:`Estimate`); a one-sided
  bound at 2.5% is one end of it. A claim over several parts (every depth, every architecture) holds
  when every part's interval is inside the claim's region (an intersection-union test: its level is
  the parts' level, no correction needed); the negation ("some part is outside") is a union, so
  its bounds are Bonferroni-corrected over the parts (the selection of the worst part).
- Seed spreads are pooled: the within-group sample variances (groups: depths, architectures)
  weighted by their degrees of freedom (:func:`pooled_spread`), which assumes one noise level
  across the groups of one claim.
- Spearman correlations are :func:`scipy.stats.spearmanr`'s (Pearson's r of average ranks); their
  two-sided p-values are exact (every pairing, :func:`scipy.stats.permutation_test`) up to 8 points,
  and spearmanr's t approximation with n - 2 degrees of freedom above (:func:`spearman`).
- :func:`partial_spearman` is the Spearman correlation of x and y given z: each variable is
  rank-transformed (average ranks for ties), the ranks of x and of y are each regressed on the
  ranks of z by least squares with an intercept, and the Pearson correlation of the two residual
  vectors is the partial correlation r. Its p-value is two-sided from Student's t with n - 3
  degrees of freedom, ``t = r sqrt((n - 3) / (1 - r^2))``. Its interval is Fisher's:
  ``atanh(r) ± 1.96 sqrt(1.06 / (n - 4))`` (the 1.06 of Fieller, Hartley and Pearson 1957 for a
  rank correlation, n - 4 for n points and one controlling variable).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from common.projection import NOT_SATURATED, SATURATED

HOLDS = "holds"
FAILS = "does not hold"
UNDECIDABLE = "not decidable"
UNDECIDABLE_AT_DESIGN = "not decidable at this design"  # undecided, and the rule cannot reach POWER_TARGET there
NOT_COMPARABLE = "not comparable"
NOT_COMPARABLE_WHY = "the paper's normalisation is not given"
NOT_RUN = "not run"
VERDICTS = (HOLDS, FAILS, UNDECIDABLE, UNDECIDABLE_AT_DESIGN, NOT_COMPARABLE, NOT_RUN)

# ----------------------------------------------------------------------------- margins and thresholds (fixed in issue 21)
SIGNIFICANCE = 0.05  # two-sided level of every test: each one-sided bound at 2.5% (a 95% interval), the convention
TAIL = SIGNIFICANCE / 2  # one side of it
EXPONENT_TOLERANCE = 0.1  # "exponent within ±0.1 of the paper" (issue 16)
# Relative slack of V_S,l <= AG_l. The probe takes AG_l from per-example gradient norms computed in the gradient's dtype
# (float32 for a float32 model: cascade sums, relative error up to ~log2(elements) * 2^-24, about 1e-6), V_S,l from the
# same gradients in float64; where the candidate is realizable (V_S,l = AG_l exactly, e.g. the head's input) rounding
# alone puts V_S,l a few 1e-8 above AG_l. A projection that adds norm (a bug) shows at the percent level.
PROJECTION_SLACK = 1e-5
EXACT_MAX_N = 8  # up to 8 points (8! = 40,320 pairings) Spearman's p-value is exact, by permutation
LINE_FACTOR = 1.5  # the paper's "approximately 5e-3": a depth is above the line only past 1.5x it (issue 21's example)
PLATEAU_MARGIN = (
    0.02  # "little or no improvement": a gain under 2% of the test loss, a sixth of the 11.8% the paper calls a gain
)
PLATEAU_BLOCKS = 4  # a gain is "systematic" when a quarter of the depths from N* on beats the first quarter
EXPLAINED_MARGIN = (
    0.3  # depth "adds nothing" beyond the training loss: |partial rho| < 0.3 (Cohen's medium r, 9% of rank variance)
)
SPEARMAN_Z_VARIANCE = 1.06  # var(atanh r_s) ~ 1.06 / (n - 3) (Fieller, Hartley and Pearson 1957)
SIZE_FACTOR = (
    2.0  # "the paper's size": within a factor of 2 either way (issue 21's example: <= 1/2x or >= 2x is another size)
)
PRECISION_UNITS = 0.5  # "at the paper's precision": within half a unit of the leading digit (one significant digit)

# Requirements of issue 21 on every rule's measured error rates (common.experiments.claim_rates, tests/test_claim_rates.py).
POWER_TARGET = 0.8  # P(holds | claim true) at noise 0.5x the effect
FALSE_HOLDS_LIMIT = 0.05  # P(holds | claim false, least favourable point) at noise 0.5x and 1x


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


def verdict_kind(verdict: str) -> str:
    """The kind of a report's verdict cell (one of :data:`VERDICTS`): its longest prefix among them, so that
    "not decidable at this design (needs ...) (mini scale)" is ``UNDECIDABLE_AT_DESIGN``, not ``UNDECIDABLE``."""
    found = [v for v in VERDICTS if verdict == v or verdict.startswith(v + " ") or verdict.startswith(v + ":")]
    if not found:
        raise ValueError(f"verdict {verdict!r} is none of {VERDICTS}")
    return max(found, key=len)


def sentences(*parts: str) -> str:
    """Text parts joined as sentences: each ends with a full stop (one added where it has none), empty parts dropped.

    Where a report cell is put together from several texts (a rule and what follows it), they never run together:
    ``sentences("a: not decidable", "Cannot reach ...")`` is ``"a: not decidable. Cannot reach ..."``.
    """
    kept = [p.strip() for p in parts if p and p.strip()]
    return " ".join(p if p.endswith((".", "?", "!")) else f"{p}." for p in kept)


def clauses(*parts: str) -> str:
    """The non-empty parts of a reproduced value joined by "; " (the report's separator within one value)."""
    return "; ".join(p for p in parts if p)


def fmt(x: float | None) -> str:
    """A number in 3 significant digits ("-" for None / NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3g}"


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
    "training loss's ranks; common/claims.py); fewer than 5 runs: not decidable"
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


# ----------------------------------------------------------------------------- rule: App. G
# Its error rates (coverage, wrong verdicts, power) are measured in tests/test_saturation.py, on App. G's own intervals.
@rule(
    "App. G's separated test (Theorem 3) on every seed of the deepest depth probed: Gamma = max_l ||C_l|| lies in "
    "[max(0, Gamma_hat - t), Gamma_hat + t] with probability >= 1 - alpha (t = sqrt(sum_l tr_l / (n_test alpha)), traces "
    "from a calibration part); holds when every upper end is <= delta ('saturated within delta'); a lower end above "
    "delta ('not saturated'): does not hold; otherwise ('undecided', no delta given, no verdict): not decidable. "
    "Beside it, not used for the verdict: 02's asymptotic interval (a normal interval on ||C_l||^2, Bonferroni over the "
    "candidates), and for both intervals the n_test at which each would exclude delta (0 without one) at this "
    "sample's estimates"
)
def saturated_within_delta(intervals: Mapping[str, Mapping]) -> Outcome:
    """``intervals``: label -> App. G numbers (``lower``, ``upper``, ``t``, ``n_candidates``, ``delta``, ``verdict``)."""
    if not intervals:
        return Outcome(UNDECIDABLE, "no App. G interval recorded")
    shown = "; ".join(f"{k}: {app_g_text(v)}" for k, v in intervals.items())
    verdicts = [v["verdict"] for v in intervals.values()]
    if NOT_SATURATED in verdicts:
        return Outcome(FAILS, shown)
    return Outcome(HOLDS if all(v == SATURATED for v in verdicts) else UNDECIDABLE, shown)


def app_g_n_test_needed(
    t: float | None, n_test: int | None, gamma_hat: float | None, delta: float | None
) -> int | None:
    """About how many test examples Theorem 3's interval needs to exclude ``delta`` (0 when None) at this sample's
    ``gamma_hat`` and traces: ``t = sqrt(sum_l tr_l / (n alpha))`` is ``t sqrt(n_test / n)`` at n examples, below
    ``|gamma_hat - delta|`` from ``n = n_test t^2 / (gamma_hat - delta)^2`` (a plug-in estimate; None if undefined)."""
    if t is None or n_test is None or gamma_hat is None:
        return None
    gap = abs(float(gamma_hat) - (float(delta) if delta else 0.0))
    return math.ceil(float(n_test) * float(t) ** 2 / gap**2) if gap > 0 else None


def app_g_text(r: Mapping) -> str:
    """``Gamma in [lo, hi], t = .., 7 candidates, delta = ..: verdict`` (t and the candidates beside every verdict), then
    02's asymptotic interval where recorded, and the n_test each interval would need (:func:`app_g_needs`)."""
    where = "-" if r.get("lower") is None else f"[{fmt(r['lower'])}, {fmt(r['upper'])}]"
    delta = "none" if r.get("delta") is None else fmt(r["delta"])
    text = f"Gamma in {where}, t = {fmt(r['t'])}, {r['n_candidates']} candidates, delta = {delta}: {r['verdict']}"
    asymptotic = r.get("asymptotic")
    if isinstance(asymptotic, Mapping) and asymptotic.get("lower") is not None:
        text += (
            f"; asymptotic interval (normal, Bonferroni; not used for the verdict) "
            f"[{fmt(asymptotic['lower'])}, {fmt(asymptotic['upper'])}]: {asymptotic.get('verdict', '-')}"
        )
    needs = app_g_needs(r)
    return f"{text}; {needs}" if needs else text


def app_g_needs(r: Mapping) -> str:
    """``n_test to exclude 0: Theorem 3's about 20,380, asymptotic's about 640`` (delta, when one was given).

    02's ``n_test_to_exclude_zero`` / ``_delta`` (and the asymptotic interval's) where recorded; an older record
    without them gets Theorem 3's from :func:`app_g_n_test_needed`. None recorded: "never at these estimates"."""
    with_delta = r.get("delta") is not None
    key = "n_test_to_exclude_delta" if with_delta else "n_test_to_exclude_zero"
    what = f"to leave delta ({r.get(f'{key}_side') or 'either side'})" if with_delta else "to exclude 0"

    def count(n) -> str:
        return "never at these estimates" if n is None else f"about {int(n):,}"

    if key in r:
        theorem = count(r[key])
    else:
        n = app_g_n_test_needed(r.get("t"), r.get("n_test"), r.get("gamma_hat"), r.get("delta"))
        theorem = count(n) if n is not None else "-"
    parts = [f"Theorem 3's {theorem}"]
    asymptotic = r.get("asymptotic")
    if isinstance(asymptotic, Mapping) and key in asymptotic:
        parts.append(f"the asymptotic interval's {count(asymptotic[key])}")
    return f"n_test {what}: {', '.join(parts)}"


# ----------------------------------------------------------------------------- identity checks (not claims)
@rule(
    f"identity (a theorem): every candidate of every exact run has V_S,l <= AG_l (relative slack {PROJECTION_SLACK:g} "
    "for the float32 rounding of AG_l)"
)
def projection_never_exceeds(growth_value: Sequence[float], ag_norm: Sequence[float]) -> Outcome:
    v, ag = np.asarray(growth_value, float), np.asarray(ag_norm, float)
    if len(v) == 0:
        return Outcome(UNDECIDABLE, "no candidate with V_S,l")
    over = v > ag * (1 + PROJECTION_SLACK) + 1e-300
    ratio = float(np.max(v / np.where(ag > 0, ag, np.inf)))
    return Outcome(
        FAILS if over.any() else HOLDS,
        f"max V_S,l / AG_l = {ratio:.4f} over {len(v)} candidates; {int(over.sum())} above",
    )


@rule(
    "identity (true by construction at small alpha): at the paper's alpha, the measured training-loss change (mean over "
    "seeds) is < 0 at every depth run"
)
def lowers_loss_everywhere(changes: Mapping[int, float]) -> Outcome:
    if not changes:
        return Outcome(UNDECIDABLE, "no depth at the paper's alpha")
    shown = ", ".join(f"ResNet-{d}: {c:+.1e}" for d, c in sorted(changes.items()))
    return Outcome(HOLDS if all(c < 0 for c in changes.values()) else FAILS, shown)


RULES = (
    falls_with_depth,
    stays_below_line,
    plateau_within_margin,
    explained_by_training_loss,
    growth_lower_mean,
    growth_wins_everywhere,
    paper_direction,
    paper_size,
    drop_not_increasing,
    matches_paper_precision,
    exponent_within_tolerance,
    sign_within_tolerance,
)
IDENTITY_CHECKS = (projection_never_exceeds, lowers_loss_everywhere)
