"""App. G's separated saturation test as a statistical procedure, on a tiny float64 residual MLP.

Two data laws for the same model: inputs ``x ~ N(0, I)``; labels either drawn from the model's
own softmax (then ``E[d loss/d logits | x] = E[p - e_y | x] = 0``, so the population gradient
of every zero block's ``V_l`` is exactly zero: saturated at every candidate), or a fixed rule
of ``x`` that the random model does not fit (a non-zero population gradient). The statistic
``max_l ||C_l||`` comes from :func:`common.probe.probe_activation_gradients` with
``contributions=True``; the verdicts and bounds from :func:`common.projection.saturation_test`.

Noise scale used in the tolerances: for ``n`` i.i.d. examples ``E ||C_l - g(l)||^2 =
tr(Sigma_l) / n``, so ``sqrt(sum_l tr(Sigma_l) / n)`` (the "standard error" ``se(n)``) bounds the
typical distance of the statistic from its population value.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from common.probe import probe_activation_gradients
from common.projection import saturation_test
from tests.helpers import ResidualMLP, tangent_rows

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
    result = probe_activation_gradients(net, [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)],
                                        contributions=True)
    values = [s.cross_gradient_norm_pooled for s in result.scores]
    traces = [s.contribution_cov_trace for s in result.scores]
    return max(values), math.sqrt(sum(traces) / n), values, traces


def test_self_labelled_model_statistic_shrinks_like_one_over_sqrt_n_and_is_declared_saturated():
    net = model()
    small, se_small, values_small, traces_small = statistic(net, 256, 1, self_labelled=True)
    large, se_large, values_large, traces_large = statistic(net, 16384, 2, self_labelled=True)
    # Zero population gradient: the statistic is noise, of the order of se(n) at both sizes ...
    for stat, se in ((small, se_small), (large, se_large)):
        assert 0.1 * se < stat < 2 * se, (stat, se)
    # ... so it shrinks by ~sqrt(16384 / 256) = 8, up to the noise of a max of three norms (a
    # per-batch statistic would not shrink at all).
    assert 3 < small / large < 24
    t = 0.05  # delta = 0 (H0: exact saturation), H1: Gamma >= 0.1
    verdict = {n: saturation_test(v, tr, delta=0.0, t=t, n=n, split="fresh", reused_training_data=False)
               for n, v, tr in ((256, values_small, traces_small), (16384, values_large, traces_large))}
    assert not verdict[256].saturated and not verdict[256].bound_informative  # too few examples to tell
    assert verdict[16384].saturated and verdict[16384].bound_informative


def test_non_saturated_model_statistic_levels_off_at_the_population_value():
    net = model()
    population, se_population, *_ = statistic(net, 65536, 3, self_labelled=False, batch=8192)
    assert population > 10 * se_population  # a clearly non-zero population gradient
    stats = {}
    for n, seed in ((1024, 4), (16384, 5)):
        stat, se, values, traces = statistic(net, n, seed, self_labelled=False)
        assert abs(stat - population) < 3 * (se + se_population), (n, stat, population)
        stats[n] = stat
        delta = t = population / 4  # H1: Gamma >= 3/4 of the population value holds
        decision = saturation_test(values, traces, delta=delta, t=t, n=n, split="fresh", reused_training_data=False)
        assert not decision.saturated
    assert stats[16384] > 0.5 * stats[1024]  # levels off; 1/sqrt(n) would give a quarter
    assert decision.bound_informative and decision.error_bound < 0.5


def test_reported_bound_holds_over_independent_resamples():
    # The population is a pool of N examples (i.i.d. resampling with replacement is then exact), so
    # the population gradient g(l) is the pool mean. Each of R resamples of n examples gives
    # ||C_l|| and tr(Sigma_hat_l) (vectorised through resample counts); saturation_test gives the
    # verdict and the reported bound. At the boundary of each hypothesis (the worst case) the observed
    # frequency of wrong verdicts must not exceed the mean reported bound.
    net = model()
    pool_n, n, repeats = 4096, 1024, 1000
    x, y = draw(net, pool_n, 6, self_labelled=False)
    means, sq = [], []
    for c in net.candidates():  # c_i(l) = psi_i g_i^T, g_i = d loss_i / d z_i (one row per example)
        psi, g_rows, _ = tangent_rows(net, x, y, c.index)
        contributions = (psi[:, :, None] * (pool_n * g_rows)[:, None, :]).reshape(pool_n, -1)
        means.append(contributions)
        sq.append(contributions.square().sum(1))
    gamma = max(float(c.mean(0).norm()) for c in means)
    traces = [float((c - c.mean(0)).square().sum()) / pool_n for c in means]
    idx = torch.randint(0, pool_n, (repeats, n), generator=torch.Generator().manual_seed(7))
    counts = torch.zeros(repeats, pool_n, dtype=torch.float64).scatter_add_(1, idx, torch.ones(repeats, n, dtype=torch.float64))
    sample_means = [counts @ c / n for c in means]
    values = torch.stack([m.norm(dim=1) for m in sample_means], 1)  # (R, L): ||C_l|| per resample
    sample_traces = torch.stack([(counts @ s - n * m.square().sum(1)) / (n - 1) for m, s in zip(sample_means, sq)], 1)
    worst = 0.0
    for beta in (4.0, 2.0, 1.0, 0.5, 0.25):  # t at which the population bound is beta
        t = math.sqrt(sum(traces) / (n * beta))
        for hypothesis, delta in (("H0", gamma), ("H1", gamma - 2 * t)):  # Gamma = delta, Gamma = delta + 2t
            if delta < 0:
                continue
            decisions = [saturation_test(values[r].tolist(), sample_traces[r].tolist(), delta=delta, t=t, n=n,
                                         split="pool", reused_training_data=False) for r in range(repeats)]
            wrong = sum(d.saturated == (hypothesis == "H1") for d in decisions) / repeats
            bound = sum(d.error_bound for d in decisions) / repeats
            assert bound == pytest.approx(beta, rel=0.1)  # the plug-in bound estimates the population one
            assert wrong <= min(1.0, bound), (beta, hypothesis, wrong, bound)
            worst = max(worst, wrong)
    assert worst > 0.05  # not vacuous: some settings do produce wrong verdicts
