"""Fully connected ResNet of Cohen et al. (2021), the model of their scaling experiments.

    x_{k+1} = x_k + delta_k * sigma(A_k x_k + b_k),    k = 0 .. L-1,   x_k in R^d

with no input or output layer: the network maps R^d to R^d and is trained on a regression.
Two families (their Section 3.1):

- ``tanh`` with one **shared** depth factor ``delta_k = |delta|`` for every layer (the absolute
  value keeps the factor non-negative, as in their code), initialised to ``1/L``;
- ``relu`` with a **per-layer** factor ``delta_k`` (any sign), initialised ``N(0, (1/L)^2)``.

The weights of all layers are stacked into one depth-indexed parameter per kind, ``A`` of shape
``(L, d, d)``, ``b`` of shape ``(L, d)`` and ``delta`` of shape ``(1,)`` (shared) or ``(L,)``
(per layer), so the sequences ``A_0 .. A_{L-1}`` that :mod:`common.science.scaling` analyses are
``model.A`` as it is. Initialisation ("xavier-depth" in their code): entries of ``A_k`` are
``N(0, (s / (L d))^2)`` and of ``b_k`` ``N(0, (s / (L sqrt(d)))^2)`` with ``s = init_scale``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu}
DELTA_MODES = ("shared", "per_layer")


@dataclass(frozen=True)
class FCResNetConfig:
    """Every hyper-parameter of the fully connected ResNet, with the tanh family's defaults."""

    depth: int  # L: number of residual layers
    dim: int = 10  # d
    activation: str = "tanh"  # "tanh" | "relu"
    delta: str = "shared"  # "shared" (one |delta| for every layer) | "per_layer" (delta_k)
    init_scale: float = 0.01  # s in the initialisation above


class FCResNet(nn.Module):
    """``x -> x_L`` with ``x_{k+1} = x_k + delta_k * sigma(A_k x_k + b_k)``."""

    def __init__(self, config: FCResNetConfig) -> None:
        super().__init__()
        if config.depth < 1 or config.dim < 1:
            raise ValueError(f"depth and dim must be >= 1, got {config.depth} and {config.dim}")
        if config.activation not in ACTIVATIONS or config.delta not in DELTA_MODES:
            raise ValueError(f"activation in {sorted(ACTIVATIONS)} and delta in {DELTA_MODES}, got {config}")
        self.config = config
        L, d = config.depth, config.dim
        self.A = nn.Parameter(torch.empty(L, d, d))  # A_k acts as x -> A_k x
        self.b = nn.Parameter(torch.empty(L, d))
        self.delta = nn.Parameter(torch.empty(1 if config.delta == "shared" else L))
        self.sigma = ACTIVATIONS[config.activation]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        L, d, s = self.config.depth, self.config.dim, self.config.init_scale
        with torch.no_grad():
            self.A.normal_(0.0, s / (L * d))
            self.b.normal_(0.0, s / (L * math.sqrt(d)))
            if self.config.delta == "shared":
                self.delta.fill_(1.0 / L)
            else:
                self.delta.normal_(0.0, 1.0 / L)

    def layer_deltas(self) -> torch.Tensor:
        """``delta_k`` for every layer, shape ``(L,)`` (the shared factor is ``|delta|``, repeated)."""
        if self.config.delta == "shared":
            return self.delta.abs().expand(self.config.depth)
        return self.delta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # unbind once: indexing A[k] in the loop would make every layer's backward write a full (L, d, d) gradient
        layers = zip(self.A.unbind(0), self.b.unbind(0), self.layer_deltas().unbind(0), strict=True)
        for a_k, b_k, delta_k in layers:  # x: (B, d)
            x = x + delta_k * self.sigma(torch.addmm(b_k, x, a_k.T))
        return x
