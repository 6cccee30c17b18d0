"""common/models/hf_expand.py: the copied layer's growth value as an identity, the policies, the expansion of seven layouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from common.errors import UserError
from common.experiments import expand_decoder_training as training
from common.models.hf_decoder import HFDecoder
from common.models.hf_expand import (
    FUNCTION_ATOL,
    Reference,
    choose_places,
    copy_decoder,
    even_places,
    expand_layers,
    expandable,
    function_check,
    place_scores,
    zeroed_projections,
)
from common.training.epoch import classification_loss
from tests.helpers import hf_tiny


def batch(seed: int = 0, size: int = 4, length: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.randint(0, 256, (size, length + 1), generator=torch.Generator().manual_seed(seed))
    return w[:, :-1], w[:, 1:]


def explicit_place(decoder: HFDecoder, place: int, x, y):
    """``(Psi, G, weight gradients)`` of the copy at ``place`` read off the expanded model itself: the inputs of its
    zeroed projections, the gradient of the loss at its output, and autograd's gradients of the zeroed weights."""
    expanded = copy_decoder(decoder)
    expand_layers(expanded, [place])
    layer = expanded.blocks[place]
    projections = zeroed_projections(layer)
    inputs, output = [], []
    handles = [m.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for m in projections]

    def keep(module, args, out):
        out = out[0] if isinstance(out, tuple) else out
        out.retain_grad()
        output.append(out)

    handles.append(layer.register_forward_hook(keep))
    for p in expanded.parameters():
        p.requires_grad_(False)
    for m in projections:
        m.weight.requires_grad_(True)
    classification_loss(expanded(x), y).backward()
    for h in handles:
        h.remove()
    rows = [t.detach().reshape(-1, t.shape[-1]) for t in inputs]
    bias = any(getattr(m, "bias", None) is not None for m in projections)
    psi = torch.cat([*rows, torch.ones(rows[0].shape[0], 1, dtype=rows[0].dtype)] if bias else rows, dim=1)
    g = output[0].grad.reshape(-1, decoder.d_model)
    return psi, g, rows, [m.weight.grad for m in projections], projections


RTOL = np.finfo(np.float64).eps  # common.science.projection: eigenvalues of Psi^T Psi <= k * eps * max count as zero


def projection_norm(psi: np.ndarray, g: np.ndarray) -> tuple[float, float]:
    """``(||U_r U_r^T G||_F, condition number of the kept part)`` from the SVD of Psi, keeping the singular values whose squares pass the Gram matrix's
    documented rank tolerance (so that a direction of Psi at ~1e-8 of the largest, as LayerNorm's mean-free
    features give next to a constant column, is kept or dropped by the same rule)."""
    u, sv, _ = np.linalg.svd(psi, full_matrices=False)
    keep = sv**2 > RTOL * psi.shape[1] * sv[0] ** 2
    return float(np.linalg.norm(u[:, keep].T @ g)), float(sv[0] / sv[keep].min())


@pytest.mark.parametrize("layout", ["llama", "gpt2", "gpt_neox", "phi"])
def test_growth_value_is_the_projection_of_the_gradient_onto_the_copys_tangent_space(layout):
    """float64 identities at every place: the copy's features are the inputs of its zeroed projections (autograd's
    weight gradients are ``a^T G``), V_S,l is the norm of the orthogonal projection of G onto their span (by an SVD), AG_l = ||G||_F,
    V_S,l <= AG_l. Tolerance: the Gram route (eigh of Psi^T Psi) loses what squaring the
    condition number costs, a relative error up to ~eps * cond(Psi)^2 against an SVD of Psi; so 10 eps cond^2 (at
    least 1e-9). The tiny LayerNorm models' features reach cond ~5e5 (measured errors 1e-7), Llama's ~1e2."""
    decoder = HFDecoder(hf_tiny.build(layout).double())
    x, y = batch()
    scores = place_scores(decoder, [(x, y)])
    assert [s.place for s in scores] == list(range(decoder.n_layer + 1))
    for s in scores:
        psi, g, rows, grads, projections = explicit_place(decoder, s.place, x, y)
        assert s.k == psi.shape[1] and s.n == psi.shape[0] == x.numel() and s.n > s.k  # a projection that can miss
        explicit, cond = projection_norm(psi.numpy(), g.numpy())
        assert s.growth_value == pytest.approx(explicit, rel=max(1e-9, 10 * RTOL * cond**2)), cond
        assert s.rank == int(
            np.linalg.matrix_rank(psi.numpy(), tol=np.sqrt(RTOL * psi.shape[1]) * np.linalg.norm(psi.numpy(), 2))
        )
        assert s.ag == pytest.approx(float(g.norm()), rel=1e-12)
        assert 0 < s.growth_value < s.ag
        for a, grad, module in zip(rows, grads, projections, strict=True):
            cross = (a.T @ g).T if isinstance(module, torch.nn.Linear) else a.T @ g  # Conv1D stores in x out
            torch.testing.assert_close(grad, cross, rtol=1e-10, atol=1e-12)


def test_criterion_picks_the_one_place_whose_copy_has_features():
    """Layers 0 and 2 with zero value and up projections: their copies' attention outputs and MLP activations are 0,
    so V_S,l = 0 at places 0, 1 (copies of layer 0) and 3 (of layer 2); place 2 (a copy of layer 1) is the argmax."""
    lm = hf_tiny.build("llama")
    with torch.no_grad():
        for i in (0, 2):
            lm.model.layers[i].self_attn.v_proj.weight.zero_()
            lm.model.layers[i].mlp.up_proj.weight.zero_()
    decoder = HFDecoder(lm.double())
    scores = place_scores(decoder, [batch(1)])
    assert [s.growth_value for s in scores][:2] == [0.0, 0.0] and scores[3].growth_value == 0.0
    assert scores[2].growth_value > 0 and all(s.ag > 0 for s in scores)
    assert choose_places("criterion", scores, 1) == [2]
    assert choose_places("criterion", scores, 2) == [0, 2]  # ties at 0: the smaller place


def test_the_policies_place_as_documented():
    assert even_places(32, 8) == [4, 8, 12, 16, 20, 24, 28, 32]  # LLaMA-Pro: 32 -> 40 layers, one copy every 4
    assert even_places(6, 1) == [6] and even_places(6, 2) == [3, 6] and even_places(3, 3) == [1, 2, 3]
    decoder = HFDecoder(hf_tiny.build("gpt_neox").double())
    scores = place_scores(decoder, [batch(2)])
    bi = [s.bi for s in scores[1:]]
    assert choose_places("bi", scores, 1) == [1 + int(np.argmax(bi))]
    assert choose_places("ag", scores, 1) == [int(np.argmax([s.ag for s in scores]))]
    with pytest.raises(UserError, match="--blocks 4"):
        choose_places("criterion", scores, 4)


@pytest.mark.parametrize("layout", sorted(hf_tiny.LAYOUTS))
def test_every_layout_expands_loads_back_and_generates_the_same_tokens(layout, tmp_path):
    """K = 2 copies: the saved expansion loads with from_pretrained (layer count and per-layer indices renumbered),
    gives the original logits within the bound and the same cached greedy tokens."""
    decoder = HFDecoder(hf_tiny.build(layout))
    batches = [batch(3, size=2, length=16)]
    reference = Reference.of(decoder, batches)
    expanded = copy_decoder(decoder)
    sources = expand_layers(expanded, [1, 3])
    assert sources == [0, 2] and expanded.n_layer == 5 and decoder.n_layer == 3
    expanded.lm.save_pretrained(tmp_path)
    hf_tiny.byte_tokenizer().save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert loaded.config.num_hidden_layers == 5 and AutoTokenizer.from_pretrained(tmp_path)("ab")["input_ids"] == [
        97,
        98,
    ]
    reloaded = HFDecoder(loaded)
    indices = [
        [m.layer_idx for m in layer.modules() if isinstance(getattr(m, "layer_idx", None), int)]
        for layer in reloaded.blocks
    ]
    assert all(idx and set(idx) == {i} for i, idx in enumerate(indices)), indices
    check = function_check(reloaded, batches, reference)
    assert check["passed"] and check["max_abs_logit_diff"] <= FUNCTION_ATOL, check
    assert check["greedy_tokens"] == reference.tokens and len(reference.tokens) > 0


def test_a_layout_without_two_output_projections_is_one_line_naming_it():
    with pytest.raises(UserError, match="GPTJForCausalLM: cannot expand it"):
        expandable(HFDecoder(hf_tiny.build("gptj")))


def test_training_changes_only_the_new_layers_and_repeats_with_the_seed():
    tokens = torch.randint(0, 256, (6000,), generator=torch.Generator().manual_seed(5))
    split = training.split_tokens(tokens, held_out_tokens=1000, seq_len=16, sequences=4, batch_size=4, what="test")
    curves = []
    for _ in range(2):
        decoder = HFDecoder(hf_tiny.build("llama"))
        expand_layers(decoder, [1])
        before = {k: v.clone() for k, v in decoder.state_dict().items()}
        curves.append(training.train_new_layers(decoder, [1], split, steps=4, batch_size=2, lr=1e-2, n_evals=3, seed=0))
        changed = {k.split(".")[3] for k, v in decoder.state_dict().items() if not torch.equal(v, before[k])}
        assert changed == {"1"}  # lm.model.layers.1.*: the copy alone
    assert curves[0] == curves[1] and [c["step"] for c in curves[0]] == [0, 2, 4]
    assert curves[0][0]["train_loss"] is None and curves[0][-1]["held_out_loss"] != curves[0][0]["held_out_loss"]
