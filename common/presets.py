"""Hyper-parameters of the ResNet depth sweep per preset and dataset, kept in one place.

``paper``: the paper's depth grids and epoch counts (B.1-B.3: CIFAR N = 1..100 plus the
backbone N = 0, 200 epochs; ImageNet-100 N in {1, 5, ..., 49}, 300 epochs). The paper does
not state the optimiser settings; the values below are this reproduction's choices
(README, "Reproduction decisions"). ``smoke``: the same code paths in minutes on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from common.errors import UserError


@dataclass(frozen=True)
class SweepPreset:
    """What one preset fixes for one dataset of the ResNet sweep."""

    depths: tuple[int, ...]  # N: extra blocks over the ResNet-8 backbone
    epochs: int
    batch_size: int
    lr: float
    momentum: float = 0.9
    weight_decay: float = 5e-4
    nesterov: bool = False
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.0
    crop_pad: int = 4  # random crop after 4-pixel zero padding (B.2)
    flip: bool = True
    eval_batch_size: int = 500
    image_size: int | None = None  # ImageNet-100 resolution; None: the dataset's own


CIFAR_PAPER = SweepPreset(depths=tuple(range(0, 101)), epochs=200, batch_size=128, lr=0.1)
IMAGENET100_PAPER = SweepPreset(
    depths=tuple(range(1, 50, 4)), epochs=300, batch_size=256, lr=0.2, warmup_epochs=5.0, image_size=64
)
SMOKE = SweepPreset(depths=(0, 1, 2, 4), epochs=12, batch_size=64, lr=0.05, eval_batch_size=256)

DEFAULT_DATASET = {"paper": "cifar10", "smoke": "digits"}


def sweep_preset(preset: str, dataset: str) -> SweepPreset:
    """The settings of ``preset`` ("paper" or "smoke") for ``dataset``."""
    if preset == "paper":
        return IMAGENET100_PAPER if dataset == "imagenet100" else CIFAR_PAPER
    if preset == "smoke":
        return replace(SMOKE, depths=(1, 5), epochs=2, image_size=64) if dataset == "imagenet100" else SMOKE
    raise UserError(f"--preset {preset}: unknown preset; use smoke or paper")
