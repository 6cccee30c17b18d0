"""common/science/pooled_solve.py and the probe's pooled-only exact mode (issue 46): one factorisation per candidate
gives today's pooled V_S,l, the Cholesky routes equal the eigendecomposition where they are taken and step aside
where their rank is not certified, V_S,l <= AG_l, states of a wrong layout are refused in words, progress lines come,
and a model without ``candidates()`` is probed at candidates given from outside."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from common.science.gram import tangent_gram
from common.science.pooled_solve import cholesky_solve, solve_pooled
from common.science.probe import POOLED_ONLY_FIELDS, probe_activation_gradients
from common.science.projection import GramAccumulator
from common.science.tangent import get_family, make_zero_block
from tests.helpers import mlp_case, resnet_case

EPS = torch.finfo(torch.float64).eps
# Pooled-only vs today's pooled V_S,l (float64). Where the pooled-only mode takes the eigendecomposition, the same
# P and X (the same per-batch sums merged in the same order) go through the same code: equal to the last bit. Where
# it takes Cholesky, both routes are backward stable on the same P, so they differ by at most ~ k eps cond(P)
# relative (pooled_solve's docstring); the conditions here are <= 1e7 at k <= 144 (the normwise bound ~1e-7 is
# pessimistic: measured differences are <= 2e-14), and 1e-10 still catches any wrong scale, solve or rank (>= 1e-3).
RTOL = 1e-10


def split_batches(x, y, size):
    return [(x[i : i + size], y[i : i + size]) for i in range(0, x.shape[0], size)]


@pytest.mark.parametrize("seed", [0, 1])
def test_pooled_only_exact_equals_the_pooled_value_of_todays_route(seed):
    model, x, y = resnet_case(seed, batch=6, size=8)
    batches = split_batches(x, y, 2)
    today = probe_activation_gradients(model, batches, exact=True, seed=3)
    pooled = probe_activation_gradients(model, batches, exact=True, seed=3, exact_per_batch=False)
    assert (today.exact_normalisation, pooled.exact_normalisation) == ("per_batch_and_pooled", "pooled")
    routes = set()
    for a, b in zip(today.scores, pooled.scores, strict=True):
        routes.add(b.pooled_route)
        assert b.growth_value is None and b.cross_gradient_norm is None  # no per-batch value in this mode
        if b.pooled_route == "eigh":
            assert b.growth_value_pooled == a.growth_value_pooled and b.gram_condition_bound is None
        else:
            assert b.growth_value_pooled == pytest.approx(a.growth_value_pooled, rel=RTOL)
            assert b.gram_condition_bound * b.tangent_dim * EPS < 1e-6  # conditions here: <= 1e7
        assert b.growth_fraction_pooled == pytest.approx(a.growth_fraction_pooled, rel=RTOL)
        assert b.cross_gradient_norm_pooled == a.cross_gradient_norm_pooled
        assert (b.tangent_dim, b.tangent_rank, b.n_rows) == (a.tangent_dim, a.tangent_rank, a.rows_pooled)
        assert b.n_rows == 6 * b.rows_per_example  # examples x positions
        assert b.growth_value_pooled <= b.ag_norm_pooled * (1 + RTOL)  # V_S,l <= ||G_S||_F
    assert {"cholesky", "pivoted"} <= routes  # the late, small maps have fewer rows than k
    assert pooled.growth_value_max is None
    summary = pooled.summary()
    assert summary["v_max"] is None and summary["v_max_pooled"] == max(s.growth_value_pooled for s in pooled.scores)
    assert all(set(POOLED_ONLY_FIELDS) <= set(r) for r in pooled.records())
    assert not any(set(POOLED_ONLY_FIELDS) & set(r) for r in today.records())  # today's records: unchanged columns


def rows_with_condition(rows: int, k: int, condition: float, seed: int) -> torch.Tensor:
    """``rows x k`` float64 features whose Gram has condition number ``condition`` (singular values log-spaced)."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(rows, k, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=torch.float64))
    sigma = torch.logspace(0, -0.5 * torch.log10(torch.tensor(condition)).item(), k, dtype=torch.float64)
    return u @ torch.diag(sigma) @ v.T


@pytest.mark.parametrize("condition", [1e2, 1e5])
def test_cholesky_route_equals_the_eigendecomposition_on_a_full_rank_gram(condition):
    psi = rows_with_condition(200, 24, condition, seed=int(condition))
    grad = torch.randn(200, 5, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    acc = GramAccumulator(24, 5)
    acc.update(psi, grad)
    solved = solve_pooled(acc)
    assert solved.route == "cholesky" and solved.rank == acc.rank() == 24
    assert solved.condition_bound >= condition * (1 - 1e-6)  # a bound on cond(P), never below it
    # Both backward stable on the same P: |difference| <~ k eps cond(P) relative (1e-12 at cond 1e5, k = 24).
    assert solved.value == pytest.approx(acc.growth_value(), rel=max(1e-13, 24 * EPS * condition))


def accumulate(psi: torch.Tensor, grad: torch.Tensor) -> GramAccumulator:
    acc = GramAccumulator(psi.shape[1], grad.shape[1])
    acc.update(psi, grad)
    return acc


def test_rank_deficient_grams_take_the_pivoted_route_where_certified_else_the_eigendecomposition():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(200, 6, generator=g, dtype=torch.float64)
    grad = torch.randn(200, 3, generator=g, dtype=torch.float64)
    dead = torch.cat([base, torch.zeros(200, 2, dtype=torch.float64)], dim=1)  # dead ReLU channels: zero columns
    near = torch.cat([base, base[:, :2] + 1e-9 * torch.randn(200, 2, generator=g, dtype=torch.float64)], dim=1)
    for psi, tolerance in ((dead, 1e-12), (near, 1e-6)):  # near: the spans differ by an angle <~ 1e-9
        acc = accumulate(psi, grad)
        assert cholesky_solve(acc.P, acc.X, acc.rtol) is None  # singular, or not certified full rank
        solved = solve_pooled(acc)
        # dead: S = 0 exactly, certified; near: S ~ eps ||P|| from the subtraction, at k = 8 too close to the cut
        assert solved.route == ("pivoted" if psi is dead else "eigh")
        assert solved.rank == acc.rank() == 6
        assert solved.value == pytest.approx(acc.growth_value(), rel=tolerance)
    few = accumulate(torch.randn(8, 11, generator=g, dtype=torch.float64), grad[:8])  # rank <= rows = 8 < k
    solved = solve_pooled(few)
    assert (solved.route, solved.rank) == ("pivoted", few.rank()) and solved.rank == 8
    assert solved.value == pytest.approx(few.grad_norm(), rel=1e-12)  # V_S,l = ||G||_F by rank
    assert few.growth_value() == pytest.approx(few.grad_norm(), rel=1e-12)
    smooth = accumulate(rows_with_condition(200, 24, 1e20, seed=3), grad)  # a spectrum through the cut
    solved = solve_pooled(smooth)
    assert (solved.route, solved.condition_bound) == ("eigh", None)  # nothing certified: the eigendecomposition
    assert solved.value == smooth.growth_value() and solved.rank == smooth.rank()


def test_a_state_of_the_wrong_layout_is_refused_with_a_sentence():
    conv, linear = get_family("conv3x3"), get_family("linear")
    with pytest.raises(
        ValueError,
        match=r"the conv3x3 family needs \(batch, channels, height, width\) feature maps; "
        r"candidate 'layer1.0' gives shape \(8, 197, 768\): name family='linear'",
    ):
        conv.check_state(torch.zeros(8, 197, 768), "layer1.0")
    with pytest.raises(ValueError, match=r"the linear family needs .*shape \(2, 4, 8, 8\): name family='conv3x3'"):
        linear.check_state(torch.zeros(2, 4, 8, 8))
    model, x, y = resnet_case(0, batch=2, size=8)
    with pytest.raises(ValueError, match=r"linear family needs .* candidate 'block0.in' gives shape \(2, 4, 8, 8\)"):
        probe_activation_gradients(model, [(x, y)], exact=True, family="linear")  # not d = image width 8
    mlp, xm, ym = mlp_case(0)
    with pytest.raises(ValueError, match=r"conv3x3 family needs .* candidate 'block0.in' gives shape \(8, 6\)"):
        probe_activation_gradients(mlp, [(xm, ym)], exact=True, family="conv3x3")
    block = make_zero_block("linear", 8, 0, 0, like=x)
    with pytest.raises(ValueError, match="the linear family needs"):
        tangent_gram(block, linear, torch.zeros(2, 4, 8, 8, dtype=torch.float64), torch.zeros(2, 4, 8, 8), 1 << 20)


def test_progress_lines_come_per_batch_and_per_factorised_candidate():
    model, x, y = resnet_case(0, batch=4, size=8)
    lines: list[str] = []
    probe_activation_gradients(model, split_batches(x, y, 2), exact=True, exact_per_batch=False, progress=lines.append)
    candidates = len(model.candidates())
    assert len(lines) == 2 + candidates
    assert lines[0].startswith("probe: batch 1/2 (2 examples) done") and "s left" in lines[0]
    assert all("factorised" in line and "s left" in line for line in lines[2:])
    assert f"candidate {candidates}/{candidates} 'head.in'" in lines[-1]
    assert probe_activation_gradients(model, split_batches(x, y, 2), progress=None).scores  # silent by default


class Wrapped(nn.Module):
    """An unmodified network: no ``candidates()``, no ``blocks``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass(frozen=True, eq=False)
class FlaggedCandidate:
    index: int
    name: str
    module: nn.Module
    family: str
    block_input: bool


def test_candidates_given_from_outside_probe_a_model_without_candidates():
    model, x, y = resnet_case(0, batch=4, size=8)
    wrapped = Wrapped(model)
    assert not hasattr(wrapped, "candidates") and not hasattr(wrapped, "blocks")
    batches = split_batches(x, y, 2)
    direct = probe_activation_gradients(model, batches, exact=True)
    outside = probe_activation_gradients(wrapped, batches, exact=True, candidates=model.candidates())
    assert outside.records() == direct.records()  # block_input: True but for the last, as the ResNet's blocks say
    flagged = [FlaggedCandidate(c.index, c.name, c.module, c.family, c.index == 1) for c in model.candidates()]
    own = probe_activation_gradients(wrapped, batches, candidates=flagged)
    assert [s.block_input for s in own.scores] == [c.index == 1 for c in flagged]
