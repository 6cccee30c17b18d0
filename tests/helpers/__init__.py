"""Builders shared by several test files: small float64 models with candidates, and their ``Psi`` / ``G`` rows.

Models: a tiny ResNet-8+N (conv3x3 family, rows = image-position pairs) and a smooth residual
MLP (linear family, rows = examples). ``Psi`` and ``G`` always come from the real pipeline:
:func:`common.science.activations.activation_gradients` for ``G = dL/dz_l`` and the protocol's seeded block
(:func:`common.science.tangent.make_zero_block`) for ``Psi``.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from common.models.candidates import Candidate
from common.models.resnet import ResNet, ResNetConfig
from common.science.activations import activation_gradients, probe_mode
from common.science.precision import PRECISION_LEAVES, precision_flag
from common.science.tangent import candidate_family, make_zero_block


# ----------------------------------------------------------------------------- small models
class MLPBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z + self.fc2(torch.tanh(self.fc1(z)))


class ResidualMLP(nn.Module):
    """A smooth (tanh) residual MLP that reports candidates like the ResNets do."""

    def __init__(self, d_in: int = 5, width: int = 6, depth: int = 2, classes: int = 3) -> None:
        super().__init__()
        self.stem = nn.Linear(d_in, width)
        self.blocks = nn.ModuleList(MLPBlock(width) for _ in range(depth))
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.tanh(self.stem(x))
        for block in self.blocks:
            z = block(z)
        return self.head(z)

    def candidates(self) -> list[Candidate]:
        found = [Candidate(i, f"block{i}.in", b, "linear") for i, b in enumerate(self.blocks)]
        return [*found, Candidate(len(self.blocks), "head.in", self.head, "linear")]


def tiny_resnet(seed: int, extra_blocks: int = 1) -> ResNet:
    """A random ResNet-8+N in float64, eval mode, with non-trivial BN running statistics."""
    torch.manual_seed(seed)
    model = ResNet(ResNetConfig(extra_blocks=extra_blocks, widths=(4, 8, 16), num_classes=5)).double()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0, 0.1)
    return model.eval()


def resnet_case(seed: int, batch: int = 2, size: int = 16):
    model = tiny_resnet(seed)
    g = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(batch, 3, size, size, generator=g, dtype=torch.float64)
    return model, x, torch.randint(0, 5, (batch,), generator=g)


def mlp_case(seed: int, batch: int = 8):
    torch.manual_seed(seed)
    model = ResidualMLP().double().eval()
    g = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(batch, 5, generator=g, dtype=torch.float64)
    return model, x, torch.randint(0, 3, (batch,), generator=g)


CASES = {"resnet": resnet_case, "mlp": mlp_case}


def tangent_rows(model, x, y, index: int, seed: int = 0):
    """``(Psi, G rows, G tensor)`` of candidate ``index``: the real probe path and the protocol's block."""
    with probe_mode(model):
        _, states, grads = activation_gradients(model, x, y)
    z, g = states[index], grads[index]
    fam = candidate_family(model.candidates()[index])
    block = make_zero_block(fam.name, fam.width(z), seed, index, like=z).eval()
    with torch.no_grad():
        psi = block.tangent_features(z)
    return psi, fam.state_rows(g), g


def rows_to_state(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Inverse of the family's ``state_rows``."""
    if like.dim() == 4:
        b, c, h, w = like.shape
        return rows.reshape(b, h, w, c).permute(0, 3, 1, 2)
    return rows.reshape(like.shape)


def terminal_weight_from_rows(block, matrix_kd: torch.Tensor) -> torch.Tensor:
    """A (k x d) matrix in Psi-row coordinates as the block's terminal weights ``V_l`` (d x k, or d x C x 3 x 3)."""
    return matrix_kd.T.reshape(block.terminal.weight.shape)


def loss_of(model, x, y) -> float:
    with torch.no_grad():
        return float(F.cross_entropy(model(x), y))


def explicit_states_grads(model, x, y):
    """``[z_l]`` and ``[dL/dz_l]`` by running the ResNet by hand with ``retain_grad`` (no hooks)."""
    model = copy.deepcopy(model).eval()
    states = [model.stem(x)]
    z = states[0]
    for block in model.blocks:
        z = block(z)
        states.append(z)
    for s in states:
        s.retain_grad()
    F.cross_entropy(model.head(z), y).backward()
    return states, [s.grad for s in states]


def precision_flags() -> dict:
    """Every ``torch.backends.*.fp32_precision`` leaf the precision guard manages, by path."""
    return {p: precision_flag(p).fp32_precision for p in PRECISION_LEAVES}
