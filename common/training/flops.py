"""Training FLOPs counted from the model (torch.utils.flop_counter.FlopCounterMode), not by hand.

:func:`training_flops_per_image` runs one forward and one backward pass of the batch-mean
cross-entropy on a batch of images and divides PyTorch's count by the batch size: the matrix
products and convolutions of the forward pass (2 FLOPs per multiply-add) and those autograd actually
runs backward (the input gradient of every layer whose input needs one, and every weight gradient).
Elementwise work (BatchNorm, ReLU, the additions, the optimiser step) is not counted, as is usual for
FLOP budgets. :func:`training_flops` multiplies by images and epochs.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

COUNT_BATCH = 2  # images of the counting pass (train-mode BatchNorm needs more than one value per channel)


def training_flops_per_image(model: nn.Module, image_shape: tuple[int, ...], num_classes: int) -> int:
    """FLOPs of one forward + backward pass per image of shape ``image_shape`` (C, H, W), on a CPU float32 copy."""
    counted = copy.deepcopy(model).to(device="cpu", dtype=torch.float32).train()
    x = torch.zeros((COUNT_BATCH, *image_shape))
    y = torch.arange(COUNT_BATCH) % num_classes
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(counted(x), y).backward()
    return int(counter.get_total_flops()) // COUNT_BATCH


def training_flops(model: nn.Module, image_shape: tuple[int, ...], num_classes: int, images: int, epochs: int) -> int:
    """Training FLOPs of ``epochs`` epochs over ``images`` images: per-image forward + backward, times both."""
    return training_flops_per_image(model, image_shape, num_classes) * int(images) * int(epochs)


__all__ = ["COUNT_BATCH", "training_flops", "training_flops_per_image"]
