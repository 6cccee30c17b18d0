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
from scipy import stats

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


PAIR_BUFFER = 32  # differences per block of the tr(Sigma^2) estimator, at most (memory: PAIR_BUFFER x k x d float64)
BLOCK_ELEMENTS = (
    1 << 21
)  # float64 values of one block of queued examples per stream (16 MiB): fewer pairs when k d is large


class ContributionMoments:
    """Streamed moments of per-example contributions ``c_i(l)`` (k x d), float64 (App. G; docs/design.md,
    sections "Pooled C_l" and "App. G: the asymptotic interval beside it").

    ``c_i(l) = sum over the rows r of example i of Psi_r^T g_r``, with ``g`` the gradient of
    example ``i``'s own loss, so the pooled cross-gradient of the mean loss over ``n`` examples is
    ``C_l = mean_i c_i(l)`` and Theorem 3's statistic is ``||C_l||_F``. ``update`` adds a stack
    ``(m, k, d)``; only running statistics are kept, memory independent of ``n``:

    - the mean and the sum of squared deviations, each chunk's own taken about a reference near the
      mean (the running mean) and merged with the pairwise update of Chan, Golub and LeVeque (no
      cancellation between ``sum ||c_i||^2`` and ``n ||C_l||^2``):
      ``covariance_trace()`` is ``tr(Sigma_hat_l) = sum_i ||c_i - C_l||_F^2 / (n - 1)`` and
      ``norm_sq_unbiased()`` is ``U_l = ||C_hat_l||^2 - tr(Sigma_hat_l) / n``, which equals
      ``sum_{i != j} <c_i, c_j> / (n (n - 1))``: unbiased for ``||C_l||^2``;
    - ``covariance_square_trace()``: an unbiased estimate of ``tr(Sigma_l^2)`` that never forms
      ``Sigma`` (``(kd)^2`` entries): consecutive examples are paired, ``u_a = c_2a - c_2a+1`` (mean 0,
      covariance ``2 Sigma``), and for two differences of four distinct examples
      ``E <u_a, u_b>^2 = tr((2 Sigma)^2) = 4 tr(Sigma^2)``; the mean of ``<u_a, u_b>^2 / 4`` over every pair
      ``a != b`` within blocks of ``pair_buffer`` differences (a ``pair_buffer^2`` Gram matrix per block;
      by default :data:`PAIR_BUFFER`, fewer when a block of ``2 pair_buffer`` examples would exceed
      :data:`BLOCK_ELEMENTS` values, at least 2);
    - with a ``direction`` ``a`` (k x d, fixed before the examples are seen: the calibration part's
      ``C_hat_l`` in App. G), ``direction_variance()``: the sample variance of ``s_i = <c_i, a>``,
      unbiased for ``a^T Sigma a``.

    ``batch_shape`` runs independent streams side by side (a simulation's repetitions): contributions
    are then ``(*batch_shape, m, k, d)`` and every statistic an array of ``batch_shape``.

    >>> m = ContributionMoments(k=1, d=2)
    >>> m.update(torch.tensor([[[1.0, 0.0]], [[3.0, 2.0]]]))
    >>> m.cross_gradient().tolist(), m.covariance_trace(), m.norm_sq_unbiased()
    ([[2.0, 1.0]], 4.0, 3.0)
    """

    def __init__(
        self,
        k: int,
        d: int,
        *,
        device: torch.device | str | None = None,
        direction: torch.Tensor | None = None,
        batch_shape: Sequence[int] = (),
        pair_buffer: int | None = None,
    ) -> None:
        if pair_buffer is None:
            pair_buffer = max(2, min(PAIR_BUFFER, BLOCK_ELEMENTS // (2 * int(k) * int(d))))
        if pair_buffer < 2:
            raise ValueError(f"pair_buffer must be at least 2, got {pair_buffer}")
        self.k, self.d = int(k), int(d)
        self.batch_shape = tuple(int(b) for b in batch_shape)
        f64 = {"dtype": torch.float64, "device": device}
        self.mean = torch.zeros(*self.batch_shape, self.k, self.d, **f64)
        self.sq_dev = torch.zeros(self.batch_shape, **f64)  # sum_i ||c_i - mean||_F^2
        self._n = 0  # absorbed examples
        self._queue: list[torch.Tensor] = []  # examples not absorbed yet
        self._queued = 0
        self.pair_buffer = int(pair_buffer)
        self.pair_sq_sum = torch.zeros(self.batch_shape, **f64)  # sum over finished blocks of <u_a, u_b>^2, a != b
        self.pair_count = 0  # ordered pairs (a, b), a != b, in finished blocks
        self._pending: torch.Tensor | None = None  # differences u_a of the open block, (*batch, h, k * d)
        self._odd: torch.Tensor | None = None  # an example waiting for its pair, (*batch, 1, k * d)
        self.direction = None
        if direction is not None:
            self.direction = direction.detach().to(**f64).reshape(*direction.shape[:-2], 1, self.k * self.d)
            self.proj_mean = torch.zeros(self.batch_shape, **f64)  # mean of s_i = <c_i, a>
            self.proj_sq_dev = torch.zeros(self.batch_shape, **f64)

    @property
    def n(self) -> int:
        """Examples added so far (absorbed and queued)."""
        return self._n + self._queued

    def update(self, contributions: torch.Tensor) -> None:
        """Add ``m`` examples' contributions, a ``(*batch_shape, m, k, d)`` tensor.

        Examples are queued and absorbed in blocks of ``2 pair_buffer`` (fewer, larger tensor operations);
        every statistic absorbs the queue first, so the results do not depend on how the examples were chunked
        beyond the pairing of consecutive examples.
        """
        expected = (*self.batch_shape, self.k, self.d)
        shape = tuple(contributions.shape)
        if len(shape) != len(expected) + 1 or shape[: len(self.batch_shape)] + shape[-2:] != expected:
            raise ValueError(f"expected contributions {(*self.batch_shape, 'm', self.k, self.d)}, got {shape}")
        c = contributions.detach().to(device=self.mean.device, dtype=torch.float64)
        if c.shape[-3] == 0:
            return
        self._queue.append(c)
        self._queued += int(c.shape[-3])
        if self._queued >= 2 * self.pair_buffer:
            self._flush()

    def _flush(self) -> None:
        """Absorb the queued examples."""
        if not self._queue:
            return
        c = self._queue[0] if len(self._queue) == 1 else torch.cat(self._queue, dim=-3)
        self._queue, self._queued = [], 0
        self._absorb(c)

    def _absorb(self, c: torch.Tensor) -> None:
        m = int(c.shape[-3])
        p = self.k * self.d
        flat = c.reshape(*self.batch_shape, m, p)
        # Shifted by a reference near the mean (the running mean; the first example at the start), the chunk's
        # own sum of squared deviations sum ||y_i||^2 - m ||y_bar||^2 has no cancellation.
        ref = self.mean.reshape(*self.batch_shape, 1, p) if self._n else flat[..., :1, :]
        y = flat - ref
        y_bar = y.mean(dim=-2)
        within = y.square().sum((-2, -1)) - m * y_bar.square().sum(-1)
        total = self._n + m
        shift = (ref.squeeze(-2) + y_bar - self.mean.reshape(*self.batch_shape, p)).reshape(self.mean.shape)
        self.sq_dev = self.sq_dev + within + shift.square().sum((-2, -1)) * (self._n * m / total)
        self.mean = self.mean + shift * (m / total)
        if self.direction is not None:
            s = (flat @ self.direction.transpose(-1, -2)).squeeze(-1)  # (*batch, m): <c_i, a>
            s_mean = s.mean(-1)
            s_shift = s_mean - self.proj_mean
            self.proj_sq_dev = (
                self.proj_sq_dev + (s - s_mean[..., None]).square().sum(-1) + s_shift.square() * (self._n * m / total)
            )
            self.proj_mean = self.proj_mean + s_shift * (m / total)
        self._n = total
        self._add_pairs(flat)

    def _add_pairs(self, flat: torch.Tensor) -> None:
        """Pair consecutive examples (across calls), queue their differences, close full blocks."""
        if self._odd is not None:
            flat = torch.cat([self._odd, flat], dim=-2)
        even = flat.shape[-2] - flat.shape[-2] % 2
        self._odd = flat[..., even:, :].clone() if even < flat.shape[-2] else None
        diffs = flat[..., 0:even:2, :] - flat[..., 1:even:2, :]
        if self._pending is not None:  # top the open block up first
            take = self.pair_buffer - self._pending.shape[-2]
            diffs, rest = diffs[..., take:, :], torch.cat([self._pending, diffs[..., :take, :]], dim=-2)
            if rest.shape[-2] < self.pair_buffer:
                self._pending = rest
                return
            self._close_block(rest)
        full = diffs.shape[-2] - diffs.shape[-2] % self.pair_buffer
        for start in range(0, full, self.pair_buffer):
            self._close_block(diffs[..., start : start + self.pair_buffer, :])
        self._pending = diffs[..., full:, :].clone() if full < diffs.shape[-2] else None

    def _close_block(self, block: torch.Tensor) -> None:
        h = block.shape[-2]
        self.pair_sq_sum += _off_diagonal_square_sum(block)
        self.pair_count += h * (h - 1)

    def _value(self, t: torch.Tensor):
        return float(t) if not self.batch_shape else t.cpu().numpy()

    def cross_gradient(self) -> torch.Tensor:
        """``C_l = mean_i c_i(l)`` (k x d): the gradient of the pooled mean loss w.r.t. ``V_l`` at 0."""
        self._flush()
        return self.mean.clone()

    def cross_gradient_norm(self):
        """``||C_l||_F``."""
        self._flush()
        return self._value(torch.linalg.matrix_norm(self.mean))

    def covariance_trace(self):
        """``tr(Sigma_hat_l)``: the sample covariance of ``c_i(l)`` (divisor ``n - 1``), traced."""
        self._flush()
        if self.n < 2:
            raise ValueError(f"a sample covariance needs at least 2 examples, got {self.n}")
        return self._value(self.sq_dev / (self.n - 1))

    def norm_sq_unbiased(self):
        """``U_l = ||C_hat_l||^2 - tr(Sigma_hat_l) / n = sum_{i != j} <c_i, c_j> / (n (n - 1))``, unbiased for ``||C_l||^2``."""
        self._flush()
        if self.n < 2:
            raise ValueError(f"the unbiased ||C_l||^2 needs at least 2 examples, got {self.n}")
        return self._value(self.mean.square().sum((-2, -1)) - self.sq_dev / (self.n - 1) / self.n)

    def covariance_square_trace(self):
        """Unbiased ``tr(Sigma_l^2)`` from pairs of example differences (class docstring); needs 4 examples."""
        self._flush()
        total, count = self.pair_sq_sum, self.pair_count
        if self._pending is not None and self._pending.shape[-2] >= 2:  # the open block counts too (not closed here)
            h = self._pending.shape[-2]
            total, count = total + _off_diagonal_square_sum(self._pending), count + h * (h - 1)
        if count == 0:
            raise ValueError(f"tr(Sigma^2) needs two pairs of examples (4), got {self.n} examples")
        return self._value(total / (4 * count))

    def direction_variance(self):
        """``sum_i (s_i - s_bar)^2 / (n - 1)`` with ``s_i = <c_i, direction>``: unbiased for ``a^T Sigma a``."""
        self._flush()
        if self.direction is None:
            raise ValueError("direction_variance needs a direction given at construction")
        if self.n < 2:
            raise ValueError(f"a sample variance needs at least 2 examples, got {self.n}")
        return self._value(self.proj_sq_dev / (self.n - 1))


def _off_diagonal_square_sum(diffs: torch.Tensor) -> torch.Tensor:
    """``sum_{a != b} <u_a, u_b>^2`` over the rows of ``diffs`` (``(*batch, h, p)``)."""
    gram = diffs @ diffs.transpose(-1, -2)
    return gram.square().sum((-2, -1)) - torch.diagonal(gram, dim1=-2, dim2=-1).square().sum(-1)


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


# ----------------------------------------------------------------------------- App. G: the asymptotic interval beside it
ASYMPTOTIC_LABEL = (
    "asymptotic (normal-theory interval on ||C_l||^2, Bonferroni over candidates; not Theorem 3's guarantee)"
)


def norm_sq_standard_error(linear_variance, cov_sq_trace, n: int):
    """``sqrt(4 v1 / n + 2 v2 / (n (n - 1)))``: the standard deviation of ``U_l`` (arrays broadcast).

    ``U_l = sum_{i != j} <c_i, c_j> / (n (n - 1))`` is a U-statistic of order 2 with kernel
    ``h(c, c') = <c, c'>``; Hoeffding's variance formula, with ``zeta_1 = Var <c, C> = C^T Sigma C`` (``v1``)
    and ``zeta_2 = Var <c, c'> = tr(Sigma^2) + 2 C^T Sigma C`` (``v2 = tr(Sigma^2)``), gives exactly
    ``Var U_l = 4 (n - 2) zeta_1 / (n (n - 1)) + 2 zeta_2 / (n (n - 1)) = 4 v1 / n + 2 v2 / (n (n - 1))``.
    """
    if n < 2:
        raise ValueError(f"the standard error of U_l needs n >= 2, got {n}")
    v1 = np.maximum(np.asarray(linear_variance, dtype=np.float64), 0.0)
    v2 = np.maximum(np.asarray(cov_sq_trace, dtype=np.float64), 0.0)
    se = np.sqrt(4.0 * v1 / n + 2.0 * v2 / (n * (n - 1.0)))
    return float(se) if se.ndim == 0 else se


def linear_variance_estimate(direction_variance, cov_sq_trace, n_direction: int):
    """``v1 = C^T Sigma C`` from the variance of ``<c_i, a>`` along ``a = C_hat`` of ``n_direction`` other examples.

    ``E[a^T Sigma a] = C^T Sigma C + tr(Sigma^2) / n_direction`` (``a = C + e``, ``Cov e = Sigma / n_direction``),
    so ``direction_variance - tr(Sigma^2) / n_direction`` is unbiased; clipped at 0 (a variance). In App. G
    ``a`` is the test part's ``C_hat_l`` (the plug-in ``C_hat^T Sigma C_hat``) and the variance along it is
    measured on the calibration part, so one pass over each part is enough.
    """
    value = np.maximum(
        np.asarray(direction_variance, dtype=np.float64) - np.asarray(cov_sq_trace, dtype=np.float64) / n_direction,
        0.0,
    )
    return float(value) if value.ndim == 0 else value


def bonferroni_z(alpha: float, n_candidates: int, dof: int | None = None) -> float:
    """The two-sided quantile at ``1 - alpha / (2 L)`` for ``L`` candidates (Bonferroni: the ``L`` intervals hold
    jointly with probability ``>= 1 - alpha``): Student t with ``dof`` degrees of freedom, the normal one without.

    App. G's asymptotic interval uses ``dof = n_cal - 1``: its variance rests on a sample variance over the
    ``n_cal`` calibration examples (it equals the normal quantile to ~1e-3 at ``n_cal`` in the thousands).
    """
    if not 0 < alpha < 1 or n_candidates < 1:
        raise ValueError(f"need 0 < alpha < 1 and at least one candidate, got alpha={alpha}, L={n_candidates}")
    level = 1.0 - alpha / (2.0 * n_candidates)
    return float(stats.norm.ppf(level) if dof is None else stats.t.ppf(level, dof))


def asymptotic_gamma_interval(norm_sq, se, z: float):
    """``Gamma = max_l ||C_l||`` in ``[max_l sqrt((U_l - z se_l)^+), max_l sqrt((U_l + z se_l)^+)]``.

    On the event that every ``||C_l||^2`` lies in ``U_l -+ z se_l`` (probability ``~ >= 1 - alpha`` at the
    Bonferroni ``z``) each ``||C_l||`` lies in ``[sqrt((U_l - z se_l)^+), sqrt((U_l + z se_l)^+)]`` and the maximum
    in the maxima of the ends (the maximum is monotone in each argument). Candidates on the last axis.
    """
    u, s = np.asarray(norm_sq, dtype=np.float64), np.asarray(se, dtype=np.float64)
    lower = np.sqrt(np.maximum(u - z * s, 0.0)).max(axis=-1)
    upper = np.sqrt(np.maximum(u + z * s, 0.0)).max(axis=-1)
    return (float(lower), float(upper)) if lower.ndim == 0 else (lower, upper)


LOWER_ABOVE_DELTA = "lower end above delta"
UPPER_AT_MOST_DELTA = "upper end at most delta"
N_SEARCH_LIMIT = 10**15  # projected sample sizes beyond this are reported as never


def smallest_sample(condition, start: int = 2, limit: int = N_SEARCH_LIMIT) -> int | None:
    """The smallest integer ``n >= start`` with ``condition(n)``, for a condition that stays true once true
    (doubling, then bisection); None when it does not hold by ``limit``."""
    if condition(start):
        return start
    low, high = start, start * 2
    while not condition(high):
        if high >= limit:
            return None
        low, high = high, min(high * 2, limit)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if condition(mid) else (mid, high)
    return high


def exclusion_side(norm_sq, delta: float) -> str:
    """Which end must leave ``delta`` for a decision: the lower end when the estimate ``max_l sqrt(U_l^+)`` is
    above ``delta`` ("not saturated"), else the upper end ("saturated within delta")."""
    estimate = math.sqrt(max(max(float(u) for u in norm_sq), 0.0))
    return LOWER_ABOVE_DELTA if estimate > delta else UPPER_AT_MOST_DELTA


def theorem3_n_to_exclude(norm_sq, test_traces, cal_traces, alpha: float, delta: float, side: str) -> int | None:
    """The ``n_test`` at which Theorem 3's interval would leave ``delta`` on ``side``, at the current estimates.

    Projection: ``||C_l||^2`` at its unbiased estimate ``U_l^+``, so that at ``n`` test examples
    ``E ||C_hat_l||^2 = U_l^+ + tr_l / n`` (``tr_l`` the test part's traces) and ``Gamma_hat(n)`` is the
    largest of their square roots; ``t(n) = sqrt(sum_l tr_l^cal / (n alpha))`` from the calibration traces.
    Lower end above delta: ``Gamma_hat(n) - t(n) > delta``; upper end at most delta: ``Gamma_hat(n) + t(n) <= delta``.
    """
    u = np.maximum(np.asarray(norm_sq, dtype=np.float64), 0.0)
    tr = np.asarray(test_traces, dtype=np.float64)
    cal = float(np.sum(np.asarray(cal_traces, dtype=np.float64)))

    def gamma_hat(n: int) -> float:
        return float(np.sqrt(u + tr / n).max())

    if side == LOWER_ABOVE_DELTA:
        return smallest_sample(lambda n: gamma_hat(n) - math.sqrt(cal / (n * alpha)) > delta)
    if side == UPPER_AT_MOST_DELTA:
        return smallest_sample(lambda n: gamma_hat(n) + math.sqrt(cal / (n * alpha)) <= delta)
    raise ValueError(f"side {side!r}: use {LOWER_ABOVE_DELTA!r} or {UPPER_AT_MOST_DELTA!r}")


def asymptotic_n_to_exclude(norm_sq, linear_variance, cov_sq_trace, z: float, delta: float, side: str) -> int | None:
    """The ``n_test`` at which the asymptotic interval would leave ``delta`` on ``side``, with ``U_l``, ``v1_l``
    and ``v2_l`` held at their estimates (only ``se_l(n)`` shrinks)."""

    def ends(n: int) -> tuple[float, float]:
        return asymptotic_gamma_interval(norm_sq, norm_sq_standard_error(linear_variance, cov_sq_trace, n), z)

    if side == LOWER_ABOVE_DELTA:
        return smallest_sample(lambda n: ends(n)[0] > delta)
    if side == UPPER_AT_MOST_DELTA:
        return smallest_sample(lambda n: ends(n)[1] <= delta)
    raise ValueError(f"side {side!r}: use {LOWER_ABOVE_DELTA!r} or {UPPER_AT_MOST_DELTA!r}")


@dataclass(frozen=True)
class AsymptoticInterval:
    """The asymptotic interval for ``Gamma = max_l ||C_l||`` beside Theorem 3's (labelled; not used for the verdict).

    Per candidate a normal interval ``U_l -+ z se_l`` on ``||C_l||^2`` (:func:`norm_sq_standard_error`), ``z`` the
    Bonferroni quantile over the ``n_candidates``, mapped to ``Gamma`` by :func:`asymptotic_gamma_interval`.
    Coverage is asymptotic (normality of ``U_l``; the variance estimated), not a guarantee at finite ``n``.
    """

    label: str
    alpha: float
    z: float  # the Bonferroni quantile used (Student t with dof degrees of freedom, normal when dof is None)
    dof: int | None
    n: int  # n_test: examples behind U_l
    n_candidates: int
    gamma_estimate: float  # max_l sqrt(U_l^+)
    argmax: str
    lower: float | None
    upper: float | None
    delta: float | None
    verdict: str
    norm_sq: dict[str, float]  # U_l
    norm_sq_se: dict[str, float]
    linear_variance: dict[str, float]  # v1_l, estimate of C_l^T Sigma_l C_l
    cov_sq_trace: dict[str, float]  # v2_l, estimate of tr(Sigma_l^2)
    n_test_to_exclude_zero: int | None
    n_test_to_exclude_delta: int | None
    n_test_to_exclude_delta_side: str | None

    def as_record(self) -> dict:
        return asdict(self)


def asymptotic_interval(
    norm_sq: Sequence[float],
    linear_variance: Sequence[float],
    cov_sq_trace: Sequence[float],
    *,
    n: int,
    alpha: float,
    dof: int | None = None,
    delta: float | None = None,
    names: Sequence[str] | None = None,
) -> AsymptoticInterval:
    """:class:`AsymptoticInterval` from per-candidate ``U_l``, ``v1_l`` and ``v2_l`` over ``n`` test examples.

    ``dof``: degrees of freedom of the quantile (:func:`bonferroni_z`; App. G: ``n_cal - 1``), None: normal.
    The projected ``n_test`` hold ``U_l``, ``v1_l``, ``v2_l`` and the quantile at their values here.
    """
    if not len(norm_sq) == len(linear_variance) == len(cov_sq_trace) > 0:
        raise ValueError(f"{len(norm_sq)} U_l, {len(linear_variance)} v1_l and {len(cov_sq_trace)} v2_l values")
    names = list(names) if names is not None else [str(i) for i in range(len(norm_sq))]
    z = bonferroni_z(alpha, len(norm_sq), dof)
    se = norm_sq_standard_error(np.asarray(linear_variance), np.asarray(cov_sq_trace), n)
    lower, upper = asymptotic_gamma_interval(np.asarray(norm_sq), se, z)
    best = max(range(len(norm_sq)), key=lambda i: norm_sq[i])
    side = None if delta is None else exclusion_side(norm_sq, delta)
    return AsymptoticInterval(
        label=ASYMPTOTIC_LABEL,
        alpha=float(alpha),
        z=float(z),
        dof=None if dof is None else int(dof),
        n=int(n),
        n_candidates=len(norm_sq),
        gamma_estimate=math.sqrt(max(float(norm_sq[best]), 0.0)),
        argmax=names[best],
        lower=lower,
        upper=upper,
        delta=None if delta is None else float(delta),
        verdict=saturation_verdict(lower, upper, delta),
        norm_sq={k: float(v) for k, v in zip(names, norm_sq, strict=True)},
        norm_sq_se={k: float(v) for k, v in zip(names, np.atleast_1d(se), strict=True)},
        linear_variance={k: float(v) for k, v in zip(names, linear_variance, strict=True)},
        cov_sq_trace={k: float(v) for k, v in zip(names, cov_sq_trace, strict=True)},
        n_test_to_exclude_zero=asymptotic_n_to_exclude(
            norm_sq, linear_variance, cov_sq_trace, z, 0.0, LOWER_ABOVE_DELTA
        ),
        n_test_to_exclude_delta=None
        if delta is None
        else asymptotic_n_to_exclude(norm_sq, linear_variance, cov_sq_trace, z, delta, side),
        n_test_to_exclude_delta_side=side,
    )
