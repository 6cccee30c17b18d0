"""probe_network's checks before it probes and its guard rails after (issue 58, items 1, 4 and 5): each bad batch,
label, dtype or loss is one UserError line; places by name or pattern, duplicates refused; a model without residual
connections and the raw input are said; the best place is the best unflagged one or none with the reason;
V_S,l = AG_l at places flagged by rank and within the stated tolerance elsewhere; the memory is estimated and a
probe that would not fit is refused before anything is allocated; an insertion that changes the outputs is undone."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import VisionTransformer

from common.errors import UserError
from common.models import probe_network_plan
from common.models.places.torchvision_resnet import small_resnet
from common.models.probe_network import probe_network
from common.models.probe_network_rails import V_AG_RTOL, InsertionChangedFunction
from common.science import memory
from common.science.growth import InsertionNotReached
from tests.models.test_probe_network import Residual, image_batches, token_batches, token_model


def resnet(classes: int = 5) -> nn.Module:
    torch.manual_seed(0)
    return small_resnet(num_classes=classes)


def refused(model, batches, match: str, **kwargs) -> str:
    with pytest.raises(UserError, match=match) as info:
        probe_network(model, batches, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def good(n: int = 4, size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 3, size, size), torch.randint(0, 5, (n,))


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        ((torch.zeros(0, 3, 16, 16), torch.zeros(0, dtype=torch.long)), r"batch 1 holds no examples"),
        ((torch.randn(4, 3, 16, 16), torch.zeros(3, dtype=torch.long)), r"batch 1: x holds 4 examples but y has shape"),
        ((torch.randn(4, 3, 16, 16).double(), torch.zeros(4, dtype=torch.long)), r"x is torch.float64 but the model"),
        ((torch.full((4, 3, 16, 16), float("nan")), torch.zeros(4, dtype=torch.long)), r"3,072 non-finite values"),
        ((torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 7, 2])), r"labels run from 0 to 7 but the model gives 5"),
        (
            (torch.randn(4, 3, 16, 16), torch.tensor([0.0, 1.0, 2.0, 3.0])),
            r"the labels are torch.float32; give integer",
        ),
        (
            (torch.randn(4, 3, 16, 16), torch.zeros(4, 1, dtype=torch.long)),
            r"the labels have shape \(4, 1\), the loss wants",
        ),
        ((torch.randn(4, 3, 16, 16), torch.tensor([0, -1, 2, 3])), r"labels run from -1 to 3"),
        (
            (torch.randn(4, 3, 16, 16), torch.zeros(4, dtype=torch.long), 3),
            r"batch 1 is a tuple; give \(x, y\) tensor pairs",
        ),
    ],
    ids=["empty", "lengths", "dtype", "nan", "range", "float-ids", "shape", "negative", "three"],
)
def test_each_bad_batch_is_one_line_naming_the_batch(batch, match):
    refused(resnet(), [good(), batch], match)


def test_a_float64_model_takes_float64_batches_and_refuses_float32_ones_in_one_line():
    model = resnet().double()
    x, y = good()
    refused(model, [(x, y)], r"batch 0: x is torch.float32 but the model's weights are torch.float64; cast one")
    assert probe_network(model, [(x.double(), y)]).result.scores


def test_a_summed_loss_is_refused_and_a_mean_loss_is_recorded_as_checked():
    batches = [good(), good()]
    summed = lambda out, y: F.cross_entropy(out, y, reduction="sum")  # noqa: E731
    refused(resnet(), batches, r"loss_fn sums over the examples .* give reduction='mean'", loss_fn=summed)
    probe = probe_network(resnet(), batches, loss_fn=lambda out, y: F.cross_entropy(out, y))
    assert "loss_fn: a mean over the examples (checked on two examples of batch 0)" in probe.normalisation
    assert "loss: cross-entropy, mean over the batch's examples" in probe_network(resnet(), batches).normalisation
    refused(resnet(), batches, r"loss_fn\(logits, y\) fails on batch 0 \(KeyError", loss_fn=lambda out, y: {}["x"])


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)  # NaN for a negative input


def test_a_loss_that_turns_non_finite_on_a_later_batch_stops_the_probe_in_one_line():
    model = nn.Sequential(Log(), *token_model())
    (x0, y0), (x1, y1) = token_batches()
    batches = [(x0.abs() + 0.1, y0), (x1, y1)]  # finite inputs; the second has negative values
    refused(model, batches, r"the loss is nan on pass 2 of the probe", places="2,3")


def test_places_by_name_and_pattern_and_duplicates_refused():
    model, batches = token_model(), token_batches()
    by_module = probe_network(model, batches, [model[1], model[2]])
    by_name = probe_network(model, batches, "1,2")
    assert [p.name for p in by_name.places] == ["1.in", "2.in"]
    assert [s.growth_value_pooled for s in by_name.result.scores] == [
        s.growth_value_pooled for s in by_module.result.scores
    ]
    assert [p.name for p in probe_network(model, batches, ["2", "3"]).places] == ["2.in", "3.in"]
    assert [p.name for p in probe_network(model, batches, "?").places] == ["0.in", "1.in", "2.in", "3.in"]
    refused(model, batches, r"places names 1 twice; give each place once", places="1,1")
    refused(model, batches, r"places names 1 twice", places=[model[1], model[1]])
    refused(
        model, batches, r"'blocks\.\*' names no module of Sequential \(its modules: 0, 1, 1\.mlp", places="blocks.*"
    )


def test_the_raw_input_is_flagged_and_a_model_without_residual_connections_is_warned_about(caplog):
    model, batches = token_model(), token_batches()
    with caplog.at_level(logging.WARNING):
        probe = probe_network(model, batches, "0,1,2")
    raw = probe.records()[0]
    assert "the model's raw input" in raw["flags"] and probe.summary()["best_place"] != "0.in"
    assert any("0.in reads the model's raw input" in w for w in probe.summary()["warnings"])
    assert not any("no residual connections" in w for w in probe.warnings)  # 1 and 2 add their input
    torch.manual_seed(0)
    plain = nn.Sequential(
        nn.Linear(5, 8), nn.Sequential(nn.Linear(8, 8), nn.GELU()), nn.Linear(8, 8), nn.Flatten(1), nn.Linear(32, 3)
    )
    with caplog.at_level(logging.WARNING):
        probe = probe_network(plain, batches, "1,2")
    assert any("no residual connections" in w for w in probe.warnings)
    assert "no residual connections" in caplog.text


def test_the_best_place_is_the_best_unflagged_one_or_none_with_the_reason():
    torch.manual_seed(0)
    vit = VisionTransformer(
        image_size=16, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=3
    )
    summary = probe_network(vit, image_batches(1, 16, 3)).summary()  # the zero head: every place flagged
    assert summary["best_place"] is None and summary["best_place_reason"].startswith("every place is flagged")
    probe = probe_network(resnet(), [good(2, 32)])  # 2 images: the small late maps have fewer rows than features
    ranking, summary = probe.ranking(), probe.summary()
    unflagged = [r["place"] for r in ranking if not r["flags"]]
    assert ranking[0]["flags"] and summary["best_place"] == unflagged[0]
    assert ranking[0]["place"] in summary["best_place_reason"]  # said to be skipped


def test_v_equals_ag_where_flagged_by_rank_and_stays_within_the_stated_tolerance_elsewhere():
    probe = probe_network(resnet(), [good(3), good(3)])  # float32 model
    flagged = [r for r in probe.records() if "by rank" in r["flags"]]
    assert flagged and len(flagged) < len(probe.records())
    for r in probe.records():
        if "by rank" in r["flags"]:
            assert r["growth_value_pooled"] == r["ag_norm_pooled"] and r["growth_fraction_pooled"] == 1.0
        else:
            assert r["growth_value_pooled"] <= r["ag_norm_pooled"] * (1 + V_AG_RTOL)
    assert f"(1 + {V_AG_RTOL:g})" in probe.normalisation


def test_a_probe_that_would_not_fit_is_refused_before_anything_is_allocated(monkeypatch):
    lines = []
    monkeypatch.setattr(probe_network_plan, "available_bytes", lambda device=None: (10 * 2**10, "a test's 10 KiB"))
    text = refused(
        resnet(),
        [good(), good()],
        r"the exact probe needs about .* but 0 MiB is free \(a test's 10 KiB\)",
        progress=lines.append,
    )
    assert "the largest places: " in text and "ways out: exact=False (AG_l only), fewer places" in text
    assert "smaller or fewer batches" in text and not lines  # refused before the probe said a word
    monkeypatch.setattr(probe_network_plan, "available_bytes", lambda device=None: (None, "unknown"))
    assert probe_network(resnet(), [good()]).memory_bytes > 0


def test_the_estimate_grows_with_the_rows_until_the_k_by_k_form_takes_over():
    place = memory.PlaceSize("p", k=4608, d=512, rows=512, pass_rows=256, state_bytes=0, row_values=512)
    more = memory.PlaceSize("p", k=4608, d=512, rows=2048, pass_rows=256, state_bytes=0, row_values=512)
    over = memory.PlaceSize("p", k=4608, d=512, rows=9216, pass_rows=256, state_bytes=0, row_values=512)
    held = [memory.exact_bytes(p, True)[0] for p in (place, more, over)]
    assert held[0] < held[1] < held[2] == memory.exact_bytes(over, False)[0]  # k >= rows: P and X, 4608^2 floats
    assert held[2] >= 8 * 4608 * (4608 + 512) and held[0] < held[2] / 10


def test_available_memory_is_the_least_of_meminfo_the_address_space_limit_and_the_cgroup(tmp_path, monkeypatch):
    (tmp_path / "meminfo").write_text("MemTotal: 9000000 kB\nMemAvailable: 4000000 kB\n")
    (tmp_path / "status").write_text("VmSize: 1000000 kB\n")
    (tmp_path / "memory.max").write_text("3000000000\n")
    (tmp_path / "memory.current").write_text("1000000000\n")
    monkeypatch.setattr(memory, "MEMINFO", tmp_path / "meminfo")
    monkeypatch.setattr(memory, "STATUS", tmp_path / "status")
    monkeypatch.setattr(memory, "CGROUP", tmp_path)
    assert memory.available_bytes() == (2_000_000_000, "the cgroup's memory.max")
    limit = 2_000_000 * 1024
    monkeypatch.setattr(memory.resource, "getrlimit", lambda what: (limit, limit))
    assert memory.available_bytes() == (limit - 1_000_000 * 1024, "the process's address-space limit (ulimit -v)")
    (tmp_path / "memory.max").write_text("max\n")  # no cgroup limit
    monkeypatch.setattr(memory.resource, "getrlimit", lambda what: (memory.resource.RLIM_INFINITY,) * 2)
    assert memory.available_bytes() == (4_000_000 * 1024, "the machine's available memory (MemAvailable)")


class Looped(nn.Module):
    """A model whose forward runs a fixed count of its blocks by index: an inserted block pushes the last one out."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem, self.n = nn.Linear(5, 8), 3
        self.blocks = nn.ModuleList(Residual(8) for _ in range(3))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        z = self.stem(x)
        for i in range(self.n):
            z = self.blocks[i](z)
        return self.head(z.mean(1))


class Float32Inside(Looped):
    """Casts its state to float32 on the way in: a float64 copy cannot run it."""

    def forward(self, x):
        z = self.stem(x)
        for block in self.blocks:
            z = block(z.to(torch.float32))
        return self.head(z.mean(1))


def test_an_insertion_that_changes_the_outputs_is_undone_and_refused_and_one_that_keeps_them_stays():
    model, batches = Looped(), token_batches()
    probe = probe_network(model, batches, "blocks.*")
    before, x = copy.deepcopy(model), batches[0][0]
    with pytest.raises(
        InsertionChangedFunction, match=r"place blocks\.1\.in changes the model's outputs .* in float64"
    ):
        probe.insert("blocks.1.in")
    assert len(model.blocks) == 3 and torch.equal(model(x), before(x))  # undone
    with pytest.raises(UserError, match="was not probed"):
        probe.insert("blocks.9.in")
    model32 = Float32Inside()
    probe = probe_network(model32, batches, "blocks.*")
    block = probe.insert("blocks.1.in")  # checked in float32 (stated tolerance): unchanged, so kept
    assert model32.blocks[1] is block and not isinstance(InsertionChangedFunction("x"), InsertionNotReached)
