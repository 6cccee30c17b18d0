"""common/science/row_gram.py (issue 58, item 1): the rows x rows form of V_S,l for fewer rows than tangent
features gives the k x k form's value and rank without its Gram; certified full row rank is V_S,l = ||G||_F with no
projection; pooling switches to the k x k form once the rows reach k; the probe's ``rows_form`` agrees with today's."""

from __future__ import annotations

import pytest
import torch

from common.science.pooled_solve import solve_pooled
from common.science.probe import probe_activation_gradients
from common.science.projection import GramAccumulator
from common.science.row_gram import RowGram, merge_grams
from common.science.tangent import get_family
from tests.helpers import mlp_case, resnet_case

F64 = {"dtype": torch.float64}


def both_forms(psi: torch.Tensor, grad: torch.Tensor) -> tuple[RowGram, GramAccumulator]:
    rows, features = RowGram(psi.shape[1], grad.shape[1]), GramAccumulator(psi.shape[1], grad.shape[1])
    rows.update(psi, grad)
    features.update(psi, grad)
    return rows, features


def test_full_row_rank_is_v_equals_the_gradient_norm_by_rank_without_a_k_by_k_gram():
    g = torch.Generator().manual_seed(0)
    psi, grad = torch.randn(12, 40, generator=g, **F64), torch.randn(12, 3, generator=g, **F64)
    rows, features = both_forms(psi, grad)
    solved = solve_pooled(rows)
    assert (solved.route, solved.rank) == ("rows", 12) and solved.value == rows.grad_norm()  # by rank: ||G||_F
    assert solved.value == pytest.approx(features.growth_value(), rel=1e-12)  # the k x k projection agrees
    assert rows.rank() == features.rank() == 12
    assert rows.cross_gradient_norm() == pytest.approx(features.cross_gradient_norm(), rel=1e-12)
    assert not hasattr(rows, "P") and rows.gram().shape == (12, 12)  # n x n, never k x k


def test_rank_deficient_rows_are_projected_as_the_k_by_k_form_projects_them():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(5, 30, generator=g, **F64)
    psi = torch.cat([base, base[:2], torch.zeros(3, 30, **F64)])  # 10 rows of rank 5 (repeats, zero rows)
    grad = torch.randn(10, 4, generator=g, **F64)
    rows, features = both_forms(psi, grad)
    solved = solve_pooled(rows)
    assert (solved.route, solved.rank, features.rank()) == ("rows-eigh", 5, 5)
    assert solved.value == pytest.approx(features.growth_value(), rel=1e-12)
    assert solved.value < rows.grad_norm() * (1 - 1e-3)  # a real projection: the zero rows' gradients are lost
    direct = torch.linalg.lstsq(psi, grad, driver="gelsd").solution  # an independent route: least squares
    assert solved.value == pytest.approx(float(torch.linalg.matrix_norm(psi @ direct)), rel=1e-10)


def test_pooling_keeps_rows_below_k_and_folds_them_into_p_and_x_at_k():
    g = torch.Generator().manual_seed(2)
    parts = [(torch.randn(4, 10, generator=g, **F64), torch.randn(4, 2, generator=g, **F64)) for _ in range(3)]
    total = RowGram(10, 2)
    total.update(*parts[0])
    second = RowGram(10, 2)
    second.update(*parts[1])
    total = merge_grams(total, second, grad_scale=2.0)
    assert isinstance(total, RowGram) and total.rows == 8  # 8 < k = 10: still rows
    third = RowGram(10, 2)
    third.update(*parts[2])
    total = merge_grams(total, third, grad_scale=3.0)
    assert isinstance(total, GramAccumulator) and total.rows == 12  # 12 >= k: the k x k form
    psi = torch.cat([p for p, _ in parts])
    grad = torch.cat([parts[0][1], 2 * parts[1][1], 3 * parts[2][1]])
    assert torch.allclose(total.P, psi.T @ psi, rtol=1e-13) and torch.allclose(total.X, psi.T @ grad, rtol=1e-13)


@pytest.mark.parametrize("case", ["resnet", "mlp"])
def test_the_probes_rows_form_gives_todays_values_ranks_and_rows(case):
    model, x, y = resnet_case(0, batch=6, size=8) if case == "resnet" else mlp_case(0)
    batches = [(x[i : i + 3], y[i : i + 3]) for i in range(0, x.shape[0], 3)]
    today = probe_activation_gradients(model, batches, exact=True, exact_per_batch=False, seed=2)
    rows = probe_activation_gradients(model, batches, exact=True, exact_per_batch=False, seed=2, rows_form=True)
    per_batch = probe_activation_gradients(model, batches, exact=True, seed=2, rows_form=True)
    routes = set()
    for a, b, c in zip(today.scores, rows.scores, per_batch.scores, strict=True):
        routes.add(b.pooled_route)
        assert b.pooled_route.startswith("rows") == (b.n_rows < b.tangent_dim)
        assert (b.tangent_rank, b.n_rows) == (a.tangent_rank, a.n_rows)
        assert b.growth_value_pooled == pytest.approx(a.growth_value_pooled, rel=1e-10)
        assert c.growth_value_pooled == pytest.approx(a.growth_value_pooled, rel=1e-10)
        assert b.cross_gradient_norm_pooled == pytest.approx(a.cross_gradient_norm_pooled, rel=1e-10)
        assert b.growth_value_pooled <= b.ag_norm_pooled * (1 + 1e-10)
    assert routes & {"rows", "rows-eigh"}, routes  # some candidate had fewer rows than k


@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (2, 3, 4, 4), (2, 5, 2, 3)])
def test_the_conv_maps_route_to_k_equals_the_im2col_rows_product(shape):
    conv = get_family("conv3x3")
    psi = torch.randn(*shape, generator=torch.Generator().manual_seed(3), **F64)
    rows = conv.feature_rows(psi)
    assert torch.allclose(conv.row_gram(psi), rows @ rows.T, rtol=1e-12, atol=1e-12)
    n, d = rows.shape[0], 2
    grad = torch.randn(n, d, generator=torch.Generator().manual_seed(4), **F64)
    maps = RowGram(rows.shape[1], d, features=conv.feature_rows, gram=conv.row_gram)
    maps.update(psi, grad)
    plain = RowGram(rows.shape[1], d)
    plain.update(rows, grad)
    assert maps.rows == n and maps.rank() == plain.rank()
    assert maps.growth_value() == pytest.approx(plain.growth_value(), rel=1e-12)
