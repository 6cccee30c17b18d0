"""A run's config read once into its typed form (common/runs/typed_config.py; docs/design.md, section "A job reads its
config once"): the converter refuses unknown and missing keys by name and builds nested sections, and every job's
typed config gives back exactly the config dict it was read from (the planned configs of each job's own planner on
the smoke presets, and every committed record under results/mini/)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.experiments import expand_decoder, gpt2_ascend, matched_insertion, probe_ag, pythia_cpt, weight_scaling
from common.experiments.expand_decoder_config import ExpandRun
from common.experiments.gpt2_ascend_config import GPTRun
from common.experiments.grow_by_criterion import grow_plan
from common.experiments.grow_by_criterion_config import CriterionRun
from common.experiments.growth_vs_scratch import growth_plan
from common.experiments.growth_vs_scratch_config import GrowthRun
from common.experiments.matched_insertion_config import MatchedRun
from common.experiments.probe_ag_config import ProbeRun, Saturation
from common.experiments.pythia_cpt_config import CPTRun
from common.experiments.shared.resnet_sweep import sweep_configs
from common.experiments.shared.resnet_sweep_config import SweepRun, SweepTrain, TrainSubset
from common.experiments.weight_scaling_config import FCRun, SweepAnalysisRun
from common.presets.matched_insertion import PRESETS as MATCHED_PRESETS
from common.presets.probe_ag import PRESETS as PROBE_PRESETS
from common.runs import run_store
from common.runs.typed_config import from_mapping, optional, to_mapping
from common.training.recipes import SGDRecipe

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Inner:
    k: int
    name: str | None = optional()


@dataclass(frozen=True)
class Outer:
    seed: int
    widths: tuple[int, ...]
    inner: Inner
    maybe: Inner | None


def test_nested_sections_are_built_and_written_back():
    config = {"seed": 3, "widths": [16, 32], "inner": {"k": 1}, "maybe": {"k": 2, "name": "x"}}
    outer = from_mapping(Outer, config)
    assert outer == Outer(3, (16, 32), Inner(1), Inner(2, "x"))
    assert isinstance(outer.inner, Inner) and outer.widths == (16, 32)
    assert to_mapping(outer) == config  # the optional key absent stays absent, the present one comes back
    assert from_mapping(Outer, {**config, "maybe": None}).maybe is None
    assert to_mapping(from_mapping(Inner, {"k": 1, "name": None})) == {"k": 1, "name": None}  # present: kept


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"seed": 3, "widths": [16], "inner": {"k": 1}, "maybe": None, "extra": 1}, "unknown key extra"),
        ({"seed": 3, "widths": [16], "inner": {"k": 1, "kk": 2}, "maybe": None}, "unknown key inner.kk"),
        ({"widths": [16], "inner": {"k": 1}, "maybe": None}, "missing key seed"),
        ({"seed": 3, "widths": [16], "inner": {}, "maybe": None}, "missing key inner.k"),
        ({"seed": 3, "widths": [16], "inner": 5, "maybe": None}, "inner is 5, not a mapping"),
    ],
)
def test_unknown_and_missing_keys_are_refused_by_name(config, named):
    with pytest.raises(ValueError, match=named):
        from_mapping(Outer, config)


def test_a_sweep_run_reads_its_recipe_and_sections_typed():
    [config] = sweep_configs(preset="mini", dataset="npz", data_root="data/x.npz", overrides={"depths": [2]})
    run = SweepRun.from_config(config)
    assert isinstance(run.train, SweepTrain) and run.data.train_subset == TrainSubset(k=1000, seed=0)
    assert run.train.recipe == SGDRecipe.from_config(config["train"])
    assert run.depth_n == 2 and run.model.widths == (16, 32, 64)
    with pytest.raises(ValueError, match="missing key train.lr"):
        SweepRun.from_config({**config, "train": {k: v for k, v in config["train"].items() if k != "lr"}})


def _round_trip(cls, config: dict) -> None:
    assert cls.from_config(config).to_config() == json.loads(json.dumps(config, default=str)), cls.__name__


def _sweep_dir(tmp_path: Path) -> tuple[Path, dict]:
    """A sweep run's directory holding its config (what the planners of 02, 06 and 07 read), no training."""
    [sweep] = sweep_configs(preset="smoke", dataset="synthetic", overrides={"depths": [1]})
    return run_store.prepare_run(tmp_path, sweep), sweep


def test_every_jobs_planned_config_round_trips(tmp_path):
    for config in sweep_configs(preset="smoke", dataset="synthetic"):
        _round_trip(SweepRun, config)
    for config in growth_plan(preset="smoke", dataset="synthetic").growth.values():
        _round_trip(GrowthRun, config)
    for config in grow_plan(preset="smoke", dataset="synthetic").configs.values():
        _round_trip(CriterionRun, config)
    directory, sweep = _sweep_dir(tmp_path)
    for app_g in (True, False):
        config = probe_ag.probe_config(directory, sweep, PROBE_PRESETS["smoke"], seed=0, device="cpu", data_root=None,
                                       app_g=app_g)  # fmt: skip
        _round_trip(ProbeRun, config)
    assert isinstance(ProbeRun.from_config(config | {"saturation": None}).runtime.sweep_dir, str)
    matched = MATCHED_PRESETS["smoke"]
    config = matched_insertion.matched_config(matched, directory, sweep, "synthetic", 0, device="cpu", data_root=None)
    _round_trip(MatchedRun, config)
    for config in weight_scaling.fc_configs("fc-tanh", preset="smoke") + weight_scaling.fc_configs(
        "fc-relu", preset="smoke", overrides={"schedule": "constant"}
    ):
        _round_trip(FCRun, config)
    for config in weight_scaling.sweep_analysis_configs([directory]):
        _round_trip(SweepAnalysisRun, config)
    for config in gpt2_ascend.gpt_configs(preset="smoke"):
        _round_trip(GPTRun, config)
    text = tmp_path / "tinyshakespeare.txt"  # mini's text, made here: a test never downloads
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 200)
    for config in pythia_cpt.cpt_configs(preset="smoke") + pythia_cpt.cpt_configs(preset="mini", text_path=text):
        _round_trip(CPTRun, config)
    for config in expand_decoder.expand_configs(preset="smoke", out=tmp_path):
        _round_trip(ExpandRun, config)


COMMITTED = {
    "resnet_sweep": SweepRun,
    "growth_vs_scratch": GrowthRun,
    "grow_by_criterion": CriterionRun,
    "ag_probe": ProbeRun,
    "matched_insertion": MatchedRun,
    "gpt2_ascend": GPTRun,
    "expand_decoder": ExpandRun,
}


@pytest.mark.parametrize("experiment", sorted(COMMITTED))
def test_every_committed_mini_record_round_trips(experiment):
    paths = sorted((ROOT / "results" / "mini").glob(f"{experiment}/*/config.json"))
    if experiment == "grow_by_criterion":
        paths += sorted((ROOT / "results" / "mini").glob("grow_calibration/*/*/config.json"))
    assert paths, f"no committed {experiment} records"
    for path in paths:
        _round_trip(COMMITTED[experiment], json.loads(path.read_text()))


def test_weight_scaling_records_round_trip_by_family():
    paths = sorted((ROOT / "results" / "mini").glob("weight_scaling/*/config.json"))
    for path in paths:
        config = json.loads(path.read_text())
        _round_trip(SweepAnalysisRun if config["family"] == "sweep" else FCRun, config)
    assert {json.loads(p.read_text())["family"] for p in paths} == {"sweep", "fc-tanh", "fc-relu"}


def test_a_saturation_section_is_typed():
    directory = Path("results/mini/resnet_sweep/x")
    config = probe_ag.probe_config(directory, {"dataset": "npz", "depth_label": 8, "depth_n": 0, "seed": 0},
                                   PROBE_PRESETS["mini"], seed=0, device="cpu", data_root=None)  # fmt: skip
    assert isinstance(ProbeRun.from_config(config).saturation, Saturation)
