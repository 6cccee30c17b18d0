"""CIFAR-style ResNet-8 backbone with ``N`` extra basic blocks added cyclically (paper B.1, B.3).

The backbone has a 3x3 stem conv (``widths[0]`` channels) + BN + ReLU, three stages of one
basic block each (widths 16/32/64 on CIFAR, 32/64/128 on ImageNet-100), global average pooling
and a linear head. Extra block ``i`` (``i = 0..N-1``) goes to stage ``i mod 3``, giving ``3 + N``
blocks; widths and head never change. The first block of stages 2 and 3 downsamples with
stride 2 and a parameter-free option-A shortcut (He et al. 2016, CIFAR ResNets): the identity,
subsampled and zero-padded in channels.

Blocks sit in one flat ``nn.ModuleList`` so that a zero-output block can be inserted at any
candidate (``common/science/growth.py``) with ``model.blocks.insert(l, block)``.

Growth (script 03, "Function-preserving growth"): :func:`grow` turns a ResNet-(8+N) into a
ResNet-(8+N+1) in place by inserting the architecture's own :class:`BasicBlock` where the
sweep's ResNet-(8+N+1) has extra block ``N`` (the end of stage ``N mod 3``,
:func:`extra_block_position`), built by :func:`zero_output_basic_block` with its last
BatchNorm's weight and bias at zero (zero-gamma): the residual branch outputs exactly 0, the
block computes ``relu(0 + z) = z`` on the post-ReLU states it receives, and the grown model has
the same modules and ``state_dict`` keys as ``ResNet(ResNetConfig(extra_blocks=N + 1))``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from common.models.candidates import Candidate
from common.presets.paper import CIFAR_STAGE_WIDTHS, IMAGENET100_BASE_CHANNELS

BACKBONE_DEPTH = 8  # ResNet-8: stem conv + 3 blocks x 2 convs + head
TANGENT_FAMILY = "conv3x3"  # the protocol's zero-output block at every candidate (common/science/tangent.py)
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
        init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.stem(x)  # (B, w0, H, W)
        for block in self.blocks:  # z_l is the input of block l
            z = block(z)
        return self.head(z)  # (B, classes)

    def candidates(self) -> list[Candidate]:
        """The ``4 + N`` insertion candidates in fixed order (docs/design.md, section "Insertion candidates").

        Candidate ``l < len(blocks)`` is the input of block ``l`` (candidate 0 is the stem's
        output); the last candidate is the tensor entering the pooling head. Each is a feature
        map whose zero-output block is the ``conv3x3`` family.
        """
        found = [Candidate(i, f"block{i}.in", b, TANGENT_FAMILY) for i, b in enumerate(self.blocks)]
        found.append(Candidate(len(self.blocks), "head.in", self.head, TANGENT_FAMILY))
        return found


def init_weights(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """The sweep's initialisation of every submodule (docs/decisions.md): Kaiming-normal
    convolutions (fan-out) and linear layers (fan-in), ReLU gain, zero biases, BatchNorm weight 1 and
    bias 0. ``generator``: draw from it instead of the global RNG."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            mode = "fan_out" if isinstance(m, nn.Conv2d) else "fan_in"
            nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu", generator=generator)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


# ----------------------------------------------------------------------------- growth
def extra_block_position(extra_blocks: int, num_stages: int = 3) -> tuple[int, int]:
    """``(stage, index in model.blocks)`` of extra block ``i = extra_blocks`` in ResNet-(8+i+1).

    The cyclic rule of B.1 puts it in stage ``i mod 3``; it is the last block of that stage, so
    inserting it at ``index`` into a ResNet-(8+i) gives exactly the block order of ResNet-(8+i+1).
    """
    stage = extra_blocks % num_stages
    return stage, sum(blocks_per_stage(extra_blocks + 1, num_stages)[: stage + 1]) - 1


def zero_output_basic_block(width: int, generator: torch.Generator | None = None) -> BasicBlock:
    """The architecture's own stride-1 :class:`BasicBlock` (``width -> width``) at a zero output.

    Initialised as :func:`init_weights` does (both convolutions random, drawn from ``generator``),
    then the last BatchNorm's weight gamma and bias beta are set to 0 (zero-gamma, Goyal et al.
    2017): the residual branch is exactly 0 in train and eval mode, so the block is
    ``z -> relu(z) = z`` on the non-negative (post-ReLU) states of the network. The BatchNorm it
    multiplies sees the random convolution's output, with variance of order 1, so its
    normalisation is well conditioned and the first gradients (on gamma and beta) carry no
    ``1 / sqrt(eps)`` factor (docs/decisions.md, section "Function-preserving growth").
    """
    block = BasicBlock(width, width, stride=1)
    init_weights(block, generator)
    last_bn = block.residual[-1]
    nn.init.zeros_(last_bn.weight)
    nn.init.zeros_(last_bn.bias)
    return block


def grow(model: ResNet, generator: torch.Generator | None = None) -> tuple[int, BasicBlock]:
    """ResNet-(8+N) -> ResNet-(8+N+1) in place: insert extra block ``N`` at a zero output; returns ``(index, block)``.

    The block goes where :func:`extra_block_position` says (the end of stage ``N mod 3``), in the
    model's dtype, device and train/eval mode; ``model.config`` and ``model.stage_of_block`` follow,
    so the grown model is indistinguishable in structure from ``ResNet(replace(config, extra_blocks=N + 1))``.
    """
    n = model.config.extra_blocks
    stage, index = extra_block_position(n)
    like = next(model.parameters())
    block = zero_output_basic_block(model.config.widths[stage], generator).to(dtype=like.dtype, device=like.device)
    block.train(model.training)
    model.blocks.insert(index, block)
    model.stage_of_block.insert(index, stage)
    model.config = replace(model.config, extra_blocks=n + 1)
    return index, block


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
