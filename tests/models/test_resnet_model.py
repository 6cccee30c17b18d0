"""common/models/resnet.py: ResNet-8 + N blocks placed cyclically over three stages (paper B.1, B.3)."""

import math

import pytest
import torch
import torch.nn.functional as F

from common.data.vision import load_vision
from common.experiments.weight_scaling_weights import stage_sequences
from common.models.resnet import ResNet, ResNetConfig, blocks_per_stage, count_parameters, depth_label
from common.presets.train_resnet_sweep import CIFAR_PAPER


def expected_parameters(per_stage, widths=(16, 32, 64), classes=10) -> int:
    """Counted by hand: stem conv + BN; per block the 3x3 conv U, its BN and the 3x3 conv V; head BN + linear."""
    total = 3 * widths[0] * 9 + 2 * widths[0]
    c_in = widths[0]
    for width, count in zip(widths, per_stage):
        for _ in range(count):
            total += 9 * c_in * width + 2 * width + 9 * width * width
            c_in = width
    return total + 2 * widths[-1] + widths[-1] * classes + classes


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


def test_resnet8_has_75194_parameters_and_labels_follow_d_equals_8_plus_n():
    assert count_parameters(ResNet(ResNetConfig())) == 75_194
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


def branch_reference(z, conv_u, bn, conv_v):
    """V relu(BN(conv3x3_U z)) (the stride of ``conv_u``), in eval mode, from the raw tensors."""
    h = F.batch_norm(
        F.conv2d(z, conv_u.weight, stride=conv_u.stride, padding=1),
        bn.running_mean,
        bn.running_var,
        bn.weight,
        bn.bias,
        training=False,
        eps=bn.eps,
    )
    return F.conv2d(F.relu(h), conv_v.weight, padding=1)


def block_inputs(model, x):
    """(block, a signed random tensor shaped like that block's input) for every block of ``model``."""
    z, g = model.stem(x), torch.Generator().manual_seed(1)
    for block in model.blocks:
        yield block, torch.randn(z.shape, generator=g, dtype=z.dtype)
        z = block(z)


@torch.no_grad()
def test_block_is_shortcut_plus_v_of_relu_bn_conv_u_with_nothing_after_v():
    # The paper's form z -> shortcut(z) + V psi(z; U), psi = relu(BN(conv_U z)): psi[0, 1] are U and its BN, terminal
    # is V, the shortcut the identity or option A, and nothing follows V (no BN, no ReLU after the sum). Built here from
    # the raw weights with torch.nn.functional in float64. Tolerance 1e-12: values of order 1-10, sums of at most
    # 9 x 64 products, so a different summation order moves them by ~1e-14.
    g = torch.Generator().manual_seed(0)
    model = random_eval_batchnorms(ResNet(ResNetConfig(extra_blocks=2)).double(), g)
    downsampling = 0
    for block, z in block_inputs(model, torch.randn(2, 3, 16, 16, generator=g, dtype=torch.float64)):
        conv_u, bn, _ = block.psi
        branch = branch_reference(z, conv_u, bn, block.terminal)
        stride = conv_u.stride[0]
        downsampling += stride == 2
        shortcut = option_a_reference(z, block.terminal.out_channels) if stride == 2 else z
        torch.testing.assert_close(block.terminal(block.psi(z)), branch, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(block.shortcut(z), shortcut, rtol=0, atol=0)
        torch.testing.assert_close(block(z), branch + shortcut, rtol=1e-12, atol=1e-12)
        # V = 0 leaves exactly the shortcut, for signed inputs too (no ReLU after the sum).
        block.terminal.weight.zero_()
        assert torch.equal(block(z), shortcut)
    assert downsampling == 2  # both option-A shortcuts were checked


@torch.no_grad()
def test_block_is_rebuilt_from_the_kernels_weight_scaling_reads():
    # weight_scaling_weights.stage_sequences reads each block's U with its BN folded in as "A" and its raw V as
    # "delta", and marks the option-A blocks as downsampling. With bias-free eval BNs these two kernels and the
    # shortcut are the whole block: conv(relu(conv(z, A, stride)), delta) + shortcut(z). Tolerance as above.
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
        torch.testing.assert_close(block(z), F.conv2d(h, b["delta"], padding=1) + shortcut, rtol=1e-12, atol=1e-12)
        assert torch.equal(b["delta"], block.terminal.weight.double())  # V raw: nothing follows it


@pytest.mark.parametrize("n", [48, 100])
def test_deep_resnets_train_through_the_recipes_warm_up(n):
    """ResNet-56 and ResNet-108 (the paper's deepest CIFAR network) from the sweep's initialisation take 50 steps of
    a linear warm-up to the paper recipe's peak (SGD, lr 0.1, momentum 0.9, weight decay 5e-4: its optimizer) on the
    smoke data, batch 64: the loss never exceeds 1.5 times its first value and ends below it (the mean of the last
    five steps, a step's loss on 64 images being noisy). The digits are 8 x 8 images the smoke source upsamples to
    32 x 32; area-downsampling them back to 8 x 8 keeps the content and makes the test 16 times cheaper."""
    data = load_vision("digits", None)
    x = data.x_train.float().div(255)
    x = F.interpolate((x - x.mean((0, 2, 3), keepdim=True)) / x.std((0, 2, 3), keepdim=True), size=8, mode="area")
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(extra_blocks=n, num_classes=data.num_classes)).train()
    recipe = CIFAR_PAPER.recipe
    optimizer = recipe.make_optimizer(model)
    g, losses = torch.Generator().manual_seed(0), []
    for step in range(50):
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr * (step + 1) / 50
        batch = torch.randint(0, len(x), (64,), generator=g)
        loss = F.cross_entropy(model(x[batch]), data.y_train[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert max(losses) <= 1.5 * losses[0], (losses[0], max(losses))
    assert sum(losses[-5:]) / 5 < losses[0], (losses[0], losses[-5:])
