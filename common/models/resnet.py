"""CIFAR-style ResNet-8 backbone with ``N`` extra residual blocks added cyclically (paper B.1, B.3).

The backbone has a 3x3 stem conv (``widths[0]`` channels) + BN + ReLU, three stages of one
residual block each (widths 16/32/64 on CIFAR, 32/64/128 on ImageNet-100), and a head
(BN + ReLU, global average pooling, a linear classifier). Extra block ``i`` (``i = 0..N-1``) goes
to stage ``i mod 3``, giving ``3 + N`` blocks; widths and head never change.

Every block has the paper's residual form ``z -> shortcut(z) + V psi(z; U)`` with
``psi(z; U) = relu(BN(conv3x3_U(z)))`` and ``V`` a bias-free 3x3 convolution, the block's terminal
layer, with nothing after it (:class:`ResidualBlock`). This is the probe's ``conv3x3`` tangent family
(``common/science/tangent.py``), so one block is measured, grown and trained from scratch:
``V_S,l`` at a candidate is the first-order value of inserting exactly the block every other
place already has, and an insertion (:func:`grow`) is that block with ``V = 0``
(docs/decisions.md, section "One residual block"). The first block of stages 2 and 3
downsamples: ``U`` has stride 2 and the shortcut is option A (He et al. 2016, CIFAR ResNets):
the identity, subsampled and zero-padded in channels; everywhere else the shortcut is the identity.

Blocks sit in one flat ``nn.ModuleList`` so that a zero-output block can be inserted at any
candidate (``common/science/growth.py``) with ``model.blocks.insert(l, block)``.

Growth (script 03, "Function-preserving growth"): :func:`grow` turns a ResNet-(8+N) into a
ResNet-(8+N+1) in place by inserting the protocol's zero-output ``conv3x3`` block
(:func:`common.science.growth.insert_zero_block`: ``U`` seeded by ``(seed, place)``, ``V = 0``) where the
sweep's ResNet-(8+N+1) has extra block ``N`` (the end of stage ``N mod 3``,
:func:`extra_block_position`); the grown model has the same ``state_dict`` keys and shapes as
``ResNet(ResNetConfig(extra_blocks=N + 1))``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from common.models.candidates import Candidate
from common.presets.paper import CIFAR_STAGE_WIDTHS, IMAGENET100_BASE_CHANNELS
from common.science.growth import insert_zero_block
from common.science.tangent import ZeroOutputBlock

BACKBONE_DEPTH = 8  # ResNet-8: stem conv + 3 blocks x 2 convs + head
TANGENT_FAMILY = "conv3x3"  # the protocol's zero-output block at every candidate (common/science/tangent.py)
BLOCK = TANGENT_FAMILY  # every block of the network is this family's block (ResidualBlock): in every run's identity
# B.3 gives only ImageNet-100's base width; doubling it per stage, as CIFAR's 16/32/64 do, is our reading.
IMAGENET100_STAGE_WIDTHS = (IMAGENET100_BASE_CHANNELS, 2 * IMAGENET100_BASE_CHANNELS, 4 * IMAGENET100_BASE_CHANNELS)


def depth_label(extra_blocks: int) -> int:
    """The "d" of "ResNet-d" for a backbone with ``N`` extra blocks: ``d = 8 + N``.

    docs/design.md, section "Depth labels".
    """
    return BACKBONE_DEPTH + extra_blocks


def blocks_per_stage(extra_blocks: int, num_stages: int = 3) -> list[int]:
    """Cyclic placement rule of B.1: one backbone block per stage, extra block i to stage i mod 3."""
    if extra_blocks < 0:
        raise ValueError(f"extra_blocks must be >= 0, got {extra_blocks}")
    return [1 + len(range(s, extra_blocks, num_stages)) for s in range(num_stages)]


@dataclass(frozen=True)
class ResNetConfig:
    """Every architectural hyper-parameter of the sweep's ResNets, with CIFAR defaults."""

    extra_blocks: int = 0  # N: the sweep's depth variable
    widths: tuple[int, int, int] = CIFAR_STAGE_WIDTHS  # ImageNet-100: IMAGENET100_STAGE_WIDTHS
    num_classes: int = 10
    in_channels: int = 3

    @classmethod
    def for_dataset(cls, dataset: str, extra_blocks: int, num_classes: int) -> ResNetConfig:
        widths = IMAGENET100_STAGE_WIDTHS if dataset == "imagenet100" else CIFAR_STAGE_WIDTHS
        return cls(extra_blocks=extra_blocks, widths=widths, num_classes=num_classes)


class DownsampleShortcut(nn.Module):
    """Option-A shortcut: take every other pixel and zero-pad the new channels."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.pad = out_channels - in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, ::2, ::2]
        return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))


class ResidualBlock(nn.Module):
    """``z -> shortcut(z) + V psi(z; U)``, ``psi = relu(BN(conv3x3_U z))``, ``V`` a 3x3 conv with nothing after it.

    The module names are the zero-output block's (:class:`~common.science.tangent.ZeroOutputBlock`: ``psi``,
    ``terminal`` = ``V``), so a stride-1 block and an inserted one have the same ``state_dict`` keys.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.psi = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),  # U
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )
        self.terminal = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)  # V
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = DownsampleShortcut(in_channels, out_channels)
        else:
            self.shortcut = nn.Identity()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.shortcut(z) + self.terminal(self.psi(z))


class Head(nn.Module):
    """BN + ReLU, global average pooling and a linear classifier (an endpoint, never a candidate).

    The residual stream is never normalised inside the blocks (nothing follows ``V``), so its scale grows with
    depth; the head's BatchNorm hands the classifier the same scale at every depth, as the final BN-ReLU of a
    pre-activation ResNet does (docs/decisions.md, section "One residual block").
    """

    def __init__(self, channels: int, num_classes: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = F.relu(self.norm(z))  # (B, C, H, W)
        return self.fc(z.mean(dim=(2, 3)))  # (B, C) -> (B, classes)


class ResNet(nn.Module):
    """ResNet-(8+N): stem, ``3 + N`` residual blocks in three stages, head."""

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.config = config
        w = config.widths
        self.stem = nn.Sequential(
            nn.Conv2d(config.in_channels, w[0], 3, padding=1, bias=False),
            nn.BatchNorm2d(w[0]),
            nn.ReLU(inplace=True),
        )
        blocks, stage_of_block, channels = [], [], w[0]
        for stage, count in enumerate(blocks_per_stage(config.extra_blocks)):
            for i in range(count):
                stride = 2 if (stage > 0 and i == 0) else 1
                blocks.append(ResidualBlock(channels, w[stage], stride))
                stage_of_block.append(stage)
                channels = w[stage]
        self.blocks = nn.ModuleList(blocks)
        self.stage_of_block = stage_of_block
        self.head = Head(channels, config.num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.stem(x)  # (B, w0, H, W)
        for block in self.blocks:  # z_l is the input of block l
            z = block(z)
        return self.head(z)  # (B, classes)

    def candidates(self) -> list[Candidate]:
        """The ``4 + N`` insertion candidates in fixed order (docs/design.md, section "Insertion candidates").

        Candidate ``l < len(blocks)`` is the input of block ``l`` (candidate 0 is the stem's
        output); the last candidate is the tensor entering the head. Each is a feature
        map whose zero-output block is the ``conv3x3`` family: the network's own block with ``V = 0``.
        """
        found = [Candidate(i, f"block{i}.in", b, TANGENT_FAMILY) for i, b in enumerate(self.blocks)]
        found.append(Candidate(len(self.blocks), "head.in", self.head, TANGENT_FAMILY))
        return found


def init_weights(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """The sweep's initialisation of every submodule (docs/decisions.md): Kaiming-normal
    convolutions (fan-out; ``U`` and ``V`` alike) and linear layers (fan-in), ReLU gain, zero biases, BatchNorm
    weight 1 and bias 0. ``generator``: draw from it instead of the global RNG."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            mode = "fan_out" if isinstance(m, nn.Conv2d) else "fan_in"
            nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu", generator=generator)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def residual_blocks(model: nn.Module) -> list[tuple[int, nn.Module]]:
    """``(index, block)`` of every block of ``model.blocks`` with the ``z + V psi(z)`` form (:class:`ResidualBlock`,
    or an inserted :class:`~common.science.tangent.ZeroOutputBlock`): what the growth records' branch norms read."""
    return [(i, b) for i, b in enumerate(model.blocks) if isinstance(b, ResidualBlock | ZeroOutputBlock)]


# ----------------------------------------------------------------------------- growth
def extra_block_position(extra_blocks: int, num_stages: int = 3) -> tuple[int, int]:
    """``(stage, index in model.blocks)`` of extra block ``i = extra_blocks`` in ResNet-(8+i+1).

    The cyclic rule of B.1 puts it in stage ``i mod 3``; it is the last block of that stage, so
    inserting it at ``index`` into a ResNet-(8+i) gives exactly the block order of ResNet-(8+i+1).
    """
    stage = extra_blocks % num_stages
    return stage, sum(blocks_per_stage(extra_blocks + 1, num_stages)[: stage + 1]) - 1


def grow(model: ResNet, seed: int) -> tuple[int, ZeroOutputBlock]:
    """ResNet-(8+N) -> ResNet-(8+N+1) in place: insert extra block ``N`` at a zero output; returns ``(index, block)``.

    The block is the protocol's zero-output ``conv3x3`` block at candidate ``index`` (``U`` drawn from
    ``(seed, index)``, ``V = 0``: :func:`common.science.growth.insert_zero_block`, the block whose tangent space
    the probe's ``V_S,l`` at that candidate projects onto with the same seed), placed where
    :func:`extra_block_position` says (the end of stage ``N mod 3``), in the model's dtype, device and train/eval
    mode; ``model.config`` and ``model.stage_of_block`` follow, so the grown model has the ``state_dict`` of
    ``ResNet(replace(config, extra_blocks=N + 1))``.
    """
    n = model.config.extra_blocks
    _, index = extra_block_position(n)
    block = insert_zero_block(model, index, TANGENT_FAMILY, seed)
    model.config = replace(model.config, extra_blocks=n + 1)
    return index, block


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
