"""Activation-gradient scores at every insertion candidate: one forward, one backward (B.1; docs/design.md).

For analysis batch ``b`` with batch-mean loss ``L_b``, :func:`common.science.activations.activation_gradients`
captures ``z_l`` and ``G_l = dL_b/dz_l`` at every candidate ``l`` (the input of ``candidate.module``,
read by a forward pre-hook) in one forward and one backward pass (``torch.autograd.grad`` on
the captured states, no full-backward module hooks). Parameters are frozen for the pass: the
backward computes input gradients only, from the loss down to the first candidate (whose state
is made a leaf that requires grad), never a parameter gradient.

:func:`probe_activation_gradients` turns B batches into, per candidate,

- ``ag_norm``: ``AG_l``, the Frobenius norm of the whole ``dL_b/dz_l`` (flattened per batch), averaged over the B
  batches (B.1). Under the batch-mean loss it scales like ``1 / sqrt(batch size)``: batch size and B are stored too;
- ``ag_norm_normalised``: ``AG~_l = AG_l / sqrt(d)``, ``d`` = coordinates of ``z_l`` per row
  unit (channels of a feature map, width of a token): descriptive only (App. A);
- ``per_example_rms``: ``sqrt(mean_i ||d loss_i / d z_l,i||^2)`` over all probed examples, with
  ``d loss_i / d z_l,i = b * (row i of dL_b/dz_l)``: exact when examples do not interact (eval-mode
  BatchNorm); in train mode it is the batch-gradient row rescaled;
- ``ag_norm_pooled``: ``||dL_S/dz_l||_F`` for ``S`` = all probed examples, ``L_S`` their mean loss
  (``= per_example_rms / sqrt(n)``), the normalisation of the pooled exact values below;
- ``block_input``: False for the tensor entering the head (the last candidate, not in ``model.blocks``), True for
  the input of a residual block;

:func:`ag_maxima` reads AGmax from these in the three readings the paper's words allow
(docs/decisions.md): ``ag_max`` (batch-mean ``AG_l``), ``ag_max_per_example`` (per-example
RMS; ``ag_max ~ ag_max_per_example / sqrt(batch size)``) and ``ag_max_blocks`` (``AG_l`` over
block inputs only, the head's input left out), each with the candidate attaining it.

With ``contributions=True`` (App. G, no Gram matrix or eigendecomposition), per candidate the
per-example contributions ``c_i(l) = Psi_i^T g_i`` (``Psi_i`` the tangent-feature rows of
example ``i``, ``g_i = b * (its rows of dL_b/dz_l)`` its own loss gradient, exact in eval-mode
BatchNorm; :func:`common.science.gram.example_contributions`) stream into
:class:`common.science.projection.ContributionMoments`:

- ``cross_gradient_norm_pooled``: ``||C_l||`` with ``C_l = mean_i c_i(l)``, the gradient of the
  mean loss over all probed examples w.r.t. ``V_l`` at 0 (Theorem 3's statistic);
- ``contribution_cov_trace``: ``tr(Sigma_hat_l)``, the traced sample covariance of ``c_i(l)``;
- ``contribution_norm_sq``: ``U_l = ||C_l||^2 - tr(Sigma_hat_l) / n``, unbiased for the population ``||C_l||^2``,
  and ``contribution_cov_sq_trace``, an unbiased ``tr(Sigma_l^2)`` (App. G's asymptotic interval);
- with ``contribution_directions`` (one ``k x d`` tensor per candidate, e.g. an independent sample's
  ``C_l``), ``contribution_direction_variance``: the variance of ``<c_i(l), direction_l>``;

and with ``exact=True`` the tangent-space quantities of :mod:`common.science.projection` for the
protocol's standard zero-output block (:mod:`common.science.tangent`, ``U_l`` seeded by ``(seed, l)``):

- ``growth_value``: ``V_S,l`` on each analysis batch (``S`` = that batch, same normalisation as ``AG_l``, so
  ``growth_value <= ag_norm``), averaged over the batches; ``cross_gradient_norm`` likewise ``||C_l||_F``;
- ``growth_value_pooled`` / ``cross_gradient_norm_pooled``: the same on the pooled sample ``S``
  (Gram statistics streamed over all batches, :mod:`common.science.gram`), with ``growth_fraction_pooled =
  V_S,l / ||G_S||_F`` in ``[0, 1]`` (1 under realizability), ``tangent_dim`` k and ``tangent_rank``.

Options of :func:`probe_activation_gradients` beyond the modes:

- ``sub_batch``: each analysis batch of ``b`` examples as passes over sub-batches of ``sub_batch`` (memory:
  activations of ``sub_batch`` examples, not ``b``), each loss weighted ``s / b``, so its rows of ``dL_b/dz_l`` come
  out as in one pass (the examples do not interact: a decoder, or eval-mode BatchNorm): every score is the batch's;
- ``contribution_directions`` (with ``contributions``): per candidate a fixed ``k x d`` direction along which the
  variance of ``c_i(l)`` is streamed (App. G's asymptotic interval: the calibration part's ``C_l``,
  :attr:`ProbeResult.cross_gradients`);
- ``candidates``: the candidates to probe (objects with ``index``, ``name``, ``module``, ``family``, like
  :class:`common.models.candidates.Candidate`), default ``model.candidates()``: a model without that method (an
  unmodified network) is probed at candidates built outside it (``block_input``: :func:`block_input_flags`);
- ``exact_per_batch`` (with ``exact``): True (default) gives ``V_S,l`` per batch (one eigendecomposition per batch
  and candidate) and pooled; False streams only the pooled Gram statistics (the same sums, merged in the same order)
  and factorises each candidate's once (:func:`common.science.pooled_solve.solve_pooled`: Cholesky or pivoted
  Cholesky where the rank they give is certified to be the tolerance's, else the same eigendecomposition):
  ``growth_value`` and ``cross_gradient_norm`` are then None, :attr:`ProbeResult.exact_normalisation` is ``"pooled"`` (the default's
  ``"per_batch_and_pooled"``), and each score carries ``n_rows`` (rows in the pooled statistics: examples x
  positions, examples x tokens), ``pooled_route`` and ``gram_condition_bound``, in ``records()`` too
  (``tangent_dim`` k and ``tangent_rank`` as before: ``tangent_rank = n_rows < k`` means ``V_S,l = AG_l`` by rank);
- ``progress``: called with a short line per batch and per factorised candidate, with an estimate of the time left
  (:class:`common.science.pooled_solve.ProgressLines`); None (default) prints nothing;
- ``rows_form`` (with ``exact``): a candidate with fewer pooled rows than ``k`` keeps its rows and factorises
  ``K = Psi Psi^T`` (n x n) instead of the ``k x k`` Gram (:mod:`common.science.row_gram`; the same value and rank).

BatchNorm runs in eval mode (running statistics) unless ``bn_mode="train"``; train mode uses
batch statistics and the running buffers are restored afterwards.

Precision: the probe runs under :func:`common.science.precision.full_precision` (TF32, and an Ascend NPU's HF32, off for
float32 matrix products and convolutions, restored afterwards), because TF32, which cuDNN convolutions use by default
on Ampere and later GPUs, and HF32, which torch_npu allows for convolutions by default, compute ``z``, ``G`` and
``Psi`` to only ~1e-3 relative precision. The math mode it ran in (:func:`common.science.precision.math_mode`) and the device
of its float64 statistics (:func:`common.science.precision.float64_device`: the CPU for MPS and NPU) are part of the result.

One shared pass (:func:`common.science.activations.sub_batch_passes`, by sub-batches with ``sub_batch``) feeds each
candidate's sums, whose ``exact`` and ``contributions`` modes (``_CandidateSums.add_exact``, ``add_contributions``)
read the same states.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from common.science.activations import LossFn, probe_mode, sub_batch_passes
from common.science.gram import CHUNK_ELEMENTS, example_contributions, tangent_gram
from common.science.pooled_solve import ProgressLines, solve_pooled
from common.science.precision import float64_device, full_precision
from common.science.projection import ContributionMoments
from common.science.row_gram import merge_grams
from common.science.tangent import candidate_family, make_zero_block


# ----------------------------------------------------------------------------- scores
@dataclass
class CandidateScore:
    """Scores of candidate ``index`` (``name``) over the probed batches (see the module docstring)."""

    index: int
    name: str
    family: str
    width: int  # d: coordinates of z_l per row unit
    rows_per_example: int
    block_input: bool  # False for the tensor entering the head
    ag_norm: float  # AG_l
    ag_norm_normalised: float  # AG~_l
    per_example_rms: float
    ag_norm_pooled: float
    growth_value: float | None = None  # V_S,l per batch, averaged
    cross_gradient_norm: float | None = None  # ||C_l||_F per batch, averaged
    growth_value_pooled: float | None = None
    cross_gradient_norm_pooled: float | None = None
    growth_fraction_pooled: float | None = None
    tangent_dim: int | None = None
    tangent_rank: int | None = None
    rows_pooled: int | None = None
    contribution_cov_trace: float | None = None  # tr(Sigma_hat_l) of c_i(l), with contributions=True
    contribution_norm_sq: float | None = None  # U_l = ||C_l||^2 - tr(Sigma_hat_l) / n, with contributions=True
    contribution_cov_sq_trace: float | None = None  # unbiased tr(Sigma_l^2), with contributions=True (n >= 4)
    contribution_direction_variance: float | None = None  # Var <c_i(l), direction_l>, with contribution_directions
    # With exact=True: rows in the pooled statistics (= rows_pooled); with exact_per_batch=False also the pooled
    # solver's route and certificate (common.science.pooled_solve). In records() only with exact_per_batch=False.
    n_rows: int | None = None
    pooled_route: str | None = None
    gram_condition_bound: float | None = None


POOLED_ONLY_FIELDS = ("n_rows", "pooled_route", "gram_condition_bound")  # records() of the pooled-only mode only


def ag_maxima(rows: Iterable[Mapping]) -> dict:
    """AGmax in its three readings, each with the candidate attaining it (docs/decisions.md).

    ``rows``: one mapping per candidate with ``name``, ``ag_norm``, ``per_example_rms`` and
    ``block_input`` (:class:`CandidateScore` fields, or the rows of a ``candidates.csv``).
    ``ag_max_blocks`` leaves out the tensor entering the head (None when no row is a block input).
    """
    rows = list(rows)
    if not rows:
        raise ValueError("ag_maxima needs at least one candidate")
    blocks = [r for r in rows if bool(r["block_input"])]
    out = {}
    for key, column, among in (
        ("ag_max", "ag_norm", rows),
        ("ag_max_per_example", "per_example_rms", rows),
        ("ag_max_blocks", "ag_norm", blocks),
    ):
        best = max(among, key=lambda r: float(r[column])) if among else None
        out[key] = float(best[column]) if best is not None else None
        out[f"{key}_candidate"] = str(best["name"]) if best is not None else None
    return out


@dataclass
class ProbeResult:
    """Per-candidate scores of one model over B analysis batches, and how they were measured."""

    scores: list[CandidateScore]
    batch_size: int
    n_batches: int
    n_examples: int
    bn_mode: str
    exact: bool
    mean_loss: float
    seed: int
    contributions: bool = False
    math_mode: dict = field(
        default_factory=dict
    )  # float32 math inside the probe (:func:`common.science.precision.math_mode`)
    float64_device: str = "cpu"  # where the float64 statistics ran (:func:`common.science.precision.float64_device`)
    sub_batch: int | None = None  # examples per forward/backward pass (None: the whole batch); scores are alike
    cross_gradients: list[torch.Tensor] | None = field(default=None, repr=False)  # C_l (k x d), with contributions
    # With exact: "per_batch_and_pooled" (exact_per_batch=True) or "pooled" (growth_value per batch None)
    exact_normalisation: str | None = None

    @property
    def pooled_only(self) -> bool:
        return self.exact_normalisation == "pooled"

    @property
    def ag_max(self) -> float:
        """``AGmax = max_l AG_l``."""
        return max(s.ag_norm for s in self.scores)

    @property
    def ag_max_score(self) -> CandidateScore:
        return max(self.scores, key=lambda s: s.ag_norm)

    @property
    def growth_value_max(self) -> float | None:
        """``V_S,max = max_l V_S,l`` (per-batch normalisation, comparable with ``AGmax``; None when pooled only)."""
        return max(s.growth_value for s in self.scores) if self.exact and not self.pooled_only else None

    def summary(self) -> dict:
        best = self.ag_max_score
        out = {
            **ag_maxima(asdict(s) for s in self.scores),
            "ag_max_index": best.index,
            "batch_size": self.batch_size,
            "n_batches": self.n_batches,
            "n_examples": self.n_examples,
            "bn_mode": self.bn_mode,
            "exact": self.exact,
            "mean_loss": self.mean_loss,
            "math_mode": self.math_mode,
            "float64_device": self.float64_device,
        }
        if self.sub_batch is not None:
            out["sub_batch"] = self.sub_batch
        if self.pooled_only:  # no per-batch V_S,l: the pooled maximum and its candidate
            pbest = max(self.scores, key=lambda s: s.growth_value_pooled)
            out.update(exact_normalisation=self.exact_normalisation, v_max=None, v_max_candidate=None)
            out.update(v_max_pooled=pbest.growth_value_pooled, v_max_pooled_candidate=pbest.name)
        elif self.exact:  # record keys v_max*: V_S,max, as ag_max is AGmax
            vbest = max(self.scores, key=lambda s: s.growth_value)
            out.update(
                v_max=self.growth_value_max,
                v_max_candidate=vbest.name,
                v_max_pooled=max(s.growth_value_pooled for s in self.scores),
            )
        return out

    def records(self) -> list[dict]:
        """One plain dict per candidate, with how it was measured (batch size, B, BN mode)."""
        measured = {
            "batch_size": self.batch_size,
            "n_batches": self.n_batches,
            "bn_mode": self.bn_mode,
            "exact": self.exact,
        }
        if self.pooled_only:
            return [{**asdict(s), **measured, "exact_normalisation": self.exact_normalisation} for s in self.scores]
        return [{**_without(asdict(s), POOLED_ONLY_FIELDS), **measured} for s in self.scores]


def _without(row: dict, keys: Iterable[str]) -> dict:
    for key in keys:
        row.pop(key, None)
    return row


# ----------------------------------------------------------------------------- the shared pass and its modes
class _CandidateSums:
    """One candidate's sums over the probed batches: ``AG_l`` and the per-example norms (every probe), with ``exact``
    the tangent regression's Gram statistics (:meth:`add_exact`), with ``contributions`` the per-example ``c_i(l)``
    (:meth:`add_contributions`); both on the protocol's zero-output block, made on first use."""

    def __init__(self, candidate, family, seed: int, bn_mode: str, exact, contributions: bool, direction, chunk, rows):
        self.candidate, self.fam = candidate, candidate_family(candidate, family)
        self.direction, self.chunk, self.rows_form = direction, chunk, rows
        self.seed, self.bn_mode, self.contributions = seed, bn_mode, contributions
        self.exact, self.per_batch = bool(exact), exact != "pooled"  # exact: False, True or "pooled" (pooled only)
        self.shape = self.block = self.gram = self.pooled = self.moments = None  # gram: this batch's; pooled: all's
        self.grad_sq = self.ag_sum = self.example_sq = self.growth_value_sum = self.cross_gradient_sum = 0.0

    def add(self, z: torch.Tensor, g: torch.Tensor, b: int, f64: torch.device) -> None:
        """One sub-batch: its states ``z`` and its rows ``g`` of ``dL_b/dz_l``, of a batch of ``b`` examples."""
        self.fam.check_state(z, self.candidate.name)  # before width reads an axis of a wrong layout
        width = self.fam.width(z)
        self.shape = self.shape or (width, self.fam.rows_per_example(z))
        # Per-example norms in g's dtype (cascade-summed; ~1e-7 relative in float32), then float64.
        self.grad_sq += float(torch.linalg.vector_norm(g.reshape(len(g), -1), dim=1).to(f64).double().square().sum())
        if (self.exact or self.contributions) and self.block is None:
            self.block = make_zero_block(self.fam.name, width, self.seed, self.candidate.index, like=z)
            self.block.train(self.bn_mode == "train")
            self.block.terminal = None  # V_l = 0 takes no part in the probe (psi does): its k x d weights not kept
        if self.contributions:
            self.add_contributions(z, g, b, f64)
        if self.exact:
            self.add_exact(z, g)

    def add_contributions(self, z: torch.Tensor, g: torch.Tensor, b: int, f64: torch.device) -> None:
        """The ``contributions`` mode: ``c_i(l) = Psi_i^T (b G_i)`` of the sub-batch's examples into the moments."""
        if self.moments is None:
            width = self.fam.width(z)
            self.moments = ContributionMoments(self.fam.feature_dim(width), width, device=f64, direction=self.direction)
        for c_i in example_contributions(self.block, self.fam, z, g, b, self.chunk):
            self.moments.update(c_i)

    def add_exact(self, z: torch.Tensor, g: torch.Tensor) -> None:
        """The ``exact`` mode: ``P = Psi^T Psi`` and ``X = Psi^T G`` of the sub-batch, merged into its batch's."""
        acc = tangent_gram(self.block, self.fam, z, g, self.chunk, self.rows_form)
        self.gram = acc if self.gram is None else merge_grams(self.gram, acc)

    def end_batch(self, b: int) -> None:
        self.ag_sum += math.sqrt(self.grad_sq)  # ||dL_b/dz_l||_F
        self.example_sq += self.grad_sq * b * b  # sum_i ||d loss_i/dz_l,i||^2
        self.grad_sq = 0.0
        if self.gram is None:
            return
        if self.per_batch:  # an eigendecomposition per batch; the pooled-only mode factorises once, at the end
            self.growth_value_sum += self.gram.growth_value()
            self.cross_gradient_sum += self.gram.cross_gradient_norm()
        # Rows of dL_S/dz are (b / n) dL_b/dz: scale by b now, by 1/n at the end.
        if self.pooled is None:
            self.pooled = self.gram.scale_(b)  # keeps the eigendecomposition: free with one batch
        else:
            self.pooled = merge_grams(self.pooled, self.gram, grad_scale=b)
        self.gram = None

    def score(self, n: int, nb: int, block_input: bool) -> CandidateScore:
        c, (width, rows), ag, rms = self.candidate, self.shape, self.ag_sum / nb, math.sqrt(self.example_sq / n)
        s = CandidateScore(
            c.index, c.name, self.fam.name, width, rows, block_input, ag, ag / math.sqrt(width), rms, 0.0
        )
        s.ag_norm_pooled = rms / math.sqrt(n)
        if self.exact:
            self.score_exact(s, n, nb)
        if self.contributions:  # with exact too, the pooled ||C_l|| is the contributions'
            m = self.moments
            s.cross_gradient_norm_pooled = m.cross_gradient_norm()
            s.contribution_cov_trace = m.covariance_trace() if n > 1 else None
            s.contribution_norm_sq = m.norm_sq_unbiased() if n > 1 else None
            s.contribution_cov_sq_trace = m.covariance_square_trace() if n > 3 else None
            if self.direction is not None and n > 1:
                s.contribution_direction_variance = m.direction_variance()
        return s

    def score_exact(self, s: CandidateScore, n: int, nb: int) -> None:
        """The exact fields of ``s``: ``V_S,l`` per batch (averaged; not in the pooled-only mode) and pooled,
        ``||C_l||``, ``tangent_dim`` k, ``tangent_rank`` and the pooled rows. The pooled ``V_S,l`` by the
        accumulator's eigendecomposition (per-batch mode, as it always was) or by :func:`solve_pooled` (pooled only:
        Cholesky or pivoted Cholesky where their rank is certified, else the same eigendecomposition)."""
        pooled = self.pooled.scale_(1.0 / n)
        if self.per_batch:
            vp, rank = pooled.growth_value(), pooled.rank()
            s.growth_value, s.cross_gradient_norm = self.growth_value_sum / nb, self.cross_gradient_sum / nb
        else:
            solved = solve_pooled(pooled)
            vp, rank = solved.value, solved.rank
            s.pooled_route, s.gram_condition_bound = solved.route, solved.condition_bound
        gp = pooled.grad_norm()
        s.growth_value_pooled, s.cross_gradient_norm_pooled = vp, pooled.cross_gradient_norm()
        s.growth_fraction_pooled = vp / gp if gp > 0 else 0.0
        s.tangent_dim, s.tangent_rank, s.rows_pooled, s.n_rows = pooled.k, rank, pooled.rows, pooled.rows


def _candidate_sums(
    model: nn.Module,
    family: str | None,
    seed: int,
    bn_mode: str,
    chunk: int,
    *,
    sub_batch: int | None,
    exact,
    contributions: bool,
    directions: list[torch.Tensor] | None,
    candidates: list | None,
    rows_form: bool = False,
) -> list[_CandidateSums]:
    """The options of :func:`probe_activation_gradients` checked, then one :class:`_CandidateSums` per candidate
    (``candidates``, default ``model.candidates()``), each with its entry of ``directions`` (the probe's
    ``contribution_directions``; None: none). ``exact``: False, True, or "pooled" for the pooled-only mode."""
    if directions is not None and not contributions:
        raise ValueError("contribution_directions need contributions=True")
    if sub_batch is not None and bn_mode != "eval":
        raise ValueError("sub-batches need examples that do not interact (train-mode BatchNorm): use bn_mode='eval'")
    candidates = list(candidates) if candidates is not None else model.candidates()
    directions = directions or [None] * len(candidates)
    return [
        _CandidateSums(c, family, seed, bn_mode, exact, contributions, d, chunk, rows_form)
        for c, d in zip(candidates, directions, strict=True)
    ]


def block_input_flags(model: nn.Module, candidates: list) -> list[bool]:
    """Per candidate: True for the input of a residual block, False for the tensor entering the head.

    A model with ``blocks`` (every model of this repository): the candidates whose module is one of them. A model
    without (an unmodified network probed through ``candidates=``): the candidate's own ``block_input`` where it has
    one, else True for all but the last candidate."""
    if hasattr(model, "blocks"):
        block_modules = {id(m) for m in model.blocks}
        return [id(c.module) in block_modules for c in candidates]
    return [bool(getattr(c, "block_input", i < len(candidates) - 1)) for i, c in enumerate(candidates)]


def _scores(sums: list[_CandidateSums], n: int, nb: int, flags: list[bool], lines: ProgressLines):
    """Each candidate's :class:`CandidateScore` (the exact modes factorise its pooled Gram here), one progress line
    per factorised candidate."""
    lines.start_factorising([min(s.pooled.k, s.pooled.rows) if s.pooled is not None else 0 for s in sums])
    scores = []
    for position, (s, flag) in enumerate(zip(sums, flags, strict=True)):
        start = time.perf_counter()
        score = s.score(n, nb, flag)
        s.pooled = None  # its statistics are done with: their memory back before the next factorisation
        route = score.pooled_route or "eigh"
        lines.candidate_done(
            position, score.name, score.tangent_dim or 0, score.n_rows or 0, route, time.perf_counter() - start
        )
        scores.append(score)
    return scores


def _probe_batch(model, x, y, loss_fn: LossFn, sub_batch: int | None, sums: list[_CandidateSums], f64) -> float:
    """The shared pass over one analysis batch: each sub-batch's states and rows of ``dL_b/dz_l`` at every candidate
    into that candidate's sums, dropped before the next sub-batch's forward; returns ``L_b``."""
    b, batch_loss = int(x.shape[0]), 0.0
    one_pass = sub_batch is None or sub_batch >= b  # then each candidate's batch is pooled at once (one batch Gram)
    for loss, states, grads in sub_batch_passes(model, x, y, loss_fn, [s.candidate for s in sums], sub_batch):
        batch_loss += float(loss)
        for candidate, z, g in zip(sums, states, grads, strict=True):  # g: these examples' rows of dL_b/dz_l
            candidate.add(z, g, b, f64)
            if one_pass:
                candidate.end_batch(b)
        del states, grads, z, g  # this sub-batch's activations and gradients, before the next forward
    for candidate in sums if not one_pass else ():
        candidate.end_batch(b)
    return batch_loss


def _probe_batches(model, batches, loss_fn: LossFn, bn_mode: str, sub_batch, sums, lines: ProgressLines):
    """Every analysis batch through :func:`_probe_batch` in probe mode at full precision: the batch sizes, the losses
    ``L_b``, the float64 device and the math mode; one progress line per batch."""
    sizes, losses, f64 = [], [], torch.device("cpu")
    with probe_mode(model, bn_mode), full_precision() as mode:
        for x, y in batches:
            f64 = float64_device(x.device)
            losses.append(_probe_batch(model, x, y, loss_fn, sub_batch, sums, f64))
            sizes.append(int(x.shape[0]))
            lines.batch_done(sizes[-1])
    return sizes, losses, f64, mode


def probe_activation_gradients(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    loss_fn: LossFn = F.cross_entropy,
    bn_mode: str = "eval",
    exact: bool = False,
    family: str | None = None,
    seed: int = 0,
    chunk_elements: int = CHUNK_ELEMENTS,
    contributions: bool = False,
    contribution_directions: list[torch.Tensor] | None = None,
    sub_batch: int | None = None,
    candidates: list | None = None,
    exact_per_batch: bool = True,
    progress: Callable[[str], None] | None = None,
    rows_form: bool = False,
) -> ProbeResult:
    """``AG_l``, ``AG~_l``, per-example RMS (with ``exact`` ``V_S,l``; with ``contributions`` the pooled
    ``C_l`` and ``tr(Sigma_hat_l)`` of App. G) for every candidate; the options are described in the module docstring.

    ``batches`` yields ``(x, y)`` analysis batches, each used for one forward and one backward pass. ``family``
    (default: each candidate's own, :func:`common.science.tangent.candidate_family`) and ``seed`` define the standard
    zero-output block whose tangent space the exact values use (:func:`common.science.growth.insert_zero_block` inserts it).
    Runs under :func:`common.science.precision.full_precision`; float64 sums on :func:`common.science.precision.float64_device`.
    """
    if exact_per_batch not in (True, False):
        raise ValueError(f"exact_per_batch must be True or False, got {exact_per_batch!r}")
    mode_exact = "pooled" if exact and not exact_per_batch else exact
    modes = {"exact": mode_exact, "contributions": contributions, "directions": contribution_directions}
    modes["rows_form"] = rows_form
    sums = _candidate_sums(
        model, family, seed, bn_mode, chunk_elements, sub_batch=sub_batch, candidates=candidates, **modes
    )
    lines = ProgressLines(progress, len(batches) if hasattr(batches, "__len__") else None)
    sizes, losses, f64, mode = _probe_batches(model, batches, loss_fn, bn_mode, sub_batch, sums, lines)
    if not sizes:
        raise ValueError("probe_activation_gradients got no batches")
    n, nb = sum(sizes), len(sizes)
    flags = block_input_flags(model, [s.candidate for s in sums])
    return ProbeResult(
        scores=_scores(sums, n, nb, flags, lines),
        batch_size=sizes[0],
        n_batches=nb,
        n_examples=n,
        bn_mode=bn_mode,
        exact=exact,
        mean_loss=sum(losses) / nb,
        seed=seed,
        contributions=contributions,
        math_mode=mode,
        float64_device=str(f64),
        sub_batch=sub_batch,
        cross_gradients=[s.moments.cross_gradient() for s in sums] if contributions else None,
        exact_normalisation=("per_batch_and_pooled" if exact_per_batch else "pooled") if exact else None,
    )
