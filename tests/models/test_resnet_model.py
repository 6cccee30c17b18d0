"""common/models/resnet.py: ResNet-8 + N blocks placed cyclically over three stages (paper B.1, B.3)."""

import pytest
import torch
import torch.nn.functional as F

from common.experiments.weight_scaling_weights import stage_sequences
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


def random_eval_batchnorms(model, generator, *, bias_free=False):
    """Every BatchNorm at random running statistics and affine parameters; ``bias_free``: beta = mean gamma /
    sqrt(var + eps), so that the eval-mode BN is a pure per-channel scaling (a conv folded with it has no bias)."""
    with torch.no_grad():
        for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
            c = bn.num_features
            bn.running_mean.copy_(torch.randn(c, generator=generator, dtype=torch.float64))
            bn.running_var.copy_(torch.rand(c, generator=generator, dtype=torch.float64) * 2 + 0.2)
            bn.weight.copy_(torch.rand(c, generator=generator, dtype=torch.float64) + 0.5)
            if bias_free:
                bn.bias.copy_(bn.running_mean * bn.weight / (bn.running_var + bn.eps).sqrt())
            else:
                bn.bias.copy_(torch.randn(c, generator=generator, dtype=torch.float64))
    return model.eval()


def option_a_reference(z, out_channels):
    """The option-A shortcut written out: every other pixel, the input channels placed in the middle of
    ``out_channels`` (``(out - in) // 2`` zero channels before them, the rest after)."""
    b, c, h, w = z.shape
    out = z.new_zeros(b, out_channels, (h + 1) // 2, (w + 1) // 2)
    first = (out_channels - c) // 2
    out[:, first : first + c] = z[:, :, ::2, ::2]
    return out


def residual_reference(z, conv1, bn1, conv2, bn2):
    """conv3x3 (stride of ``conv1``) - BN - ReLU - conv3x3 - BN, in eval mode, from the raw tensors."""

    def bn(x, m):
        return F.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, training=False, eps=m.eps)

    h = F.relu(bn(F.conv2d(z, conv1.weight, stride=conv1.stride, padding=1), bn1))
    return bn(F.conv2d(h, conv2.weight, padding=1), bn2)


def block_inputs(model, x):
    """(block, a signed random tensor shaped like that block's input) for every block of ``model``."""
    z, g = model.stem(x), torch.Generator().manual_seed(1)
    for block in model.blocks:
        yield block, torch.randn(z.shape, generator=g, dtype=z.dtype)
        z = block(z)


@torch.no_grad()
def test_block_is_relu_of_conv_bn_relu_conv_bn_residual_plus_option_a_shortcut():
    # The decomposition growth and weight scaling index into: residual[0, 1, 3, 4] are conv1, BN1, conv2, BN2
    # and residual[-1] the last BN (zero-gamma), shortcut the identity or option A, added before the ReLU.
    # Built here from the raw weights with torch.nn.functional in float64. Tolerance 1e-12: values of order 1-10,
    # sums of at most 9 x 64 products, so a different summation order moves them by ~1e-14.
    g = torch.Generator().manual_seed(0)
    model = random_eval_batchnorms(ResNet(ResNetConfig(extra_blocks=2)).double(), g)
    downsampling = 0
    for block, z in block_inputs(model, torch.randn(2, 3, 16, 16, generator=g, dtype=torch.float64)):
        conv1, bn1, _, conv2, bn2 = block.residual
        residual = residual_reference(z, conv1, bn1, conv2, bn2)
        stride = conv1.stride[0]
        downsampling += stride == 2
        shortcut = option_a_reference(z, conv2.out_channels) if stride == 2 else z
        torch.testing.assert_close(block.residual(z), residual, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(block.shortcut(z), shortcut, rtol=0, atol=0)
        torch.testing.assert_close(block(z), F.relu(residual + shortcut), rtol=1e-12, atol=1e-12)
        # Zero-gamma: the last BN's weight and bias at 0 leave relu(shortcut), for signed inputs too.
        block.residual[-1].weight.zero_()
        block.residual[-1].bias.zero_()
        assert torch.equal(block(z), F.relu(shortcut))
    assert downsampling == 2  # both option-A shortcuts were checked


@torch.no_grad()
def test_block_is_rebuilt_from_the_folded_kernels_weight_scaling_reads():
    # weight_scaling_weights.stage_sequences reads each block's first folded conv as "A" and its last as "delta" and
    # marks the option-A blocks as downsampling. With bias-free eval BNs these two kernels and the shortcut
    # are the whole block: relu(conv(relu(conv(z, A, stride)), delta) + shortcut(z)). Tolerance as above.
    g = torch.Generator().manual_seed(2)
    model = random_eval_batchnorms(ResNet(ResNetConfig(extra_blocks=2)).double(), g, bias_free=True)
    read = stage_sequences(model, 16)
    assert [b["downsample"] for b in read] == [False, False, True, False, True]
    for (block, z), b in zip(
        block_inputs(model, torch.randn(2, 3, 16, 16, generator=g, dtype=torch.float64)), read, strict=True
    ):
        stride = 2 if b["downsample"] else 1
        shortcut = option_a_reference(z, b["delta"].shape[0]) if b["downsample"] else z
        h = F.relu(F.conv2d(z, b["A"], stride=stride, padding=1))
        torch.testing.assert_close(
            block(z), F.relu(F.conv2d(h, b["delta"], padding=1) + shortcut), rtol=1e-12, atol=1e-12
        )
