"""Is my network deep enough? The paper's criterion on any PyTorch model, in one call (:func:`probe_network`).

``probe_network(model, batches)`` probes an unmodified model at every *place* of its residual stream (the input of
each residual block, and the state entering the head): ``AG_l``, the exact growth value ``V_S,l`` of the protocol's
zero-output block pooled over every example (docs/design.md, sections "Activation-gradient score AG_l" and "Exact
growth value V_S,l"), and with ``contributions=True`` App. G's per-example statistics. ``places="auto"`` asks the
registered rules of :mod:`common.models.places` (torchvision ResNets and ViTs, Hugging Face causal LMs); any other
model names its blocks (``places=[model.block1, ...]``: the input of each listed module is a place). The tangent
family follows from the captured state's layout: an NCHW map is ``conv3x3``, ``(batch, tokens, width)`` or
``(batch, width)`` is ``linear``; a family that does not fit is refused with a sentence.

Batches are ``(x, y)`` pairs (cross-entropy on ``model(x)``'s logits unless ``loss_fn``) or dicts as Hugging Face
models take (``input_ids``, ``attention_mask``, ``labels``; no labels: the input ids where the mask is 1), whose loss
is next-token cross-entropy on the logits. The model is wrapped (``forward(x) -> logits``), never modified: the
probe's hooks are placed and removed for it, its modes and ``requires_grad`` flags restored.

The result (:class:`NetworkProbe`) holds today's :class:`common.science.probe.ProbeResult` and the guard rails: a
place whose tangent features reach the number of gradient rows (``V_S,l = AG_l`` by rank alone), all-zero gradients
with their likely cause (a zero-initialised head), and which normalisation each ``AG_l`` carries. ``.records()`` and
``.to_dataframe()`` give one row per place; ``.insert(place)`` grows the model there by the zero-output block whose
``V_S,l`` was reported, checked to be reached by the forward pass (:func:`common.science.growth.insert_zero_block_into`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from common.errors import UserError
from common.models.candidates import Candidate
from common.models.places.registry import Place, places_for, places_of_modules
from common.science.activations import probe_mode
from common.science.growth import insert_zero_block_into
from common.science.probe import CandidateScore, ProbeResult, probe_activation_gradients
from common.science.tangent import ZeroOutputBlock, get_family

IGNORE = -100  # label of a token the loss leaves out (Hugging Face's convention)
LAYOUTS = {4: "conv3x3", 3: "linear", 2: "linear"}  # state dimensions -> tangent family (NCHW map, tokens, vectors)


# ----------------------------------------------------------------------------- the model as forward(x) -> logits
class LogitsOf(nn.Module):
    """``forward(x) -> logits`` of a user's model: ``model(x)`` (its ``.logits`` or first element when it returns
    more), or for token batches ``model(input_ids=..., attention_mask=...)`` with ``x`` the ids, or ids and mask
    stacked on dim 1. ``blocks``: the modules whose inputs are block places (a plain list, for the probe's flags)."""

    def __init__(self, model: nn.Module, tokens: bool, blocks: Sequence[nn.Module] = ()) -> None:
        super().__init__()
        self.model, self.tokens, self.blocks = model, tokens, list(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tokens:
            ids, mask = (x[:, 0], x[:, 1]) if x.dim() == 3 else (x, None)
            out = self.model(input_ids=ids, attention_mask=mask, use_cache=False)
        else:
            out = self.model(x)
        out = getattr(out, "logits", out)
        return out[0] if isinstance(out, tuple | list) else out


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of each position's logits against the next label (``-100``: left out), as Hugging Face's
    causal LMs compute their loss; float32 (float64 logits: float64)."""
    logits = logits[:, :-1].flatten(0, 1)
    logits = logits if logits.dtype == torch.float64 else logits.float()
    return F.cross_entropy(logits, labels[:, 1:].flatten(), ignore_index=IGNORE)


def as_pairs(batches: Iterable) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], bool]:
    """``([(x, y)], tokens)``: tuple batches as they are; dict batches (Hugging Face) as ``x`` = the ids (and the mask
    stacked on dim 1) and ``y`` = the labels (default: the ids, ``-100`` where the mask is 0)."""
    pairs, kinds = [], set()
    for i, batch in enumerate(batches):
        if isinstance(batch, Mapping):
            if "input_ids" not in batch:
                raise UserError(f"batch {i} is a dict without input_ids; give dicts as Hugging Face models take them")
            ids, mask = batch["input_ids"], batch.get("attention_mask")
            labels = batch.get("labels")
            if labels is None:
                labels = ids if mask is None else ids.masked_fill(mask == 0, IGNORE)
            pairs.append((ids if mask is None else torch.stack([ids, mask.to(ids.dtype)], 1), labels))
            kinds.add("tokens")
        elif isinstance(batch, tuple | list) and len(batch) == 2:
            pairs.append((batch[0], batch[1]))
            kinds.add("pairs")
        else:
            raise UserError(f"batch {i} is a {type(batch).__name__}; give (x, y) pairs or Hugging Face dicts")
    if not pairs:
        raise UserError("probe_network got no batches; give at least one (x, y) pair or dict")
    if len(kinds) > 1:
        raise UserError("the batches mix (x, y) pairs and dicts; give one kind")
    return pairs, kinds == {"tokens"}


# ----------------------------------------------------------------------------- places and their families
def state_shapes(wrapped: nn.Module, places: Sequence[Place], x: torch.Tensor) -> list[tuple[int, ...]]:
    """The shape of the state entering each place on one forward pass of ``x`` (eval mode, no gradients); a place the
    forward pass never enters is a :class:`UserError`."""
    shapes: list[tuple[int, ...] | None] = [None] * len(places)

    def hook(i: int):
        def keep(module, args):
            if args and isinstance(args[0], torch.Tensor) and shapes[i] is None:
                shapes[i] = tuple(args[0].shape)

        return keep

    handles = [p.module.register_forward_pre_hook(hook(i)) for i, p in enumerate(places)]
    try:
        with probe_mode(wrapped), torch.no_grad():
            wrapped(x)
    finally:
        for h in handles:
            h.remove()
    missing = [p.name for p, s in zip(places, shapes, strict=True) if s is None]
    if missing:
        raise UserError(
            f"the forward pass never enters {', '.join(missing)} with a tensor as its first input; list modules "
            "whose input is the residual stream"
        )
    return shapes


def family_of(name: str, shape: tuple[int, ...], family: str | None = None) -> str:
    """The tangent family of a state of ``shape``: ``conv3x3`` for an NCHW map, ``linear`` for ``(batch, tokens,
    width)`` or ``(batch, width)``; an explicit ``family`` must fit the layout. Otherwise a :class:`UserError`."""
    found = LAYOUTS.get(len(shape))
    if family is not None:
        get_family(family)  # an unknown name: ValueError naming the known ones
    chosen = family or found
    fits = chosen == "conv3x3" and len(shape) == 4 or chosen == "linear" and len(shape) in (2, 3)
    if not fits:
        want = (
            "an NCHW feature map (batch, channels, height, width)" if chosen == "conv3x3" else "(batch, tokens, width)"
        )
        raise UserError(
            f"place {name}: its state has shape {tuple(shape)}, which the {chosen or 'no'} tangent family does not fit "
            f"(it needs {want if chosen else 'an NCHW map or (batch, tokens, width)'}); "
            "name modules whose input is the residual stream, or another family"
        )
    return chosen


def resolve_places(model: nn.Module, places) -> list[Place]:
    """``"auto"``: :func:`common.models.places.places_for`; a list of modules: :func:`places_of_modules`; a list of
    :class:`Place`: as given."""
    if isinstance(places, str):
        if places != "auto":
            raise UserError(f"places={places!r}: give 'auto' or a list of the model's blocks")
        return places_for(model)
    places = list(places)
    if not places:
        raise UserError("places is empty; give 'auto' or at least one of the model's blocks")
    if all(isinstance(p, Place) for p in places):
        return places
    return places_of_modules(model, places)


# ----------------------------------------------------------------------------- the guard rails
def zero_weight_modules(model: nn.Module) -> list[str]:
    """Names of the Linear and Conv layers whose weights are all zero (inserted zero-output blocks' ``V`` left out)."""
    skip = {id(m.terminal) for m in model.modules() if isinstance(m, ZeroOutputBlock)}
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear | nn.Conv1d | nn.Conv2d) and id(m) not in skip and not m.weight.detach().any()
    ]


def rank_flag(score: CandidateScore, rows: int) -> str | None:
    """``V_S,l = AG_l by rank`` when the tangent features' rank (their number, without the exact values) reaches the
    gradient rows: every gradient is then realisable and ``V_S,l`` says nothing beyond ``AG_l``."""
    k = score.tangent_dim or get_family(score.family).feature_dim(score.width)
    reach = score.tangent_rank if score.tangent_rank is not None else k
    if reach < rows:
        return None
    examples = k // max(score.rows_per_example, 1) + 1
    return (
        f"V_S,l = AG_l by rank: needs more rows (about {examples} examples; {rows} rows of {score.rows_per_example} per "
        f"example against {k} tangent features)"
    )


def zero_flag(score: CandidateScore, zero_layers: Sequence[str]) -> str | None:
    """All-zero gradients at a place, with the likely cause."""
    if score.ag_norm_pooled != 0.0:
        return None
    if zero_layers:
        return (
            f"all-zero gradients: {', '.join(zero_layers[:3])} has all-zero weights (a zero-initialised head, as "
            "torchvision's VisionTransformer has), so the loss does not depend on the state; load trained weights"
        )
    return "all-zero gradients: the loss does not depend on this state (a detached path, or dead activations after it)"


def normalisation_of(result: ProbeResult, per_batch: bool) -> str:
    """Which normalisation each number carries."""
    b, nb, n = result.batch_size, result.n_batches, result.n_examples
    pooled = f"pooled: ||dL_S/dz_l|| of the mean loss over all n = {n} examples"
    if not result.exact:
        return f"AG_l per batch mean (B.1: batch-mean loss, b = {b}, averaged over B = {nb} batches); AG_l {pooled}"
    v = f"V_S,l {pooled.split(': ', 1)[0]} (same normalisation as AG_l pooled, so V_S,l <= AG_l pooled)"
    extra = "; V_S,l per batch beside AG_l per batch" if per_batch else ""
    return f"AG_l per batch mean (B.1: b = {b}, B = {nb}) and AG_l {pooled}; {v}{extra}"


# ----------------------------------------------------------------------------- the result
@dataclass
class NetworkProbe:
    """:func:`probe_network`'s answer: the probe's :class:`ProbeResult` (``result``), the places probed, the guard
    rails (``flags``: per place, a list of sentences) and which normalisation each number carries."""

    result: ProbeResult
    places: list[Place]
    flags: list[list[str]]
    normalisation: str
    per_batch: bool = False
    wrapped: LogitsOf | None = field(default=None, repr=False)
    example: torch.Tensor | None = field(default=None, repr=False)  # one batch, for the insertion's reach check

    def records(self) -> list[dict]:
        """One row per place: name, ``AG_l`` (per batch mean and pooled), ``V_S,l`` (pooled; per batch with
        ``per_batch``), family, rows against tangent features, the flags."""
        rows = []
        for place, s, flags in zip(self.places, self.result.scores, self.flags, strict=True):
            row = {
                "place": place.name,
                "index": s.index,
                "head": place.head,
                "family": s.family,
                "width": s.width,
                "ag_norm": s.ag_norm,
                "ag_norm_pooled": s.ag_norm_pooled,
                "per_example_rms": s.per_example_rms,
                "growth_value_pooled": s.growth_value_pooled,
                "growth_fraction_pooled": s.growth_fraction_pooled,
                "rows": rows_of(s, self.result),
                "rows_per_example": s.rows_per_example,
                "tangent_dim": s.tangent_dim or get_family(s.family).feature_dim(s.width),
                "tangent_rank": s.tangent_rank,
                "flags": "; ".join(flags),
            }
            if self.per_batch:
                row["growth_value"] = s.growth_value
            if self.result.contributions:
                row |= {"cross_gradient_norm_pooled": s.cross_gradient_norm_pooled}
                row |= {"contribution_cov_trace": s.contribution_cov_trace}
            rows.append(row)
        return rows

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame(self.records())

    def ranking(self) -> list[dict]:
        """The records, the place where a block would help most first: by ``V_S,l`` (pooled) with the exact values,
        else by ``AG_l`` (pooled)."""
        key = "growth_value_pooled" if self.result.exact else "ag_norm_pooled"
        return sorted(self.records(), key=lambda r: -float(r[key]))

    def summary(self) -> dict:
        best = self.ranking()[0]
        return {
            **self.result.summary(),
            "places": len(self.places),
            "best_place": best["place"],
            "best_by": "V_S,l pooled" if self.result.exact else "AG_l pooled",
            "normalisation": self.normalisation,
            "flagged": {r["place"]: r["flags"] for r in self.records() if r["flags"]},
        }

    def insert(self, place: str | int, *, example: torch.Tensor | None = None) -> ZeroOutputBlock:
        """Grow the model at ``place`` (name or index) by the zero-output block whose ``V_S,l`` was reported (same
        family, width and ``U_l`` seed), in place; the forward pass on ``example`` (default: the first batch probed)
        must run it, else it is undone and refused (:class:`common.science.growth.InsertionNotReached`)."""
        i = place if isinstance(place, int) else [p.name for p in self.places].index(place)
        p, s = self.places[i], self.result.scores[i]
        if p.container is None:
            raise UserError(f"place {p.name}: no nn.Sequential or ModuleList to put a block in ({p.note})")
        x = self.example if example is None else example
        return insert_zero_block_into(
            self.wrapped.model,
            p.container,
            p.position,
            s.family,
            s.width,
            seed=self.result.seed,
            index=s.index,
            example=(lambda: self.wrapped(x)) if x is not None else None,
            where=f"place {p.name}",
        )


def rows_of(score: CandidateScore, result: ProbeResult) -> int:
    """Gradient rows behind the pooled values: the probe's count, else examples times rows per example."""
    rows = score.rows_pooled  # the exact probe's count (its n_rows too)
    return int(rows) if rows else result.n_examples * score.rows_per_example


# ----------------------------------------------------------------------------- the one call
def probe_network(
    model: nn.Module,
    batches: Iterable,
    places="auto",
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    exact: bool = True,
    per_batch: bool = False,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    family: str | None = None,
    contributions: bool = False,
    contribution_directions: list[torch.Tensor] | None = None,
) -> NetworkProbe:
    """``AG_l`` and ``V_S,l`` at every place of an unmodified ``model`` (module docstring).

    ``places``: ``"auto"`` (a registered rule), or a list of the model's modules (the input of each is a place).
    ``loss_fn``: on the logits and targets; default cross-entropy, next-token cross-entropy for dict batches.
    ``exact``: ``V_S,l`` pooled over every example (one factorisation per place); ``per_batch`` adds it per batch.
    ``seed`` fixes the zero-output blocks' ``U_l``; ``family`` forces one tangent family (it must fit every state);
    ``contributions`` (and ``contribution_directions``) add App. G's per-example statistics;
    ``progress``: called with one line of text per step of the probe.
    """
    pairs, tokens = as_pairs(batches)
    found = resolve_places(model, places)
    wrapped = LogitsOf(model, tokens, [p.module for p in found if not p.head])
    shapes = state_shapes(wrapped, found, pairs[0][0])
    candidates = [
        Candidate(i, p.name, p.module, family_of(p.name, s, family))
        for i, (p, s) in enumerate(zip(found, shapes, strict=True))
    ]
    if progress is not None:
        progress(f"probing {len(found)} places on {len(pairs)} batches ({'exact' if exact else 'AG_l only'})")
    result = probe_activation_gradients(
        wrapped,
        pairs,
        loss_fn=loss_fn or (next_token_loss if tokens else F.cross_entropy),
        exact=exact,
        seed=seed,
        candidates=candidates,
        exact_per_batch=per_batch,
        progress=progress,
        contributions=contributions,
        contribution_directions=contribution_directions,
    )
    zero_layers = zero_weight_modules(model)
    flags = [
        [f for f in (zero_flag(s, zero_layers), rank_flag(s, rows_of(s, result))) if f is not None]
        for s in result.scores
    ]
    return NetworkProbe(result, found, flags, normalisation_of(result, per_batch), per_batch, wrapped, pairs[0][0])
