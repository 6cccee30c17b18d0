"""common/science/probe.py: AG_l, AG~_l, per-example RMS, AGmax's readings, the exact values and App. G's pooled C_l
with its per-example contributions, checked by independent routes."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from common.models.gpt import GPT, GPTConfig
from common.runs.atomic import atomic_write_csv
from common.science.growth import insert_zero_block
from common.science.probe import ag_maxima, probe_activation_gradients
from common.science.projection import ContributionMoments
from common.training.epoch import classification_loss
from tests.helpers import CASES, ResidualMLP, explicit_states_grads, mlp_case, resnet_case, tangent_rows

ROOT = Path(__file__).resolve().parents[2]

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
        "ag_max": 0.050,
        "ag_max_candidate": "head.in",
        "ag_max_per_example": 0.30,
        "ag_max_per_example_candidate": "block2.in",
        "ag_max_blocks": 0.030,
        "ag_max_blocks_candidate": "block1.in",
    }


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
        v = insert_zero_block(grown, score.index, seed=5).terminal.weight  # V_l
        pooled = torch.autograd.grad(F.cross_entropy(grown(x), y), v)[0]
        each = torch.stack(
            [torch.autograd.grad(F.cross_entropy(grown(x[i : i + 1]), y[i : i + 1]), v)[0] for i in range(6)]
        )
        assert score.cross_gradient_norm_pooled == pytest.approx(float(pooled.norm()), rel=RTOL)
        assert score.contribution_cov_trace == pytest.approx(float((each - pooled).square().sum()) / 5, rel=RTOL)
    exact = probe_activation_gradients(model, split_batches(x, y, 3), exact=True, seed=5)  # C_l from the Gram route
    assert [s.cross_gradient_norm_pooled for s in exact.scores] == pytest.approx(
        [s.cross_gradient_norm_pooled for s in result.scores], rel=RTOL
    )


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
    assert result.growth_value_max == max(s.growth_value for s in result.scores)


@pytest.mark.parametrize("bn_mode", ["eval", "train"])
def test_probe_leaves_the_model_unchanged_and_computes_no_parameter_gradients(bn_mode):
    model, x, y = resnet_case(0, batch=4, size=8)
    model.train()
    model.blocks[0].psi[0].weight.requires_grad_(False)  # a mixed state that must come back as it was
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


# ----------------------------------------------------------------------------- sub-batches (memory)
def gpt_case(seed: int, batch: int = 5, length: int = 6):
    """A tiny float64 GPT-2 (common/models/gpt.py) in eval mode and one batch of token windows."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(n_layer=2, n_embd=8, n_head=2, block_size=length, vocab_size=17)).double().eval()
    g = torch.Generator().manual_seed(100 + seed)
    return model, torch.randint(0, 17, (batch, length), generator=g), torch.randint(0, 17, (batch, length), generator=g)


EXACT_KEYS = (
    "ag_norm",
    "per_example_rms",
    "ag_norm_pooled",
    "growth_value",
    "cross_gradient_norm",
    "growth_value_pooled",
    "cross_gradient_norm_pooled",
    "growth_fraction_pooled",
)
CONTRIBUTION_KEYS = ("cross_gradient_norm_pooled", "contribution_cov_trace")


@pytest.mark.parametrize("sub_batch", [1, 2, 4])
@pytest.mark.parametrize("kind", ["gpt", "mlp"])
def test_sub_batched_probe_equals_the_one_batch_probe(kind, sub_batch):
    """Rows of dL_b/dz from sub-batches of s examples, each loss weighted s/b, are the rows of one pass over b.

    Float64, batches of 5 (so that 2 and 4 leave a shorter last sub-batch); the exact values go
    through eigh of the same Gram matrices summed in another order, hence 1e-10 relative (as the
    other two-route checks of this file).
    """
    if kind == "gpt":
        model, x, y = gpt_case(0)
        loss_fn = classification_loss  # mean token cross-entropy: every sequence weighs alike
        batches = [(x, y), (x.flip(0), y.flip(0))]
    else:
        model, x, y = mlp_case(0, batch=10)
        loss_fn = F.cross_entropy
        batches = split_batches(x, y, 5)
    for keys, options in ((EXACT_KEYS, {"exact": True}), (CONTRIBUTION_KEYS, {"contributions": True})):
        whole = probe_activation_gradients(model, batches, loss_fn=loss_fn, **options)
        parts = probe_activation_gradients(model, batches, loss_fn=loss_fn, sub_batch=sub_batch, **options)
        assert parts.mean_loss == pytest.approx(whole.mean_loss, rel=1e-12)
        assert (parts.batch_size, parts.n_examples, parts.summary()["sub_batch"]) == (5, 10, sub_batch)
        for a, b in zip(whole.scores, parts.scores, strict=True):
            for key in keys:
                assert getattr(b, key) == pytest.approx(getattr(a, key), rel=RTOL), (a.name, key)
            assert b.tangent_rank == a.tangent_rank


def test_sub_batches_are_refused_with_train_mode_batchnorm():
    model, x, y = resnet_case(0, batch=4, size=8)
    with pytest.raises(ValueError, match="bn_mode='eval'"):
        probe_activation_gradients(model, [(x, y)], bn_mode="train", sub_batch=2)


def test_a_tiny_decoders_probe_peak_memory_falls_with_the_sub_batch_size():
    """Peak resident memory of fresh forked processes (tests/helpers/memory_jobs.py): one batch of 16 sequences, then sub-batches
    of 4 and 1. The probe's own memory (above a process that built the same model and batch) must shrink with the
    sub-batch: the saved activations and the logits' gradient are those of one sub-batch at a time."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.memory_jobs"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    peaks = json.loads(proc.stdout.strip().splitlines()[-1])
    base = peaks.pop("base")
    probe = {int(k): v - base for k, v in peaks.items()}  # KiB above the built model and batch
    assert probe[16] > probe[4] > probe[1] > 0, peaks
    assert probe[1] < 0.5 * probe[16], peaks  # ~1/16 of the activations, plus what does not scale
