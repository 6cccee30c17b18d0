"""Training FLOPs counted from the model (torch.utils.flop_counter.FlopCounterMode), not by hand: the one FLOP counter.

:func:`training_flops_per_image` runs one forward and one backward pass of the batch-mean
cross-entropy on a batch of images and divides PyTorch's count by the batch size: the matrix
products and convolutions of the forward pass (2 FLOPs per multiply-add) and those autograd actually
runs backward (the input gradient of every layer whose input needs one, and every weight gradient).
Elementwise work (BatchNorm, ReLU, the additions, the optimiser step) is not counted, as is usual for
FLOP budgets. :func:`training_flops` multiplies by images and epochs.

A model built on the meta device is counted there (shapes only, no compute): what
:func:`common.models.resnet_flops.resnet_training_flops_per_image` does for the sweep's ResNet-(8+N) of a config without
a model or data at hand (a run's order in the pool, ``--dry-run``'s GPU estimate, the CPU-time warning).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

COUNT_BATCH = 2  # images of the counting pass (train-mode BatchNorm needs more than one value per channel)


def training_flops_per_image(model: nn.Module, image_shape: tuple[int, ...], num_classes: int) -> int:
    """FLOPs of one forward + backward pass per image of shape ``image_shape`` (C, H, W), on a CPU float32 copy (a
    model on the meta device is counted there: shapes only, no compute)."""
    device = "meta" if any(p.is_meta for p in model.parameters()) else "cpu"
    counted = copy.deepcopy(model).to(device=device, dtype=torch.float32).train()
    x = torch.zeros((COUNT_BATCH, *image_shape), device=device)
    y = torch.arange(COUNT_BATCH, device=device) % num_classes
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(counted(x), y).backward()
    return int(counter.get_total_flops()) // COUNT_BATCH


def training_flops(model: nn.Module, image_shape: tuple[int, ...], num_classes: int, images: int, epochs: int) -> int:
    """Training FLOPs of ``epochs`` epochs over ``images`` images: per-image forward + backward, times both."""
    return training_flops_per_image(model, image_shape, num_classes) * int(images) * int(epochs)


__all__ = ["COUNT_BATCH", "training_flops", "training_flops_per_image"]
