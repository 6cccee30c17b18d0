"""Compact GPT-2 (Radford et al. 2019) for the decoder depth sweep of paper B.4, nanoGPT-style.

Pre-LayerNorm decoder blocks (``z -> z + attn(ln_1(z))``, then ``z -> z + mlp(ln_2(z))``), causal
self-attention through ``F.scaled_dot_product_attention``, a tanh-GELU MLP of width ``4 d``, a
final LayerNorm and an LM head tied to the token embedding. GPT-2 initialisation: every weight
``N(0, 0.02)``, biases 0, and the two residual output projections of each block (``c_proj``)
``N(0, 0.02 / sqrt(2 L))``. The vocabulary is padded to a multiple of 64 (50257 -> 50304, as
nanoGPT does): the padded rows are never an input or a target, their logits take part in the
softmax and are pushed down by training.

Candidates (docs/design.md, section "Insertion candidates"): the residual stream entering every
block plus the stream leaving the last block, i.e. the input of the final LayerNorm: ``L + 1``
states of width ``d``, one row per token. The LM head is an endpoint, never a candidate. Each
candidate declares the ``linear`` tangent family (``common/science/tangent.py``:
``psi = gelu(U(layer_norm(z)))``, ``V`` zero), the protocol's standard block for the probe's exact
projection.

A *full* decoder block inserted with both output projections at zero (:func:`zero_decoder_block`,
:func:`insert_decoder_block`) also preserves the logits exactly; at that origin its first-order
tangent features are the attention output before ``c_proj``, the MLP's hidden features and a
constant (the two ``c_proj`` biases): :meth:`Block.tangent_features`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from common.models.candidates import Candidate
from common.presets.paper import GPT2_BASELINE_LAYERS, GPT2_HEADS, GPT2_WIDTH

TANGENT_FAMILY = "linear"  # the protocol's zero-output block at every candidate (common/science/tangent.py)
VOCAB_MULTIPLE = 64  # the embedding and LM head have a multiple of 64 rows (GPU-friendly matmuls)
INIT_STD = 0.02


def padded_vocab_size(vocab_size: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """``vocab_size`` rounded up to a multiple of ``multiple`` (50257 -> 50304)."""
    return -(-vocab_size // multiple) * multiple


@dataclass(frozen=True)
class GPTConfig:
    """Every architectural hyper-parameter, with GPT-2 Small's values (B.4: 768 / 3072 / 12 heads)."""

    n_layer: int = GPT2_BASELINE_LAYERS  # L: the sweep's depth variable
    n_embd: int = GPT2_WIDTH  # d
    n_head: int = GPT2_HEADS
    n_inner: int | None = None  # feed-forward width; None: 4 d = 3072
    block_size: int = 1024  # context length T
    vocab_size: int = 50257  # GPT-2's BPE (tiktoken "gpt2"); padded in the model
    dropout: float = 0.0
    bias: bool = True
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")

    @property
    def hidden(self) -> int:
        return self.n_inner or 4 * self.n_embd

    @property
    def padded_vocab_size(self) -> int:
        return padded_vocab_size(self.vocab_size)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.dropout = config.n_head, config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)  # residual output projection
        self.resid_dropout = nn.Dropout(config.dropout)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The attention output before ``c_proj``: (B, T, d)."""
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)  # 3 x (B, T, d)
        q, k, v = (u.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for u in (q, k, v))  # (B, nh, T, hd)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return y.transpose(1, 2).reshape(b, t, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.resid_dropout(self.c_proj(self.features(x)))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.hidden, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's "gelu_new"
        self.c_proj = nn.Linear(config.hidden, config.n_embd, bias=config.bias)  # residual output projection
        self.dropout = nn.Dropout(config.dropout)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The hidden features before ``c_proj``: (B, T, 4 d)."""
        return self.gelu(self.c_fc(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.features(x)))


class Block(nn.Module):
    """One pre-LayerNorm decoder block: ``z + attn(ln_1(z))``, then ``+ mlp(ln_2(.))``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = z + self.attn(self.ln_1(z))
        return z + self.mlp(self.ln_2(z))

    def tangent_features(self, z: torch.Tensor) -> torch.Tensor:
        """``Psi`` of this block at a zero-output origin (both ``c_proj`` zero): (tokens, d + 4d + 1).

        With both output projections at zero the block is the identity, so the MLP reads ``z``
        itself; the derivative of the output with respect to the ``c_proj`` weights and biases is
        spanned by the attention features, the MLP features and a constant column (the two biases
        add the same direction). Column blocks are in the order of ``attn.c_proj.weight``,
        ``mlp.c_proj.weight`` and the bias: ``Psi^T G`` stacks their gradients.
        """
        attn = self.attn.features(self.ln_1(z))
        mlp = self.mlp.features(self.ln_2(z))
        ones = torch.ones(*z.shape[:-1], 1, dtype=z.dtype, device=z.device)
        return torch.cat([attn, mlp, ones], dim=-1).reshape(-1, attn.shape[-1] + mlp.shape[-1] + 1)


class GPT(nn.Module):
    """GPT-2 with ``config.n_layer`` blocks in one flat ``nn.ModuleList`` (insertion: ``blocks.insert``)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.padded_vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one parameter
        self.apply(self._init_weights)
        init_residual_projections(self.blocks, config.n_layer)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=INIT_STD)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.config.block_size:
            raise ValueError(f"sequence of length {t} is longer than the context {self.config.block_size}")
        pos = torch.arange(t, device=idx.device)
        z = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, d)
        for block in self.blocks:  # z_l is the input of block l
            z = block(z)
        return self.lm_head(self.ln_f(z))  # (B, T, padded vocab); z_L is the input of ln_f

    def candidates(self) -> list[Candidate]:
        """The ``L + 1`` insertion candidates: every block's input, then the final LayerNorm's input."""
        found = [Candidate(i, f"block{i}.in", b, TANGENT_FAMILY) for i, b in enumerate(self.blocks)]
        found.append(Candidate(len(self.blocks), "ln_f.in", self.ln_f, TANGENT_FAMILY))
        return found

    def candidate_width(self, index: int) -> int:
        return self.config.n_embd

    def num_params(self, *, exclude_position: bool = True) -> int:
        """Parameters, the tied embedding once; without the position embedding by default (``N`` of the FLOP count)."""
        total = sum(p.numel() for p in self.parameters())
        return total - self.wpe.weight.numel() if exclude_position else total

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token, ``6 N + 12 L d T`` (Kaplan et al. 2020; PaLM's MFU, App. B).

        ``N`` excludes the position embedding and counts the tied embedding once; the second term is
        the attention scores and values at context ``T`` (default: the model's).
        """
        t = seq_len or self.config.block_size
        return 6 * self.num_params() + 12 * len(self.blocks) * self.config.n_embd * t


def init_residual_projections(blocks, n_layer: int, generator: torch.Generator | None = None) -> None:
    """GPT-2's scaled init of the residual output projections: ``N(0, 0.02 / sqrt(2 L))``."""
    std = INIT_STD / math.sqrt(2 * n_layer)
    with torch.no_grad():
        for block in blocks:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                proj.weight.copy_(torch.randn(proj.weight.shape, generator=generator) * std)


def zero_decoder_block(config: GPTConfig, seed: int = 0) -> Block:
    """A full decoder block (attention and MLP) whose two output projections are zero: the identity.

    Its other weights get GPT-2's initialisation from a generator seeded by ``seed``; ``c_proj``
    weights and biases are 0, so the block adds exactly 0 to the residual stream.
    """
    generator = torch.Generator().manual_seed(seed)
    block = Block(config)
    with torch.no_grad():
        for m in block.modules():
            if isinstance(m, nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator) * INIT_STD)
                if m.bias is not None:
                    m.bias.zero_()
        for proj in (block.attn.c_proj, block.mlp.c_proj):
            proj.weight.zero_()
    return block


def insert_decoder_block(model: GPT, index: int, seed: int = 0) -> Block:
    """Insert :func:`zero_decoder_block` at candidate ``index`` (before block ``index``; ``L``: before ``ln_f``)."""
    if not 0 <= index <= len(model.blocks):
        raise ValueError(f"candidate {index} out of range: the model has {len(model.blocks) + 1} candidates")
    like = next(model.parameters())
    block = zero_decoder_block(model.config, seed).to(dtype=like.dtype, device=like.device)
    block.train(model.training)
    model.blocks.insert(index, block)
    return block
