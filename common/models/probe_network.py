"""Is my network deep enough? The paper's criterion on any PyTorch model, in one call (:func:`probe_network`).

``probe_network(model, batches)`` probes an unmodified model at every *place* of its residual stream (the input of
each residual block, and the state entering the head): ``AG_l``, the exact growth value ``V_S,l`` of the protocol's
zero-output block pooled over every example (docs/design.md, sections "Activation-gradient score AG_l" and "Exact
growth value V_S,l"), and with ``contributions=True`` App. G's per-example statistics. ``places="auto"`` asks the
registered rules of :mod:`common.models.places` (torchvision ResNets and ViTs, Hugging Face causal LMs); any other
model names its blocks (``places=[model.block1, ...]``, or module names and patterns, ``places="blocks.*"``: the
input of each is a place). The tangent family follows from the captured state's layout: an NCHW map is
``conv3x3``, ``(batch, tokens, width)`` or ``(batch, width)`` is ``linear``; a family that does not fit is refused.

Batches are ``(x, y)`` pairs (cross-entropy on ``model(x)``'s logits unless ``loss_fn``, which must be a mean over
the examples) or dicts as Hugging Face models take (``input_ids``, ``attention_mask``, ``labels``; no labels: the
input ids where the mask is 1), whose loss is next-token cross-entropy on the logits. The model is wrapped
(``forward(x) -> logits``), never modified: the probe's hooks are placed and removed, its modes and
``requires_grad`` flags restored.

Before anything is probed (:func:`prepare`), the batches, labels, dtypes, loss and places are checked
(:mod:`common.models.probe_network_checks`), one example goes through the model, and the peak memory is estimated
from the places' widths and the batches against what this process may use (:mod:`common.models.probe_network_plan`):
each mistake, and a probe that would not fit, is one :class:`UserError` line. Places with fewer gradient rows than
tangent features are solved in the rows x rows form, with no ``k x k`` Gram (:mod:`common.science.row_gram`).

The result (:class:`NetworkProbe`) holds today's :class:`common.science.probe.ProbeResult` and the guard rails
(:mod:`common.models.probe_network_rails`): a place whose tangent features reach the number of gradient rows
(``V_S,l = AG_l`` by rank, set equal there), all-zero gradients with their likely cause, a place reading the raw
input, the best unflagged place, and which normalisation each number carries. ``.records()`` and
``.to_dataframe()`` give one row per place; ``.insert(place)`` grows the model there by the zero-output block whose
``V_S,l`` was reported, checked to be run by the forward pass and to leave the outputs on the probe batch unchanged
(:func:`common.science.growth.insert_zero_block_into`), else undone and refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from common.errors import UserError
from common.models.candidates import Candidate
from common.models.places.registry import Place
from common.models.probe_network_checks import (
    IGNORE,
    PYTHON,
    Names,
    as_pairs,
    check_batches,
    check_labels,
    finite_loss,
    loss_normalisation,
)
from common.models.probe_network_plan import (
    check_memory,
    family_of,
    gb,
    measure,
    place_sizes,
    resolve_places,
    skip_connections,
)
from common.models.probe_network_rails import (
    RAW_INPUT,
    OutputsBefore,
    best_place,
    by_rank,
    normalisation_of,
    rank_flag,
    rows_of,
    zero_flag,
    zero_weight_modules,
)
from common.science.growth import insert_zero_block_into
from common.science.probe import ProbeResult, probe_activation_gradients
from common.science.tangent import ZeroOutputBlock, get_family

log = logging.getLogger(__name__)


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


# ----------------------------------------------------------------------------- before the probe
@dataclass
class Prepared:
    """What :func:`prepare` checked and measured: the batches as pairs, the places and their candidates, the wrapped
    model, the loss and its normalisation, per-place flags and warnings found before probing, the estimated peak."""

    pairs: list[tuple[torch.Tensor, torch.Tensor]]
    tokens: bool
    places: list[Place]
    wrapped: LogitsOf
    candidates: list[Candidate]
    loss_fn: Callable
    loss_note: str
    flags: list[list[str]]
    warnings: list[str]
    memory_bytes: int


def loss_check(tokens: bool, loss_fn, names: Names) -> tuple[Callable, Callable, list[str]]:
    """``(loss, check, note)``: the loss, the check of the first examples' logits and labels before it is taken
    (labels for the defaults, :func:`common.models.probe_network_checks.check_labels`; a given ``loss_fn``'s
    normalisation, :func:`common.models.probe_network_checks.loss_normalisation`), and the sentence on its
    normalisation (filled by the check)."""
    if loss_fn is None:
        note = (
            ["loss: next-token cross-entropy, mean over the tokens"]
            if tokens
            else ["loss: cross-entropy, mean over the batch's examples"]
        )
        return (next_token_loss if tokens else F.cross_entropy), lambda logits, y: None, note
    note = []

    def check(logits: torch.Tensor, y: torch.Tensor) -> None:
        try:
            note.append(loss_normalisation(logits, y, loss_fn, names))
        except UserError:
            raise
        except Exception as exc:
            text = " ".join(str(exc).split())[:300]
            raise UserError(f"loss_fn(logits, y) fails on {names.batch(0)} ({type(exc).__name__}: {text})") from None

    return loss_fn, check, note


def prepare(
    model: nn.Module,
    batches: Iterable,
    places="auto",
    *,
    loss_fn: Callable | None = None,
    family: str | None = None,
    names: Names = PYTHON,
    **modes,
) -> Prepared:
    """Everything :func:`probe_network` checks before it probes (modules :mod:`common.models.probe_network_checks`
    and :mod:`common.models.probe_network_plan`), each mistake one :class:`UserError` line; ``modes``: ``exact``,
    ``contributions``, ``direction`` (for the memory estimate)."""
    pairs, tokens = as_pairs(batches, names)
    check_batches(pairs, tokens, model, names)
    found = resolve_places(model, places, names)
    wrapped = LogitsOf(model, tokens, [p.module for p in found if not p.head])
    x0, y0 = pairs[0]
    loss, check, note = loss_check(tokens, loss_fn, names)

    def on_logits(logits: torch.Tensor, y: torch.Tensor) -> None:
        if loss_fn is None:
            check_labels(pairs, tokens, (1, *logits.shape[1:]), names)
        check(logits, y)

    measured = measure(wrapped, found, x0, y0, loss, names, on_logits)
    families = [
        family_of(p.name, s, t, family) for p, s, t in zip(found, measured.shapes, measured.dtypes, strict=True)
    ]
    candidates = [Candidate(i, p.name, p.module, f) for i, (p, f) in enumerate(zip(found, families, strict=True))]
    named = not (isinstance(places, str) and places == "auto")  # a rule's places are residual states by its family
    skip, raw = skip_connections(wrapped, found, x0[:1]) if named else ([None] * len(found), [False] * len(found))
    flags = [[RAW_INPUT] if r else [] for r in raw]
    warnings = [f"{p.name} reads {RAW_INPUT}" for p, r in zip(found, raw, strict=True) if r]
    blocks = [s for p, s in zip(found, skip, strict=True) if not p.head]
    if blocks and all(s is False for s in blocks):
        warnings.append(
            "none of the places is the input of a module that adds its input to its output (z + f(z)): the model "
            "looks like it has no residual connections there, and V_S,l asks what a new residual block would add"
        )
    pass_examples = max(int(x.shape[0]) for x, _ in pairs)
    sizes = place_sizes(found, measured, families, sum(int(x.shape[0]) for x, _ in pairs), pass_examples)
    memory = check_memory(sizes, measured, pass_examples, x0.device, names, **modes)
    return Prepared(pairs, tokens, found, wrapped, candidates, loss, note[0], flags, warnings, memory)


# ----------------------------------------------------------------------------- the result
@dataclass
class NetworkProbe:
    """:func:`probe_network`'s answer: the probe's :class:`ProbeResult` (``result``), the places probed, the guard
    rails (``flags``: per place, a list of sentences), which normalisation each number carries, the warnings and the
    estimated peak memory."""

    result: ProbeResult
    places: list[Place]
    flags: list[list[str]]
    normalisation: str
    per_batch: bool = False
    wrapped: LogitsOf | None = field(default=None, repr=False)
    example: torch.Tensor | None = field(default=None, repr=False)  # one batch, for the insertion's checks
    warnings: list[str] = field(default_factory=list)
    memory_bytes: int | None = None

    def records(self) -> list[dict]:
        """One row per place: name, ``AG_l`` (per batch mean and pooled), ``V_S,l`` (pooled; per batch with
        ``per_batch``), family, rows against tangent features, the pooled route, the flags."""
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
                "route": s.pooled_route,
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
        """The probe's summary with the best place (the best unflagged one, or None and why:
        :func:`common.models.probe_network_rails.best_place`), the normalisation, the flags and the warnings."""
        best, why = best_place(self.ranking(), self.result.exact)
        return {
            **self.result.summary(),
            "places": len(self.places),
            "best_place": best,
            "best_place_reason": why,
            "best_by": "V_S,l pooled" if self.result.exact else "AG_l pooled",
            "normalisation": self.normalisation,
            "flagged": {r["place"]: r["flags"] for r in self.records() if r["flags"]},
            "warnings": list(self.warnings),
            "memory_estimate_bytes": self.memory_bytes,
        }

    def insert(self, place: str | int, *, example: torch.Tensor | None = None) -> ZeroOutputBlock:
        """Grow the model at ``place`` (name or index) by the zero-output block whose ``V_S,l`` was reported (same
        family, width and ``U_l`` seed), in place. On ``example`` (default: the first batch probed) the forward pass
        must run it (else :class:`common.science.growth.InsertionNotReached`) and the model's outputs must be those
        before (float64 copies, bit for bit, where the model runs in float64; else its dtype within
        :data:`common.models.probe_network_rails.FLOAT32_RTOL`), else
        :class:`common.models.probe_network_rails.InsertionChangedFunction`; either way the block is removed first."""
        names = [p.name for p in self.places]
        if not isinstance(place, int) and place not in names:
            raise UserError(f"place {place!r} was not probed; give one of {', '.join(names)}")
        i = place if isinstance(place, int) else names.index(place)
        p, s = self.places[i], self.result.scores[i]
        if p.container is None:
            raise UserError(f"place {p.name}: no nn.Sequential or ModuleList to put a block in ({p.note})")
        x = self.example if example is None else example
        before = OutputsBefore(self.wrapped, x) if x is not None else None
        where = f"place {p.name}"
        return insert_zero_block_into(
            self.wrapped.model,
            p.container,
            p.position,
            s.family,
            s.width,
            seed=self.result.seed,
            index=s.index,
            example=(lambda: self.wrapped(x)) if x is not None else None,
            where=where,
            verify=(lambda: before.check(where)) if before is not None else None,
        )


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
    names: Names = PYTHON,
) -> NetworkProbe:
    """``AG_l`` and ``V_S,l`` at every place of an unmodified ``model`` (module docstring).

    ``places``: ``"auto"`` (a registered rule), module names or patterns (``"blocks.*"``, ``["blocks.0", ...]``), or
    the model's modules (the input of each is a place). ``loss_fn``: on the logits and targets, a mean over the
    examples (a sum is refused); default cross-entropy, next-token cross-entropy for dict batches.
    ``exact``: ``V_S,l`` pooled over every example (one factorisation per place); ``per_batch`` adds it per batch.
    ``seed`` fixes the zero-output blocks' ``U_l``; ``family`` forces one tangent family (it must fit every state);
    ``contributions`` (and ``contribution_directions``) add App. G's per-example statistics;
    ``progress``: called with one line of text per step of the probe; ``names``: how refusals name the arguments
    (:class:`common.models.probe_network_checks.Names`; script 11 passes its flags).
    """
    direction = contribution_directions is not None
    prep = prepare(
        model, batches, places, loss_fn=loss_fn, family=family, names=names, exact=exact,
        contributions=contributions, direction=direction,
    )  # fmt: skip
    for line in prep.warnings:
        log.warning("probe_network: %s", line)
    if progress is not None:
        progress(
            f"probing {len(prep.places)} places on {len(prep.pairs)} batches ({'exact' if exact else 'AG_l only'}; "
            f"about {gb(prep.memory_bytes)} at the peak, estimated)"
        )
    result = probe_activation_gradients(
        prep.wrapped,
        prep.pairs,
        loss_fn=finite_loss(prep.loss_fn, names),
        exact=exact,
        seed=seed,
        candidates=prep.candidates,
        exact_per_batch=per_batch,
        progress=progress,
        contributions=contributions,
        contribution_directions=contribution_directions,
        rows_form=True,
    )
    by_rank(result)
    normalisation = normalisation_of(result, per_batch, prep.loss_note)
    flags = flags_of(result, prep.flags, zero_weight_modules(model))
    return NetworkProbe(result, prep.places, flags, normalisation, per_batch, prep.wrapped, prep.pairs[0][0], prep.warnings, prep.memory_bytes)  # fmt: skip


def flags_of(result: ProbeResult, before: list[list[str]], zero_layers: list[str]) -> list[list[str]]:
    """Per place: the flags found before probing (the raw input), all-zero gradients, ``V_S,l = AG_l`` by rank."""
    return [
        [*extra, *(f for f in (zero_flag(s, zero_layers), rank_flag(s, rows_of(s, result))) if f is not None)]
        for s, extra in zip(result.scores, before, strict=True)
    ]
