"""The one call on unmodified models (common/models/probe_network.py): places found or named, the tangent family read
from the state's layout, V_S,l <= AG_l, the guard rails, and insertions that preserve the function or are refused."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn
from torchvision.models import VisionTransformer

from common.errors import UserError
from common.models.candidates import Candidate
from common.models.places.torchvision_resnet import small_resnet
from common.models.probe_network import probe_network
from common.science.growth import (
    InsertionNotReached,
    check_function_preserved,
    insert_zero_block,
    insert_zero_block_into,
)
from common.science.tangent import ZeroOutputBlock
from tests.helpers import hf_tiny


def image_batches(n: int, size: int, classes: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(4, 3, size, size, generator=g), torch.randint(0, classes, (4,), generator=g)) for _ in range(n)
    ]


def within_ag(probe) -> bool:
    return all(s.growth_value_pooled <= s.ag_norm_pooled * (1 + 1e-6) + 1e-12 for s in probe.result.scores)


class Residual(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z + self.mlp(z)


class Head(nn.Module):
    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.out = nn.Linear(width, classes)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.out(z.mean(1))


def token_model(width: int = 8, classes: int = 3) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, width), Residual(width), Residual(width), Head(width, classes))


def token_batches(n: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 4, 5, generator=g), torch.randint(0, 3, (6,), generator=g)) for _ in range(n)]


def test_a_torchvision_resnet_is_probed_at_every_block_and_the_head_and_grows_without_changing_its_function():
    torch.manual_seed(0)
    model = small_resnet(num_classes=5).train()
    flags = {id(p): p.requires_grad for p in model.parameters()}
    batches = image_batches(2, 32, 5)
    lines = []
    probe = probe_network(model, batches, progress=lines.append)
    assert [p.name for p in probe.places] == [*(f"layer{k}.0.in" for k in range(1, 5)), "avgpool.in"]
    assert {s.family for s in probe.result.scores} == {"conv3x3"} and within_ag(probe) and lines
    assert model.training and {id(p): p.requires_grad for p in model.parameters()} == flags  # restored
    assert not any(m._forward_pre_hooks for m in model.modules())  # the hooks were removed
    frame = probe.to_dataframe()
    assert list(frame["place"]) == [p.name for p in probe.places] and "tangent_rank" in frame
    assert "pooled" in probe.summary()["normalisation"] and "per batch mean" in probe.summary()["normalisation"]
    before, x = copy.deepcopy(model), batches[0][0]
    block = probe.insert("layer2.0.in")
    assert model.layer2[0] is block and isinstance(block, ZeroOutputBlock)
    probe.insert("avgpool.in")
    assert isinstance(model.layer4[-1], ZeroOutputBlock)
    assert check_function_preserved(before, model, x) == {"train": 0.0, "eval": 0.0}


def test_a_small_vit_flags_its_zero_head_and_features_that_reach_the_rows():
    torch.manual_seed(0)
    vit = VisionTransformer(
        image_size=16, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=3
    )
    probe = probe_network(vit, image_batches(1, 16, 3))
    assert [p.name for p in probe.places] == ["encoder.layers.0.in", "encoder.layers.1.in", "encoder.ln.in"]
    assert {s.family for s in probe.result.scores} == {"linear"}
    for flags in probe.flags:  # torchvision's ViT starts with heads.head at zero: no gradient reaches any state
        assert any("all-zero gradients" in f and "heads.head" in f for f in flags), flags
    with torch.no_grad():
        vit.heads.head.weight.normal_()
    probe = probe_network(vit, image_batches(1, 16, 3))
    rows = probe.records()[0]["rows"]  # 4 images x 5 tokens = 20 rows against 64 tangent features
    assert rows == 20 and within_ag(probe)
    for r in probe.records():  # the class token is one row in every image: rank 17 of 20 at the first place
        assert ("V_S,l = AG_l by rank" in r["flags"]) == (r["tangent_rank"] >= r["rows"]), r
    assert "needs more rows (about 13 examples" in probe.records()[-1]["flags"]  # 64 features / 5 tokens + 1
    assert not any("all-zero" in f for fl in probe.flags for f in fl)


def test_a_hand_written_sequential_is_probed_at_the_blocks_it_names_and_grows_there():
    model, batches = token_model(), token_batches()
    with pytest.raises(UserError, match="pass the list of its residual blocks"):
        probe_network(model, batches)
    probe = probe_network(model, batches, [model[1], model[2], model[3]], per_batch=True)
    assert [p.name for p in probe.places] == ["1.in", "2.in", "3.in"] and within_ag(probe)
    assert all(s.growth_value <= s.ag_norm * (1 + 1e-6) for s in probe.result.scores)  # per batch, like for like
    assert all(r["rows"] == 48 for r in probe.records()) and not any(probe.flags)  # 12 examples x 4 tokens > 32
    before, x = copy.deepcopy(model), batches[0][0]
    probe.insert("2.in")
    assert isinstance(model[2], ZeroOutputBlock) and len(model) == 5
    assert check_function_preserved(before, model, x) == {"train": 0.0, "eval": 0.0}


def test_a_family_that_does_not_fit_the_state_is_refused_with_a_sentence():
    model, batches = token_model(), token_batches(1)
    with pytest.raises(
        UserError, match=r"shape \(1, 4, 8\) for one example, which the conv3x3 tangent family does not fit"
    ):
        probe_network(model, batches, [model[1]], family="conv3x3")
    model[3].stray = nn.Linear(8, 8)  # a submodule its forward pass never calls
    with pytest.raises(UserError, match=r"never entered places \['3\.stray\.in'\]"):
        probe_network(model, batches, [model[3].stray])


def test_a_tiny_llama_takes_dict_batches_with_next_token_loss_and_refuses_a_block_insertion():
    lm = hf_tiny.build("llama")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, hf_tiny.VOCAB, (2, 8), generator=g)
    mask = torch.ones_like(ids)
    probe = probe_network(lm, [{"input_ids": ids, "attention_mask": mask}])
    assert [p.name for p in probe.places] == [
        "model.layers.0.in",
        "model.layers.1.in",
        "model.layers.2.in",
        "model.norm.in",
    ]
    assert {s.family for s in probe.result.scores} == {"linear"} and within_ag(probe)
    with torch.no_grad():
        expected = float(lm(input_ids=ids, attention_mask=mask, labels=ids).loss)
    assert probe.result.mean_loss == pytest.approx(expected, rel=1e-5)
    with pytest.raises(UserError, match="insert_zero_layer"):
        probe.insert(0)


class Unused(nn.Module):
    """A model whose ``blocks`` list is never run by its forward pass (as a wrapper's copied list would be)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(Residual(8), Residual(8))
        self.blocks = nn.ModuleList(list(self.body))

    def forward(self, z):
        return self.body(z)

    def candidates(self):
        return [Candidate(i, f"block{i}", b, "linear") for i, b in enumerate(self.blocks)]


def test_an_insertion_the_forward_pass_never_reaches_is_undone_and_refused():
    model, x = Unused(), torch.randn(2, 3, 8)
    insert_zero_block(model, 0)  # without a batch, today's behaviour: no check
    del model.blocks[0]
    with pytest.raises(InsertionNotReached, match="never run"):
        insert_zero_block(model, 1, example=x)
    assert len(model.blocks) == 2 and not any(isinstance(m, ZeroOutputBlock) for m in model.modules())
    with pytest.raises(InsertionNotReached):
        insert_zero_block_into(model, model.blocks, 0, "linear", 8, example=x)
    assert len(model.blocks) == 2
    block = insert_zero_block_into(model, model.body, 1, "linear", 8, example=x)
    assert model.body[1] is block


def test_the_readme_example_runs_as_written(capsys):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## On your own network", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "avgpool.in" in printed and "growth_value_pooled" in printed
