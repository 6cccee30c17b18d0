"""The growth value of the *existing* residual branches' terminal weights: the reference of 09's stop rule.

For a residual block whose branch ends in a layer with weights ``W`` (a convolution, possibly followed by an
eval-mode BatchNorm, i.e. a per-channel affine map), the branch's output moves, to first order in ``W``, within
``T_b = {Psi_b W'}``: ``Psi_b`` the rows of the terminal layer's input features (for a 3x3 convolution its
im2col patches, the ``conv3x3`` family's ``feature_rows``), one row per position. A per-channel scale after the
layer multiplies each output channel's column by a non-zero constant and leaves ``T_b`` unchanged (a channel
whose BatchNorm scale is exactly 0 is counted as if it were not: the span is read off ``Psi_b``).

:func:`terminal_values` returns, per block ``b``, ``V_b = ||P_{T_b} G_b||_F`` with ``G_b = dL_S/d(branch
output)`` on each analysis batch ``S`` (batch-mean loss), averaged over the batches: the same quantity, in the same
normalisation, as the probe's ``growth_value`` ``V_S,l`` of a *new* zero-output block (:mod:`common.science.probe`), but
for the weights a block already has. At a stationary point of the existing terminal weights ``V_b = 0`` (its
projection vanishes exactly when ``Psi_b^T G_b = 0``, the weight gradient), whatever their scale; so the ratio
``max_l V_S,l / max_b V_b`` compares the first-order value of new depth with that of the last layers the network
already has, free of the loss's and the batch's scale.

BatchNorm in eval mode (running statistics), parameters frozen, under :func:`common.science.precision.full_precision`;
nothing of the model is changed (:func:`common.science.activations.probe_mode`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from common.science.activations import probe_mode
from common.science.gram import features_gram
from common.science.precision import full_precision
from common.science.tangent import get_family


@dataclass(frozen=True)
class TerminalValue:
    """``V_b`` of block ``index`` (its type in ``kind``), averaged over ``n_batches``; ``k`` tangent features and
    ``d`` channels, ``rows`` rows of the first batch (what its Gram products cost)."""

    index: int
    kind: str
    value: float
    n_batches: int
    k: int
    d: int
    rows: int


def terminal_layers(block: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """``(terminal layer, branch)`` of a residual block: the layer whose input features span the branch's tangent
    space and the module whose output is the branch's; None for a block with no such branch.

    A block with a ``terminal`` layer (the ResNets' ``z -> shortcut(z) + V psi(z)`` block and the inserted
    :class:`~common.science.tangent.ZeroOutputBlock`): that layer ``V``, which is also the branch's end (nothing follows
    it)."""
    terminal = getattr(block, "terminal", None)
    if isinstance(terminal, nn.Module):
        return terminal, terminal
    return None


def terminal_values(
    model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], family: str = "conv3x3"
) -> list[TerminalValue]:
    """``V_b`` of every block of ``model.blocks`` that has a terminal layer (:func:`terminal_layers`), in block
    order, on ``batches`` (each a forward and a backward pass; module docstring)."""
    rule = get_family(family)
    blocks = [(i, b, terminal_layers(b)) for i, b in enumerate(model.blocks)]
    blocks = [(i, b, t) for i, b, t in blocks if t is not None]
    sums, n_batches, shapes = [0.0] * len(blocks), 0, {}
    inputs, outputs, handles = {}, {}, []
    for k, (_, _, (layer, branch)) in enumerate(blocks):
        handles.append(layer.register_forward_pre_hook(lambda m, a, k=k: inputs.__setitem__(k, a[0])))
        handles.append(branch.register_forward_hook(lambda m, a, out, k=k: outputs.__setitem__(k, out)))
    try:
        with probe_mode(model, "eval"), full_precision():
            for x, y in batches:
                with torch.enable_grad():
                    x = x.detach().requires_grad_(True)  # parameters are frozen: the input carries the graph
                    loss = F.cross_entropy(model(x).float(), y)
                    grads = torch.autograd.grad(loss, [outputs[k] for k in range(len(blocks))])
                for k, g in enumerate(grads):
                    acc = features_gram(rule, inputs[k].detach(), g.detach())
                    sums[k] += acc.growth_value()
                    shapes.setdefault(k, (acc.k, acc.d, acc.rows))
                n_batches += 1
    finally:
        for h in handles:
            h.remove()
    if not n_batches:
        raise ValueError("terminal_values got no batches")
    return [
        TerminalValue(i, type(b).__name__, s / n_batches, n_batches, *shapes[k])
        for k, ((i, b, _), s) in enumerate(zip(blocks, sums, strict=True))
    ]


__all__ = ["TerminalValue", "terminal_layers", "terminal_values"]
