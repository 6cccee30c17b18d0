"""The rows x rows form of the exact growth value, for a place with fewer gradient rows than tangent features.

``V_S,l = ||Pi G||_F`` (docs/design.md, section "Exact growth value V_S,l"), ``Pi`` the orthogonal projection onto
the column space of ``Psi`` (n x k) in ``R^n``, which is the range of ``K = Psi Psi^T`` (n x n). So with
``K = U diag(lambda) U^T``, ``V_S,l^2 = sum over the kept eigenvectors u of ||u^T G||^2``: no ``k x k`` Gram
``P = Psi^T Psi`` at all. The nonzero eigenvalues of ``K`` are those of ``P``, so the accumulator's rank tolerance
(:func:`common.science.projection.kept_eigenpairs`, ``rtol = k eps(float64)`` of the largest) keeps the same
directions and gives the same ``tangent_rank``. Where ``K`` is certified full rank
(:func:`common.science.pooled_solve.rows_solve`), ``Pi`` is the identity and ``V_S,l = ||G||_F``: "``V_S,l = AG_l``
by rank", with no projection computed.

:class:`RowGram` keeps the rows themselves, float64: ``Psi`` (n x k) and ``G`` (n x d), ``n (k + d)`` values, less
than ``P`` and ``X`` (``k (k + d)``) while ``n < k``. :func:`merge_grams` pools two accumulators: in the rows form while
their rows stay below ``k``, else in :class:`common.science.projection.GramAccumulator`'s ``k x k`` form (the rows
folded into ``P`` and ``X``), so memory never exceeds the features form's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch

from common.science.precision import float64_device
from common.science.projection import DEFAULT_RTOL_FACTOR, GramAccumulator, kept_eigenpairs


class RowGram:
    """Streamed rows of ``Psi`` (n x k) and ``G`` (n x d) in float64, with the interface of
    :class:`common.science.projection.GramAccumulator` (``growth_value``, ``rank``, ``cross_gradient_norm``,
    ``grad_norm``, ``merge``, ``scaled``) computed from ``K = Psi Psi^T`` (module docstring).

    What is kept of ``Psi`` is what its rows are made of: the rows themselves by default, or a tangent family's
    ``psi`` output with ``features`` (``psi -> Psi`` rows) and ``gram`` (``psi -> K`` without the rows: for
    ``conv3x3`` the maps, 9 times fewer values than their im2col rows, :func:`common.science.tangent._conv_row_gram`).

    >>> acc = RowGram(k=4, d=1)
    >>> acc.update(torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]]), torch.tensor([[3.0], [1.0]]))
    >>> acc.rank(), round(acc.growth_value(), 12), round(acc.grad_norm(), 12)   # G projected on (1, 1) / sqrt 2
    (1, 2.828427124746, 3.162277660168)
    """

    def __init__(
        self,
        k: int,
        d: int,
        *,
        device: torch.device | str | None = None,
        rtol: float | None = None,
        features: Callable[[torch.Tensor], torch.Tensor] | None = None,
        gram: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        if k <= 0 or d <= 0:
            raise ValueError(f"RowGram needs k > 0 and d > 0, got k={k}, d={d}")
        self.k, self.d = int(k), int(d)
        self.features, self.gram_of = features, gram
        self.device = float64_device(device)
        self.rtol = float(rtol) if rtol is not None else DEFAULT_RTOL_FACTOR * self.k * torch.finfo(torch.float64).eps
        self._psi: list[torch.Tensor] = []
        self._g: list[torch.Tensor] = []
        self.rows = 0
        self._eig: tuple[torch.Tensor, torch.Tensor] | None = None
        self._gram: torch.Tensor | None = None

    def update(self, psi_rows: torch.Tensor, grad_rows: torch.Tensor) -> None:
        """Add rows: ``psi_rows`` (n x k; with ``features``, what they are made of) and ``grad_rows`` (n x d), row
        ``i`` of each the same row unit."""
        n = self._rows_of(psi_rows)
        if grad_rows.dim() != 2 or n != grad_rows.shape[0] or grad_rows.shape[1] != self.d:
            raise ValueError(f"expected {n} rows of (n, {self.d}) gradients, got {tuple(grad_rows.shape)}")
        self._psi.append(psi_rows.detach().to(self.device).to(torch.float64))
        self._g.append(grad_rows.detach().to(self.device).to(torch.float64))
        self.rows += n
        self._eig = self._gram = None

    def _rows_of(self, psi: torch.Tensor) -> int:
        """Rows of ``psi`` (checked to have ``k`` columns)."""
        rows = psi if self.features is None else self.features(psi[:1])
        if rows.dim() != 2 or rows.shape[1] != self.k:
            raise ValueError(f"expected features of (n, {self.k}) rows, got {tuple(rows.shape)}")
        return int(psi.shape[0]) if self.features is None else int(psi.shape[0]) * int(rows.shape[0])

    def _joined(self, parts: list[torch.Tensor], width: int) -> torch.Tensor:
        if len(parts) > 1:
            parts[:] = [torch.cat(parts)]  # joined once, kept joined
        return parts[0] if parts else torch.zeros(0, width, dtype=torch.float64, device=self.device)

    @property
    def psi(self) -> torch.Tensor:
        """What ``Psi`` is made of so far (its rows, n x k, without ``features``)."""
        return self._joined(self._psi, self.k)

    def feature_rows(self) -> torch.Tensor:
        """``Psi`` (n x k)."""
        return self.psi if self.features is None else self.features(self.psi)

    @property
    def G(self) -> torch.Tensor:
        """``G`` (n x d), the gradient rows so far."""
        return self._joined(self._g, self.d)

    def merge(self, other: RowGram, *, grad_scale: float = 1.0) -> None:
        """Add another accumulator's rows, their gradients multiplied by ``grad_scale``."""
        if (other.k, other.d) != (self.k, self.d):
            raise ValueError(f"cannot merge a ({other.k}, {other.d}) accumulator into a ({self.k}, {self.d}) one")
        if other.rows:
            self.update(other.psi, other.G * grad_scale)

    def scaled(self, grad_scale: float) -> RowGram:
        """A copy whose gradient rows are multiplied by ``grad_scale`` (``Psi`` shared: rows are never changed)."""
        out = copy.copy(self)
        out._psi, out._g = [self.psi], [self.G * grad_scale]
        return out

    def scale_(self, grad_scale: float) -> RowGram:
        """:meth:`scaled` in place; returns ``self``."""
        self._g = [self.G * grad_scale]
        return self

    def to_features(self) -> GramAccumulator:
        """The same rows as ``P = Psi^T Psi`` and ``X = Psi^T G`` (the ``k x k`` form, for more rows than ``k``)."""
        acc = GramAccumulator(self.k, self.d, device=self.device, rtol=self.rtol)
        if self.rows:
            acc.update(self.feature_rows(), self.G)
        return acc

    # ------------------------------------------------------------------ results
    def gram(self) -> torch.Tensor:
        """``K = Psi Psi^T`` (n x n; formed once for the rows so far)."""
        if self._gram is None:
            rows = None if self.gram_of is not None else self.feature_rows()
            self._gram = self.gram_of(self.psi) if rows is None else rows @ rows.T
        return self._gram

    def _kept(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._eig is None:
            self._eig = torch.linalg.eigh(self.gram())
        return kept_eigenpairs(*self._eig, self.rtol)

    def rank(self) -> int:
        """Numerical rank of ``Psi`` (= of ``K``, = of ``P``) under the documented tolerance."""
        return int(self._kept()[0].numel()) if self.rows else 0

    def growth_value(self) -> float:
        """``V_S,l = ||U_kept^T G||_F``: ``G`` projected onto the range of ``K`` (module docstring)."""
        if not self.rows:
            return 0.0
        _, evecs = self._kept()
        return math.sqrt(float((evecs.T @ self.G).square().sum()))

    def cross_gradient_norm(self) -> float:
        """``||C_l||_F = ||Psi^T G||_F = sqrt(tr(G^T K G))``, without the ``k x d`` matrix."""
        g = self.G
        return math.sqrt(max(float((g * (self.gram() @ g)).sum()), 0.0)) if self.rows else 0.0

    def cross_gradient(self) -> torch.Tensor:
        """``C_l = Psi^T G`` (k x d)."""
        return self.feature_rows().T @ self.G

    def grad_norm(self) -> float:
        """``||G||_F`` over the rows seen."""
        return float(torch.linalg.vector_norm(self.G)) if self.rows else 0.0


def merge_grams(total, part, grad_scale: float = 1.0):
    """``total`` plus ``part`` (its gradient rows times ``grad_scale``), either one a :class:`RowGram` or a
    :class:`~common.science.projection.GramAccumulator`: rows stay rows while there are fewer than ``k`` of them, else
    they are folded into ``P`` and ``X``. Returns the pooled accumulator (``total`` or ``part``, changed in place)."""
    if isinstance(total, RowGram) and isinstance(part, RowGram) and total.rows + part.rows < total.k:
        total.merge(part, grad_scale=grad_scale)
        return total
    if isinstance(part, RowGram):
        total = total.to_features() if isinstance(total, RowGram) else total
        if part.rows:
            total.update(part.feature_rows(), part.G * grad_scale)
        return total
    if isinstance(total, RowGram):  # the rows so far into the part's P and X
        part.scale_(grad_scale)
        if total.rows:
            part.update(total.feature_rows(), total.G)
        return part
    total.merge(part, grad_scale=grad_scale)
    return total
