"""Tangent-space Gram statistics of a zero-output block at one candidate (Theorem 1, App. G, App. H.1), in float64.

With ``Psi`` the tangent features of the protocol's zero-output block (:mod:`common.science.tangent`, one row per
row unit, ``k`` columns) and ``G`` the rows of an activation gradient:

- :func:`features_gram` and :func:`tangent_gram`: ``P = Psi^T Psi`` and ``X = Psi^T G`` streamed over example chunks
  (the family's structured route where it has one) into a :class:`common.science.projection.GramAccumulator`, whose
  projection gives ``V_S,l = ||Pi G||_F``;
- :func:`example_contributions`: the per-example ``c_i(l) = Psi_i^T g_i`` of App. G, ``g_i`` example ``i``'s own
  loss gradient, whose mean is the cross-gradient ``C_l``;
- :func:`per_example_tangent_regression` and :class:`TangentRegression`: App. H.1's regression ``Psi W ~ G`` of the
  per-example gradients at one candidate, its ``P`` and ``X`` streamed over batches, nothing of size ``n x d`` kept.

Chunks hold about :data:`CHUNK_ELEMENTS` float64 values; float64 only where the device has it
(:func:`common.science.precision.float64_device`: the CPU for MPS and NPU).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from common.science.activations import LossFn, activation_gradients, probe_mode
from common.science.precision import float64_device
from common.science.projection import GramAccumulator
from common.science.row_gram import RowGram
from common.science.tangent import ZeroOutputBlock, candidate_family, make_zero_block

CHUNK_ELEMENTS = 1 << 20  # float64 elements per chunk of tangent features or padded maps (8 MiB)


@torch.no_grad()
def example_contributions(
    block: ZeroOutputBlock, fam, z: torch.Tensor, g: torch.Tensor, scale: float, chunk_elements: int = CHUNK_ELEMENTS
) -> Iterator[torch.Tensor]:
    """Per-example ``c_i = Psi_i^T (scale * G_i)`` (float64, ``(m, k, d)`` per chunk of examples).

    ``Psi_i`` and ``G_i`` are example ``i``'s rows of the tangent features and of ``g``; with
    ``g = dL_b/dz_l`` of a batch-mean loss and ``scale = b``, ``scale * G_i`` is the gradient of
    example ``i``'s own loss (eval-mode BatchNorm: examples do not interact), and the mean of
    the ``c_i`` is the cross-gradient of the mean loss over the examples.
    """
    fam.check_state(z)  # a state of another layout: a sentence, not an error from inside psi
    psi = block.psi(z)  # whole batch: train-mode BN inside psi sees the batch's statistics
    rows, d = fam.rows_per_example(z), fam.width(z)
    k = fam.feature_dim(d)
    per_chunk = max(1, chunk_elements // max(1, rows * max(k, d)))
    for start in range(0, z.shape[0], per_chunk):
        sl = slice(start, start + per_chunk)
        m = int(psi[sl].shape[0])
        f64 = float64_device(z.device)  # float64 only where the device has it (the CPU for MPS, NPU)
        features = fam.feature_rows(psi[sl]).to(f64).to(torch.float64).reshape(m, rows, k)
        grads = fam.state_rows(g[sl]).to(f64).to(torch.float64).reshape(m, rows, d)
        yield torch.bmm(features.transpose(1, 2), grads).mul_(scale)


@torch.no_grad()
def tangent_gram(
    block: ZeroOutputBlock, fam, z: torch.Tensor, g: torch.Tensor, chunk_elements: int, rows_form: bool = False
) -> GramAccumulator | RowGram:
    """``P = Psi^T Psi`` and ``X = Psi^T G`` of one batch, streamed over example chunks (float64); with
    ``rows_form``, the rows themselves where there are fewer than ``k`` (:class:`common.science.row_gram.RowGram`)."""
    fam.check_state(z)  # a state of another layout: a sentence, not an error from inside psi
    psi = block.psi(z)  # whole batch: train-mode BN inside psi sees the batch's statistics
    return features_gram(fam, psi, g, chunk_elements, rows_form)


def features_gram(
    fam, psi: torch.Tensor, g: torch.Tensor, chunk_elements: int = CHUNK_ELEMENTS, rows_form: bool = False
) -> GramAccumulator | RowGram:
    """``P = Psi^T Psi`` and ``X = Psi^T G`` (float64) of the tangent features of ``psi`` (the map a terminal layer
    of family ``fam`` reads) and the state-shaped gradient ``g`` at its output: the family's structured route where
    it has one, else the rows, streamed over example chunks. With ``rows_form`` and fewer rows than ``k``: the rows
    (n x k and n x d, less than ``P``), for the rows x rows form."""
    d, k = fam.width(g), int(fam.feature_rows(psi[:1]).shape[1])  # k: the features' columns (one example's rows)
    if rows_form and g.numel() // d < k:  # what the rows are made of (the family's psi output), and its K route
        rows = RowGram(k, d, device=psi.device, features=fam.feature_rows, gram=fam.row_gram)
        rows.update(psi.to(rows.device), fam.state_rows(g.to(rows.device)))
        return rows
    acc = GramAccumulator(k, d, device=psi.device)
    psi, g = psi.to(acc.device), g.to(acc.device)  # float64 only where the device has it (the CPU for MPS, NPU)
    if fam.gram is not None and fam.gram_supported(psi):  # structured route, chunked inside
        P, X = fam.gram(psi, g, chunk_elements=chunk_elements)
        acc.update_statistics(P, X, float(torch.linalg.vector_norm(g, dtype=torch.float64)) ** 2, g.numel() // d)
        return acc
    per_chunk = max(1, chunk_elements // max(1, fam.rows_per_example(psi) * k))  # rows x k float64 features
    for start in range(0, psi.shape[0], per_chunk):
        sl = slice(start, start + per_chunk)
        acc.update(fam.feature_rows(psi[sl]), fam.state_rows(g[sl]))
    return acc


# ----------------------------------------------------------------------------- per-example tangent regression (H.1)
@dataclass
class TangentRegression:
    """Streamed statistics of the regression ``Psi W ~ G`` at one candidate, ``G`` the per-example gradients.

    ``gram`` holds ``P = Psi^T Psi`` and ``X = Psi^T G`` where row ``r`` of ``G`` is the row of
    ``g_i = d loss_i / d z_i`` (example ``i``'s own loss; exact with eval-mode BatchNorm, where
    examples do not interact) and row ``r`` of ``Psi`` the protocol block's tangent features.
    ``gram.solution()`` is the least-squares ``W* = P^+ X``, ``gram.growth_value()`` is
    ``||Pi G||_F`` and ``gram.grad_norm()`` is ``||G||_F``; ``examples`` is ``n``.
    """

    gram: GramAccumulator
    examples: int
    index: int
    family: str

    def first_order_change(self, alpha: float) -> float:
        """The first-order change of the mean loss when the block outputs ``-alpha Pi g``: ``-alpha ||Pi G||^2 / n``."""
        return -alpha * self.gram.growth_value() ** 2 / self.examples

    def pooled_growth_value(self) -> float:
        """``V_S,l`` in the pooled mean-loss normalisation (rows ``G / n``): ``||Pi G||_F / n``."""
        return self.gram.growth_value() / self.examples

    def relative_residual(self) -> float:
        """``||Pi G - G||_F / ||G||_F`` (0 under realizability, 1 when ``G`` is orthogonal to the tangent space)."""
        g_sq, pi_sq = self.gram.grad_norm() ** 2, self.gram.growth_value() ** 2
        return math.sqrt(max(g_sq - pi_sq, 0.0) / g_sq) if g_sq > 0 else 0.0


def per_example_tangent_regression(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    index: int,
    *,
    loss_fn: LossFn = F.cross_entropy,
    family: str | None = None,
    seed: int = 0,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> TangentRegression:
    """Stream ``P`` and ``X`` of candidate ``index`` over ``batches``, nothing of size ``n x d`` kept (App. H.1).

    Each batch is one forward and one backward pass of the frozen model in eval mode with the
    batch-mean loss ``loss_fn``; the per-example gradients are ``b`` times the rows of the batch
    gradient. ``family`` and ``seed`` define the standard zero-output block exactly as in
    :func:`common.science.probe.probe_activation_gradients` and :func:`common.science.growth.insert_zero_block`.
    """
    candidate = model.candidates()[index]
    fam = candidate_family(candidate, family)
    block: ZeroOutputBlock | None = None
    total: GramAccumulator | None = None
    n = 0
    with probe_mode(model, "eval"):
        for x, y in batches:
            _, (z,), (g,) = activation_gradients(model, x, y, loss_fn, [candidate])
            b = int(x.shape[0])
            if block is None:
                fam.check_state(z, candidate.name)
                block = make_zero_block(fam.name, fam.width(z), seed, candidate.index, like=z).eval()
            acc = tangent_gram(block, fam, z, g * b, chunk_elements)
            if total is None:
                total = acc
            else:
                total.merge(acc)
            n += b
    if total is None:
        raise ValueError("per_example_tangent_regression got no batches")
    return TangentRegression(gram=total, examples=n, index=candidate.index, family=fam.name)
