"""Training FLOPs per image of the sweep's ResNet-(8+N) from its config alone: :mod:`common.training.flops`'s count (the
one counter) of the architecture, with no model trained and no data read.

What needs it: a run's order in the pool (:func:`common.experiments.shared.resnet_sweep.sweep_run_cost`), the CPU-time
warning of ``--preset paper`` (:func:`common.experiments.shared.resnet_sweep.estimate_training_s`) and ``--dry-run``'s
GPU estimate (:mod:`common.launch.gpu_estimates`). The models are built and counted on the meta device (shapes only,
no compute), once per (widths, image shape, classes) at N = 0..3: a ResNet-(8+N) puts extra block ``i`` in stage
``i mod 3`` (:mod:`common.models.resnet`), so with N = 3q + r it is ResNet-8 plus q whole cycles of three blocks plus
the first r blocks of one, and its count is ResNet-8's plus q times the cycle's plus the r blocks' (exact: every block
of a stage has the same shapes). Counting every depth anew instead takes about 1 s a model at N = 100 and 86 s for the
paper sweep's 101 depths (measured on a 2-core CPU), too slow for a dry run.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from common.models.resnet import ResNet, ResNetConfig
from common.presets.paper import CIFAR_STAGE_WIDTHS
from common.training.flops import training_flops_per_image


@functools.cache
def _resnet_cycle(widths: tuple[int, ...], image_shape: tuple[int, ...], num_classes: int) -> tuple[int, ...]:
    """:func:`~common.training.flops.training_flops_per_image` of ResNet-8 .. ResNet-11 (N = 0..3), counted on the meta device."""
    counts = []
    for n in range(4):
        config = ResNetConfig(extra_blocks=n, widths=widths, num_classes=num_classes, in_channels=image_shape[0])
        with torch.device("meta"):
            model = ResNet(config)
        counts.append(training_flops_per_image(model, image_shape, num_classes))
    return tuple(counts)


def resnet_training_flops_per_image(
    depth_n: int,
    widths: Sequence[int] = CIFAR_STAGE_WIDTHS,
    image_shape: Sequence[int] = (3, 32, 32),
    num_classes: int = 10,
) -> int:
    """:func:`common.training.flops.training_flops_per_image` of ResNet-(8+``depth_n``) with these stage ``widths`` on images of
    ``image_shape`` (C, H, W) with ``num_classes`` classes, from four counts cached per architecture and image shape
    (module docstring); equal to counting the model itself (tests/models/test_resnet_flops.py)."""
    f = _resnet_cycle(tuple(int(w) for w in widths), tuple(int(s) for s in image_shape), int(num_classes))
    q, r = divmod(int(depth_n), 3)
    return f[0] + q * (f[3] - f[0]) + (f[r] - f[0])


__all__ = ["resnet_training_flops_per_image"]
