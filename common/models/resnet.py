"""CIFAR-style ResNet-8 backbone with ``N`` extra basic blocks added cyclically (paper B.1, B.3).

The backbone has a 3x3 stem conv (``widths[0]`` channels) + BN + ReLU, three stages of one
basic block each (widths 16/32/64 on CIFAR, 32/64/128 on ImageNet-100), global average pooling
and a linear head. Extra block ``i`` (``i = 0..N-1``) goes to stage ``i mod 3``, giving ``3 + N``
blocks; widths and head never change. The first block of stages 2 and 3 downsamples with
stride 2 and a parameter-free option-A shortcut (He et al. 2016, CIFAR ResNets): the identity,
subsampled and zero-padded in channels.

Blocks sit in one flat ``nn.ModuleList`` so that a zero-output block can be inserted at any
candidate (``common/growth.py``) with ``model.blocks.insert(l, block)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from common.models.candidates import Candidate

BACKBONE_DEPTH = 8  # ResNet-8: stem conv + 3 blocks x 2 convs + head
TANGENT_FAMILY = "conv3x3"  # the protocol's zero-output block at every candidate (common/tangent.py)


def depth_label(extra_blocks: int) -> int:
    """The "d" of "ResNet-d" for a backbone with ``N`` extra blocks: ``d = 8 + N`` (DESIGN.md 3)."""
    return BACKBONE_DEPTH + extra_blocks


def blocks_per_stage(extra_blocks: int, num_stages: int = 3) -> list[int]:
    """Cyclic placement rule of B.1: one backbone block per stage, extra block i to stage i mod 3."""
    if extra_blocks < 0:
        raise ValueError(f"extra_blocks must be >= 0, got {extra_blocks}")
    return [1 + len(range(s, extra_blocks, num_stages)) for s in range(num_stages)]


def next_block_index(extra_blocks: int, num_stages: int = 3) -> int:
    """Where the cyclic rule puts the next block of ResNet-(8+N): its index in the flat block list.

    Block ``N`` goes to the end of stage ``N mod 3``, so it becomes ``blocks[l]`` with ``l`` the number
    of blocks in stages ``0..N mod 3``; it reads the state ``z_l``, candidate ``l`` of ResNet-(8+N).
    """
    counts = blocks_per_stage(extra_blocks, num_stages)
    return sum(counts[: extra_blocks % num_stages + 1])


@dataclass(frozen=True)
class ResNetConfig:
    """Every architectural hyper-parameter of the sweep's ResNets, with CIFAR defaults."""

    extra_blocks: int = 0  # N: the sweep's depth variable
    widths: tuple[int, int, int] = (16, 32, 64)  # ImageNet-100: (32, 64, 128)
    num_classes: int = 10
    in_channels: int = 3

    @classmethod
    def for_dataset(cls, dataset: str, extra_blocks: int, num_classes: int) -> ResNetConfig:
        widths = (32, 64, 128) if dataset == "imagenet100" else (16, 32, 64)
        return cls(extra_blocks=extra_blocks, widths=widths, num_classes=num_classes)


class DownsampleShortcut(nn.Module):
    """Option-A shortcut: take every other pixel and zero-pad the new channels."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.pad = out_channels - in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, ::2, ::2]
        return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))


class BasicBlock(nn.Module):
    """``z -> relu(residual(z) + shortcut(z))`` with ``residual = conv-BN-ReLU-conv-BN``."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
        )
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = DownsampleShortcut(in_channels, out_channels)
        else:
            self.shortcut = nn.Identity()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return F.relu(self.residual(z) + self.shortcut(z))


class Head(nn.Module):
    """Global average pooling + linear classifier (an endpoint, never a candidate)."""

    def __init__(self, channels: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.fc(z.mean(dim=(2, 3)))  # (B, C, H, W) -> (B, C) -> (B, classes)


class ResNet(nn.Module):
    """ResNet-(8+N): stem, ``3 + N`` basic blocks in three stages, head."""

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
                blocks.append(BasicBlock(channels, w[stage], stride))
                stage_of_block.append(stage)
                channels = w[stage]
        self.blocks = nn.ModuleList(blocks)
        self.stage_of_block = stage_of_block
        self.head = Head(channels, config.num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(m.weight, mode="fan_out" if isinstance(m, nn.Conv2d) else "fan_in", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.stem(x)  # (B, w0, H, W)
        for block in self.blocks:  # z_l is the input of block l
            z = block(z)
        return self.head(z)  # (B, classes)

    def candidates(self) -> list[Candidate]:
        """The ``4 + N`` insertion candidates in fixed order (DESIGN.md section 1).

        Candidate ``l < len(blocks)`` is the input of block ``l`` (candidate 0 is the stem's
        output); the last candidate is the tensor entering the pooling head. Each is a feature
        map whose zero-output block is the ``conv3x3`` family.
        """
        found = [Candidate(i, f"block{i}.in", b, TANGENT_FAMILY) for i, b in enumerate(self.blocks)]
        found.append(Candidate(len(self.blocks), "head.in", self.head, TANGENT_FAMILY))
        return found


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
