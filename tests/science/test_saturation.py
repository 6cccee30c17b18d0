"""App. G's interval for ``Gamma = max_l ||C_l||`` and its three verdicts, as a statistical procedure.

Part 1, a tiny float64 residual MLP under two data laws for the same model: inputs ``x ~ N(0, I)``; labels either drawn from the model's
own softmax (then ``E[d loss/d logits | x] = E[p - e_y | x] = 0``, so the population gradient
of every zero block's ``V_l`` is exactly zero: saturated at every candidate), or a fixed rule
of ``x`` that the random model does not fit (a non-zero population gradient). The statistic
``max_l ||C_l||`` comes from :func:`common.science.probe.probe_activation_gradients` with
``contributions=True``; the interval and verdicts from :func:`common.science.projection.saturation_interval`,
with the traces from a separate calibration sample and ``C_l`` from the test sample (App. G's split).

Noise scale used in the tolerances: for ``n`` i.i.d. examples ``E ||C_l - g(l)||^2 =
tr(Sigma_l) / n``, so ``sqrt(sum_l tr(Sigma_l) / n)`` (the "standard error" ``se(n)``) bounds the
typical distance of the statistic from its population value.

Part 2, a simulation over R seeded repetitions where the population ``C_l`` is known in closed
form: per-example contributions ``c_i(l) = C_l + sigma_l eps_i(l)`` in ``R^(k_l)``, with ``eps``
i.i.d. unit-variance Gaussian or Student-t(3) / sqrt(3) (finite variance, infinite fourth moment:
the calibration traces are then often underestimated), so ``tr Sigma_l = k_l sigma_l^2`` exactly.
Each repetition draws a calibration part (traces) and a test part of ``n_test`` examples
(``C_hat_l``) and goes through :func:`common.science.projection.separation_margin`,
:func:`~common.science.projection.gamma_interval` and :func:`~common.science.projection.saturation_verdict`, the
functions :func:`~common.science.projection.saturation_interval` is made of, vectorised over the
repetitions.

Part 3, the asymptotic interval beside Theorem 3's (issue 29): the streamed moments of
:class:`common.science.projection.ContributionMoments` against direct formulas, Hoeffding's variance of
``U_l = ||C_hat_l||^2 - tr_hat_l / n`` against a simulation, and the interval's coverage over 1,000
simulated draws of 1,000-dimensional contributions at ``Gamma = 0``, ``sqrt(tr / n)`` and
``5 sqrt(tr / n)``, run through the class exactly as the probe streams the two parts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from common.science.probe import probe_activation_gradients
from common.science.projection import ContributionMoments
from common.science.saturation import (
    LOWER_ABOVE_DELTA,
    NOT_SATURATED,
    SATURATED,
    UNDECIDED,
    UPPER_AT_MOST_DELTA,
    asymptotic_gamma_interval,
    asymptotic_interval,
    asymptotic_n_to_exclude,
    bonferroni_z,
    gamma_interval,
    linear_variance_estimate,
    norm_sq_standard_error,
    saturation_interval,
    saturation_verdict,
    separation_margin,
    theorem3_n_to_exclude,
)
from tests.helpers import ResidualMLP

BATCH = 256  # small analysis batches: a per-batch statistic would stay at ~ RMS / sqrt(256), not shrink


def model() -> ResidualMLP:
    torch.manual_seed(0)
    return ResidualMLP(width=3).double().eval()


def draw(net, n: int, seed: int, *, self_labelled: bool) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    if self_labelled:
        with torch.no_grad():
            y = torch.multinomial(F.softmax(net(x), dim=-1), 1, generator=g).squeeze(1)
    else:
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return x, y


def statistic(net, n: int, seed: int, *, self_labelled: bool, batch: int = BATCH) -> tuple[float, float, list, list]:
    """``(max_l ||C_l||, se(n), values, traces)`` from the probe on ``n`` fresh examples."""
    x, y = draw(net, n, seed, self_labelled=self_labelled)
    result = probe_activation_gradients(
        net, [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)], contributions=True
    )
    values = [s.cross_gradient_norm_pooled for s in result.scores]
    traces = [s.contribution_cov_trace for s in result.scores]
    return max(values), math.sqrt(sum(traces) / n), values, traces


def test_self_labelled_model_statistic_shrinks_like_one_over_sqrt_n_and_is_declared_saturated_within_delta():
    net = model()
    small, se_small, values_small, _ = statistic(net, 256, 1, self_labelled=True)
    large, se_large, values_large, _ = statistic(net, 16384, 2, self_labelled=True)
    # Zero population gradient: the statistic is noise, of the order of se(n) at both sizes ...
    for stat, se in ((small, se_small), (large, se_large)):
        assert 0.1 * se < stat < 2 * se, (stat, se)
    # ... so it shrinks by ~sqrt(16384 / 256) = 8, up to the noise of a max of three norms (a
    # per-batch statistic would not shrink at all).
    assert 3 < small / large < 24
    # App. G's split: traces from a separate calibration sample of n / 4, C_l from the n test examples.
    # With Gamma_hat < 2 se and t = se / sqrt(alpha) ~ 4.5 se, the upper end stays below delta = 6.5 se(16384).
    delta = 6.5 * se_large
    interval = {}
    for n, values, seed in ((256, values_small, 11), (16384, values_large, 12)):
        *_, cal_traces = statistic(net, n // 4, seed, self_labelled=True)
        interval[n] = saturation_interval(values, cal_traces, n=n, alpha=0.05, delta=delta)
        assert interval[n].t == pytest.approx(math.sqrt(sum(cal_traces) / (n * 0.05)), rel=1e-12)
        assert interval[n].lower == 0.0  # Gamma = 0 is inside
    assert interval[256].verdict == UNDECIDED and interval[256].upper > delta  # too few examples to tell
    assert interval[16384].verdict == SATURATED
    no_delta = saturation_interval(values_large, list(interval[16384].covariance_traces.values()), n=16384, alpha=0.05)
    assert no_delta.verdict == UNDECIDED  # without a tolerance, exact saturation is never declared


def test_non_saturated_model_interval_covers_the_population_value_and_says_not_saturated_once_n_is_large():
    net = model()
    population, se_population, *_ = statistic(net, 65536, 3, self_labelled=False, batch=8192)
    assert population > 10 * se_population  # a clearly non-zero population gradient
    stats, verdicts = {}, {}
    for n, seed in ((1024, 4), (16384, 5)):
        stat, se, values, _ = statistic(net, n, seed, self_labelled=False)
        *_, cal_traces = statistic(net, n // 4, seed + 10, self_labelled=False)
        assert abs(stat - population) < 3 * (se + se_population), (n, stat, population)
        stats[n] = stat
        interval = saturation_interval(values, cal_traces, n=n, alpha=0.05)
        # The 1,024-example "population" is itself an estimate: widen by its own 3 se.
        assert interval.lower - 3 * se_population <= population <= interval.upper + 3 * se_population
        verdicts[n] = interval.verdict
        assert verdicts[n] == (NOT_SATURATED if interval.lower > 0 else UNDECIDED)
    assert stats[16384] > 0.5 * stats[1024]  # levels off; 1/sqrt(n) would give a quarter
    assert verdicts[16384] == NOT_SATURATED  # t ~ 4.5 se(16384) ~ 0.2 < Gamma ~ 0.34: the lower end is above 0


# ----------------------------------------------------------------------------- deterministic checks
def test_t_alpha_is_the_markov_margin_of_the_calibration_traces_over_n_test():
    traces = [2.0, 1.0, 3.0]
    t = separation_margin(traces, 1280, 0.05)
    assert t == pytest.approx(math.sqrt(6.0 / (1280 * 0.05)), rel=1e-15)
    # More candidates, the same per-candidate trace: t grows like sqrt(number of candidates).
    assert separation_margin(traces * 4, 1280, 0.05) == pytest.approx(2 * t, rel=1e-15)
    interval = saturation_interval([1e-3, 4e-3, 2e-3], traces, n=1280, alpha=0.05, names=["a", "b", "c"])
    assert (interval.t, interval.alpha, interval.alpha_source) == (t, 0.05, "given")
    assert (interval.gamma_hat, interval.argmax, interval.n_candidates, interval.n) == (4e-3, "b", 3, 1280)
    assert (interval.lower, interval.upper) == (max(0.0, 4e-3 - t), 4e-3 + t)
    # A given t: alpha is implied by the same sample's traces, sum tr / (n t^2).
    given = saturation_interval([1.0], [1.0], n=16, t=0.5)
    assert (given.alpha, given.alpha_source, given.lower, given.upper) == (0.25, "implied by t", 0.5, 1.5)
    for kwargs in ({}, {"alpha": 0.05, "t": 1.0}):  # exactly one of alpha and t
        with pytest.raises(ValueError):
            saturation_interval([1.0], [1.0], n=2, **kwargs)
    for bad in ({"alpha": 0.0}, {"alpha": 1.0}, {"t": 0.0}):
        with pytest.raises(ValueError):
            saturation_interval([1.0], [1.0], n=2, **bad)


def test_verdict_boundaries_upper_end_at_most_delta_and_lower_end_above_delta():
    # Binary fractions, so every comparison below is exact: Gamma_hat = 0.5, t = 0.25 -> [0.25, 0.75].
    lower, upper = gamma_interval(0.5, 0.25)
    assert (lower, upper) == (0.25, 0.75)
    assert saturation_verdict(lower, upper, 0.75) == SATURATED  # upper end == delta: saturated
    assert saturation_verdict(lower, upper, 0.75 - 2**-20) == UNDECIDED
    assert saturation_verdict(lower, upper, 0.25) == UNDECIDED  # lower end == delta: not above it
    assert saturation_verdict(lower, upper, 0.25 - 2**-20) == NOT_SATURATED
    assert saturation_verdict(lower, upper, None) == NOT_SATURATED  # no delta: is Gamma > 0?
    assert saturation_verdict(*gamma_interval(0.25, 0.25), None) == UNDECIDED  # lower end 0
    assert gamma_interval(0.125, 0.25) == (0.0, 0.375)  # clipped at 0
    # delta = 0 is the knife edge: never "saturated", even when Gamma_hat = 0 exactly.
    assert saturation_verdict(*gamma_interval(0.0, 2**-30), 0.0) == UNDECIDED
    assert saturation_verdict(0.0, 0.0, 0.0) == UNDECIDED
    with pytest.raises(ValueError):
        saturation_verdict(0.0, 1.0, -1.0)
    # Vectorised: one verdict per element.
    assert saturation_verdict(np.array([0.0, 0.3]), np.array([0.2, 0.9]), 0.25).tolist() == [SATURATED, NOT_SATURATED]


def test_the_issues_one_thousand_image_models_are_undecided():
    # Issue 21: ResNet-8/11/17 after 100 epochs on 1,000 CIFAR-10 images, max ||C_l|| against t (printed "sat" before).
    for gamma_hat, t in ((6.2, 20.4), (14.4, 40.4), (10.3, 54.4)):
        for delta in (None, 0.0):
            interval = saturation_interval([gamma_hat], [1.0], n=1000, t=t, delta=delta)
            assert (interval.lower, interval.upper) == (0.0, gamma_hat + t)
            assert interval.verdict == UNDECIDED


# ----------------------------------------------------------------------------- simulation
R = 2000  # repetitions per setting


@dataclass(frozen=True)
class Population:
    """``c_i(l) = C_l + sigma_l eps_i(l)`` in ``R^(k_l)``, ``C_l = Gamma shape_l u_l`` (``u_l`` unit vectors)."""

    k: tuple[int, ...]  # coordinates of C_l per candidate
    sigma: tuple[float, ...]  # per-coordinate standard deviation of c_i(l) - C_l
    shape: tuple[float, ...]  # ||C_l|| / Gamma; the largest is 1 (that candidate attains Gamma)

    @property
    def slots(self) -> np.ndarray:
        """The candidate of each coordinate."""
        return np.repeat(np.arange(len(self.k)), self.k)

    @property
    def traces(self) -> np.ndarray:
        """``tr Sigma_l = k_l sigma_l^2``, exactly."""
        return np.array(self.k) * np.square(self.sigma)

    def per_candidate(self, x: np.ndarray) -> np.ndarray:
        """Sum over each candidate's coordinates: ``(..., sum k)`` -> ``(..., len(k))``."""
        return np.stack([x[..., self.slots == c].sum(-1) for c in range(len(self.k))], -1)

    def means(self, gamma: float, rng: np.random.Generator) -> np.ndarray:
        """``C_l`` laid out on the coordinates, each in a random fixed direction."""
        u = rng.standard_normal(len(self.slots))
        u /= np.sqrt(self.per_candidate(u * u))[self.slots]
        return gamma * np.asarray(self.shape)[self.slots] * u


THREE = Population(k=(1, 2, 3), sigma=(1.0, 0.7, 0.5), shape=(1.0, 0.6, 0.3))


def unit_noise(rng: np.random.Generator, law: str, shape: tuple[int, ...]) -> np.ndarray:
    if law == "gaussian":
        return rng.standard_normal(shape)
    return rng.standard_t(3, shape) / math.sqrt(3.0)  # Student-t(3) scaled to variance 1


def simulate(pop: Population, law: str, n_cal: int, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(calibration traces (R, L), test noise means (R, sum k))`` of R repetitions. The traces do not
    depend on ``C_l`` and ``C_hat_l = C_l + mean noise``, so one draw serves every Gamma (common random numbers)."""
    rng = np.random.default_rng(seed)
    scale = np.asarray(pop.sigma)[pop.slots]
    cal = unit_noise(rng, law, (R, n_cal, len(pop.slots))) * scale
    test = unit_noise(rng, law, (R, n_test, len(pop.slots))) * scale
    return pop.per_candidate(cal.var(axis=1, ddof=1)), test.mean(axis=1)


def rates(pop: Population, draws, gamma: float, delta: float | None, *, n_for_t: int, alpha: float) -> dict[str, float]:
    """Coverage of the true Gamma and the frequency of each verdict over the repetitions."""
    cal_traces, noise_means = draws
    c_hat = pop.means(gamma, np.random.default_rng(0)) + noise_means  # (R, sum k)
    gamma_hat = np.sqrt(pop.per_candidate(c_hat**2)).max(axis=1)
    lower, upper = gamma_interval(gamma_hat, separation_margin(cal_traces, n_for_t, alpha))
    verdicts = saturation_verdict(lower, upper, delta)
    return {
        "coverage": float(np.mean((lower <= gamma) & (gamma <= upper))),
        **{v: float(np.mean(verdicts == v)) for v in (SATURATED, NOT_SATURATED, UNDECIDED)},
    }


def coverage_floor(alpha: float) -> float:
    """``1 - alpha - 2 sqrt(alpha (1 - alpha) / R)``: the promised coverage less two binomial standard errors."""
    return 1 - alpha - 2 * math.sqrt(alpha * (1 - alpha) / R)


@pytest.mark.parametrize("alpha", [0.05, 0.25])
@pytest.mark.parametrize("law", ["gaussian", "student_t3"])
def test_interval_covers_gamma_and_verdicts_are_wrong_at_most_alpha_of_the_time(law, alpha):
    n_cal, n_test = 100, 200
    draws = simulate(THREE, law, n_cal, n_test, seed=21 if law == "gaussian" else 22)
    t = separation_margin(THREE.traces, n_test, alpha)  # t_alpha from the true traces and n_test
    delta = 4 * t  # so that delta / 2 = delta - 2t: the power point below delta is one of the issue's four
    measured = {}
    for name, gamma in (
        ("delta/2", delta / 2),
        ("delta", delta),
        ("delta+0.1t", delta + 0.1 * t),
        ("delta+2t", delta + 2 * t),
    ):
        r = measured[name] = rates(THREE, draws, gamma, delta, n_for_t=n_test, alpha=alpha)
        assert r["coverage"] >= coverage_floor(alpha), (name, r)
        if gamma > delta:  # a true Gamma above delta: "saturated within delta" at most alpha of the time
            assert r[SATURATED] <= alpha, (name, r)
        else:  # a true Gamma <= delta: "not saturated" at most alpha of the time
            assert r[NOT_SATURATED] <= alpha, (name, r)
    assert measured["delta+2t"][NOT_SATURATED] >= 1 - alpha  # power at Gamma >= delta + 2t
    assert measured["delta/2"][SATURATED] >= 1 - alpha  # power at Gamma <= delta - 2t
    # Without a tolerance: at Gamma = 0 "not saturated" at most alpha of the time, "saturated" never.
    exact = rates(THREE, draws, 0.0, None, n_for_t=n_test, alpha=alpha)
    assert exact[NOT_SATURATED] <= alpha and exact[SATURATED] == 0.0 and exact["coverage"] >= coverage_floor(alpha)
    print(
        law,
        alpha,
        {k: {v: round(x, 4) for v, x in r.items()} for k, r in {**measured, "Gamma=0, no delta": exact}.items()},
    )


def test_coverage_check_catches_t_computed_from_the_whole_samples_n():
    # One candidate, one coordinate, Gaussian: |Gamma_hat - Gamma| = |mean noise| ~ |N(0, 1 / n_test)|.
    # At alpha = 0.25 the right t = 2 / sqrt(n_test) covers ~95.4% (floor 73.1%); with the whole sample's
    # n = n_cal + n_test = 4 n_test, t halves and coverage falls to P(|Z| < 1) ~ 68.3%: below the floor.
    one = Population(k=(1,), sigma=(1.0,), shape=(1.0,))
    n_cal, n_test, alpha = 150, 50, 0.25
    draws = simulate(one, "gaussian", n_cal, n_test, seed=23)
    gamma = 10.0  # far from 0: the clip at 0 plays no part
    right = rates(one, draws, gamma, None, n_for_t=n_test, alpha=alpha)["coverage"]
    whole = rates(one, draws, gamma, None, n_for_t=n_cal + n_test, alpha=alpha)["coverage"]
    assert right >= coverage_floor(alpha) > whole, (right, whole, coverage_floor(alpha))


# ----------------------------------------------------------------------------- the asymptotic interval (issue 29)
def test_streamed_moments_equal_direct_formulas_for_any_chunking():
    g = torch.Generator().manual_seed(3)
    c = torch.randn(2, 51, 4, 3, dtype=torch.float64, generator=g) * torch.linspace(0.2, 2.0, 12).reshape(4, 3) + 0.7
    direction = torch.randn(2, 4, 3, dtype=torch.float64, generator=g)
    moments = ContributionMoments(4, 3, batch_shape=(2,), direction=direction, pair_buffer=5)
    for part in c.split([1, 2, 7, 30, 11], dim=1):  # odd chunks: pairs straddle the calls
        moments.update(part)
    flat = c.reshape(2, 51, 12)
    n = 51
    # U_l is the U-statistic sum_{i != j} <c_i, c_j> / (n (n - 1)).
    gram = flat @ flat.transpose(1, 2)
    u = (gram.sum((1, 2)) - torch.diagonal(gram, dim1=1, dim2=2).sum(1)) / (n * (n - 1))
    assert moments.norm_sq_unbiased() == pytest.approx(u.numpy(), rel=1e-12)
    s = (flat * direction.reshape(2, 1, 12)).sum(-1)
    assert moments.direction_variance() == pytest.approx(s.var(dim=1).numpy(), rel=1e-12)
    # tr(Sigma^2): consecutive pairs' differences, every pair of differences within blocks of 5 (the last
    # block holds the 25th difference alone, example 51 has no partner).
    diffs = flat[:, 0:50:2] - flat[:, 1:50:2]
    total, count = 0.0, 0
    for block in diffs.split(5, dim=1):
        b = block @ block.transpose(1, 2)
        total = total + (b.square().sum((1, 2)) - torch.diagonal(b, dim1=1, dim2=2).square().sum(1))
        count += block.shape[1] * (block.shape[1] - 1)
    assert moments.covariance_square_trace() == pytest.approx((total / (4 * count)).numpy(), rel=1e-12)
    # One stream without a batch shape gives plain floats, the same as its slice of the batched one.
    single = ContributionMoments(4, 3, pair_buffer=5)
    for part in c[1].split([4, 47]):
        single.update(part)
    assert isinstance(single.covariance_square_trace(), float)
    assert single.covariance_square_trace() == pytest.approx(float(total[1] / (4 * count)), rel=1e-12)
    assert single.norm_sq_unbiased() == pytest.approx(float(u[1]), rel=1e-12)


def test_standard_error_is_hoeffdings_variance_of_the_u_statistic():
    # Non-zero C, an anisotropic Sigma: Var U = 4 C^T Sigma C / n + 2 tr(Sigma^2) / (n (n - 1)) exactly.
    rng = np.random.default_rng(5)
    n, lam = 8, np.array([2.0, 1.0, 0.5, 0.25, 0.1])
    mean = np.array([0.3, -0.2, 0.1, 0.0, 0.4])
    c = mean + rng.standard_normal((200_000, n, 5)) * np.sqrt(lam)
    total = c.sum(axis=1)
    u = (np.square(total).sum(-1) - np.square(c).sum((1, 2))) / (n * (n - 1))
    se = norm_sq_standard_error(float(mean**2 @ lam), float(np.sum(lam**2)), n)
    assert u.mean() == pytest.approx(float(mean @ mean), abs=4 * se / math.sqrt(len(u)))  # unbiased
    assert u.std() == pytest.approx(se, rel=0.01)  # the sample sd of 200,000 draws is within ~0.3%


K_SIM, D_SIM = 250, 4  # 1,000 features per contribution
N_TEST_SIM, N_CAL_SIM = 96, 32  # the protocol's calibration share, 25% of the sample
R_SIM = 1000


def test_asymptotic_interval_covers_gamma_at_zero_one_and_five_noise_units():
    # c_i = C + Sigma^(1/2) eps_i, eps standard Gaussian, Sigma diagonal with a power-law spectrum
    # lambda_j ~ j^(-1/2) (tr Sigma = 1,000; tr(Sigma^2)^2 / tr(Sigma^4) ~ 34, far from isotropic), Gamma = ||C||.
    # Each draw streams a test part of 96 and a calibration part of 32 examples through ContributionMoments as
    # the probe does: U_l and tr(Sigma^2) from the test part, the variance along the test part's C_hat on the
    # calibration part; the interval at alpha = 0.05 (one candidate). The noise is shared by the three Gammas.
    g = torch.Generator().manual_seed(29)
    lam = torch.arange(1, K_SIM * D_SIM + 1, dtype=torch.float64) ** -0.5
    lam = lam / lam.sum() * (K_SIM * D_SIM)
    scale = lam.sqrt().reshape(K_SIM, D_SIM)
    direction = torch.randn(K_SIM, D_SIM, dtype=torch.float64, generator=g)
    unit = float(lam.sum() / N_TEST_SIM) ** 0.5  # sqrt(tr / n_test)
    gammas = {"0": 0.0, "sqrt(tr/n)": unit, "5 sqrt(tr/n)": 5 * unit}
    means = {k: gamma * direction / direction.norm() for k, gamma in gammas.items()}
    chunk, buffer = 8, 8

    def noise(m: int) -> torch.Tensor:
        return torch.randn(R_SIM, m, K_SIM, D_SIM, generator=g).double().mul_(scale)

    test = {k: ContributionMoments(K_SIM, D_SIM, batch_shape=(R_SIM,), pair_buffer=buffer) for k in gammas}
    for _ in range(N_TEST_SIM // chunk):
        e = noise(chunk)
        for k, moments in test.items():
            moments.update(e + means[k])
    cal = {
        k: ContributionMoments(K_SIM, D_SIM, batch_shape=(R_SIM,), direction=m.cross_gradient(), pair_buffer=buffer)
        for k, m in test.items()
    }
    for _ in range(N_CAL_SIM // chunk):
        e = noise(chunk)
        for k, moments in cal.items():
            moments.update(e + means[k])
    z = bonferroni_z(0.05, 1, dof=N_CAL_SIM - 1)
    coverage = {}
    for k, gamma in gammas.items():
        v2 = test[k].covariance_square_trace()
        assert v2.mean() == pytest.approx(float(lam.square().sum()), rel=0.02)  # unbiased tr(Sigma^2)
        v1 = linear_variance_estimate(cal[k].direction_variance(), v2, N_TEST_SIM)
        se = norm_sq_standard_error(v1, v2, N_TEST_SIM)
        lower, upper = asymptotic_gamma_interval(test[k].norm_sq_unbiased()[:, None], se[:, None], z)
        coverage[k] = float(np.mean((lower <= gamma) & (gamma <= upper)))
    print(coverage)
    assert all(c >= 0.93 for c in coverage.values()), coverage


def test_bonferroni_quantile_and_the_map_to_gamma():
    assert bonferroni_z(0.05, 1) == pytest.approx(1.959964, abs=1e-6)
    # 19 candidates: alpha / 38 on each side (checked with the standard library's normal, not scipy's)
    assert NormalDist().cdf(bonferroni_z(0.05, 19)) == pytest.approx(1 - 0.05 / 38, abs=1e-12)
    assert bonferroni_z(0.05, 19, dof=10_000) == pytest.approx(bonferroni_z(0.05, 19), abs=2e-3)
    assert bonferroni_z(0.05, 1, dof=31) > bonferroni_z(0.05, 1)
    # Per candidate U_l -+ z se_l, clipped at 0, square-rooted; Gamma's ends are the largest ends.
    u, se = np.array([4.0, 9.0, -1.0]), np.array([1.0, 4.0, 0.5])
    assert asymptotic_gamma_interval(u, se, 2.0) == (2.0 * 0.5**0.5, 17.0**0.5)  # [sqrt 2, sqrt 17]: 2nd ends
    interval = asymptotic_interval([4.0, 9.0, -1.0], [0.0] * 3, [1.0] * 3, n=100, alpha=0.05, names=["a", "b", "c"])
    assert (interval.argmax, interval.gamma_estimate, interval.n_candidates) == ("b", 3.0, 3)
    assert interval.z == bonferroni_z(0.05, 3) and interval.verdict == NOT_SATURATED  # no delta: is Gamma > 0?
    assert interval.norm_sq_se["a"] == pytest.approx(math.sqrt(2 / (100 * 99)), rel=1e-12)


def test_projected_n_test_is_the_first_size_at_which_each_interval_leaves_zero_or_delta():
    u, tr, cal, alpha = [4.0, 1.0], [30_000.0, 10_000.0], [25_000.0, 15_000.0], 0.05
    n = theorem3_n_to_exclude(u, tr, cal, alpha, 0.0, LOWER_ABOVE_DELTA)

    def lower(m):
        return max(math.sqrt(ui + ti / m) for ui, ti in zip(u, tr, strict=True)) - math.sqrt(sum(cal) / (m * alpha))

    assert lower(n) > 0 >= lower(n - 1)
    # Below sum tr_cal / (alpha Gamma^2) = 40,000 / (0.05 * 4) = 200,000: E ||C_hat_l||^2 = U_l + tr_l / n helps.
    assert 150_000 < n < 200_000
    assert theorem3_n_to_exclude([-1.0, 0.0], tr, cal, alpha, 0.0, LOWER_ABOVE_DELTA) is None  # never
    # Upper end at most delta: every candidate's expected ||C_hat_l|| plus t below delta.
    n_up = theorem3_n_to_exclude([0.01, 0.0], tr, cal, alpha, 0.5, UPPER_AT_MOST_DELTA)
    upper = max(math.sqrt(0.01 + 30_000 / n_up), math.sqrt(10_000 / n_up)) + math.sqrt(40_000 / (n_up * alpha))
    assert upper <= 0.5 and theorem3_n_to_exclude([0.3, 0.0], tr, cal, alpha, 0.5, UPPER_AT_MOST_DELTA) is None
    # The asymptotic interval: U_l, v1_l, v2_l held, se_l(n) shrinks.
    v1, v2, z = [500.0, 100.0], [1e6, 1e6], bonferroni_z(0.05, 2)
    m = asymptotic_n_to_exclude(u, v1, v2, z, 0.0, LOWER_ABOVE_DELTA)
    for size, excluded in ((m, True), (m - 1, False)):
        ends = asymptotic_gamma_interval(u, norm_sq_standard_error(v1, v2, size), z)
        assert (ends[0] > 0) is excluded
    assert m < n  # the asymptotic interval needs far fewer examples than Markov's bound
    record = asymptotic_interval(u, v1, v2, n=1000, alpha=0.05, delta=1.0)
    assert (record.n_test_to_exclude_zero, record.n_test_to_exclude_delta_side) == (m, LOWER_ABOVE_DELTA)
    assert record.n_test_to_exclude_delta > m  # leaving delta = 1 below Gamma = 2 needs more than leaving 0
