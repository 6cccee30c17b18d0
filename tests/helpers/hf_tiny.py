"""Tiny Hugging Face causal LMs of seven layouts (and one that cannot be expanded), built and saved locally.

Each has hidden width 16, 3 layers and the byte tokenizer's vocabulary (257), saved with ``save_pretrained`` beside
:func:`common.models.gpt_export.byte_tokenizer`, so that ``AutoModelForCausalLM`` and ``AutoTokenizer`` load the
folder offline.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTJConfig,
    GPTJForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PhiConfig,
    PhiForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from common.models.gpt_export import byte_tokenizer

VOCAB = 257
_LLAMA_LIKE = dict(
    vocab_size=VOCAB,
    hidden_size=16,
    num_hidden_layers=3,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=32,
    max_position_embeddings=64,
)
LAYOUTS = {  # name -> a function building the model (the seven the issue names, Qwen3 as the seventh layout)
    "gpt2": lambda: GPT2LMHeadModel(
        GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=3, n_head=2, n_positions=64, bos_token_id=256, eos_token_id=256)
    ),
    "gpt_neox": lambda: GPTNeoXForCausalLM(
        GPTNeoXConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            num_hidden_layers=3,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        )
    ),
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**_LLAMA_LIKE)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**_LLAMA_LIKE)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**_LLAMA_LIKE, sliding_window=4)),
    "phi": lambda: PhiForCausalLM(PhiConfig(**_LLAMA_LIKE)),
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**_LLAMA_LIKE, head_dim=8)),
}
UNEXPANDABLE = {  # GPT-J's MLP projects back with fc_out, which no rule of the copied layer names
    "gptj": lambda: GPTJForCausalLM(
        GPTJConfig(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=2, rotary_dim=4, n_positions=64)
    )
}


def build(layout: str, seed: int = 0) -> torch.nn.Module:
    """A random tiny model of ``layout`` in eval mode, its 1-D parameters (norms, biases) perturbed so that none is at
    its special initial value."""
    torch.manual_seed(seed)
    lm = {**LAYOUTS, **UNEXPANDABLE}[layout]().eval()
    with torch.no_grad():
        for p in lm.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return lm


def save(layout: str, folder: Path, seed: int = 0) -> Path:
    """``build(layout, seed)`` and the byte tokenizer saved into ``folder`` (``save_pretrained``)."""
    build(layout, seed).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def text(folder: Path, chars: int = 40_000) -> Path:
    """A text file of ``chars`` characters of varied English-like words (a deterministic sample)."""
    g = torch.Generator().manual_seed(7)
    words = ["the", "growth", "value", "of", "a", "layer", "is", "large", "where", "depth", "helps", "and", "small"]
    picks = torch.randint(0, len(words), (chars // 4,), generator=g).tolist()
    path = folder / "text.txt"
    path.write_text(" ".join(words[i] for i in picks)[:chars] + "\n")
    return path
