"""Cross-gradient, streamed Gram statistics, the exact growth value V_S,l, the App. G test.

For one sample set ``S`` (docs/design.md, section "Exact growth value V_S,l"), with ``G`` the rows of
``dL_S/dz_l`` (n x d) and ``Psi`` the tangent features (n x k) of candidate ``l``:

- cross-gradient ``C_l = Psi^T G`` (k x d): the gradient of ``L_S`` with respect to ``V_l`` at
  ``V_l = 0`` (App. F; :func:`common.growth.insert_zero_block` checks it against autograd);
- exact empirical growth value ``V_S,l = || Psi (Psi^T Psi)^+ Psi^T G ||_F``, the norm of the
  orthogonal projection of ``G`` onto the residual tangent space ``{Psi W}`` (App. D.1 closed form),
  computed as ``V_S,l^2 = tr(X^T P^+ X)`` from ``P = Psi^T Psi`` and ``X = Psi^T G`` streamed over
  row chunks and batches, so memory is ``O(k^2 + k d)`` however many rows go through;
- the separated saturation test of App. G (Theorem 3) on ``Gamma = max_l ||C_l||``, ``C_l`` the
  cross-gradient of the *pooled* mean loss over an independent probe sample: the interval
  ``[max(0, Gamma_hat - t_alpha), Gamma_hat + t_alpha]``, ``t_alpha = sqrt(sum_l tr_l / (n_test alpha))``
  (Markov on ``sum_l ||C_hat_l - C_l||^2``), with the traces ``tr_l`` of the per-example
  contributions ``c_i(l)`` from a disjoint calibration part (:class:`ContributionMoments`), and
  three verdicts against a tolerance delta (:func:`saturation_interval`). No Gram matrix or
  eigendecomposition is needed for it.

Rank tolerance (one place: :data:`DEFAULT_RTOL_FACTOR`): ``P`` is eigendecomposed in float64 and
eigenvalues ``<= rtol * max_eig`` count as zero, ``rtol = k * eps(float64)`` by default (numpy's
``matrix_rank`` convention, applied to the Gram matrix). A spurious direction kept by this rule
adds at most ``~ eps * ||G||_F^2`` to ``V^2`` (its ``X`` component is rounding noise too), so the
value is insensitive to the exact factor; the reported rank is what the tolerance defines.

Where the float64 arithmetic runs (one place: :func:`common.precision.float64_device`): on the
features' own device when it computes float64 (CPU, CUDA), else on the CPU. Apple MPS has no
float64 and Ascend NPUs lack float64 matrix products and ``eigh`` (or cast to float32 silently),
which the float64 rank tolerance above cannot survive; there the rows are moved to the CPU
*before* the cast to float64. :attr:`GramAccumulator.device` records where it ran.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from common.precision import float64_device

DEFAULT_RTOL_FACTOR = 1.0  # rtol = DEFAULT_RTOL_FACTOR * k * eps(float64), see the module docstring


class GramAccumulator:
    """Streamed ``P = Psi^T Psi`` (k x k) and ``X = Psi^T G`` (k x d) in float64 (docs/design.md, section
    "Exact growth value V_S,l").

    ``update(psi_rows, grad_rows)`` adds any number of rows; nothing but ``P``, ``X``, the row
    count and ``||G||_F^2`` is kept. Then ``growth_value()`` is ``V_S,l``,
    ``cross_gradient_norm()`` is ``||C_l||_F`` and ``grad_norm()`` is ``||G||_F`` over the rows seen.
    ``device`` is where the rows come from; the statistics live on :func:`~common.precision.float64_device` of it
    (the CPU for MPS and NPU), recorded as :attr:`device`.

    >>> acc = GramAccumulator(k=3, d=2)
    >>> acc.update(torch.eye(3), torch.ones(3, 2))   # Psi = I: every G is realizable
    >>> round(acc.growth_value(), 12), round(acc.grad_norm(), 12)
    (2.449489742783, 2.449489742783)
    """

    def __init__(self, k: int, d: int, *, device: torch.device | str | None = None, rtol: float | None = None) -> None:
        if k <= 0 or d <= 0:
            raise ValueError(f"GramAccumulator needs k > 0 and d > 0, got k={k}, d={d}")
        self.k, self.d = int(k), int(d)
        self.dtype = torch.float64
        self.device = float64_device(device)
        self.rtol = float(rtol) if rtol is not None else DEFAULT_RTOL_FACTOR * self.k * torch.finfo(self.dtype).eps
        self.P = torch.zeros(self.k, self.k, dtype=self.dtype, device=self.device)
        self.X = torch.zeros(self.k, self.d, dtype=self.dtype, device=self.device)
        self.grad_sq = torch.zeros((), dtype=self.dtype, device=self.device)
        self.rows = 0
        self._eig: tuple[torch.Tensor, torch.Tensor] | None = None

    # ------------------------------------------------------------------ streaming
    def update(self, psi_rows: torch.Tensor, grad_rows: torch.Tensor) -> None:
        """Add rows: ``psi_rows`` (n x k) and ``grad_rows`` (n x d), row ``i`` of each the same row unit."""
        if psi_rows.dim() != 2 or grad_rows.dim() != 2:
            raise ValueError(f"update wants 2-D row matrices, got {tuple(psi_rows.shape)} and {tuple(grad_rows.shape)}")
        if psi_rows.shape[0] != grad_rows.shape[0]:
            raise ValueError(f"psi_rows has {psi_rows.shape[0]} rows but grad_rows has {grad_rows.shape[0]}")
        if psi_rows.shape[1] != self.k or grad_rows.shape[1] != self.d:
            raise ValueError(
                f"expected (n, {self.k}) and (n, {self.d}), got {tuple(psi_rows.shape)} and {tuple(grad_rows.shape)}"
            )
        psi = psi_rows.detach().to(self.device).to(self.dtype)  # move first: no float64 on the source device
        grad = grad_rows.detach().to(self.device).to(self.dtype)
        self.P.addmm_(psi.T, psi)
        self.X.addmm_(psi.T, grad)
        self.grad_sq += grad.square().sum()
        self.rows += int(psi.shape[0])
        self._eig = None

    def update_statistics(self, P: torch.Tensor, X: torch.Tensor, grad_sq: float, rows: int) -> None:
        """Add ``Psi^T Psi``, ``Psi^T G``, ``||G||_F^2`` and the row count of rows summarised elsewhere.

        For structured features whose Gram statistics have a cheaper exact route than the rows
        (the conv3x3 family's translation structure, :func:`common.tangent._conv_gram`).
        """
        if tuple(P.shape) != (self.k, self.k) or tuple(X.shape) != (self.k, self.d):
            raise ValueError(
                f"expected P ({self.k}, {self.k}) and X ({self.k}, {self.d}), got {tuple(P.shape)} and {tuple(X.shape)}"
            )
        self.P += P.to(self.device).to(self.dtype)
        self.X += X.to(self.device).to(self.dtype)
        self.grad_sq += float(grad_sq)
        self.rows += int(rows)
        self._eig = None

    def merge(self, other: GramAccumulator, *, grad_scale: float = 1.0) -> None:
        """Add another accumulator's rows, their gradients multiplied by ``grad_scale``.

        Pooling B batch-mean gradients into the gradient of the mean over all their examples
        uses ``grad_scale = batch_size / total_examples`` (the union's ``G`` rows are scaled).
        """
        if (other.k, other.d) != (self.k, self.d):
            raise ValueError(f"cannot merge a ({other.k}, {other.d}) accumulator into a ({self.k}, {self.d}) one")
        self.P += other.P
        self.X.add_(other.X, alpha=grad_scale)
        self.grad_sq += other.grad_sq * grad_scale**2
        self.rows += other.rows
        self._eig = None

    def scaled(self, grad_scale: float) -> GramAccumulator:
        """A copy whose gradient rows are multiplied by ``grad_scale`` (``P`` unchanged)."""
        out = copy.copy(self)
        out.P = self.P.clone()
        out.X = self.X * grad_scale
        out.grad_sq = self.grad_sq * grad_scale**2
        out._eig = self._eig
        return out

    # ------------------------------------------------------------------ results
    def _eigh(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._eig is None:
            evals, evecs = torch.linalg.eigh(self.P)
            self._eig = (evals, evecs)
        return self._eig

    def _kept(self) -> tuple[torch.Tensor, torch.Tensor]:
        evals, evecs = self._eigh()
        top = evals.max().clamp_min(0.0)
        keep = evals > self.rtol * top
        if top <= 0:
            keep = torch.zeros_like(keep)
        return evals[keep], evecs[:, keep]

    def rank(self) -> int:
        """Numerical rank of ``Psi`` (= of ``P``) under the documented tolerance."""
        return int(self._kept()[0].numel())

    def growth_value(self) -> float:
        """``V_S,l = sqrt(tr(X^T P^+ X))`` (App. D.1 closed form; docs/design.md, section "Exact growth value
        V_S,l")."""
        evals, evecs = self._kept()
        if evals.numel() == 0:
            return 0.0
        coords = evecs.T @ self.X  # (rank, d): X in the eigenbasis of P
        return math.sqrt(max(float((coords.square().sum(dim=1) / evals).sum()), 0.0))

    def solution(self) -> torch.Tensor:
        """``W* = P^+ X`` (k x d): the minimum-norm least-squares fit ``Psi W* ~ G``."""
        evals, evecs = self._kept()
        return evecs @ ((evecs.T @ self.X) / evals[:, None])

    def cross_gradient(self) -> torch.Tensor:
        """``C_l = Psi^T G`` (k x d) = ``dL_S/dV_l`` at ``V_l = 0`` up to V's weight layout."""
        return self.X.clone()

    def cross_gradient_norm(self) -> float:
        """``||C_l||_F``."""
        return float(torch.linalg.matrix_norm(self.X))

    def grad_norm(self) -> float:
        """``||G||_F`` over the rows seen (the activation-gradient norm on the same sample)."""
        return math.sqrt(float(self.grad_sq))


def growth_value(psi_rows: torch.Tensor, grad_rows: torch.Tensor, *, rtol: float | None = None) -> float:
    """``V_S,l`` of one set of rows (a one-shot :class:`GramAccumulator`)."""
    acc = GramAccumulator(psi_rows.shape[1], grad_rows.shape[1], device=psi_rows.device, rtol=rtol)
    acc.update(psi_rows, grad_rows)
    return acc.growth_value()


def cross_gradient(psi_rows: torch.Tensor, grad_rows: torch.Tensor) -> torch.Tensor:
    """``C_l = Psi^T G`` (k x d), in float64."""
    return psi_rows.double().T @ grad_rows.double()


# ----------------------------------------------------------------------------- App. G
SATURATION_STATISTIC = "max_pooled_cross_gradient_norm"  # max_l ||C_l||, C_l of the pooled mean loss


class ContributionMoments:
    """Streamed mean and total variance of per-example contributions ``c_i(l)`` (k x d), float64 (App. G).

    ``c_i(l) = sum over the rows r of example i of Psi_r^T g_r``, with ``g`` the gradient of
    example ``i``'s own loss, so the pooled cross-gradient of the mean loss over ``n`` examples is
    ``C_l = mean_i c_i(l)`` and Theorem 3's statistic is ``||C_l||_F``. ``update`` adds a stack
    ``(m, k, d)``; only the running mean and the sum of squared deviations are kept, merged batch
    by batch with the pairwise update of Chan, Golub and LeVeque (no cancellation between
    ``sum ||c_i||^2`` and ``n ||C_l||^2``). ``covariance_trace()`` is
    ``tr(Sigma_hat_l) = sum_i ||c_i - C_l||_F^2 / (n - 1)``.

    >>> m = ContributionMoments(k=1, d=2)
    >>> m.update(torch.tensor([[[1.0, 0.0]], [[3.0, 2.0]]]))
    >>> m.cross_gradient().tolist(), m.covariance_trace()
    ([[2.0, 1.0]], 4.0)
    """

    def __init__(self, k: int, d: int, *, device: torch.device | str | None = None) -> None:
        self.k, self.d = int(k), int(d)
        self.mean = torch.zeros(self.k, self.d, dtype=torch.float64, device=device)
        self.sq_dev = 0.0  # sum_i ||c_i - mean||_F^2
        self.n = 0

    def update(self, contributions: torch.Tensor) -> None:
        """Add ``m`` examples' contributions, a ``(m, k, d)`` tensor."""
        if contributions.dim() != 3 or tuple(contributions.shape[1:]) != (self.k, self.d):
            raise ValueError(f"expected contributions (m, {self.k}, {self.d}), got {tuple(contributions.shape)}")
        c = contributions.detach().to(device=self.mean.device, dtype=torch.float64)
        m = int(c.shape[0])
        if m == 0:
            return
        batch_mean = c.mean(dim=0)
        batch_sq_dev = float((c - batch_mean).square().sum())
        shift = batch_mean - self.mean
        total = self.n + m
        self.sq_dev += batch_sq_dev + float(shift.square().sum()) * self.n * m / total
        self.mean += shift * (m / total)
        self.n = total

    def cross_gradient(self) -> torch.Tensor:
        """``C_l = mean_i c_i(l)`` (k x d): the gradient of the pooled mean loss w.r.t. ``V_l`` at 0."""
        return self.mean.clone()

    def cross_gradient_norm(self) -> float:
        """``||C_l||_F``."""
        return float(torch.linalg.matrix_norm(self.mean))

    def covariance_trace(self) -> float:
        """``tr(Sigma_hat_l)``: the sample covariance of ``c_i(l)`` (divisor ``n - 1``), traced."""
        if self.n < 2:
            raise ValueError(f"a sample covariance needs at least 2 examples, got {self.n}")
        return self.sq_dev / (self.n - 1)


def saturation_error_bound(covariance_traces, n: int, t: float):
    """``sum_l tr(Sigma_l) / (n t^2)``: Markov on ``sum_l ||C_hat_l - C_l||^2`` (App. G).

    ``E ||C_hat_l - C_l||^2 = tr(Sigma_l) / n`` for the mean ``C_hat_l`` of ``n`` i.i.d. contributions,
    so ``P(max_l ||C_hat_l - C_l|| >= t) <= P(sum_l ||C_hat_l - C_l||^2 >= t^2)`` is at most this
    number. ``covariance_traces``: one trace per candidate on the last axis (a sequence, or an array
    of several samples' traces); the result has the leading shape (a float for one sample).
    """
    if np.any(np.asarray(t) <= 0) or n <= 0:
        raise ValueError(f"the error bound needs t > 0 and n > 0, got t={t}, n={n}")
    bound = np.sum(np.asarray(covariance_traces, dtype=np.float64), axis=-1) / (n * np.square(t))
    return float(bound) if np.ndim(bound) == 0 else bound


def separation_margin(covariance_traces, n: int, alpha: float):
    """``t_alpha = sqrt(sum_l tr_l / (n alpha))``: the ``t`` at which :func:`saturation_error_bound` is ``alpha``.

    In the split protocol ``tr_l`` are the calibration part's traces and ``n`` is ``n_test``, the
    number of examples behind ``C_hat_l`` (not the whole sample's). ``t_alpha`` grows with the number
    of candidates (one trace each in the sum): the statement covers all of them at once.

    >>> round(separation_margin([2.0, 3.0], n=100, alpha=0.05), 12)   # sqrt(5 / 5)
    1.0
    """
    if not 0 < alpha < 1 or n <= 0:
        raise ValueError(f"the separation margin needs 0 < alpha < 1 and n > 0, got alpha={alpha}, n={n}")
    t = np.sqrt(np.sum(np.asarray(covariance_traces, dtype=np.float64), axis=-1) / (n * alpha))
    return float(t) if np.ndim(t) == 0 else t


SATURATED = "saturated within delta"
NOT_SATURATED = "not saturated"
UNDECIDED = "undecided"
NO_VERDICT = "no verdict"  # the contributions are not per-example gradients (BatchNorm in train mode)
SATURATION_VERDICTS = (SATURATED, NOT_SATURATED, UNDECIDED, NO_VERDICT)


def gamma_interval(gamma_hat, t):
    """``[max(0, Gamma_hat - t), Gamma_hat + t]``, the interval for ``Gamma = max_l ||C_l||`` (App. G).

    On the event ``max_l ||C_hat_l - C_l|| < t`` (probability at least ``1 - alpha`` at ``t = t_alpha``),
    ``|max_l ||C_hat_l|| - max_l ||C_l||| <= max_l |(||C_hat_l|| - ||C_l||)| <= max_l ||C_hat_l - C_l|| < t``
    (the max is 1-Lipschitz in the sup norm, then the reverse triangle inequality). Arrays broadcast.
    """
    gamma_hat, t = np.asarray(gamma_hat, dtype=np.float64), np.asarray(t, dtype=np.float64)
    lower, upper = np.maximum(0.0, gamma_hat - t), gamma_hat + t
    return (float(lower), float(upper)) if lower.ndim == 0 else (lower, upper)


def saturation_verdict(lower, upper, delta: float | None = None):
    """The three verdicts of App. G's separated test against a tolerance ``delta`` (arrays broadcast).

    "saturated within delta" when the upper end is at most ``delta``; "not saturated" when the lower
    end is above it; "undecided" otherwise. Without a ``delta`` the question is ``Gamma > 0``: "not
    saturated" or "undecided", never "saturated" (exact saturation is the knife edge; so is
    ``delta = 0``, where the upper end ``Gamma_hat + t > 0`` is never at most ``delta``).

    >>> saturation_verdict(0.0, 20.6, None), saturation_verdict(0.5, 1.5, 2.0), saturation_verdict(2.5, 3.5, 2.0)
    ('undecided', 'saturated within delta', 'not saturated')
    """
    if delta is not None and delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    d = 0.0 if delta is None else float(delta)
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    verdict = np.where(lower > d, NOT_SATURATED, np.where((d > 0) & (upper <= d), SATURATED, UNDECIDED))
    return str(verdict) if verdict.ndim == 0 else verdict


@dataclass(frozen=True)
class SaturationInterval:
    """App. G's interval for ``Gamma = max_l ||C_l||`` at confidence ``1 - alpha`` and its verdict.

    ``alpha_source`` says how ``t`` and ``alpha`` relate: ``"given"`` (``t = t_alpha`` from the
    calibration traces and the ``n`` test examples, :func:`separation_margin`) or ``"implied by t"``
    (``t`` fixed by the user, ``alpha = sum_l tr_l / (n t^2)`` from the same sample's traces: an
    estimate of the error probability, not a guarantee). Coverage is conditional on the traces
    used: heavy-tailed contributions make an underestimate, hence a too-short interval, likely.
    """

    statistic: str
    gamma_hat: float  # max_l ||C_hat_l|| over the n test examples
    argmax: str
    n: int  # examples behind C_hat_l (n_test in the split protocol)
    n_candidates: int
    t: float
    alpha: float
    alpha_source: str
    lower: float | None
    upper: float | None
    delta: float | None
    verdict: str
    values: dict[str, float]  # ||C_hat_l|| per candidate
    covariance_traces: dict[str, float]  # the tr(Sigma_hat_l) that set t (or alpha)

    def as_record(self) -> dict:
        return asdict(self)


def saturation_interval(
    values: Sequence[float],
    covariance_traces: Sequence[float],
    *,
    n: int,
    alpha: float | None = None,
    t: float | None = None,
    delta: float | None = None,
    names: Sequence[str] | None = None,
    statistic: str = SATURATION_STATISTIC,
) -> SaturationInterval:
    """App. G (Theorem 3): ``Gamma in [max(0, Gamma_hat - t), Gamma_hat + t]`` and a verdict against ``delta``.

    ``values`` are ``||C_hat_l||``, the pooled mean-loss cross-gradients over ``n`` independent examples.
    Give ``alpha`` (then ``t = t_alpha`` from ``covariance_traces``, which must come from a disjoint
    calibration part, and ``n`` is ``n_test``) or ``t`` (then ``alpha`` is implied by the traces of the
    same sample). ``delta`` None: no tolerance (verdicts "not saturated" / "undecided" only).
    """
    if (alpha is None) == (t is None):
        raise ValueError("give exactly one of alpha (t from the calibration traces) and t (alpha implied)")
    if len(values) == 0:
        raise ValueError("the App. G interval needs at least one candidate")
    names = list(names) if names is not None else [str(i) for i in range(len(values))]
    if not len(names) == len(values) == len(covariance_traces):
        raise ValueError(f"{len(names)} names, {len(values)} values and {len(covariance_traces)} covariance traces")
    if t is None:
        t, source = separation_margin(covariance_traces, n, alpha), "given"
    else:
        alpha, source = saturation_error_bound(covariance_traces, n, t), "implied by t"
    best = max(range(len(values)), key=lambda i: values[i])
    lower, upper = gamma_interval(values[best], t)
    return SaturationInterval(
        statistic=statistic,
        gamma_hat=float(values[best]),
        argmax=names[best],
        n=int(n),
        n_candidates=len(values),
        t=float(t),
        alpha=float(alpha),
        alpha_source=source,
        lower=lower,
        upper=upper,
        delta=None if delta is None else float(delta),
        verdict=saturation_verdict(lower, upper, delta),
        values={k: float(v) for k, v in zip(names, values, strict=True)},
        covariance_traces={k: float(v) for k, v in zip(names, covariance_traces, strict=True)},
    )
