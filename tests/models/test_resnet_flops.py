"""common/models/resnet_flops.py on common/training/flops.py, the one FLOP counter: a ResNet-(8+N)'s count from the four
cached counts is the count of the model itself, at any depth, widths, image size and classes; on the meta device it is
the CPU count."""

from __future__ import annotations

import pytest
import torch

from common.models.resnet import IMAGENET100_STAGE_WIDTHS, ResNet, ResNetConfig
from common.models.resnet_flops import resnet_training_flops_per_image
from common.training.flops import training_flops, training_flops_per_image


def counted(n: int, widths=(16, 32, 64), image_shape=(3, 32, 32), num_classes=10) -> int:
    """The count of ResNet-(8+N) itself, on the meta device (shapes only)."""
    with torch.device("meta"):
        model = ResNet(ResNetConfig(extra_blocks=n, widths=widths, num_classes=num_classes))
    return training_flops_per_image(model, image_shape, num_classes)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 8, 13])
def test_a_resnets_count_is_the_count_of_the_model_itself(n):
    assert resnet_training_flops_per_image(n) == counted(n)


def test_other_widths_image_sizes_and_classes_are_counted_as_the_model():
    shape = (3, 64, 64)
    assert resnet_training_flops_per_image(5, IMAGENET100_STAGE_WIDTHS, shape, 100) == counted(
        5, IMAGENET100_STAGE_WIDTHS, shape, 100
    )
    assert resnet_training_flops_per_image(4, (16, 32, 64), (3, 8, 8), 4) == counted(4, (16, 32, 64), (3, 8, 8), 4)


def test_the_meta_count_is_the_cpu_count():
    with torch.random.fork_rng():
        model = ResNet(ResNetConfig(extra_blocks=2))
    assert training_flops_per_image(model, (3, 32, 32), 10) == counted(2)
    assert training_flops(model, (3, 32, 32), 10, images=5, epochs=3) == 15 * counted(2)
