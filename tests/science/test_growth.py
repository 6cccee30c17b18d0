"""common/science/growth.py: zero-output insertion preserves the function bit for bit; dL/dV_l = C_l."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from common.models.resnet import ResNet, ResNetConfig
from common.science.growth import candidate_width, function_preserved, insert_zero_block, insert_zero_blocks
from common.science.probe import probe_activation_gradients
from common.science.projection import GramAccumulator
from common.science.tangent import ZeroOutputBlock, candidate_family, protocol_seed
from tests.helpers import CASES, tangent_rows, terminal_weight_from_rows

SEEDS = [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_zero_block_insertion_preserves_function_bitwise(kind, seed, mode):
    model, x, _ = CASES[kind](seed)
    for c in model.candidates():
        before, after = copy.deepcopy(model).train(mode == "train"), copy.deepcopy(model).train(mode == "train")
        insert_zero_block(after, c.index, seed=seed)
        assert function_preserved(before, after, x), (kind, c.name)  # torch.equal: no tolerance


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_inserted_block_v_gradient_equals_cross_gradient(kind, seed):
    model, x, y = CASES[kind](seed)
    for c in model.candidates():
        psi, g_rows, _ = tangent_rows(model, x, y, c.index, seed=seed)  # reference model, probe path
        acc = GramAccumulator(psi.shape[1], g_rows.shape[1])
        acc.update(psi, g_rows)
        grown = copy.deepcopy(model)
        block = insert_zero_block(grown, c.index, seed=seed)
        (grad,) = torch.autograd.grad(F.cross_entropy(grown(x), y), [block.terminal.weight])
        # Same O(n) sums of products by two routes (autograd's conv/linear backward vs Psi^T G): rtol 1e-10.
        torch.testing.assert_close(grad, terminal_weight_from_rows(block, acc.cross_gradient()), rtol=1e-10, atol=1e-18)
        assert float(grad.norm()) == pytest.approx(acc.cross_gradient_norm(), rel=1e-10)


def test_insertion_bookkeeping_resnet():
    model, x, _ = CASES["resnet"](0)
    n_candidates, stages = len(model.candidates()), list(model.stage_of_block)
    last = n_candidates - 1
    width = candidate_width(model, last)
    block = insert_zero_block(model, last, seed=0)  # the head's input: appended
    assert isinstance(model.blocks[-1], ZeroOutputBlock) and model.blocks[-1] is block
    assert len(model.candidates()) == n_candidates + 1
    assert model.stage_of_block == [*stages, stages[-1]]
    assert block.terminal.weight.shape == (width, width, 3, 3) and block.terminal.weight.dtype == torch.float64
    assert not block.terminal.weight.any()
    # The block of stage-2's first candidate reads stage 1's width (the previous block's output).
    first_of_stage2 = model.stage_of_block.index(1)
    assert candidate_width(model, first_of_stage2) == model.config.widths[0]


def test_blocks_are_seeded_by_run_seed_and_candidate():
    model, _, _ = CASES["resnet"](0)
    a = insert_zero_block(copy.deepcopy(model), 1, seed=7)
    b = insert_zero_block(copy.deepcopy(model), 1, seed=7)
    c = insert_zero_block(copy.deepcopy(model), 1, seed=8)
    u = lambda blk: blk.psi[0].weight  # noqa: E731
    assert torch.equal(u(a), u(b)) and not torch.equal(u(a), u(c))
    assert protocol_seed(7, 1) != protocol_seed(7, 2) != protocol_seed(8, 1)


def test_joint_insertion_places_each_block_at_its_original_candidate():
    model, x, _ = CASES["resnet"](1)
    original = [c.module for c in model.candidates()]
    blocks = insert_zero_blocks(model, [3, 0, 1], seed=0)
    order = list(model.blocks)
    for index, block in zip([3, 0, 1], blocks, strict=True):
        # The inserted block sits right before the module that consumed z_index.
        following = order[order.index(block) + 1] if order.index(block) + 1 < len(order) else model.head
        assert following is original[index]
    with pytest.raises(ValueError, match="distinct"):
        insert_zero_blocks(model, [1, 1])


class RelabelledResNet(ResNet):
    """A ResNet that declares the ``linear`` family at candidate 1: a layout rule would say conv3x3."""

    def candidates(self):
        return [replace(c, family="linear") if c.index == 1 else c for c in super().candidates()]


@pytest.mark.parametrize("kind", [*sorted(CASES), "relabelled"])
def test_probe_and_insertion_choose_the_family_by_the_same_rule(kind):
    # The rule is common.science.tangent.candidate_family: the family the model declares per candidate.
    if kind == "relabelled":
        torch.manual_seed(0)
        model = RelabelledResNet(ResNetConfig(extra_blocks=1, widths=(4, 8, 16), num_classes=5)).double().eval()
        # 4x4 images: the linear family acts on the last axis (W = 4), which equals candidate 1's
        # channel count, the width insert_zero_block reads from the module.
        x, y = torch.randn(2, 3, 4, 4, dtype=torch.float64), torch.tensor([0, 3])
    else:
        model, x, y = CASES[kind](0)
    declared = {c.index: c.family for c in model.candidates()}
    assert kind != "relabelled" or declared[1] == "linear" != declared[0]
    if kind == "relabelled":  # the probe applies the declared family, which refuses the 4-D map in words
        with pytest.raises(ValueError, match="the linear family needs .* candidate 'block1.in' gives shape"):
            probe_activation_gradients(model, [(x, y)], exact=True)
    else:
        scores = probe_activation_gradients(model, [(x, y)], exact=True).scores
        assert [s.family for s in scores] == [declared[s.index] for s in scores]
    for c in model.candidates():
        grown = copy.deepcopy(model)
        assert insert_zero_block(grown, c.index).family == declared[c.index] == candidate_family(c).name
        assert function_preserved(model, grown, x)
