"""App. G's intervals for ``Gamma = max_l ||C_l||`` and their verdicts, from the streamed moments of
:class:`common.science.projection.ContributionMoments` (docs/design.md, sections "App. G: saturation interval and verdicts"
and "App. G: the asymptotic interval beside it").

- Theorem 3's separated saturation test: the interval ``[max(0, Gamma_hat - t_alpha), Gamma_hat + t_alpha]``,
  ``t_alpha = sqrt(sum_l tr_l / (n_test alpha))`` (Markov on ``sum_l ||C_hat_l - C_l||^2``), the traces ``tr_l``
  of the per-example contributions from a disjoint calibration part, and three verdicts against a tolerance
  delta (:func:`saturation_interval`);
- beside it, labelled asymptotic, a normal-theory interval on each ``||C_l||^2`` from its unbiased U-statistic,
  Bonferroni over the candidates (:func:`asymptotic_interval`), and for both the projected ``n_test`` at which
  each interval would leave 0 or delta.

Functions of numbers and arrays only: no Gram matrix or eigendecomposition is needed here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

SATURATION_STATISTIC = "max_pooled_cross_gradient_norm"  # max_l ||C_l||, C_l of the pooled mean loss


def saturation_error_bound(covariance_traces, n: int, t: float):
    """``sum_l tr(Sigma_l) / (n t^2)``: Markov on ``sum_l ||C_hat_l - C_l||^2`` (App. G).

    ``E ||C_hat_l - C_l||^2 = tr(Sigma_l) / n`` for the mean ``C_hat_l`` of ``n`` i.i.d. contributions,
    so ``P(max_l ||C_hat_l - C_l|| >= t) <= P(sum_l ||C_hat_l - C_l||^2 >= t^2)`` is at most this
    number. ``covariance_traces``: one trace per candidate on the last axis (a sequence, or an array
    of several samples' traces); the result has the leading shape (a float for one sample).
    """
    if np.any(np.asarray(t) <= 0) or n <= 0:
        raise ValueError(f"the error bound needs t > 0 and n > 0, got t={t}, n={n}")
    bound = np.sum(np.asarray(covariance_traces, dtype=np.float64), axis=-1) / (n * np.square(t))
    return float(bound) if np.ndim(bound) == 0 else bound


def separation_margin(covariance_traces, n: int, alpha: float):
    """``t_alpha = sqrt(sum_l tr_l / (n alpha))``: the ``t`` at which :func:`saturation_error_bound` is ``alpha``.

    In the split protocol ``tr_l`` are the calibration part's traces and ``n`` is ``n_test``, the
    number of examples behind ``C_hat_l`` (not the whole sample's). ``t_alpha`` grows with the number
    of candidates (one trace each in the sum): the statement covers all of them at once.

    >>> round(separation_margin([2.0, 3.0], n=100, alpha=0.05), 12)   # sqrt(5 / 5)
    1.0
    """
    if not 0 < alpha < 1 or n <= 0:
        raise ValueError(f"the separation margin needs 0 < alpha < 1 and n > 0, got alpha={alpha}, n={n}")
    t = np.sqrt(np.sum(np.asarray(covariance_traces, dtype=np.float64), axis=-1) / (n * alpha))
    return float(t) if np.ndim(t) == 0 else t


SATURATED = "saturated within delta"
NOT_SATURATED = "not saturated"
UNDECIDED = "undecided"
NO_VERDICT = "no verdict"  # the contributions are not per-example gradients (BatchNorm in train mode)
SATURATION_VERDICTS = (SATURATED, NOT_SATURATED, UNDECIDED, NO_VERDICT)


def gamma_interval(gamma_hat, t):
    """``[max(0, Gamma_hat - t), Gamma_hat + t]``, the interval for ``Gamma = max_l ||C_l||`` (App. G).

    On the event ``max_l ||C_hat_l - C_l|| < t`` (probability at least ``1 - alpha`` at ``t = t_alpha``),
    ``|max_l ||C_hat_l|| - max_l ||C_l||| <= max_l |(||C_hat_l|| - ||C_l||)| <= max_l ||C_hat_l - C_l|| < t``
    (the max is 1-Lipschitz in the sup norm, then the reverse triangle inequality). Arrays broadcast.
    """
    gamma_hat, t = np.asarray(gamma_hat, dtype=np.float64), np.asarray(t, dtype=np.float64)
    lower, upper = np.maximum(0.0, gamma_hat - t), gamma_hat + t
    return (float(lower), float(upper)) if lower.ndim == 0 else (lower, upper)


def saturation_verdict(lower, upper, delta: float | None = None):
    """The three verdicts of App. G's separated test against a tolerance ``delta`` (arrays broadcast).

    "saturated within delta" when the upper end is at most ``delta``; "not saturated" when the lower
    end is above it; "undecided" otherwise. Without a ``delta`` the question is ``Gamma > 0``: "not
    saturated" or "undecided", never "saturated" (exact saturation is the knife edge; so is
    ``delta = 0``, where the upper end ``Gamma_hat + t > 0`` is never at most ``delta``).

    >>> saturation_verdict(0.0, 20.6, None), saturation_verdict(0.5, 1.5, 2.0), saturation_verdict(2.5, 3.5, 2.0)
    ('undecided', 'saturated within delta', 'not saturated')
    """
    if delta is not None and delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    d = 0.0 if delta is None else float(delta)
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    verdict = np.where(lower > d, NOT_SATURATED, np.where((d > 0) & (upper <= d), SATURATED, UNDECIDED))
    return str(verdict) if verdict.ndim == 0 else verdict


@dataclass(frozen=True)
class SaturationInterval:
    """App. G's interval for ``Gamma = max_l ||C_l||`` at confidence ``1 - alpha`` and its verdict.

    ``alpha_source`` says how ``t`` and ``alpha`` relate: ``"given"`` (``t = t_alpha`` from the
    calibration traces and the ``n`` test examples, :func:`separation_margin`) or ``"implied by t"``
    (``t`` fixed by the user, ``alpha = sum_l tr_l / (n t^2)`` from the same sample's traces: an
    estimate of the error probability, not a guarantee). Coverage is conditional on the traces
    used: heavy-tailed contributions make an underestimate, hence a too-short interval, likely.
    """

    statistic: str
    gamma_hat: float  # max_l ||C_hat_l|| over the n test examples
    argmax: str
    n: int  # examples behind C_hat_l (n_test in the split protocol)
    n_candidates: int
    t: float
    alpha: float
    alpha_source: str
    lower: float | None
    upper: float | None
    delta: float | None
    verdict: str
    values: dict[str, float]  # ||C_hat_l|| per candidate
    covariance_traces: dict[str, float]  # the tr(Sigma_hat_l) that set t (or alpha)

    def as_record(self) -> dict:
        return asdict(self)


def saturation_interval(
    values: Sequence[float],
    covariance_traces: Sequence[float],
    *,
    n: int,
    alpha: float | None = None,
    t: float | None = None,
    delta: float | None = None,
    names: Sequence[str] | None = None,
    statistic: str = SATURATION_STATISTIC,
) -> SaturationInterval:
    """App. G (Theorem 3): ``Gamma in [max(0, Gamma_hat - t), Gamma_hat + t]`` and a verdict against ``delta``.

    ``values`` are ``||C_hat_l||``, the pooled mean-loss cross-gradients over ``n`` independent examples.
    Give ``alpha`` (then ``t = t_alpha`` from ``covariance_traces``, which must come from a disjoint
    calibration part, and ``n`` is ``n_test``) or ``t`` (then ``alpha`` is implied by the traces of the
    same sample). ``delta`` None: no tolerance (verdicts "not saturated" / "undecided" only).
    """
    if (alpha is None) == (t is None):
        raise ValueError("give exactly one of alpha (t from the calibration traces) and t (alpha implied)")
    if len(values) == 0:
        raise ValueError("the App. G interval needs at least one candidate")
    names = list(names) if names is not None else [str(i) for i in range(len(values))]
    if not len(names) == len(values) == len(covariance_traces):
        raise ValueError(f"{len(names)} names, {len(values)} values and {len(covariance_traces)} covariance traces")
    if t is None:
        t, source = separation_margin(covariance_traces, n, alpha), "given"
    else:
        alpha, source = saturation_error_bound(covariance_traces, n, t), "implied by t"
    best = max(range(len(values)), key=lambda i: values[i])
    lower, upper = gamma_interval(values[best], t)
    return SaturationInterval(
        statistic=statistic,
        gamma_hat=float(values[best]),
        argmax=names[best],
        n=int(n),
        n_candidates=len(values),
        t=float(t),
        alpha=float(alpha),
        alpha_source=source,
        lower=lower,
        upper=upper,
        delta=None if delta is None else float(delta),
        verdict=saturation_verdict(lower, upper, delta),
        values={k: float(v) for k, v in zip(names, values, strict=True)},
        covariance_traces={k: float(v) for k, v in zip(names, covariance_traces, strict=True)},
    )


# ----------------------------------------------------------------------------- App. G: the asymptotic interval beside it
ASYMPTOTIC_LABEL = (
    "asymptotic (normal-theory interval on ||C_l||^2, Bonferroni over candidates; not Theorem 3's guarantee)"
)


def norm_sq_standard_error(linear_variance, cov_sq_trace, n: int):
    """``sqrt(4 v1 / n + 2 v2 / (n (n - 1)))``: the standard deviation of ``U_l`` (arrays broadcast).

    ``U_l = sum_{i != j} <c_i, c_j> / (n (n - 1))`` is a U-statistic of order 2 with kernel
    ``h(c, c') = <c, c'>``; Hoeffding's variance formula, with ``zeta_1 = Var <c, C> = C^T Sigma C`` (``v1``)
    and ``zeta_2 = Var <c, c'> = tr(Sigma^2) + 2 C^T Sigma C`` (``v2 = tr(Sigma^2)``), gives exactly
    ``Var U_l = 4 (n - 2) zeta_1 / (n (n - 1)) + 2 zeta_2 / (n (n - 1)) = 4 v1 / n + 2 v2 / (n (n - 1))``.
    """
    if n < 2:
        raise ValueError(f"the standard error of U_l needs n >= 2, got {n}")
    v1 = np.maximum(np.asarray(linear_variance, dtype=np.float64), 0.0)
    v2 = np.maximum(np.asarray(cov_sq_trace, dtype=np.float64), 0.0)
    se = np.sqrt(4.0 * v1 / n + 2.0 * v2 / (n * (n - 1.0)))
    return float(se) if se.ndim == 0 else se


def linear_variance_estimate(direction_variance, cov_sq_trace, n_direction: int):
    """``v1 = C^T Sigma C`` from the variance of ``<c_i, a>`` along ``a = C_hat`` of ``n_direction`` other examples.

    ``E[a^T Sigma a] = C^T Sigma C + tr(Sigma^2) / n_direction`` (``a = C + e``, ``Cov e = Sigma / n_direction``),
    so ``direction_variance - tr(Sigma^2) / n_direction`` is unbiased; clipped at 0 (a variance). In App. G
    ``a`` is the test part's ``C_hat_l`` (the plug-in ``C_hat^T Sigma C_hat``) and the variance along it is
    measured on the calibration part, so one pass over each part is enough.
    """
    value = np.maximum(
        np.asarray(direction_variance, dtype=np.float64) - np.asarray(cov_sq_trace, dtype=np.float64) / n_direction,
        0.0,
    )
    return float(value) if value.ndim == 0 else value


def bonferroni_z(alpha: float, n_candidates: int, dof: int | None = None) -> float:
    """The two-sided quantile at ``1 - alpha / (2 L)`` for ``L`` candidates (Bonferroni: the ``L`` intervals hold
    jointly with probability ``>= 1 - alpha``): Student t with ``dof`` degrees of freedom, the normal one without.

    App. G's asymptotic interval uses ``dof = n_cal - 1``: its variance rests on a sample variance over the
    ``n_cal`` calibration examples (it equals the normal quantile to ~1e-3 at ``n_cal`` in the thousands).
    """
    if not 0 < alpha < 1 or n_candidates < 1:
        raise ValueError(f"need 0 < alpha < 1 and at least one candidate, got alpha={alpha}, L={n_candidates}")
    level = 1.0 - alpha / (2.0 * n_candidates)
    return float(stats.norm.ppf(level) if dof is None else stats.t.ppf(level, dof))


def asymptotic_gamma_interval(norm_sq, se, z: float):
    """``Gamma = max_l ||C_l||`` in ``[max_l sqrt((U_l - z se_l)^+), max_l sqrt((U_l + z se_l)^+)]``.

    On the event that every ``||C_l||^2`` lies in ``U_l -+ z se_l`` (probability ``~ >= 1 - alpha`` at the
    Bonferroni ``z``) each ``||C_l||`` lies in ``[sqrt((U_l - z se_l)^+), sqrt((U_l + z se_l)^+)]`` and the maximum
    in the maxima of the ends (the maximum is monotone in each argument). Candidates on the last axis.
    """
    u, s = np.asarray(norm_sq, dtype=np.float64), np.asarray(se, dtype=np.float64)
    lower = np.sqrt(np.maximum(u - z * s, 0.0)).max(axis=-1)
    upper = np.sqrt(np.maximum(u + z * s, 0.0)).max(axis=-1)
    return (float(lower), float(upper)) if lower.ndim == 0 else (lower, upper)


LOWER_ABOVE_DELTA = "lower end above delta"
UPPER_AT_MOST_DELTA = "upper end at most delta"
N_SEARCH_LIMIT = 10**15  # projected sample sizes beyond this are reported as never


def smallest_sample(condition, start: int = 2, limit: int = N_SEARCH_LIMIT) -> int | None:
    """The smallest integer ``n >= start`` with ``condition(n)``, for a condition that stays true once true
    (doubling, then bisection); None when it does not hold by ``limit``."""
    if condition(start):
        return start
    low, high = start, start * 2
    while not condition(high):
        if high >= limit:
            return None
        low, high = high, min(high * 2, limit)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if condition(mid) else (mid, high)
    return high


def exclusion_side(norm_sq, delta: float) -> str:
    """Which end must leave ``delta`` for a decision: the lower end when the estimate ``max_l sqrt(U_l^+)`` is
    above ``delta`` ("not saturated"), else the upper end ("saturated within delta")."""
    estimate = math.sqrt(max(max(float(u) for u in norm_sq), 0.0))
    return LOWER_ABOVE_DELTA if estimate > delta else UPPER_AT_MOST_DELTA


def theorem3_n_to_exclude(norm_sq, test_traces, cal_traces, alpha: float, delta: float, side: str) -> int | None:
    """The ``n_test`` at which Theorem 3's interval would leave ``delta`` on ``side``, at the current estimates.

    Projection: ``||C_l||^2`` at its unbiased estimate ``U_l^+``, so that at ``n`` test examples
    ``E ||C_hat_l||^2 = U_l^+ + tr_l / n`` (``tr_l`` the test part's traces) and ``Gamma_hat(n)`` is the
    largest of their square roots; ``t(n) = sqrt(sum_l tr_l^cal / (n alpha))`` from the calibration traces.
    Lower end above delta: ``Gamma_hat(n) - t(n) > delta``; upper end at most delta: ``Gamma_hat(n) + t(n) <= delta``.
    """
    u = np.maximum(np.asarray(norm_sq, dtype=np.float64), 0.0)
    tr = np.asarray(test_traces, dtype=np.float64)
    cal = float(np.sum(np.asarray(cal_traces, dtype=np.float64)))

    def gamma_hat(n: int) -> float:
        return float(np.sqrt(u + tr / n).max())

    if side == LOWER_ABOVE_DELTA:
        return smallest_sample(lambda n: gamma_hat(n) - math.sqrt(cal / (n * alpha)) > delta)
    if side == UPPER_AT_MOST_DELTA:
        return smallest_sample(lambda n: gamma_hat(n) + math.sqrt(cal / (n * alpha)) <= delta)
    raise ValueError(f"side {side!r}: use {LOWER_ABOVE_DELTA!r} or {UPPER_AT_MOST_DELTA!r}")


def asymptotic_n_to_exclude(norm_sq, linear_variance, cov_sq_trace, z: float, delta: float, side: str) -> int | None:
    """The ``n_test`` at which the asymptotic interval would leave ``delta`` on ``side``, with ``U_l``, ``v1_l``
    and ``v2_l`` held at their estimates (only ``se_l(n)`` shrinks)."""

    def ends(n: int) -> tuple[float, float]:
        return asymptotic_gamma_interval(norm_sq, norm_sq_standard_error(linear_variance, cov_sq_trace, n), z)

    if side == LOWER_ABOVE_DELTA:
        return smallest_sample(lambda n: ends(n)[0] > delta)
    if side == UPPER_AT_MOST_DELTA:
        return smallest_sample(lambda n: ends(n)[1] <= delta)
    raise ValueError(f"side {side!r}: use {LOWER_ABOVE_DELTA!r} or {UPPER_AT_MOST_DELTA!r}")


@dataclass(frozen=True)
class AsymptoticInterval:
    """The asymptotic interval for ``Gamma = max_l ||C_l||`` beside Theorem 3's (labelled; not used for the verdict).

    Per candidate a normal interval ``U_l -+ z se_l`` on ``||C_l||^2`` (:func:`norm_sq_standard_error`), ``z`` the
    Bonferroni quantile over the ``n_candidates``, mapped to ``Gamma`` by :func:`asymptotic_gamma_interval`.
    Coverage is asymptotic (normality of ``U_l``; the variance estimated), not a guarantee at finite ``n``.
    """

    label: str
    alpha: float
    z: float  # the Bonferroni quantile used (Student t with dof degrees of freedom, normal when dof is None)
    dof: int | None
    n: int  # n_test: examples behind U_l
    n_candidates: int
    gamma_estimate: float  # max_l sqrt(U_l^+)
    argmax: str
    lower: float | None
    upper: float | None
    delta: float | None
    verdict: str
    norm_sq: dict[str, float]  # U_l
    norm_sq_se: dict[str, float]
    linear_variance: dict[str, float]  # v1_l, estimate of C_l^T Sigma_l C_l
    cov_sq_trace: dict[str, float]  # v2_l, estimate of tr(Sigma_l^2)
    n_test_to_exclude_zero: int | None
    n_test_to_exclude_delta: int | None
    n_test_to_exclude_delta_side: str | None

    def as_record(self) -> dict:
        return asdict(self)


def asymptotic_interval(
    norm_sq: Sequence[float],
    linear_variance: Sequence[float],
    cov_sq_trace: Sequence[float],
    *,
    n: int,
    alpha: float,
    dof: int | None = None,
    delta: float | None = None,
    names: Sequence[str] | None = None,
) -> AsymptoticInterval:
    """:class:`AsymptoticInterval` from per-candidate ``U_l``, ``v1_l`` and ``v2_l`` over ``n`` test examples.

    ``dof``: degrees of freedom of the quantile (:func:`bonferroni_z`; App. G: ``n_cal - 1``), None: normal.
    The projected ``n_test`` hold ``U_l``, ``v1_l``, ``v2_l`` and the quantile at their values here.
    """
    if not len(norm_sq) == len(linear_variance) == len(cov_sq_trace) > 0:
        raise ValueError(f"{len(norm_sq)} U_l, {len(linear_variance)} v1_l and {len(cov_sq_trace)} v2_l values")
    names = list(names) if names is not None else [str(i) for i in range(len(norm_sq))]
    z = bonferroni_z(alpha, len(norm_sq), dof)
    se = norm_sq_standard_error(np.asarray(linear_variance), np.asarray(cov_sq_trace), n)
    lower, upper = asymptotic_gamma_interval(np.asarray(norm_sq), se, z)
    best = max(range(len(norm_sq)), key=lambda i: norm_sq[i])
    side = None if delta is None else exclusion_side(norm_sq, delta)
    return AsymptoticInterval(
        label=ASYMPTOTIC_LABEL,
        alpha=float(alpha),
        z=float(z),
        dof=None if dof is None else int(dof),
        n=int(n),
        n_candidates=len(norm_sq),
        gamma_estimate=math.sqrt(max(float(norm_sq[best]), 0.0)),
        argmax=names[best],
        lower=lower,
        upper=upper,
        delta=None if delta is None else float(delta),
        verdict=saturation_verdict(lower, upper, delta),
        norm_sq={k: float(v) for k, v in zip(names, norm_sq, strict=True)},
        norm_sq_se={k: float(v) for k, v in zip(names, np.atleast_1d(se), strict=True)},
        linear_variance={k: float(v) for k, v in zip(names, linear_variance, strict=True)},
        cov_sq_trace={k: float(v) for k, v in zip(names, cov_sq_trace, strict=True)},
        n_test_to_exclude_zero=asymptotic_n_to_exclude(
            norm_sq, linear_variance, cov_sq_trace, z, 0.0, LOWER_ABOVE_DELTA
        ),
        n_test_to_exclude_delta=None
        if delta is None
        else asymptotic_n_to_exclude(norm_sq, linear_variance, cov_sq_trace, z, delta, side),
        n_test_to_exclude_delta_side=side,
    )
