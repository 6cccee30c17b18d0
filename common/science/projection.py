"""Cross-gradient, streamed Gram statistics, the exact growth value V_S,l, App. G's contribution moments.

For one sample set ``S`` (docs/design.md, section "Exact growth value V_S,l"), with ``G`` the rows of
``dL_S/dz_l`` (n x d) and ``Psi`` the tangent features (n x k) of candidate ``l``:

- cross-gradient ``C_l = Psi^T G`` (k x d): the gradient of ``L_S`` with respect to ``V_l`` at
  ``V_l = 0`` (App. F; :func:`common.science.growth.insert_zero_block` checks it against autograd);
- exact empirical growth value ``V_S,l = || Psi (Psi^T Psi)^+ Psi^T G ||_F``, the norm of the
  orthogonal projection of ``G`` onto the residual tangent space ``{Psi W}`` (App. D.1 closed form),
  computed as ``V_S,l^2 = tr(X^T P^+ X)`` from ``P = Psi^T Psi`` and ``X = Psi^T G`` streamed over
  row chunks and batches, so memory is ``O(k^2 + k d)`` however many rows go through;
- the streamed moments of the per-example contributions ``c_i(l)`` whose mean is the cross-gradient
  of the *pooled* mean loss (:class:`ContributionMoments`): what App. G's separated saturation test
  (Theorem 3) and the asymptotic interval beside it need. The intervals and verdicts themselves are
  functions of those numbers, in :mod:`common.science.saturation`.

Rank tolerance (one place: :data:`DEFAULT_RTOL_FACTOR`): ``P`` is eigendecomposed in float64 and
eigenvalues ``<= rtol * max_eig`` count as zero, ``rtol = k * eps(float64)`` by default (numpy's
``matrix_rank`` convention, applied to the Gram matrix). A spurious direction kept by this rule
adds at most ``~ eps * ||G||_F^2`` to ``V^2`` (its ``X`` component is rounding noise too), so the
value is insensitive to the exact factor; the reported rank is what the tolerance defines.

Where the float64 arithmetic runs (one place: :func:`common.science.precision.float64_device`): on the
features' own device when it computes float64 (CPU, CUDA), else on the CPU. Apple MPS has no
float64 and Ascend NPUs lack float64 matrix products and ``eigh`` (or cast to float32 silently),
which the float64 rank tolerance above cannot survive; there the rows are moved to the CPU
*before* the cast to float64. :attr:`GramAccumulator.device` records where it ran.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch

from common.science.precision import float64_device

DEFAULT_RTOL_FACTOR = 1.0  # rtol = DEFAULT_RTOL_FACTOR * k * eps(float64), see the module docstring


class GramAccumulator:
    """Streamed ``P = Psi^T Psi`` (k x k) and ``X = Psi^T G`` (k x d) in float64 (docs/design.md, section
    "Exact growth value V_S,l").

    ``update(psi_rows, grad_rows)`` adds any number of rows; nothing but ``P``, ``X``, the row
    count and ``||G||_F^2`` is kept. Then ``growth_value()`` is ``V_S,l``,
    ``cross_gradient_norm()`` is ``||C_l||_F`` and ``grad_norm()`` is ``||G||_F`` over the rows seen.
    ``device`` is where the rows come from; the statistics live on :func:`~common.science.precision.float64_device` of it
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
        (the conv3x3 family's translation structure, :func:`common.science.tangent._conv_gram`).
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

    def scale_(self, grad_scale: float) -> GramAccumulator:
        """:meth:`scaled` in place (the same numbers, no copy of the ``k x k`` ``P``); returns ``self``."""
        self.X.mul_(grad_scale)
        self.grad_sq = self.grad_sq * grad_scale**2
        return self

    # ------------------------------------------------------------------ results
    def _eigh(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._eig is None:
            evals, evecs = torch.linalg.eigh(self.P)
            self._eig = (evals, evecs)
        return self._eig

    def _kept(self) -> tuple[torch.Tensor, torch.Tensor]:
        return kept_eigenpairs(*self._eigh(), self.rtol)

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


def kept_eigenpairs(evals: torch.Tensor, evecs: torch.Tensor, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The eigenpairs of a Gram matrix that count (module docstring): eigenvalues above ``rtol * max_eig``."""
    top = evals.max().clamp_min(0.0)
    keep = evals > rtol * top
    if top <= 0:
        keep = torch.zeros_like(keep)
    return evals[keep], evecs[:, keep]


def growth_value(psi_rows: torch.Tensor, grad_rows: torch.Tensor, *, rtol: float | None = None) -> float:
    """``V_S,l`` of one set of rows (a one-shot :class:`GramAccumulator`)."""
    acc = GramAccumulator(psi_rows.shape[1], grad_rows.shape[1], device=psi_rows.device, rtol=rtol)
    acc.update(psi_rows, grad_rows)
    return acc.growth_value()


def cross_gradient(psi_rows: torch.Tensor, grad_rows: torch.Tensor) -> torch.Tensor:
    """``C_l = Psi^T G`` (k x d), in float64."""
    return psi_rows.double().T @ grad_rows.double()


# ----------------------------------------------------------------------------- App. G: per-example contributions
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
