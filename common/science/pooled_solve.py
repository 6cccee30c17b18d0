"""The pooled growth value ``V_S,l`` from one factorisation of the pooled Gram, and the probe's progress lines.

With ``P = Psi^T Psi`` (k x k, PSD) and ``X = Psi^T G`` (k x d) streamed over every probed row
(:class:`common.science.projection.GramAccumulator`), ``V_S,l^2 = tr(X^T P^+ X)`` (App. D.1 closed form;
docs/design.md, section "Exact growth value V_S,l"), and ``tangent_rank`` is the number of eigenvalues of ``P``
above ``rtol * lambda_max`` (the accumulator's tolerance). :func:`solve_pooled` factorises ``P`` once, by the first
of three routes whose conditions are *checked*, each giving the rank that the eigendecomposition gives:

- **Cholesky** (``route = "cholesky"``; at least ``k`` rows): ``P = L L^T`` (``torch.linalg.cholesky_ex``),
  ``V_S,l = ||L^{-1} X||_F``. Certificate: ``tr(P^{-1}) = ||L^{-1}||_F^2 >= 1 / lambda_min`` and
  ``min(||P||_F, ||P||_1) >= lambda_max``, so ``kappa_bound`` (their product) ``>= cond(P)`` (where it is above the
  limit, the tighter ``||P^{-1}||_F >= 1 / lambda_min`` replaces the trace); the route is taken only
  when ``kappa_bound <= 1 / (RANK_MARGIN * rtol)``. Then every eigenvalue is above ``RANK_MARGIN * rtol *
  lambda_max``, above the cut by the margin (which also covers the eigensolver's eigenvalue errors, ``~ eps
  lambda_max``): the eigendecomposition keeps all ``k``, so ``tangent_rank = k`` (from the certificate).
- **pivoted Cholesky** (``route = "pivoted"``; LAPACK ``dpstrf``, stopped where the largest remaining pivot is
  ``<= rtol * max_j P_jj``): ``r`` columns ``sel`` of ``Psi``, ``P[sel, sel] = L_11 L_11^T``, ``V_S,l =
  ||L_11^{-1} X[sel]||_F``, the projection onto the span of those columns. Keep side: ``lambda_r(P) >=
  lambda_min(P[sel, sel])`` (Cauchy interlacing), bounded below by the same certificate on ``L_11``. Discard side:
  either by counting (``r`` = the number of rows: ``rank(Psi) <= rows``, so the span of the ``r`` columns is all of
  the row space and ``V_S,l = ||G||_F``: the case "``V_S,l = AG_l`` by rank"), or from the Schur complement ``S`` of
  ``P[sel, sel]``: ``lambda_{r+1}(P) <= lambda_max(S) <= ||S||_F <= rtol * max_j P_jj / RANK_MARGIN`` (e.g. the
  exactly zero columns of channels that ``psi``'s ReLU leaves dead), and then the angle between the two
  ``r``-dimensional spans, ``sin theta <= sqrt(||S||_F tr(P[sel, sel]^{-1}))``, moves ``V_S,l`` by at most
  ``sin theta ||G||_F``, required ``<= ANGLE_TOL V_S,l``. Then ``tangent_rank = r``.
- **eigendecomposition** (``route = "eigh"``) otherwise: :class:`GramAccumulator`'s own route, value and rank
  exactly as the per-batch probe gives them.

In the rows x rows form (:class:`common.science.row_gram.RowGram`, fewer rows ``n`` than ``k``), :func:`rows_solve`
factorises ``K = Psi Psi^T`` (n x n) instead: the same Cholesky certificate on ``K`` (whose nonzero eigenvalues are
``P``'s) gives ``rank = n`` and ``V_S,l = ||G||_F`` (route ``"rows"``, the case "``V_S,l = AG_l`` by rank"), else
``K``'s eigendecomposition (``"rows-eigh"``).

Both discard-side arguments, like the tolerance itself (:mod:`common.science.projection`), take the rounding noise
of ``P``'s null directions to lie below the cut ``rtol * lambda_max``.

Agreement with the eigendecomposition (float64): each factorisation is backward stable, i.e. computes ``b^T (P +
Delta)^{-1} b`` per column ``b`` of ``X`` (on the kept part) with ``||Delta|| <= c k eps ||P||`` (Higham, *Accuracy
and Stability*, Thm 10.3 for Cholesky; the symmetric eigensolver likewise), and ``Delta`` moves ``b^T P^{-1} b`` by
at most ``||Delta|| ||P^{-1}||`` relative. So ``|V_chol - V_eigh| / V <= c k eps cond(P)`` (plus ``ANGLE_TOL`` for
the Schur-complement case of the pivoted route): a worst-case bound that is also the accuracy of the
eigendecomposition's own value (on a full-row-rank ResNet-18 Gram, where the exact value is ``||G||_F``, it gave
``||G||_F (1 + 4e-11)``). ``kappa_bound`` is loose (by up to ``k``, ``sqrt(k)`` in its tighter form), so it is held to the rank's
margin only, not to an accuracy; it is recorded (``condition_bound``). Measured differences: <= 2e-14 on the tests' float64 models
(tests/science/test_pooled_solve.py), 1e-12 to 3e-11 on ResNet-18 Grams with ``kappa_bound`` 1e9 to 2e11
(benchmarks/bench_probe_network.py prints them).

Cost: Cholesky ``k^3 / 3``, the certificate's triangular inverse ``k^3 / 3`` (its tighter form ``k^3`` more), the
solve ``k^2 d``; pivoted Cholesky
of rank ``r`` about ``k r^2``; ``eigh`` with eigenvectors several ``k^3`` (at ``k = 4,608`` on one CPU thread of this
project's machine: ~30 s against ~2 s for Cholesky, < 1 s pivoted at ``r = 64``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import scipy.linalg.lapack
import torch

from common.science.projection import GramAccumulator
from common.science.row_gram import RowGram

RANK_MARGIN = 10.0  # the Cholesky routes need every kept eigenvalue above RANK_MARGIN * rtol * lambda_max
ANGLE_TOL = 1e-4  # the pivoted route's bound on |V_pivoted - V_eigh| / V from the angle of the two spans


@dataclass(frozen=True)
class PooledSolve:
    """``V_S,l``, the rank of ``Psi`` and how they were obtained (module docstring)."""

    value: float  # V_S,l = sqrt(tr(X^T P^+ X))
    rank: int  # tangent_rank
    route: str  # "cholesky", "pivoted", "eigh"; the rows form: "rows" (V = ||G|| by rank) or "rows-eigh"
    condition_bound: float | None  # kappa_bound >= cond(P), the Cholesky route's certificate (None: not formed)


def _triangular_inverse(lower: torch.Tensor) -> torch.Tensor:
    """``L^{-1}`` of a lower-triangular ``L``: LAPACK ``dtrtri`` on the CPU (``k^3 / 3``), else a triangular solve."""
    if lower.device.type == "cpu":
        inverse, info = scipy.linalg.lapack.dtrtri(lower.numpy(), lower=1)
        if info != 0:
            raise ValueError(f"dtrtri failed (info {info})")
        return torch.from_numpy(inverse).tril_()
    eye = torch.eye(lower.shape[0], dtype=lower.dtype, device=lower.device)
    return torch.linalg.solve_triangular(lower, eye, upper=False)


def certified_cholesky(P: torch.Tensor, rtol: float) -> tuple[torch.Tensor, float] | None:
    """``(L^{-1}, kappa_bound)`` when the Cholesky factor ``L`` of ``P`` exists and certifies full rank (module
    docstring), else None."""
    lower, info = torch.linalg.cholesky_ex(P)
    if int(info) != 0:
        return None
    inverse = _triangular_inverse(lower)
    kappa = _kappa_bound(P, inverse, rtol)
    return None if kappa is None else (inverse, kappa)


def cholesky_solve(P: torch.Tensor, X: torch.Tensor, rtol: float) -> PooledSolve | None:
    """The Cholesky route: ``V = ||L^{-1} X||_F`` with ``rank = k`` when ``P`` is certified full rank
    (module docstring), else None (the caller takes the eigendecomposition)."""
    certified = certified_cholesky(P, rtol)
    if certified is None:
        return None
    inverse, kappa = certified
    value = math.sqrt(float((inverse @ X).square().sum()))
    return PooledSolve(value, int(P.shape[0]), "cholesky", kappa)


def rows_solve(acc: RowGram) -> PooledSolve:
    """The rows x rows form (:mod:`common.science.row_gram`, fewer rows than ``k``): where ``K = Psi Psi^T`` is
    certified full rank by the Cholesky certificate, ``Pi = I`` and ``V_S,l = ||G||_F`` with ``rank = n`` (route
    ``"rows"``: ``V_S,l = AG_l`` by rank, no projection computed); else ``K``'s eigendecomposition (``"rows-eigh"``)."""
    certified = certified_cholesky(acc.gram(), acc.rtol) if acc.rows else None
    if certified is not None:
        return PooledSolve(acc.grad_norm(), acc.rows, "rows", certified[1])
    return PooledSolve(acc.growth_value(), acc.rank(), "rows-eigh", None)


def _kappa_bound(P: torch.Tensor, inverse: torch.Tensor, rtol: float) -> float | None:
    """``kappa_bound >= lambda_max(P) / lambda_min(P_11)`` (``inverse = L^{-1}``, ``L`` the Cholesky factor of the
    principal block ``P_11``: all of ``P`` for the plain route), or None above ``1 / (RANK_MARGIN * rtol)``.

    ``lambda_max(P) <= min(||P||_F, ||P||_1)``; ``1 / lambda_min(P_11) = lambda_max(P_11^{-1})`` is bounded by
    ``tr(P_11^{-1}) = ||L^{-1}||_F^2`` (free; loose by up to the order ``r``), and where that is not enough by
    ``||P_11^{-1}||_F = ||L^{-T} L^{-1}||_F`` (``r^3`` more; loose by at most ``sqrt(r)``)."""
    lambda_max_bound = min(float(torch.linalg.matrix_norm(P)), float(torch.linalg.matrix_norm(P, ord=1)))
    limit = 1.0 / (RANK_MARGIN * rtol)
    kappa = lambda_max_bound * float(inverse.square().sum())
    if math.isfinite(kappa) and kappa > limit:
        kappa = lambda_max_bound * float(torch.linalg.matrix_norm(inverse.T @ inverse))
    if not math.isfinite(kappa) or kappa > limit:
        return None
    return kappa


def pivoted_solve(P: torch.Tensor, X: torch.Tensor, rtol: float, rows: int, grad_norm: float) -> PooledSolve | None:
    """The pivoted-Cholesky route (LAPACK ``dpstrf``, cut at ``rtol * max_j P_jj``): ``r`` pivots ``sel``,
    ``P[sel, sel] = L_11 L_11^T``, ``V = ||L_11^{-1} X[sel]||_F`` (the projection onto the span of those columns of
    ``Psi``) with ``rank = r`` when certified (module docstring), else None."""
    top = float(P.diagonal().max())
    if top <= 0:
        return PooledSolve(0.0, 0, "pivoted", None)  # Psi = 0: as the eigendecomposition (nothing kept)
    factor, piv, r, _ = scipy.linalg.lapack.dpstrf(P.cpu().numpy(), lower=1, tol=rtol * top)
    if r > rows:  # more pivots than rows: one is rounding noise
        return None
    sel, rest = torch.from_numpy(piv[:r] - 1).to(P.device), torch.from_numpy(piv[r:] - 1).to(P.device)
    inverse = _triangular_inverse(torch.from_numpy(factor[:r, :r]).tril().to(P.device))
    kappa = _kappa_bound(P, inverse, rtol)  # keep side: lambda_r(P) >= lambda_min(P[sel, sel]) (interlacing)
    if kappa is None:
        return None
    value = math.sqrt(float((inverse @ X[sel]).square().sum()))
    if r < rows and rest.numel():  # discard side from the Schur complement S (r == rows: by counting)
        w = inverse @ P[sel][:, rest]
        schur = float(torch.linalg.matrix_norm(P[rest][:, rest] - w.T @ w))  # >= lambda_max(S) >= lambda_{r+1}(P)
        angle = math.sqrt(schur * float(inverse.square().sum()))  # >= sin of the angle between the two spans
        if schur > rtol * top / RANK_MARGIN or angle * grad_norm > ANGLE_TOL * value:
            return None
    return PooledSolve(value, int(r), "pivoted", kappa)


def solve_pooled(acc: GramAccumulator | RowGram) -> PooledSolve:
    """``V_S,l`` and ``tangent_rank`` of an accumulator's pooled ``P`` and ``X``, factorised once: Cholesky where
    certified full rank, else pivoted Cholesky where its rank is certified, else the accumulator's eigendecomposition
    (module docstring); in the rows form (:class:`~common.science.row_gram.RowGram`), :func:`rows_solve`."""
    if isinstance(acc, RowGram):
        return rows_solve(acc)
    if acc.rows >= acc.k:  # fewer rows than k: rank <= rows < k, singular by counting
        solved = cholesky_solve(acc.P, acc.X, acc.rtol)
        if solved is not None:
            return solved
    solved = pivoted_solve(acc.P, acc.X, acc.rtol, acc.rows, acc.grad_norm())
    if solved is not None:
        return solved
    return PooledSolve(acc.growth_value(), acc.rank(), "eigh", None)


# ----------------------------------------------------------------------------- progress lines
class ProgressLines:
    """Short human lines for a long exact probe: one per batch and one per factorised candidate, each with an estimate
    of the time left from the time per unit so far (batches: per batch; factorisations: per ``k^3``, their cost)."""

    def __init__(self, report: Callable[[str], None] | None, n_batches: int | None) -> None:
        self.report, self.n_batches = report, n_batches
        self.start = time.perf_counter()
        self.batches = 0
        self.weights: list[float] = []
        self.done_weight, self.factor_start = 0.0, 0.0

    def batch_done(self, examples: int) -> None:
        self.batches += 1
        if self.report is None:
            return
        elapsed = time.perf_counter() - self.start
        left = ""
        if self.n_batches:
            left = f", ~{elapsed / self.batches * (self.n_batches - self.batches):.0f} s left for the batches"
        total = self.n_batches or "?"
        self.report(f"probe: batch {self.batches}/{total} ({examples} examples) done, {elapsed:.1f} s{left}")

    def start_factorising(self, dims: Sequence[int]) -> None:
        """Before the candidates' factorisations; ``dims`` the size of each Gram, ``k`` or (rows form) ``n`` (0: none)."""
        self.weights = [float(k) ** 3 for k in dims]
        self.done_weight, self.factor_start = 0.0, time.perf_counter()

    def candidate_done(self, position: int, name: str, k: int, rows: int, route: str, seconds: float) -> None:
        self.done_weight += self.weights[position] if self.weights else 0.0
        if self.report is None or not k:
            return
        elapsed = time.perf_counter() - self.factor_start
        rest = sum(self.weights[position + 1 :])
        left = elapsed / self.done_weight * rest if self.done_weight > 0 else 0.0
        self.report(
            f"probe: candidate {position + 1}/{len(self.weights)} {name!r} factorised ({route}, k = {k}, "
            f"{rows} rows) in {seconds:.1f} s, ~{left:.0f} s left"
        )
