"""The guard rails of :func:`common.models.probe_network.probe_network`: what a number at a place does not say, which
place is the best, which normalisation each number carries, and the check that an insertion keeps the function.

- :func:`rank_flag`: the tangent features' rank reaches the gradient rows, so ``V_S,l = AG_l`` by rank (then set
  equal, :func:`by_rank`: the two are the same norm, computed in float64 and in the model's dtype);
- :func:`zero_flag`: all-zero gradients, with the likely cause; :data:`RAW_INPUT`: a place that reads the model's
  own input, not a state it computed;
- :func:`best_place`: the first place of the ranking that no rail flags, or None with the reason;
- :func:`normalisation_of`: the sentence of the record, the loss's normalisation and ``V_S,l <= AG_l``'s tolerance;
- :class:`OutputsBefore`: the model's outputs on the probe batch before an insertion, compared after it (float64
  copies where the model runs in float64: equal bit for bit; else its own dtype within :data:`FLOAT32_RTOL`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from torch import nn

from common.errors import UserError
from common.science.activations import probe_mode
from common.science.probe import CandidateScore, ProbeResult
from common.science.tangent import ZeroOutputBlock, get_family

V_AG_RTOL = 1e-5  # V_S,l <= AG_l pooled (1 + V_AG_RTOL) at places not flagged by rank: AG_l's norms are summed in
# the model's dtype (float32: ~1e-7 relative measured, 2e-7 at most), V_S,l's statistics in float64
FLOAT32_RTOL = 1e-5  # an insertion checked in the model's own dtype: |after - before| <= FLOAT32_RTOL max |before|
RAW_INPUT = "the model's raw input, not a state of its residual stream: a block here would see the data itself"
NOT_BEST = {
    True: ("V_S,l = AG_l by rank", "all-zero gradients", "the model's raw input"),
    False: ("all-zero", "the model's raw input"),
}


def zero_weight_modules(model: nn.Module) -> list[str]:
    """Names of the Linear and Conv layers whose weights are all zero (inserted zero-output blocks' ``V`` left out)."""
    skip = {id(m.terminal) for m in model.modules() if isinstance(m, ZeroOutputBlock)}
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear | nn.Conv1d | nn.Conv2d) and id(m) not in skip and not m.weight.detach().any()
    ]


def rows_of(score: CandidateScore, result: ProbeResult) -> int:
    """Gradient rows behind the pooled values: the probe's count, else examples times rows per example."""
    rows = score.rows_pooled  # the exact probe's count (its n_rows too)
    return int(rows) if rows else result.n_examples * score.rows_per_example


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


def by_rank(result: ProbeResult) -> None:
    """At places whose features' rank reaches the rows, ``V_S,l`` pooled is ``AG_l`` pooled by definition (the
    projection onto everything): set equal, so that ``V_S,l <= AG_l`` holds as written there too."""
    for s in result.scores:
        if s.growth_value_pooled is not None and s.tangent_rank is not None and s.tangent_rank >= rows_of(s, result):
            s.growth_value_pooled, s.growth_fraction_pooled = s.ag_norm_pooled, 1.0


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


def best_place(records: list[dict], exact: bool) -> tuple[str | None, str]:
    """``(place, why)``: the first place of the ranking (``records``, best first) that no rail flags; in the
    ``AG_l``-only ranking a rank flag does not count (it is about ``V_S,l``). None with the reason when every place
    is flagged, or when the best has no first-order value."""
    key = "growth_value_pooled" if exact else "ag_norm_pooled"
    usable = [r for r in records if not any(f.strip().startswith(NOT_BEST[exact]) for f in r["flags"].split(";") if f)]
    if not usable:
        kinds = sorted({f.split(":")[0].strip() for r in records for f in r["flags"].split(";") if f})
        more = "probe more examples" if any("rank" in k for k in kinds) else "see the flags"
        return None, f"every place is flagged ({'; '.join(kinds)}): no place can be ranked; {more}"
    best = usable[0]
    if not best[key]:
        return None, f"no place has first-order value: {'V_S,l' if exact else 'AG_l'} = 0 at every place not flagged"
    skipped = [r["place"] for r in records[: records.index(best)]]
    return best["place"], f"rank {records.index(best) + 1}" + (f"; {', '.join(skipped)} flagged" if skipped else "")


def normalisation_of(result: ProbeResult, per_batch: bool, loss: str) -> str:
    """Which normalisation each number carries, how the loss normalises, and ``V_S,l <= AG_l``'s tolerance."""
    b, nb, n = result.batch_size, result.n_batches, result.n_examples
    pooled = f"pooled: ||dL_S/dz_l|| of the mean loss over all n = {n} examples"
    if not result.exact:
        return f"AG_l per batch mean (B.1: batch-mean loss, b = {b}, averaged over B = {nb} batches); AG_l {pooled}; {loss}"
    v = (
        f"V_S,l {pooled.split(': ', 1)[0]} (same normalisation as AG_l pooled: V_S,l = AG_l pooled where flagged by "
        f"rank, else V_S,l <= AG_l pooled (1 + {V_AG_RTOL:g}), AG_l's norms summed in the model's dtype)"
    )
    extra = "; V_S,l per batch beside AG_l per batch (same tolerance)" if per_batch else ""
    return f"AG_l per batch mean (B.1: b = {b}, B = {nb}) and AG_l {pooled}; {v}{extra}; {loss}"


class InsertionChangedFunction(UserError):
    """An inserted block changed the model's outputs on the probe batch (undone before this is raised)."""


class OutputsBefore:
    """The outputs of ``wrapped`` (``forward(x) -> logits``) on ``x`` before an insertion (module docstring);
    :meth:`check` compares them with the outputs after it and raises :class:`InsertionChangedFunction`."""

    def __init__(self, wrapped: nn.Module, x: torch.Tensor) -> None:
        self.wrapped, self.x = wrapped, x
        try:
            self.float64, self.before = True, self.run(True)
        except (RuntimeError, TypeError, NotImplementedError):  # a model that does not run in float64
            self.float64, self.before = False, self.run(False)

    def run(self, float64: bool) -> torch.Tensor:
        model, x = self.wrapped, self.x
        if float64:
            model = copy.deepcopy(model).to(torch.float64)
            x = x.to(torch.float64) if x.is_floating_point() else x
        with probe_mode(model), torch.no_grad():
            return model(x).detach()

    def check(self, where: str) -> None:
        after = self.run(self.float64)
        same = after.shape == self.before.shape
        diff = float((after - self.before).abs().max()) if same and after.numel() else (0.0 if same else math.inf)
        allowed = 0.0 if self.float64 else FLOAT32_RTOL * float(self.before.abs().max())
        if not diff <= allowed:
            how = "in float64 copies" if self.float64 else f"in {self.before.dtype}, allowed {allowed:.2g}"
            raise InsertionChangedFunction(
                f"the block inserted at {where} changes the model's outputs on the probe batch (max |diff| "
                f"{diff:.3g} {how}): its forward does not run that container as a sequence of z -> block(z); it was "
                "removed: insert where the forward runs each block once, in order"
            )
