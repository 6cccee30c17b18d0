"""common/probe.py: AG_l, AG~_l, per-example RMS, AGmax's readings, the exact values and App. G's pooled C_l
with its per-example contributions, checked by independent routes."""

from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from common.growth import insert_zero_block
from common.probe import ag_maxima, probe_activation_gradients
from common.projection import ContributionMoments
from common.runs import atomic_write_csv
from tests.helpers import CASES, ResidualMLP, explicit_states_grads, resnet_case, tangent_rows

SEEDS = [0, 1]
RTOL = 1e-10  # float64, same sums of products by two routes (see test_projection_identities)


def split_batches(x, y, size):
    return [(x[i : i + size], y[i : i + size]) for i in range(0, x.shape[0], size)]


@pytest.mark.parametrize("seed", SEEDS)
def test_ag_norm_is_the_batch_gradient_frobenius_norm_averaged_over_batches(seed):
    model, x, y = resnet_case(seed, batch=6, size=8)
    result = probe_activation_gradients(model, split_batches(x, y, 3))
    assert (result.batch_size, result.n_batches, result.n_examples) == (3, 2, 6)
    per_batch = [explicit_states_grads(model, xb, yb)[1] for xb, yb in split_batches(x, y, 3)]
    for score in result.scores:
        expected = sum(float(g[score.index].norm()) for g in per_batch) / 2
        assert score.ag_norm == pytest.approx(expected, rel=RTOL)
        assert score.ag_norm_normalised == pytest.approx(expected / math.sqrt(score.width), rel=RTOL)
        assert score.width == per_batch[0][score.index].shape[1]
    assert result.ag_max == max(s.ag_norm for s in result.scores)
    assert result.summary()["ag_max_candidate"] == max(result.scores, key=lambda s: s.ag_norm).name


@pytest.mark.parametrize("seed", SEEDS)
def test_per_example_rms_and_pooled_norm_match_single_example_gradients(seed):
    model, x, y = resnet_case(seed, batch=6, size=8)
    result = probe_activation_gradients(model, split_batches(x, y, 3))
    singles = [explicit_states_grads(model, x[i : i + 1], y[i : i + 1])[1] for i in range(6)]
    _, pooled = explicit_states_grads(model, x, y)  # one batch of all 6: dL_S/dz_l
    rms = [math.sqrt(sum(float(g[score.index].norm()) ** 2 for g in singles) / 6) for score in result.scores]
    for score, expected in zip(result.scores, rms, strict=True):
        assert score.per_example_rms == pytest.approx(expected, rel=RTOL)
        assert score.ag_norm_pooled == pytest.approx(float(pooled[score.index].norm()), rel=RTOL)
    summary = result.summary()
    assert summary["ag_max_per_example"] == pytest.approx(max(rms), rel=RTOL)
    assert summary["ag_max_per_example_candidate"] == result.scores[rms.index(max(rms))].name


def test_three_ag_maxima_from_a_hand_made_candidates_csv(tmp_path):
    # Each reading is attained at a different candidate, the batch-mean one at the head's input.
    rows = [
        {"index": 0, "name": "block0.in", "block_input": True, "ag_norm": 0.010, "per_example_rms": 0.20},
        {"index": 1, "name": "block1.in", "block_input": True, "ag_norm": 0.030, "per_example_rms": 0.15},
        {"index": 2, "name": "block2.in", "block_input": True, "ag_norm": 0.020, "per_example_rms": 0.30},
        {"index": 3, "name": "head.in", "block_input": False, "ag_norm": 0.050, "per_example_rms": 0.25},
    ]
    atomic_write_csv(tmp_path / "candidates.csv", rows)
    maxima = ag_maxima(pd.read_csv(tmp_path / "candidates.csv").to_dict("records"))
    assert maxima == {
        "ag_max": 0.050, "ag_max_candidate": "head.in",
        "ag_max_per_example": 0.30, "ag_max_per_example_candidate": "block2.in",
        "ag_max_blocks": 0.030, "ag_max_blocks_candidate": "block1.in",
    }  # fmt: skip


@pytest.mark.parametrize("kind", sorted(CASES))
def test_pooled_cross_gradient_and_contribution_covariance_match_autograd_on_an_inserted_block(kind):
    # C_l = dL_S/dV_l at V_l = 0 for L_S the mean loss over all 6 examples (two batches of 3), and
    # c_i(l) = d loss_i / dV_l one example at a time, on the protocol's block really inserted.
    model, x, y = CASES[kind](0) if kind == "mlp" else resnet_case(0, batch=6, size=8)
    x, y = x[:6], y[:6]
    # A tiny chunk forces the contributions to be streamed over several example chunks.
    result = probe_activation_gradients(model, split_batches(x, y, 3), contributions=True, seed=5, chunk_elements=300)
    assert [s.block_input for s in result.scores] == [True] * (len(result.scores) - 1) + [False]
    assert result.summary()["ag_max_blocks"] == max(s.ag_norm for s in result.scores[:-1])
    for score in result.scores:
        grown = copy.deepcopy(model)
        v = insert_zero_block(grown, score.index, seed=5).v.weight
        pooled = torch.autograd.grad(F.cross_entropy(grown(x), y), v)[0]
        each = torch.stack([torch.autograd.grad(F.cross_entropy(grown(x[i : i + 1]), y[i : i + 1]), v)[0] for i in range(6)])
        assert score.cross_gradient_norm_pooled == pytest.approx(float(pooled.norm()), rel=RTOL)
        assert score.contribution_cov_trace == pytest.approx(float((each - pooled).square().sum()) / 5, rel=RTOL)
    exact = probe_activation_gradients(model, split_batches(x, y, 3), exact=True, seed=5)  # C_l from the Gram route
    assert [s.cross_gradient_norm_pooled for s in exact.scores] == pytest.approx(
        [s.cross_gradient_norm_pooled for s in result.scores], rel=RTOL)


def test_contribution_moments_stream_to_the_sample_mean_and_covariance_trace():
    c = torch.randn(50, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 4.0  # mean >> spread
    moments = ContributionMoments(3, 2)
    for part in c.split([1, 7, 30, 12]):
        moments.update(part)
    assert moments.n == 50
    assert torch.allclose(moments.cross_gradient(), c.mean(0), rtol=RTOL, atol=0)
    flat = c.reshape(50, -1)
    assert moments.covariance_trace() == pytest.approx(float(torch.cov(flat.T).trace()), rel=RTOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_exact_values_match_a_direct_projection_per_batch_and_pooled(seed):
    model, x, y = resnet_case(seed, batch=4, size=8)
    batches = split_batches(x, y, 2)
    # A tiny chunk forces the Gram statistics to be streamed over many row chunks.
    result = probe_activation_gradients(model, batches, exact=True, seed=3, chunk_elements=500)
    for score in result.scores:
        per_batch = []
        for xb, yb in batches:
            psi, g_rows, _ = tangent_rows(model, xb, yb, score.index, seed=3)
            fitted = psi @ torch.linalg.lstsq(psi, g_rows, driver="gelsd").solution
            per_batch.append(float(fitted.norm()))
        assert score.growth_value == pytest.approx(sum(per_batch) / 2, rel=1e-8)  # normal eq. vs SVD
        assert score.growth_value <= score.ag_norm * (1 + RTOL)
        psi, g_rows, _ = tangent_rows(model, x, y, score.index, seed=3)  # pooled sample S, L_S its mean loss
        fitted = psi @ torch.linalg.lstsq(psi, g_rows, driver="gelsd").solution
        assert score.growth_value_pooled == pytest.approx(float(fitted.norm()), rel=1e-8)
        assert score.cross_gradient_norm_pooled == pytest.approx(float((psi.T @ g_rows).norm()), rel=RTOL)
        assert score.growth_fraction_pooled == pytest.approx(float(fitted.norm() / g_rows.norm()), rel=1e-8)
        assert score.rows_pooled == psi.shape[0] and score.tangent_dim == psi.shape[1]
    assert result.v_max == max(s.growth_value for s in result.scores)


@pytest.mark.parametrize("bn_mode", ["eval", "train"])
def test_probe_leaves_the_model_unchanged_and_computes_no_parameter_gradients(bn_mode):
    model, x, y = resnet_case(0, batch=4, size=8)
    model.train()
    model.blocks[0].residual[0].weight.requires_grad_(False)  # a mixed state that must come back as it was
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    state = copy.deepcopy(model.state_dict())
    result = probe_activation_gradients(model, split_batches(x, y, 2), bn_mode=bn_mode)
    assert result.bn_mode == bn_mode and all(r["bn_mode"] == bn_mode for r in result.records())
    assert model.training and all(m.training for m in model.modules())
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert all(p.grad is None for p in model.parameters())
    after = model.state_dict()
    assert all(torch.equal(state[k], after[k]) for k in state)  # BN running statistics included


def test_train_mode_batchnorm_changes_the_scores():
    model, x, y = resnet_case(0, batch=4, size=8)
    ev = probe_activation_gradients(model, [(x, y)], bn_mode="eval")
    tr = probe_activation_gradients(model, [(x, y)], bn_mode="train")
    assert ev.ag_max != pytest.approx(tr.ag_max, rel=1e-3)


@pytest.mark.parametrize("seed", SEEDS)
def test_probe_reads_token_states_of_a_decoder_like_model(seed):
    # States (B, T, d): rows are tokens, the linear family's features; T tokens per example.
    torch.manual_seed(seed)
    model = ResidualMLP(d_in=5, width=6).double().eval()
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (3, 4))

    def token_loss(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    result = probe_activation_gradients(model, [(x, y)], loss_fn=token_loss, exact=True)
    for score in result.scores:
        assert (score.family, score.rows_per_example, score.width, score.tangent_dim) == ("linear", 4, 6, 24)
        # 12 token rows <= k = 24 and generic features: realizable, so V_S,l = AG_l.
        assert score.tangent_rank == 12
        assert score.growth_value == pytest.approx(score.ag_norm, rel=1e-8)


def test_float32_model_probe_agrees_with_float64():
    model64, x, y = CASES["resnet"](0)
    model32 = copy.deepcopy(model64).float()
    r64 = probe_activation_gradients(model64, [(x, y)], exact=True)
    r32 = probe_activation_gradients(model32, [(x.float(), y)], exact=True)
    for a, b in zip(r64.scores, r32.scores, strict=True):
        # float32 forward/backward: ~1e-6 relative; the Gram statistics are float64 in both.
        assert b.ag_norm == pytest.approx(a.ag_norm, rel=1e-4)
        assert b.growth_value == pytest.approx(a.growth_value, rel=1e-4)
