"""Expand a Hugging Face decoder by copied zero-output layers: each place's growth value, the expansion, its checks.

**The block inserted** at place ``l`` (``0..L``: before layer ``l``; ``L``: before the final norm) is a copy of
the layer it follows, ``layers[max(l - 1, 0)]`` (LLaMA-Pro's block expansion copies the block it inserts
after; place 0 copies layer 0), with its residual output projections (attention and MLP, weights and
biases: :data:`common.models.hf_decoder.OUTPUT_PROJECTIONS`) at zero, so the model computes the same
function (:func:`common.models.hf_decoder.zero_output_layer`).

**Its tangent space** at that origin (docs/design.md, section "Exact growth value V_S,l"): with the output
projections ``W_o`` (attention) and ``W_d`` (MLP) at zero, the copy adds ``W_o a + W_d h (+ b)`` to the
residual stream to first order, where ``a`` is the input of ``W_o`` (the attention output before its
projection) and ``h`` the input of ``W_d`` (the MLP's hidden activations), both computed by the copy's own
weights from the stream ``z_l`` it receives, with the model's attention mask and rotary positions. Every
other weight of the copy gets no first-order gradient (its effect passes through a zero projection). So
the tangent features of a token are ``psi = [a, h, 1]`` (``k = d_a + d_h``, plus one constant column where a
zeroed projection has a bias: GPT-2, GPT-NeoX, Phi) and the growth value is the norm of the projection of
the activation gradient ``G = dL_S/dz_l`` onto ``{Psi W}``: ``V_S,l = ||Psi (Psi^T Psi)^+ Psi^T G||_F``
(:class:`common.science.projection.GramAccumulator`), with ``V_S,l <= AG_l = ||G||_F``. The features are read by
forward pre-hooks on the copy's zeroed projections while the copy runs on the arguments the source layer
received (:func:`place_scores`); this is not the ``linear`` family of :mod:`common.science.tangent` (random ``U``
over the state), which 04 reads.

``L_S`` is the mean token cross-entropy over the probe sample (every batch weighted by its tokens), ``G``'s
rows one per token (``n`` rows), as 04's probe of the same model (AG_l is the Frobenius norm of the same
``G``). Block Influence (ShortGPT) of every layer comes from the same forward passes.

**Policies** (:func:`choose_places`), each giving K distinct places of the original model, ranked once:
inserting a zero-output block changes neither the function nor any other place's stream and gradient
(the block's Jacobian is the identity), so the growth values of the remaining places after one insertion
are the ones ranked before it; re-ranking would only add the option of a second copy beside the first.
``criterion``: the K largest V_S,l; ``ag``: the K largest AG_l; ``even``: LLaMA-Pro's spacing, one copy
after every ``L / K`` layers (places ``round(j L / K)``, j = 1..K); ``bi``: after the K layers with the
largest Block Influence (layer ``i`` -> place ``i + 1``, a copy of layer ``i`` beside it). Ties: the
smaller place first.

:func:`expand_layers` inserts the copies and renumbers every per-layer index (each module's ``layer_idx``,
the config's ``num_hidden_layers`` and ``layer_types``) so that a generation cache keeps one slot per
layer; :func:`function_check` compares logits and cached greedy generation with the original's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from common.errors import UserError
from common.models.hf_decoder import (
    OUTPUT_PROJECTIONS,
    BlockInfluence,
    HFDecoder,
    renumber_layers,
    zero_output_layer,
)
from common.presets.expand_decoder import POLICIES
from common.science.activations import probe_mode
from common.science.projection import GramAccumulator
from common.training.epoch import classification_loss

FUNCTION_ATOL = 1e-5  # |logits difference| bound of the function check (float32; measured 0 on the CPU, see docs)
GENERATE_TOKENS = 8  # greedy tokens compared by the function check


# ----------------------------------------------------------------------------- the copied block
def copy_source(place: int, n_layer: int) -> int:
    """The layer copied at ``place``: the one it follows (``place - 1``), layer 0 at place 0."""
    if not 0 <= place <= n_layer:
        raise ValueError(f"place {place} out of range: a model of {n_layer} layers has places 0..{n_layer}")
    return max(place - 1, 0)


def zeroed_projections(layer: nn.Module) -> list[nn.Module]:
    """The modules of ``layer`` that :func:`~common.models.hf_decoder.zero_output_layer` zeroes (its output projections)."""
    return [
        m for name, m in layer.named_modules() if name.rpartition(".")[2] in OUTPUT_PROJECTIONS and hasattr(m, "weight")
    ]


def projection_inputs(module: nn.Module) -> int:
    """Input width of a projection: ``nn.Linear.in_features``, or GPT-2's ``Conv1D`` (weight ``in x out``)."""
    if isinstance(module, nn.Linear):
        return int(module.in_features)
    return int(module.weight.shape[0])


def feature_count(layer: nn.Module) -> int:
    """``k``: the copy's tangent features, the input widths of its zeroed projections plus one bias column if any has one."""
    projections = zeroed_projections(layer)
    bias = any(getattr(m, "bias", None) is not None for m in projections)
    return sum(projection_inputs(m) for m in projections) + int(bias)


def expandable(decoder: HFDecoder) -> None:
    """A one-line :class:`UserError` naming the architecture when its layers lack the two output projections."""
    layer = decoder.blocks[0]
    found = len(zeroed_projections(layer))
    if found < 2:
        raise UserError(
            f"{type(decoder.lm).__name__}: cannot expand it: its layer {type(layer).__name__} has {found} of the two residual "
            f"output projections the copied layer zeroes (by name: {', '.join(OUTPUT_PROJECTIONS)})"
        )


class _CopyFeatures:
    """Forward pre-hooks on a zeroed copy's projections: their inputs as rows ``[a, h, (1)]`` of one forward pass."""

    def __init__(self, copy_layer: nn.Module) -> None:
        self.projections = zeroed_projections(copy_layer)
        self.bias = any(getattr(m, "bias", None) is not None for m in self.projections)
        self.inputs: list[torch.Tensor | None] = [None] * len(self.projections)
        self.handles = [m.register_forward_pre_hook(self._keep(i)) for i, m in enumerate(self.projections)]

    def _keep(self, i: int):
        def hook(module, args):
            self.inputs[i] = args[0].detach()

        return hook

    def rows(self) -> torch.Tensor:
        for h in self.handles:
            h.remove()
        if any(t is None for t in self.inputs):
            raise RuntimeError("the copied layer's forward did not reach both output projections")
        parts = [t.reshape(-1, t.shape[-1]) for t in self.inputs]
        if self.bias:
            parts.append(torch.ones(parts[0].shape[0], 1, dtype=parts[0].dtype, device=parts[0].device))
        return torch.cat(parts, dim=1)


@dataclass(frozen=True)
class PlaceScore:
    """One insertion place: its copied layer, V_S,l of that copy, AG_l, the Block Influence of the layer before it, k, n."""

    place: int
    source: int
    growth_value: float
    ag: float
    bi: float | None  # of the layer the place follows (None at place 0)
    k: int
    n: int
    rank: int  # of the Gram matrix Psi^T Psi

    def record(self) -> dict:
        return asdict(self)


def _layer_calls(decoder: HFDecoder):
    """Pre-hooks keeping every layer's positional and keyword arguments and the final norm's input, for one forward."""
    calls: dict[int, tuple[tuple, dict]] = {}
    layers = list(decoder.blocks)

    def keep(i: int):
        def hook(module, args, kwargs):
            hidden = _hidden((args, kwargs))
            if not hidden.requires_grad:  # the first stream with frozen embeddings: a leaf the backward stops at
                hidden = hidden.detach().requires_grad_(True)
            calls[i] = _with_hidden((args, kwargs), hidden)
            return calls[i]

        return hook

    handles = [layer.register_forward_pre_hook(keep(i), with_kwargs=True) for i, layer in enumerate(layers)]
    handles.append(decoder.parts.final_norm.register_forward_pre_hook(keep(len(layers)), with_kwargs=True))
    return calls, handles


def _hidden(call: tuple[tuple, dict]) -> torch.Tensor:
    args, kwargs = call
    return args[0] if args else kwargs["hidden_states"]


def _with_hidden(call: tuple[tuple, dict], hidden: torch.Tensor) -> tuple[tuple, dict]:
    args, kwargs = call
    return ((hidden, *args[1:]), kwargs) if args else ((), {**kwargs, "hidden_states": hidden})


def place_scores(
    decoder: HFDecoder,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable = classification_loss,
) -> list[PlaceScore]:
    """V_S,l of the copied layer, AG_l and Block Influence at every place ``0..L`` of the frozen ``decoder``.

    One forward and backward pass per batch of the original model gives every place's stream ``z_l`` and
    gradient rows (each batch's gradient weighted by its share of the sample's tokens, so that ``G`` is the
    gradient of the sample's mean token loss); then each place's zeroed copy runs on ``z_l`` with the source
    layer's own arguments (mask, positions), and its projections' inputs are the features. Memory: one copied
    layer at a time, and ``L + 1`` Gram matrices of ``k x k`` float64.
    """
    expandable(decoder)
    layers = list(decoder.blocks)
    n_layer = len(layers)
    places = range(n_layer + 1)
    copies = {s: zero_output_layer(layers[s]) for s in sorted({copy_source(p, n_layer) for p in places})}
    total = sum(int(y.numel()) for _, y in batches)
    device = next(decoder.parameters()).device
    accs = [
        GramAccumulator(feature_count(copies[copy_source(p, n_layer)]), decoder.d_model, device=device) for p in places
    ]
    with probe_mode(decoder), BlockInfluence(decoder) as influence:
        for c in copies.values():
            c.eval()
            c.requires_grad_(False)
        for x, y in batches:
            calls, handles = _layer_calls(decoder)
            try:
                with torch.enable_grad():
                    loss = loss_fn(decoder(x), y)
            finally:
                for h in handles:
                    h.remove()
            states = [_hidden(calls[p]) for p in places]
            grads = torch.autograd.grad(loss, states)
            weight = int(y.numel()) / total
            with torch.no_grad():
                for p in places:
                    source = copy_source(p, n_layer)
                    features = _CopyFeatures(copies[source])
                    args, kwargs = _with_hidden(calls[source], states[p].detach())
                    copies[source](*args, **kwargs)
                    accs[p].update(features.rows(), grads[p].reshape(-1, decoder.d_model) * weight)
    bi = influence.values()
    return [
        PlaceScore(
            place=p,
            source=copy_source(p, n_layer),
            growth_value=accs[p].growth_value(),
            ag=accs[p].grad_norm(),
            bi=bi[p - 1] if p > 0 else None,
            k=accs[p].k,
            n=accs[p].rows,
            rank=accs[p].rank(),
        )
        for p in places
    ]


# ----------------------------------------------------------------------------- where the copies go
def _largest(values: Sequence[float], k: int) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return sorted(order[:k])


def even_places(n_layer: int, blocks: int) -> list[int]:
    """LLaMA-Pro's spacing: one copy after every ``L / K`` layers, places ``round(j L / K)`` for ``j = 1..K``."""
    return sorted({max(1, math.floor(j * n_layer / blocks + 0.5)) for j in range(1, blocks + 1)})


def choose_places(policy: str, scores: Sequence[PlaceScore], blocks: int) -> list[int]:
    """The K distinct places (of the original model, ascending) ``policy`` picks from one ranking (module docstring)."""
    n_layer = len(scores) - 1
    if not 1 <= blocks <= n_layer:
        raise UserError(f"--blocks {blocks}: give 1..{n_layer} (one copy per layer, at distinct places)")
    if policy == "criterion":
        return _largest([s.growth_value for s in scores], blocks)
    if policy == "ag":
        return _largest([s.ag for s in scores], blocks)
    if policy == "even":
        return even_places(n_layer, blocks)
    if policy == "bi":
        return [i + 1 for i in _largest([s.bi for s in scores[1:]], blocks)]
    raise UserError(f"--policy {policy}: choose from {', '.join(POLICIES)}")


# ----------------------------------------------------------------------------- the expansion
def expand_layers(decoder: HFDecoder, places: Iterable[int]) -> list[int]:
    """Insert a zeroed copy at each place (places of the original model), renumber; the copied layers' indices.

    Inserted from the last place down, so each place keeps its meaning in the original numbering; the
    config's ``layer_types`` (sliding or full attention per layer: Mistral, Qwen2) gets the copied layer's
    type at the copy's new index.
    """
    n_layer = decoder.n_layer
    places = sorted(places)
    if len(set(places)) != len(places):
        raise ValueError(f"places must be distinct, got {places}")
    sources = [copy_source(p, n_layer) for p in places]
    config = decoder.lm.config
    types = getattr(config, "layer_types", None)
    originals = list(decoder.blocks)
    for place, source in sorted(zip(places, sources, strict=True), reverse=True):
        decoder.blocks.insert(place, zero_output_layer(originals[source]))
        if isinstance(types, list) and len(types) >= n_layer:
            types.insert(place, types[source])
    renumber_layers(decoder.blocks, config)
    return sources


@torch.no_grad()
def greedy_tokens(lm: nn.Module, prompt: torch.Tensor, new_tokens: int = GENERATE_TOKENS) -> list[int]:
    """Greedy generation with the key-value cache (``use_cache=True``): the new token ids."""
    lm.eval()
    out = lm.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=new_tokens,
        do_sample=False,
        use_cache=True,
        pad_token_id=0,
    )
    return [int(t) for t in out[0, prompt.shape[1] :]]


@torch.no_grad()
def sample_logits(decoder: HFDecoder, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """The logits of every probe batch, in eval mode."""
    decoder.eval()
    return [decoder(x) for x, _ in batches]


@dataclass(frozen=True)
class Reference:
    """The original model's logits on the probe sample and its greedy tokens from a prompt: what expansions must match."""

    logits: list[torch.Tensor]
    prompt: torch.Tensor
    tokens: list[int]

    @classmethod
    def of(cls, decoder: HFDecoder, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], prompt_len: int = 8):
        prompt = batches[0][0][:1, :prompt_len]
        return cls(sample_logits(decoder, batches), prompt, greedy_tokens(decoder.lm, prompt))


def function_check(decoder: HFDecoder, batches, reference: Reference) -> dict:
    """The expanded model against the original: maximum |logits difference| on the probe sample (bound
    :data:`FUNCTION_ATOL`) and the greedy tokens with the cache; ``passed`` when both hold."""
    diffs = [float((a - b).abs().max()) for a, b in zip(sample_logits(decoder, batches), reference.logits, strict=True)]
    tokens = greedy_tokens(decoder.lm, reference.prompt, len(reference.tokens))
    max_diff = max(diffs)
    return {
        "max_abs_logit_diff": max_diff,
        "bound": FUNCTION_ATOL,
        "greedy_tokens": tokens,
        "greedy_reference": reference.tokens,
        "greedy_equal": tokens == reference.tokens,
        "passed": max_diff <= FUNCTION_ATOL and tokens == reference.tokens,
    }


def copy_decoder(decoder: HFDecoder) -> HFDecoder:
    """An independent copy of ``decoder`` (one expansion per policy from the same original)."""
    return HFDecoder(copy.deepcopy(decoder.lm))
