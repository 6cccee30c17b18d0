"""A decoder's training memory on one device, and whether it needs gradient checkpointing (issue 33, item 4).

An estimate, in bytes, of what one process holds at the peak of a training step of a decoder with ``P`` parameters,
``L`` layers of width ``h`` and feed-forward width ``f``, on micro-batches of ``b`` sequences of ``T`` tokens over a
vocabulary of ``V`` (``n = b T`` tokens), with ``a`` bytes per activation (2 under bf16 autocast, else 4):

- training state, ``16 P``: float32 weights (4), gradients (4) and AdamW's two moments (8); divided by the number
  of processes under FSDP (``shards``);
- autocast's weight copies, ``2 P`` under bf16 autocast: the forward casts every weight once, and the backward keeps
  the copies until it has used them;
- activations without checkpointing, ``a n L (8 h + 2 f)``: per layer and token the two norms' inputs, the
  attention's input, q, k, v and output, the MLP's input (``h`` each) and its activation's input and output (``f``
  each); a gated MLP (SwiGLU: gate, up, activation, product) ``a n L (8 h + 4 f)``. This is Korthikanti et al.
  (2022)'s ``34 s b h`` for ``f = 4 h`` without its two dropout masks, with fused attention (no ``a s^2`` terms);
- activations with checkpointing: each layer's input (``a n h`` per layer) and one layer recomputed;
- the logits: bf16 logits and their gradient (``2 a n V``) and one float32 chunk of the loss
  (:data:`common.training.losses.CHUNK_ELEMENTS`).

The issue's example, Pythia-2.8B (``P`` = 2.78 B, ``L`` = 32, ``h`` = 2,560, ``f`` = 10,240) at 4 x 2,048 tokens:
44 GB of state, 5.6 GB of weight copies, 21 GB of activations, 1.6 GB of logits: 73 GB in all, which fits an H200
(141 GB) and is marginal on an 80 GB H100. Checkpointing is chosen where the estimate without it exceeds
:data:`FIT_FRACTION` of the device's memory (:func:`needs_checkpointing`): the rest covers what the estimate leaves
out (the CUDA context, the allocator's fragmentation, the evaluation's batches, collective buffers).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch
from torch import nn

from common.training.losses import CHUNK_ELEMENTS

FIT_FRACTION = 0.8  # the share of a device's memory the estimate may fill without checkpointing
STATE_BYTES = 16  # per parameter: float32 weight, gradient and AdamW's two moments
AUTOCAST_COPY_BYTES = 2  # per parameter under bf16 autocast


@dataclass(frozen=True)
class DecoderShape:
    """What the estimate reads of a decoder: parameters ``P``, layers ``L``, width ``h``, feed-forward width ``f``,
    vocabulary ``V`` and whether its MLP is gated (SwiGLU)."""

    params: int
    n_layer: int
    d_model: int
    ffn: int
    vocab: int
    gated: bool = False


@dataclass(frozen=True)
class MemoryEstimate:
    """The parts of the estimate, in bytes; :meth:`total` with or without checkpointing."""

    state: int  # weights, gradients, AdamW moments (this process's shard)
    weight_copies: int  # autocast's bf16 copies of the weights
    activations: int  # saved for the backward without checkpointing
    activations_checkpointed: int  # the layers' inputs and one layer recomputed
    logits: int  # the logits, their gradient and one float32 chunk of the loss

    def total(self, checkpointing: bool) -> int:
        kept = self.activations_checkpointed if checkpointing else self.activations
        return self.state + self.weight_copies + kept + self.logits

    def record(self) -> dict:
        """The parts and both totals, for a run's record."""
        return {**asdict(self), "total": self.total(False), "total_checkpointed": self.total(True)}


def training_memory(
    shape: DecoderShape, *, micro_batch: int, block_size: int, amp: bool = True, shards: int = 1
) -> MemoryEstimate:
    """The estimate of the module docstring for micro-batches of ``micro_batch`` sequences of ``block_size`` tokens;
    ``amp``: bf16 autocast (2-byte activations and weight copies); ``shards``: FSDP's processes (the state split)."""
    a = 2 if amp else 4
    tokens = micro_batch * block_size
    per_token_layer = 8 * shape.d_model + (4 if shape.gated else 2) * shape.ffn  # values per token and layer
    one_layer = a * tokens * per_token_layer
    return MemoryEstimate(
        state=-(-STATE_BYTES * shape.params // shards),
        weight_copies=AUTOCAST_COPY_BYTES * shape.params if amp else 0,
        activations=one_layer * shape.n_layer,
        activations_checkpointed=a * tokens * shape.d_model * shape.n_layer + one_layer,
        logits=2 * a * tokens * shape.vocab + 4 * min(CHUNK_ELEMENTS, tokens * shape.vocab),
    )


def needs_checkpointing(estimate: MemoryEstimate, capacity: int | None) -> bool:
    """Whether training without checkpointing would not fit: its estimate above :data:`FIT_FRACTION` of ``capacity``
    bytes; an unknown capacity (None) keeps checkpointing on, the choice that cannot run out of memory first."""
    return capacity is None or estimate.total(False) > FIT_FRACTION * capacity


def device_memory(device: torch.device) -> int | None:
    """The memory of ``device`` in bytes: an accelerator's total (CUDA, NPU), the host's physical memory for the CPU;
    None where it cannot be read (MPS, a platform without ``sysconf``)."""
    if device.type in ("cuda", "npu"):
        backend = getattr(torch, device.type, None)
        props = getattr(backend, "get_device_properties", None)
        return int(props(device).total_memory) if props is not None else None
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None
    return None


def hf_shape(lm: nn.Module, n_layer: int, d_model: int) -> DecoderShape:
    """The :class:`DecoderShape` of a Hugging Face causal LM with ``n_layer`` layers of width ``d_model``: its
    parameters (tied ones once), the output embedding's rows, the config's feed-forward width (``intermediate_size``,
    ``n_inner``, else ``4 d``), gated where a module is named ``gate_proj`` or ``gate_up_proj`` (Llama, Qwen, Mistral)."""
    config = getattr(lm, "config", None)
    ffn = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d_model
    head = lm.get_output_embeddings() if hasattr(lm, "get_output_embeddings") else None
    vocab = head.weight.shape[0] if head is not None else getattr(config, "vocab_size", 0)
    gated = any(name.rpartition(".")[2] in ("gate_proj", "gate_up_proj") for name, _ in lm.named_modules())
    params = sum(p.numel() for p in lm.parameters())
    return DecoderShape(params=params, n_layer=n_layer, d_model=d_model, ffn=int(ffn), vocab=int(vocab), gated=gated)


def choose_checkpointing(asked: bool | str | None, estimate: MemoryEstimate, capacity: int | None) -> tuple[bool, str]:
    """Gradient checkpointing on or off, and why: ``asked`` True or False (the flag or the preset) wins; ``"auto"``
    or None: :func:`needs_checkpointing` (``"memory estimate"``)."""
    if isinstance(asked, bool):
        return asked, "asked"
    if asked not in (None, "auto"):
        raise ValueError(f"gradient_checkpointing {asked!r}: use true, false or auto")
    return needs_checkpointing(estimate, capacity), "memory estimate"
