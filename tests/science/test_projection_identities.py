"""The identities of docs/design.md, section "Exact growth value V_S,l", each its own test, in float64 on
random models and inputs.

Models: a tiny ResNet-8+N (conv3x3 family, rows = image-position pairs) and a smooth residual
MLP (linear family, rows = examples). ``Psi`` and ``G`` always come from the real pipeline:
:func:`common.science.activations.activation_gradients` for ``G = dL/dz_l`` and the protocol's seeded block
(:func:`common.science.tangent.make_zero_block`) for ``Psi``.

Tolerances (float64, eps = 2.2e-16): identities computed by two routes of O(k) to O(n) summed
products agree to ~1e-13 relative; we allow rtol 1e-10. Routes through the normal equations
(``P = Psi^T Psi``) lose up to ``cond(Psi)^2 * eps``: where that applies the test says so.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from common.science.growth import insert_zero_block, insert_zero_blocks
from common.science.projection import GramAccumulator, growth_value
from common.science.tangent import get_family
from tests.helpers import CASES, loss_of, mlp_case, resnet_case, rows_to_state, tangent_rows, terminal_weight_from_rows

SEEDS = [0, 1, 2]
RTOL = 1e-10  # float64 identities by two routes of O(k)..O(n) reductions (see module docstring)


# ----------------------------------------------------------------------------- identities
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_projection_never_exceeds_ag_norm(kind, seed):
    model, x, y = CASES[kind](seed)
    strict = 0
    for c in model.candidates():
        psi, g_rows, g = tangent_rows(model, x, y, c.index)
        ag = float(torch.linalg.vector_norm(g))  # AG_l of this one batch
        v = growth_value(psi, g_rows)
        assert v <= ag * (1 + RTOL), (c.name, v, ag)
        strict += v < ag * (1 - 1e-3)
    if kind == "resnet":
        # 2 images of 16x16 give 512 rows > k = 36 at stage 1: the bound is strict somewhere,
        # so an implementation returning ||G|| itself would fail the next line.
        assert strict >= 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_projection_equals_ag_norm_when_features_have_full_row_rank(kind, seed):
    # Realizability: rows <= k and Psi of full row rank, so every G is in Range(Psi).
    model, x, y = resnet_case(seed, batch=1, size=2) if kind == "resnet" else mlp_case(seed, batch=8)
    for c in model.candidates():
        psi, g_rows, g = tangent_rows(model, x, y, c.index)
        acc = GramAccumulator(psi.shape[1], g_rows.shape[1])
        acc.update(psi, g_rows)
        assert torch.linalg.matrix_rank(psi) == psi.shape[0] <= psi.shape[1]
        assert acc.rank() == psi.shape[0]
        # rtol 1e-8: P's non-zero eigenvalues span cond(Psi)^2 (<= ~1e4 here), eps * 1e4 * margin.
        assert acc.growth_value() == pytest.approx(float(torch.linalg.vector_norm(g)), rel=1e-8)


@pytest.mark.parametrize("seed", SEEDS)
def test_growth_value_is_zero_exactly_when_cross_gradient_is_zero(seed):
    model, x, y = resnet_case(seed)  # candidate 0: 512 rows, k = 36, so G is not realizable
    psi, g_rows, _ = tangent_rows(model, x, y, 0)
    acc = GramAccumulator(psi.shape[1], g_rows.shape[1])
    acc.update(psi, g_rows)
    assert acc.cross_gradient_norm() > 0 and acc.growth_value() > 0
    # Saturated case: project the gradient out of the tangent space.
    g_perp = g_rows - psi @ acc.solution()
    assert torch.linalg.matrix_norm(g_perp) > 0.1 * torch.linalg.matrix_norm(g_rows)  # not a vacuous case
    sat = GramAccumulator(psi.shape[1], g_rows.shape[1])
    sat.update(psi, g_perp)
    scale = float(torch.linalg.matrix_norm(psi) * torch.linalg.matrix_norm(g_rows))
    # C = Psi^T (G - Psi P^+ X) = X - P P^+ X: rounding of O(n k) sums, relative to ||Psi|| ||G||.
    assert sat.cross_gradient_norm() <= 1e-10 * scale
    assert sat.growth_value() <= 1e-6 * acc.growth_value()
    # Conversely a gradient inside the tangent space keeps all of V and C.
    par = GramAccumulator(psi.shape[1], g_rows.shape[1])
    par.update(psi, psi @ acc.solution())
    assert par.growth_value() == pytest.approx(acc.growth_value(), rel=1e-8)
    assert par.cross_gradient_norm() == pytest.approx(acc.cross_gradient_norm(), rel=1e-8)


@pytest.mark.parametrize("seed", SEEDS)
def test_growth_value_is_invariant_under_v_equals_w_t_while_parameter_gradient_changes(seed):
    model, x, y = mlp_case(seed, batch=32)  # 32 rows > k = 24: a proper projection
    index = 1
    psi, g_rows, _ = tangent_rows(model, x, y, index)
    k = psi.shape[1]
    gen = torch.Generator().manual_seed(seed)
    t = torch.eye(k, dtype=torch.float64) * 2.0 + 0.3 * torch.randn(k, k, generator=gen, dtype=torch.float64)
    assert torch.linalg.cond(t) < 100  # regular reparameterisation
    # Really reparameterise the inserted block: V = W T, W the new parameter, at W = 0.
    grown = copy.deepcopy(model)
    block = insert_zero_block(grown, index, "linear", seed=0)
    w = nn.Parameter(torch.zeros_like(block.terminal.weight))
    block.terminal = _ReparamLinear(w, t)
    grad_w = torch.autograd.grad(F.cross_entropy(grown(x), y), w)[0]
    # The tangent features of coordinates W are T psi; their growth value is V_S,l.
    assert growth_value(psi @ t.T, g_rows) == pytest.approx(growth_value(psi, g_rows), rel=1e-9)  # cond(T)^2 eps
    grad_v = (psi.T @ g_rows).T  # dL/dV = C^T
    torch.testing.assert_close(grad_w, grad_v @ t.T, rtol=RTOL, atol=0)
    assert abs(float(grad_w.norm()) / float(grad_v.norm()) - 1) > 0.1  # the Euclidean gradient norm moved


class _ReparamLinear(nn.Module):
    def __init__(self, w: nn.Parameter, t: torch.Tensor) -> None:
        super().__init__()
        self.w, self.t = w, t

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.w @ self.t)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_gradient_step_on_v_lowers_loss_by_eta_times_cross_gradient_norm_squared(kind, seed):
    model, x, y = CASES[kind](seed)
    index = 1
    psi, g_rows, _ = tangent_rows(model, x, y, index)
    acc = GramAccumulator(psi.shape[1], g_rows.shape[1])
    acc.update(psi, g_rows)
    c_sq = acc.cross_gradient_norm() ** 2
    grown = copy.deepcopy(model)
    block = insert_zero_block(grown, index, seed=0)
    base = loss_of(grown, x, y)
    errors = []
    for scale in (1e-4, 1e-5):
        eta = scale / c_sq  # predicted decrease eta ||C||^2 = scale, far above rounding (1e-16 * L)
        with torch.no_grad():
            block.terminal.weight.copy_(terminal_weight_from_rows(block, -eta * acc.cross_gradient()))
        decrease = base - loss_of(grown, x, y)
        errors.append(abs(decrease / (eta * c_sq) - 1))
    assert errors[0] < 1e-2
    # The remainder is O(eta^2): ten times smaller eta, about ten times smaller relative error
    # (1e-7 absorbs the float64 rounding of a 1e-5 loss difference, ~1e-16 / 1e-5 * a few).
    assert errors[1] <= 0.2 * errors[0] + 1e-7


def adamw_first_step(model, x, y, index: int, lr: float, subtract: torch.Tensor | None = None):
    """Insert the zero block at ``index``, take one zero-state AdamW step on ``V_l`` alone.

    With ``subtract`` the loss is ``L - <subtract, z_l>`` (``z_l`` = the block's output).
    Returns ``(dL/dV_l at V_l = 0, loss after - loss before)``.
    """
    grown = copy.deepcopy(model)
    block = insert_zero_block(grown, index, seed=0)
    for p in grown.parameters():
        p.requires_grad_(p is block.terminal.weight)
    out = {}
    block.register_forward_hook(lambda m, a, o: out.__setitem__("z", o))

    def loss_fn():
        loss = F.cross_entropy(grown(x), y)
        return loss if subtract is None else loss - (out["z"] * subtract).sum()

    opt = torch.optim.AdamW([block.terminal.weight], lr=lr, weight_decay=0.01)
    before = loss_fn()
    before.backward()
    grad = block.terminal.weight.grad.clone()
    opt.step()
    with torch.no_grad():
        return grad, float(loss_fn() - before)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_zero_state_adamw_first_step_descends_exactly_when_cross_gradient_nonzero(kind, seed):
    model, x, y = CASES[kind](seed)
    index, lr = 1, 1e-4
    psi, g_rows, g = tangent_rows(model, x, y, index)
    acc = GramAccumulator(psi.shape[1], g_rows.shape[1])
    acc.update(psi, g_rows)
    # C_l != 0: the bias-corrected zero-state step is d = -lr g / (|g| + eps), so the loss
    # drops by lr * sum g^2 / (|g| + eps) to first order (2% covers the O(lr^2) remainder).
    grad, descent = adamw_first_step(model, x, y, index, lr)
    assert float(grad.norm()) == pytest.approx(acc.cross_gradient_norm(), rel=RTOL)
    assert descent < 0
    assert -descent == pytest.approx(lr * float((grad.square() / (grad.abs() + 1e-8)).sum()), rel=2e-2)
    # C_l = 0: subtract <Pi G, z_l> from the loss, so dL'/dz_l = G - Pi G is orthogonal to the
    # tangent space. Then the gradient is rounding noise and no first-order decrease exists.
    projected = rows_to_state(psi @ acc.solution(), g)
    grad, change = adamw_first_step(model, x, y, index, lr, subtract=projected)
    assert float(grad.norm()) <= 1e-10 * acc.cross_gradient_norm()
    # A millionth of the C_l != 0 descent, not an absolute 1e-12: Pi G went through eigh, and what is
    # left is a few ulps of the loss (seen: <= 1.5e-12 of the descent).
    assert abs(change) <= 1e-6 * abs(descent)


@pytest.mark.parametrize("seed", SEEDS)
def test_joint_insertion_gradient_is_the_concatenation_of_single_insertions(seed):
    model, x, y = resnet_case(seed)
    indices = [0, 2, len(model.candidates()) - 1]
    joint = copy.deepcopy(model)
    blocks = insert_zero_blocks_frozen(joint, indices)
    joint_grads = torch.autograd.grad(F.cross_entropy(joint(x), y), [b.terminal.weight for b in blocks])
    for index, grad in zip(indices, joint_grads, strict=True):
        single = copy.deepcopy(model)
        (block,) = insert_zero_blocks_frozen(single, [index])
        (single_grad,) = torch.autograd.grad(F.cross_entropy(single(x), y), [block.terminal.weight])
        torch.testing.assert_close(grad, single_grad, rtol=RTOL, atol=0)
        psi, g_rows, _ = tangent_rows(model, x, y, index)
        torch.testing.assert_close(grad, terminal_weight_from_rows(block, psi.T @ g_rows), rtol=RTOL, atol=1e-18)
    # A joint step along minus the concatenated gradient descends (one candidate non-degenerate suffices).
    base = loss_of(joint, x, y)
    with torch.no_grad():
        for b, grad in zip(blocks, joint_grads, strict=True):
            b.terminal.weight.sub_(1e-3 * grad)
    assert loss_of(joint, x, y) < base


def insert_zero_blocks_frozen(model, indices):
    blocks = insert_zero_blocks(model, indices, seed=0)
    for p in model.parameters():
        p.requires_grad_(any(p is b.terminal.weight for b in blocks))
    return blocks


@pytest.mark.parametrize("seed", SEEDS)
def test_streamed_gram_equals_one_shot_lstsq_projection(seed):
    model, x, y = resnet_case(seed)
    psi, g_rows, _ = tangent_rows(model, x, y, 0)  # 512 x 36 features, 512 x 4 gradient rows
    gen = torch.Generator().manual_seed(seed)
    cuts = sorted(torch.randperm(psi.shape[0] - 1, generator=gen)[:5].add(1).tolist())
    acc = GramAccumulator(psi.shape[1], g_rows.shape[1])
    for a, b in zip([0, *cuts], [*cuts, psi.shape[0]], strict=True):  # six uneven chunks
        acc.update(psi[a:b], g_rows[a:b])
    solution = torch.linalg.lstsq(psi, g_rows, driver="gelsd").solution
    direct = float(torch.linalg.matrix_norm(psi @ solution))
    cond = float(torch.linalg.cond(psi))
    assert cond < 1e4
    # Normal equations versus an SVD solve: agreement to ~cond(Psi)^2 eps (<= 2e-8 here).
    assert acc.growth_value() == pytest.approx(direct, rel=max(1e-10, 10 * cond**2 * 2.2e-16))
    torch.testing.assert_close(acc.cross_gradient(), psi.T @ g_rows, rtol=RTOL, atol=1e-18)
    assert acc.grad_norm() == pytest.approx(float(torch.linalg.matrix_norm(g_rows)), rel=RTOL)


def test_streamed_gram_handles_rank_deficient_features_like_lstsq():
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(200, 6, generator=gen, dtype=torch.float64)
    psi = torch.cat([base, base[:, :3] * 2.0, torch.zeros(200, 2, dtype=torch.float64)], dim=1)  # rank 6 of 11
    g_rows = torch.randn(200, 3, generator=gen, dtype=torch.float64)
    acc = GramAccumulator(11, 3)
    acc.update(psi[:77], g_rows[:77])
    acc.update(psi[77:], g_rows[77:])
    assert acc.rank() == 6
    direct = torch.linalg.matrix_norm(psi @ torch.linalg.lstsq(psi, g_rows, rcond=1e-12, driver="gelsd").solution)
    assert acc.growth_value() == pytest.approx(float(direct), rel=1e-9)


@pytest.mark.parametrize("shape", [(2, 3, 4, 4), (3, 2, 5, 7), (2, 4, 9, 6), (1, 2, 16, 16), (2, 3, 4, 9)])
def test_structured_conv_gram_equals_the_im2col_rows(shape):
    # The conv3x3 family's shortcut (translation structure, no im2col) against Psi^T Psi and
    # Psi^T G from the explicit rows; the same products summed in another order (no solve): rtol 1e-12.
    fam = get_family("conv3x3")
    gen = torch.Generator().manual_seed(sum(shape))
    psi = torch.randn(*shape, generator=gen, dtype=torch.float64).relu()
    g = torch.randn(shape[0], 5, *shape[2:], generator=gen, dtype=torch.float64)
    assert fam.gram_supported(psi)
    p, x = fam.gram(psi, g)
    rows = fam.feature_rows(psi)
    torch.testing.assert_close(p, rows.T @ rows, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x, rows.T @ fam.state_rows(g), rtol=1e-12, atol=1e-12)
    assert not fam.gram_supported(psi[:, :, :3, :])  # 3-row maps: the probe uses the rows
