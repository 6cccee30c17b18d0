"""common/models/resnet.py: ResNet-8 + N blocks placed cyclically over three stages (paper B.1, B.3)."""

import pytest
import torch
import torch.nn.functional as F

from common.models.resnet import ResNet, ResNetConfig, blocks_per_stage, count_parameters, depth_label


def expected_parameters(per_stage, widths=(16, 32, 64), classes=10) -> int:
    """Counted by hand: stem conv + BN, two 3x3 convs + two BNs per block, linear head."""
    total = 3 * widths[0] * 9 + 2 * widths[0]
    c_in = widths[0]
    for width, count in zip(widths, per_stage):
        for _ in range(count):
            total += 9 * c_in * width + 2 * width + 9 * width * width + 2 * width
            c_in = width
    return total + widths[-1] * classes + classes


@pytest.mark.parametrize("n, per_stage", [(0, [1, 1, 1]), (1, [2, 1, 1]), (2, [2, 2, 1]), (5, [3, 3, 2])])
def test_extra_blocks_go_to_stages_cyclically(n, per_stage):
    assert blocks_per_stage(n) == per_stage
    model = ResNet(ResNetConfig(extra_blocks=n))
    assert model.stage_of_block == sorted(s for s, count in enumerate(per_stage) for _ in range(count))
    assert len(model.blocks) == 3 + n and len(model.candidates()) == 4 + n


@pytest.mark.parametrize("n, per_stage", [(0, [1, 1, 1]), (1, [2, 1, 1]), (2, [2, 2, 1]), (5, [3, 3, 2])])
def test_output_shape_and_parameter_count(n, per_stage):
    model = ResNet(ResNetConfig(extra_blocks=n)).eval()
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert count_parameters(model) == expected_parameters(per_stage)


def test_resnet8_has_75290_parameters_and_labels_follow_d_equals_8_plus_n():
    assert count_parameters(ResNet(ResNetConfig())) == 75_290
    assert [depth_label(n) for n in (0, 2, 6, 12, 26, 100)] == [8, 10, 14, 20, 34, 108]


def test_imagenet100_variant_has_base_width_32_and_100_classes():
    config = ResNetConfig.for_dataset("imagenet100", extra_blocks=1, num_classes=100)
    model = ResNet(config).eval()
    assert config.widths == (32, 64, 128)
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 100)  # CIFAR stem: no 7x7 conv, no max-pool
    assert count_parameters(model) == expected_parameters([2, 1, 1], (32, 64, 128), 100)


def test_every_block_exposes_its_residual_branch():
    model = ResNet(ResNetConfig(extra_blocks=2)).eval()
    z = model.stem(torch.randn(2, 3, 32, 32))
    for block in model.blocks:
        expected = F.relu(block.residual(z) + block.shortcut(z))
        assert torch.equal(block(z), expected)
        z = expected
