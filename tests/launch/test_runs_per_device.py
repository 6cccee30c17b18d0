"""--runs-per-device K (common/launch/local_pool.py, common/launch/slurm.py): K runs share a device, the longest first, and a CPU
run's records are those of the same run alone."""

import json

import pytest
import torch

from common.errors import UserError
from common.experiments.shared.resnet_sweep import sweep_configs, sweep_run_cost, train_resnet_run
from common.launch import local_pool, slurm
from common.launch.launcher import launch
from common.launch.local_pool import CPU_THREADS, local_slots, longest_first
from common.runs import run_store
from common.runs.run_store import make_specs
from common.training.checkpoints import load_weights
from common.training.device import cpu_threads
from tests.launch.test_launcher import fake_devices

TIMINGS = ("wall_s", "epoch_time_s", "images_per_s")  # the only keys allowed to differ between K = 1, 2 and 3


def test_k_slots_per_gpu_first_slots_first_and_k_per_core_with_fixed_threads(monkeypatch):
    fake_devices(monkeypatch, "cuda", "3,5")
    slots = local_slots("cuda", distributed=False, runs_per_device=2)
    assert [s.params["visible_gpus"] for s in slots] == [(3,), (5,), (3,), (5,)]  # one run per GPU before a second
    monkeypatch.setattr(local_pool, "resolve_device", lambda name: torch.device("cpu"))
    monkeypatch.setattr(local_pool, "cpu_count", lambda: 2)
    cpu = local_slots("cpu", distributed=False, runs_per_device=3)
    assert len(cpu) == 6 and all(dict(s.env) == {"OMP_NUM_THREADS": str(CPU_THREADS)} for s in cpu)
    with pytest.raises(UserError, match="--runs-per-device 2: this script's runs are distributed"):
        local_slots("cpu", distributed=True, runs_per_device=2)


def test_longest_first_orders_by_the_sweep_flop_estimate():
    configs = sweep_configs(preset="paper", overrides={"depths": [0, 7, 3]})
    specs = make_specs(configs, "unused")
    assert [s.config["depth_n"] for s in longest_first(specs, sweep_run_cost)] == [7, 3, 0]
    assert longest_first(specs, None) == specs  # no estimate: the plan's order
    assert sweep_run_cost(configs[1]) > sweep_run_cost(configs[2]) > sweep_run_cost(configs[0]) > 0


def test_slurm_shares_a_gpu_through_the_profiles_gpu_share(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('gpus_per_node = 1\ngpu_share = "shard:8"\n')
    params = slurm.resolve(slurm.load_profile(path), "train", runs_per_device=4).executor_params()
    assert params["slurm_additional_parameters"]["gres"] == "shard:2" and "gpus_per_node" not in params
    preview = slurm.sbatch_preview(params, tmp_path, 3)
    assert "#SBATCH --gres=shard:2" in preview and "gpus-per-node" not in preview
    with pytest.raises(UserError, match="cannot share evenly; use a K that divides 8"):
        slurm.resolve(slurm.load_profile(path), "train", runs_per_device=3)
    path.write_text("gpus_per_node = 1\n")
    with pytest.raises(UserError, match="needs the profile's gpu_share key"):
        slurm.resolve(slurm.load_profile(path), "train", runs_per_device=2)
    path.write_text('gpu_share = "gpu:4"\n')
    with pytest.raises(UserError, match="gpu_share = 'gpu:4' at top level must be 'shard:N' or 'mps:N'"):
        slurm.load_profile(path)


def _records(run_dir) -> tuple[list[str], dict, dict]:
    """A run's metrics lines and result without timings, and its final weights."""
    lines = [
        json.dumps({k: v for k, v in r.items() if k not in TIMINGS}, sort_keys=True)
        for r in run_store.read_metrics(run_dir)
    ]
    result = {k: v for k, v in run_store.read_result(run_dir).items() if k not in TIMINGS}
    return lines, result, load_weights(run_dir)


def test_k_runs_on_one_core_give_the_records_of_each_run_alone(tmp_path, monkeypatch):
    """Three tiny sweep runs trained alone (inline, one thread), then as K = 2 and K = 3 local jobs sharing one core
    (all started together with K = 3): every metrics line, result and weight is the same, timings apart."""
    configs = sweep_configs(
        preset="smoke",
        dataset="synthetic",
        overrides={"depths": [0, 1, 2], "epochs": 2, "batch_size": 16},
        synthetic={"num_train": 32, "num_test": 16, "image_size": 8},
        device="cpu",
        compile="off",
    )
    with cpu_threads(CPU_THREADS):
        alone = launch(train_resnet_run, make_specs(configs, tmp_path / "alone"))
    monkeypatch.setattr(local_pool, "cpu_count", lambda: 1)
    for k, chosen in ((2, configs[:2]), (3, configs)):
        specs = make_specs(chosen, tmp_path / f"k{k}")
        slots = local_slots("cpu", distributed=False, runs_per_device=k)
        assert len(slots) == k
        launch(train_resnet_run, specs, launcher="local", slots=slots, cost=sweep_run_cost)
        for spec in specs:
            mine, reference = (
                _records(spec.dir),
                _records(tmp_path / "alone" / spec.dir.relative_to(tmp_path / f"k{k}")),
            )
            assert mine[:2] == reference[:2], spec.name
            assert all(torch.equal(mine[2][key], reference[2][key]) for key in reference[2]), spec.name
    assert len(alone) == 3 and all(r["cpu_threads"] == CPU_THREADS for r in alone)  # recorded: results depend on it
