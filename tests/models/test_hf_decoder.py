"""common/models/hf_decoder.py: the layer list of any HF causal LM, its candidates, zero insertion, Block Influence, CPT, memory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM, PhiConfig, PhiForCausalLM, Qwen2Config, Qwen2ForCausalLM

from common.errors import UserError
from common.models.hf_decoder import BlockInfluence, HFDecoder, find_decoder_layers, insert_zero_layer
from common.science.probe import probe_activation_gradients
from common.training.device import cpu_threads
from common.training.epoch import classification_loss, train_epoch
from common.training.recipes import AdamWRecipe, Schedule, TrainSettings
from tests.conftest import ROOT
from tests.helpers.hf_jobs import CONFIGS, VOCAB, from_config, save_memory_model

PATHS = {
    "gpt_neox": ("gpt_neox.layers", "gpt_neox.final_layer_norm"),
    "gpt2": ("transformer.h", "transformer.ln_f"),
    "llama": ("model.layers", "model.norm"),
}


def tiny(family: str, seed: int = 0) -> HFDecoder:
    """A random float64 decoder in eval mode, norms and biases perturbed so that no special case hides."""
    torch.manual_seed(seed)
    lm = from_config(CONFIGS[family]()).double().eval()
    with torch.no_grad():
        for p in lm.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return HFDecoder(lm)


def tokens(seed: int, batch: int = 3, length: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.randint(0, VOCAB, (batch, length + 1), generator=torch.Generator().manual_seed(100 + seed))
    return w[:, :-1], w[:, 1:]


def retained_state_grads(decoder: HFDecoder, x, y) -> list[torch.Tensor]:
    """``dL/dz_l`` by retain_grad on ``output_hidden_states`` (layer inputs) and on the final norm's input."""
    final = []
    handle = decoder.parts.final_norm.register_forward_pre_hook(lambda m, args: final.append(args[0]))
    try:
        out = decoder.lm(input_ids=x, use_cache=False, output_hidden_states=True)
    finally:
        handle.remove()
    states = [*out.hidden_states[: decoder.n_layer], final[0]]  # the last hidden state is normed: not a candidate
    for s in states:
        s.retain_grad()
    classification_loss(out.logits, y).backward()
    decoder.lm.zero_grad(set_to_none=True)
    return [s.grad for s in states]


@pytest.mark.parametrize("family", list(CONFIGS))
def test_candidates_are_the_residual_stream_and_ag_matches_retain_grad(family):
    decoder = tiny(family)
    assert (decoder.parts.layers_path, decoder.parts.norm_path) == PATHS[family]
    names = [c.name for c in decoder.candidates()]
    assert names == ["layer0.in", "layer1.in", "layer2.in", "final_norm.in"]  # n_layer + 1
    x, y = tokens(1)
    result = probe_activation_gradients(decoder, [(x, y)], loss_fn=classification_loss)
    grads = retained_state_grads(decoder, x, y)
    # Two routes to the same float64 gradients (hooks + autograd.grad vs retain_grad + backward): rtol 1e-10.
    assert [s.ag_norm for s in result.scores] == pytest.approx([g.norm().item() for g in grads], rel=1e-10)
    assert [s.block_input for s in result.scores] == [True, True, True, False]
    assert all(s.ag_norm > 0 for s in result.scores)


@pytest.mark.parametrize(
    ("config", "cls", "paths"),
    [
        (Qwen2Config, Qwen2ForCausalLM, ("model.layers", "model.norm")),
        (MistralConfig, MistralForCausalLM, ("model.layers", "model.norm")),
        (PhiConfig, PhiForCausalLM, ("model.layers", "model.final_layernorm")),
    ],
)
def test_the_layer_list_is_found_in_qwen2_mistral_and_phi(config, cls, paths):
    lm = cls(
        config(
            vocab_size=VOCAB,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
        )
    )
    parts = find_decoder_layers(lm)
    assert (parts.layers_path, parts.norm_path) == paths and len(parts.layers) == 2


def test_a_model_without_a_layer_list_is_a_user_error():
    flat = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    with pytest.raises(UserError, match="cannot find its decoder layers"):
        find_decoder_layers(flat)


@pytest.mark.parametrize("family", ["gpt_neox", "llama"])
def test_zero_output_layer_insertion_leaves_the_logits_unchanged(family):
    x, _ = tokens(2)
    for index in range(4):
        decoder = tiny(family, seed=3)
        with torch.no_grad():
            before = decoder(x)
            layer = insert_zero_layer(decoder, index)
            after = decoder(x)
        assert decoder.blocks[index] is layer and len(decoder.candidates()) == 5
        assert torch.equal(before, after), (family, index)
        assert any(p.abs().sum() > 0 for p in layer.parameters())  # only the output projections are zero


def test_block_influence_equals_hidden_states_and_the_final_norm_input():
    decoder = tiny("gpt_neox", seed=4)
    batches = [tokens(5), tokens(6)]
    with BlockInfluence(decoder) as recorder:  # recorded inside the probe's own forward passes
        probe_activation_gradients(decoder, batches, loss_fn=classification_loss)
    final, cos = [], [[] for _ in range(3)]
    handle = decoder.parts.final_norm.register_forward_pre_hook(lambda m, args: final.append(args[0].detach()))
    with torch.no_grad():
        for x, _ in batches:
            hs = decoder.lm(input_ids=x, use_cache=False, output_hidden_states=True).hidden_states
            outs = [*hs[1:3], final[-1]]  # hidden_states[3] is after the final norm: use the norm's input
            for i in range(3):
                cos[i].append(torch.nn.functional.cosine_similarity(hs[i], outs[i], dim=-1).flatten())
    handle.remove()
    expected = [1 - torch.cat(c).mean().item() for c in cos]
    assert recorder.values() == pytest.approx(expected, rel=1e-10)
    assert len(set(recorder.values())) == 3


def test_continued_pretraining_lowers_the_loss_on_a_repeated_batch():
    torch.manual_seed(0)
    decoder = HFDecoder(from_config(CONFIGS["gpt_neox"]()))
    x, y = tokens(7, batch=4, length=16)
    recipe = AdamWRecipe(steps=8, lr=1e-2, eval_interval=8, warmup_steps=0, weight_decay=0.0)
    with torch.no_grad():
        start = classification_loss(decoder.eval()(x), y).item()
    with cpu_threads(1):  # tiny matrices: threads only wait on a busy machine
        train_epoch(
            decoder.train(),
            recipe.make_optimizer(decoder),
            [(x, y)] * 8,
            schedule=Schedule(1e-2, 8, 0),
            step=0,
            settings=TrainSettings(recipe),
            device=torch.device("cpu"),
        )
    with torch.no_grad():
        end = classification_loss(decoder.eval()(x), y).item()
    assert end < start - 0.5, (start, end)


def test_probe_peak_memory_stays_below_a_training_step(tmp_path):
    """Fresh processes (one high-water mark each, tests/helpers/hf_jobs.py), same model and batch: probe vs one AdamW step."""
    folder = save_memory_model(tmp_path / "model")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.hf_jobs", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    peaks = json.loads(proc.stdout.strip().splitlines()[-1])
    assert peaks["probe"] <= peaks["train"], peaks
