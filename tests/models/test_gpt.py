"""common/models/gpt.py: GPT-2 structure, exact zero insertion, C_l = dL/dV, and the probe on a decoder."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from common.models.gpt import GPT, GPTConfig, insert_decoder_block, padded_vocab_size
from common.science.activations import activation_gradients, probe_mode
from common.science.growth import function_preserved, insert_zero_block
from common.science.probe import probe_activation_gradients
from common.science.projection import GramAccumulator
from common.science.tangent import make_zero_block
from common.training.epoch import classification_loss
from tests.helpers import terminal_weight_from_rows

TINY = GPTConfig(n_layer=3, n_embd=16, n_head=2, block_size=8, vocab_size=61)


def tiny_gpt(seed: int = 0, config: GPTConfig = TINY) -> GPT:
    """A random GPT in float64, eval mode, with non-zero LayerNorm affines and biases (no special case hides)."""
    torch.manual_seed(seed)
    model = GPT(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name or name.startswith("ln_f"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def tokens(seed: int, batch: int = 3, config: GPTConfig = TINY) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + seed)
    w = torch.randint(0, config.vocab_size, (batch, config.block_size + 1), generator=g)
    return w[:, :-1], w[:, 1:]


def test_gpt2_structure_init_and_flop_count():
    config = GPTConfig(n_layer=4, n_embd=64, n_head=4, block_size=32, vocab_size=257)
    torch.manual_seed(0)
    model = GPT(config)
    assert padded_vocab_size(50257) == 50304 and model.wte.weight.shape == (320, 64)
    assert model.lm_head.weight is model.wte.weight  # tied: one parameter, counted once
    projections = torch.cat([p.flatten() for b in model.blocks for p in (b.attn.c_proj.weight, b.mlp.c_proj.weight)])
    others = torch.cat([p.flatten() for b in model.blocks for p in (b.attn.c_attn.weight, b.mlp.c_fc.weight)])
    # ~160k and ~260k draws: the sample std is within 1% of the target with overwhelming probability.
    assert projections.std().item() == pytest.approx(0.02 / math.sqrt(2 * 4), rel=0.01)
    assert others.std().item() == pytest.approx(0.02, rel=0.01)
    assert all(not b.attn.c_proj.bias.any() and not b.mlp.c_fc.bias.any() for b in model.blocks)
    unique = {id(p): p.numel() for p in model.parameters()}
    n = sum(unique.values()) - 32 * 64  # without the position embedding
    per_block = 4 * 64 + 64 * 3 * 64 + 3 * 64 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64
    assert n == per_block * 4 + 320 * 64 + 2 * 64 == model.num_params()
    assert model.flops_per_token() == 6 * n + 12 * 4 * 64 * 32


def test_attention_is_causal():
    model, (x, _) = tiny_gpt(0), tokens(0)
    changed = x.clone()
    changed[:, 5] = (changed[:, 5] + 1) % TINY.vocab_size
    with torch.no_grad():
        a, b = model(x), model(changed)
    assert torch.equal(a[:, :5], b[:, :5]) and not torch.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_zero_insertion_preserves_the_logits_exactly_at_every_candidate(mode):
    model, (x, _) = tiny_gpt(1).train(mode == "train"), tokens(1)
    candidates = model.candidates()
    assert [c.name for c in candidates] == ["block0.in", "block1.in", "block2.in", "ln_f.in"]
    for c in candidates:
        linear, full = copy.deepcopy(model), copy.deepcopy(model)
        assert insert_zero_block(linear, c.index, seed=3).family == "linear"
        block = insert_decoder_block(full, c.index, seed=3)
        assert function_preserved(model, linear, x) and function_preserved(model, full, x), c.name  # torch.equal
        assert full.blocks[c.index] is block and len(full.candidates()) == len(candidates) + 1
        assert (
            block.attn.c_attn.weight.any() and not block.attn.c_proj.weight.any() and not block.mlp.c_proj.weight.any()
        )


def reference_rows(model: GPT, x, y):
    with probe_mode(model):
        _, states, grads = activation_gradients(model, x, y, classification_loss)
    return states, grads


def test_inserted_linear_block_v_gradient_equals_the_cross_gradient():
    model, (x, y) = tiny_gpt(2), tokens(2)
    states, grads = reference_rows(model, x, y)
    for c in model.candidates():
        z, g = states[c.index], grads[c.index]
        psi = make_zero_block("linear", 16, 0, c.index, like=z).eval().tangent_features(z).detach()
        acc = GramAccumulator(psi.shape[1], 16)
        acc.update(psi, g.reshape(-1, 16))
        grown = copy.deepcopy(model)
        block = insert_zero_block(grown, c.index, seed=0)
        (grad,) = torch.autograd.grad(classification_loss(grown(x), y), [block.terminal.weight])
        # The same sums of products by two routes (autograd's Linear backward vs Psi^T G): rtol 1e-10.
        torch.testing.assert_close(grad, terminal_weight_from_rows(block, acc.cross_gradient()), rtol=1e-10, atol=1e-18)
        assert grad.norm() > 0


def test_full_decoder_block_gradient_holds_attention_and_mlp_features():
    model, (x, y) = tiny_gpt(3), tokens(3)
    states, grads = reference_rows(model, x, y)
    d, m = 16, 64
    for c in model.candidates():
        grown = copy.deepcopy(model)
        block = insert_decoder_block(grown, c.index, seed=5)
        params = [block.attn.c_proj.weight, block.mlp.c_proj.weight, block.attn.c_proj.bias, block.mlp.c_proj.bias]
        g_attn, g_mlp, g_bias_attn, g_bias_mlp = torch.autograd.grad(classification_loss(grown(x), y), params)
        with torch.no_grad():
            psi = block.tangent_features(states[c.index])  # the inserted block's features at the reference state
        cross = psi.T @ grads[c.index].reshape(-1, d)  # C = Psi^T G, (d + m + 1) x d
        torch.testing.assert_close(g_attn, cross[:d].T, rtol=1e-10, atol=1e-18)
        torch.testing.assert_close(g_mlp, cross[d : d + m].T, rtol=1e-10, atol=1e-18)
        torch.testing.assert_close(g_bias_attn, cross[-1], rtol=1e-10, atol=1e-18)
        torch.testing.assert_close(g_bias_mlp, cross[-1], rtol=1e-10, atol=1e-18)
        assert g_attn.norm() > 0 and g_mlp.norm() > 0  # both parts of the tangent space carry signal


def test_probe_finds_every_candidate_and_matches_retain_grad():
    model = tiny_gpt(4)
    batches = [tokens(10), tokens(11)]
    result = probe_activation_gradients(model, batches, loss_fn=classification_loss, exact=True)
    assert [s.name for s in result.scores] == [c.name for c in model.candidates()] and len(result.scores) == 3 + 1
    assert {s.rows_per_example for s in result.scores} == {TINY.block_size} and {s.width for s in result.scores} == {16}

    # AG_l by hand: the decoder run block by block with retain_grad (no hooks), batch-mean loss.
    ag = torch.zeros(4, dtype=torch.float64)
    per_sequence_sq = torch.zeros(4, dtype=torch.float64)
    for x, y in batches:
        ag += torch.stack([g.norm() for g in explicit_grads(model, x, y)])
        for i in range(len(x)):  # each sequence alone: its loss is its own mean token loss
            per_sequence_sq += torch.stack([g.norm() ** 2 for g in explicit_grads(model, x[i : i + 1], y[i : i + 1])])
    n = sum(len(x) for x, _ in batches)
    assert [s.ag_norm for s in result.scores] == pytest.approx((ag / 2).tolist(), rel=1e-10)
    assert [s.per_example_rms for s in result.scores] == pytest.approx((per_sequence_sq / n).sqrt().tolist(), rel=1e-10)
    # V_S,l goes through eigh of a rank-deficient Gram matrix (24 rows, k = 64), which loses up to
    # cond(Psi)^2 eps: 1e-10 relative as in test_projection_identities.RTOL, not a summation-order bound
    # (seen: 1.03e-12 over). Both sides are float64 here, so the claims report's float32 slack would be too loose.
    for s in result.scores:
        assert s.tangent_dim == 4 * 16 and 0 < s.growth_value <= s.ag_norm * (1 + 1e-10)


def explicit_grads(model: GPT, x, y) -> list[torch.Tensor]:
    model = copy.deepcopy(model)
    z = model.wte(x) + model.wpe(torch.arange(x.shape[1]))
    states = []
    for block in model.blocks:
        states.append(z)
        z = block(z)
    states.append(z)
    for s in states:
        s.retain_grad()
    classification_loss(model.lm_head(model.ln_f(z)), y).backward()
    return [s.grad for s in states]
