"""common/launch/gpu_estimates.py: the launch model's arithmetic on known FLOP counts (common.models.resnet_flops's), the gpu-hour preset's
dry-run plans of 01, 02, 03 and 06 (FLOPs and estimated GPU time printed), and the scripts without it refusing it."""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import replace

import pytest

from common.experiments.grow_by_criterion import grow_plan
from common.experiments.growth_vs_scratch import growth_plan
from common.experiments.shared.resnet_sweep import sweep_configs
from common.launch import gpu_estimates as g
from common.models.resnet import ResNet, ResNetConfig
from common.models.resnet_flops import resnet_training_flops_per_image
from common.power import claim_rates
from common.presets.train_resnet_sweep import GPU_HOUR, GPU_HOUR_SEEDS
from common.report import claim_power
from common.report.rules.cases import CASES
from common.runs import run_store
from common.runs.run_store import make_specs
from common.training.flops import training_flops_per_image

# Known counts (issue 33): ResNet-8 12,239,488 multiply-adds per 32 x 32 image, each extra block 4,718,592 (two
# 3x3 convolutions, C^2 x 9 x H x W with C x H x W constant over the stages); 2 FLOPs each.
RESNET8_MACS, BLOCK_MACS = 12_239_488, 4_718_592
STEM_INPUT_GRAD = 2 * 16 * 3 * 9 * 32 * 32  # the stem's input gradient: the only backward product never computed
TOL = 1e-12  # every estimate below is a few float64 sums and products of exact integers: rounding only


def known_training_flops(n: int) -> int:
    """Forward + backward = 3 forwards, less the stem's input gradient."""
    return 3 * 2 * (RESNET8_MACS + n * BLOCK_MACS) - STEM_INPUT_GRAD


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 26, 100])
def test_training_flops_are_the_known_counts(n):
    assert resnet_training_flops_per_image(n) == known_training_flops(n)


def test_the_meta_count_is_common_flops_count():
    model = ResNet(ResNetConfig(extra_blocks=1))
    assert resnet_training_flops_per_image(1) == training_flops_per_image(model, (3, 32, 32), 10)


def test_the_estimates_count_with_the_one_counter():
    """A config's training FLOPs per image are common.models.resnet_flops's count of its architecture (none of its own)."""
    [config] = sweep_configs(preset="paper", dataset="cifar100", overrides={"depths": [7]})
    assert g.shapes_of(config).training() == resnet_training_flops_per_image(7, (16, 32, 64), (3, 32, 32), 100)
    assert not hasattr(g, "resnet_training_flops")


def test_a_phase_takes_the_slower_of_its_arithmetic_and_its_launches():
    device = replace(g.H100, launch_s=10e-6, host_step_s=100e-6)
    compute_bound = g.Phase(flops=2e12, rate=1e12, steps=1000, kernels=100)  # 2 s against 1000 x 1.1 ms = 1.1 s
    launch_bound = replace(compute_bound, steps=4000)  # 4.4 s of launches
    assert math.isclose(compute_bound.seconds(device), 2.0, rel_tol=TOL)
    assert math.isclose(launch_bound.seconds(device), 4.4, rel_tol=TOL)
    run = g.RunEstimate.of("r", [compute_bound, launch_bound], overhead_s=3.0, device=device)
    assert run.flops == 4e12 and math.isclose(run.compute_s, 4.0, rel_tol=TOL)
    assert math.isclose(run.alone_s, 3.0 + 2.0 + 4.4, rel_tol=TOL)
    # K runs per device: max(C, T / K)
    assert [run.device_s(k) for k in (1, 2, 3)] == [run.alone_s, run.alone_s / 2, 4.0]
    plan = g.PlanEstimate((run, replace(run, name="s", compute_s=0.5, alone_s=1.0)))
    assert math.isclose(plan.gpu_s(1), run.alone_s + 1.0, rel_tol=TOL)
    assert math.isclose(plan.gpu_s(8), max(4.0 + 0.5, run.alone_s), rel_tol=TOL)  # never below the longest alone


def test_a_paper_resnet8_run_is_its_phases():
    [config] = sweep_configs(preset="paper", dataset="cifar10", overrides={"depths": [0]})
    run, d, m = g.training_run(config), g.H100, g.LAUNCH
    t = known_training_flops(0)
    steps = 200 * (50_000 // 128)
    train = g.Phase(steps * 128 * t, d.bf16_flops, steps, 4 * m.kernels_per_block + m.kernels_fixed)
    forward_kernels = 4 * m.forward_kernels_per_block + m.forward_kernels_fixed
    evals = g.Phase(40 * 10_000 * t / 3, d.bf16_flops, 40 * 20, forward_kernels)  # every 5th of 200 epochs
    final = g.Phase(60_000 * t / 3, d.fp32_flops, 100 + 20, forward_kernels)
    assert math.isclose(run.flops, train.flops + evals.flops + final.flops, rel_tol=TOL)
    alone = m.start_s + m.compile_s + sum(p.seconds() for p in (train, evals, final))
    assert math.isclose(run.alone_s, alone, rel_tol=TOL)
    assert train.launch_s() > train.compute_s()  # ResNet-8 on an H100-class GPU: launch-bound


def test_a_growth_run_is_its_segments_at_each_depth_with_one_start_and_one_final_evaluation():
    """03's gpu-hour ResNet-10 (20 epochs, blocks before epochs 2 and 4): epochs 1-2 at ResNet-8, 3-4 at ResNet-9,
    5-20 at ResNet-10, the test set at epochs 5, 10, 15 and 20 (the run's own cadence, at that epoch's depth), the
    final float32 evaluation at ResNet-10, and one start and compilation: written out by hand from the known counts."""
    plan = growth_plan(preset="gpu-hour", dataset="cifar10", seeds=[0])
    config = plan.growth[(0, 2)]
    assert config["growth"]["epochs"] == [2, 4] and config["train"]["epochs"] == 20
    d, m, steps = g.H100, g.LAUNCH, 50_000 // 128
    kernels = {n: (4 + n) * m.kernels_per_block + m.kernels_fixed for n in range(3)}
    forward_kernels = 6 * m.forward_kernels_per_block + m.forward_kernels_fixed
    t = known_training_flops
    phases = [
        *(g.Phase(e * steps * 128 * t(n), d.bf16_flops, e * steps, kernels[n]) for n, e in ((0, 2), (1, 2), (2, 16))),
        g.Phase(4 * 10_000 * t(2) / 3, d.bf16_flops, 4 * 20, forward_kernels),  # epochs 5, 10, 15, 20
        g.Phase(60_000 * t(2) / 3, d.fp32_flops, 100 + 20, forward_kernels),
    ]
    run = g.growth_run(config)
    assert run.name == config["name"] and math.isclose(run.flops, sum(p.flops for p in phases), rel_tol=TOL)
    assert math.isclose(run.compute_s, sum(p.compute_s() for p in phases), rel_tol=TOL)
    assert math.isclose(run.alone_s, m.start_s + m.compile_s + sum(p.seconds() for p in phases), rel_tol=TOL)
    # cheaper than the scratch run (the sweep's ResNet-10), dearer than the sweep's ResNet-8 over the same epochs
    [resnet8] = sweep_configs(preset="gpu-hour", dataset="cifar10", overrides={"depths": [0]})
    assert g.training_run(resnet8).flops < run.flops < g.training_run(plan.scratch[(0, 2)]).flops
    [estimate] = g.plan_estimate(make_specs([config], "x")).runs  # what a dry run of 03 counts for it
    assert estimate == run


def test_a_plan_names_the_jobs_it_has_no_estimate_for():
    known = make_specs(sweep_configs(preset="gpu-hour", dataset="cifar10", overrides={"depths": [0]}), "x")
    other = run_store.RunSpec({"experiment": "weight_scaling", "name": "fc-tanh-l4"}, "x")
    plan = g.plan_estimate([*known, other])
    assert len(plan.runs) == 1 and plan.unknown == ("fc-tanh-l4",)
    text = g.describe(plan, runs_per_device=2)
    assert "at --runs-per-device 1, " in text and "at --runs-per-device 2, " in text and "--runs-per-device 4 (" in text
    assert text.splitlines()[1] == "  no estimate for 1 jobs (their experiment or data size is not modelled)"
    assert g.describe(g.plan_estimate([other])) is None  # nothing to estimate: no line at all


def test_the_paper_sweep_per_seed_is_what_reproducing_md_states():
    plan = g.plan_estimate(make_specs(sweep_configs(preset="paper", dataset="cifar10"), "unused"))
    assert len(plan.runs) == 101 and round(plan.flops / 1e18, 2) == 1.52
    assert round(plan.gpu_s(1) / 3600) == 19 and round(plan.gpu_s(4) / 3600, 1) == 8.5


def test_the_paper_growth_runs_are_what_reproducing_md_states():
    """03's row of docs/reproducing.md: four growth runs of 200 epochs per seed, ~0.17 GPU-hours at K = 1 (its
    scratch runs, 01's, ~0.18 more where 01 has not trained them); three seeds ~0.5 at K = 1 and ~0.13 at K = 4."""
    plan = growth_plan(preset="paper", dataset="cifar10", seeds=[0, 1, 2])
    seed0 = [c for (seed, _), c in plan.growth.items() if seed == 0]
    scratch0 = [c for (seed, _), c in plan.scratch.items() if seed == 0]
    hours = {k: g.plan_estimate(make_specs(configs, "x")) for k, configs in (("one", seed0), ("scratch", scratch0))}
    three = g.plan_estimate(make_specs(list(plan.growth.values()), "x"))
    assert len(seed0) == 4 and round(hours["one"].gpu_s(1) / 3600, 2) == 0.17
    assert round(hours["scratch"].gpu_s(1) / 3600, 2) == 0.18
    assert round(three.gpu_s(1) / 3600, 1) == 0.5 and round(three.gpu_s(4) / 3600, 2) == 0.13


def test_the_gpu_hour_design_decides_every_rule_of_01_to_06():
    """docs/reproducing.md's table: at N = 0..26 x 5 seeds (growth 4 architectures x 5, the matched insertion's four
    depths x 5) every rule of the sweep, growth and matched insertion has power >= 0.8 at noise 0.5x its effect and
    P(holds | false) <= 0.05 at 0.5x and 1x (issue 21), seeded as docs/claim-rules.md's table is."""
    design = claim_power.design_for_preset("gpu-hour", seeds=GPU_HOUR_SEEDS)
    assert design.sweep_depths == GPU_HOUR.depths == tuple(range(27)) and design.matched_depths == (8, 14, 20, 34)
    rates = [claim_rates.measure(c, design) for c in CASES if c.experiment in ("sweep", "growth", "matched")]
    assert len(rates) == 11 and all(r.meets() for r in rates), [(r.case.name, r.holds_true) for r in rates]
    assert abs(min(r.holds_true[0.5] for r in rates) - 0.8425) <= 0.02  # explained_by_training_loss (the docs)


def finished_sweep(out, seeds=GPU_HOUR_SEEDS) -> list[dict]:
    """Finished gpu-hour sweep runs (records only, no weights): what 02, 03 and 06 plan from."""
    configs = sweep_configs(preset="gpu-hour", dataset="cifar10", seeds=range(seeds))
    for config in configs:
        path = run_store.prepare_run(out, config)
        run_store.write_result(path, {"train_loss": 0.1, "test_loss": 0.4, "train_size": 50_000, "test_size": 10_000})
    return configs


def estimate_line(out: str) -> str:
    [line] = [x for x in out.splitlines() if x.startswith("GPU time (estimate")]
    return line


def printed_minutes(line: str, k: int) -> float:
    value, unit = re.search(rf"([\d.]+) (h|min) at --runs-per-device {k}\b", line).groups()
    return float(value) * (60 if unit == "h" else 1)


def test_gpu_hour_dry_runs_print_flops_and_time_and_fit_about_an_hour(tmp_path, capsys):
    names = ("01_train_resnet_sweep", "02_probe_ag", "03_growth_vs_scratch", "06_matched_insertion")
    scripts = {name[:2]: importlib.import_module(name) for name in names}
    args = ["--preset", "gpu-hour", "--dry-run", "--runs-per-device", "4"]
    assert scripts["01"].main([*args, "--out", str(tmp_path / "never")]) == 0
    line = estimate_line(capsys.readouterr().out)
    sweep = g.plan_estimate(make_specs(sweep_configs(preset="gpu-hour", dataset="cifar10", seeds=range(5)), "x"))
    assert len(sweep.runs) == len(GPU_HOUR.depths) * GPU_HOUR_SEEDS == 135
    assert "135 jobs to run" in line and f"{sweep.flops:.3g} FLOPs (estimate)" in line
    assert abs(printed_minutes(line, 4) - sweep.gpu_s(4) / 60) <= 0.5
    assert not (tmp_path / "never").exists()

    out = tmp_path / "runs"
    finished_sweep(out)  # what 02 and 06 read, and 03's scratch runs
    minutes = {"01": sweep.gpu_s(4) / 60}
    lines = {}
    for key in ("02", "03", "06"):
        assert scripts[key].main([*args, "--out", str(out)]) == 0
        lines[key] = estimate_line(capsys.readouterr().out)
        assert "FLOPs (estimate)" in lines[key] and "(estimates)" in lines[key]
        minutes[key] = printed_minutes(lines[key], 4)
    assert "135 jobs" in lines["02"] and f"{4 * GPU_HOUR_SEEDS} jobs" in lines["06"]
    plan = growth_plan(preset="gpu-hour", dataset="cifar10", seeds=range(5))
    todo = [s for s in make_specs(plan.jobs(), out) if not run_store.is_done(s.dir)]  # 4 x 5 growth runs; scratch: 01's
    assert len(todo) == 4 * 5 and all("growth" in s.config for s in todo) and f"{len(todo)} jobs" in lines["03"]
    assert abs(minutes["03"] - g.plan_estimate(todo).gpu_s(4) / 60) <= 0.5
    assert 45 <= sum(minutes.values()) <= 75, minutes  # "about one hour" at --runs-per-device 4 (an estimate)


@pytest.mark.parametrize(
    "name", ["04_pythia_cpt", "05_gpt2_ascend", "07_weight_scaling", "09_grow_by_criterion", "10_expand_decoder"]
)
def test_scripts_without_the_gpu_hour_preset_refuse_it_in_one_line(name, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        importlib.import_module(name).main(["--preset", "gpu-hour", "--dry-run", "--out", str(tmp_path)])
    assert info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--preset gpu-hour" in line and "01_train_resnet_sweep.py" in line and "06_matched_insertion.py" in line
    assert not any(tmp_path.iterdir())


def test_a_09_run_is_estimated_as_the_sweeps_run_whose_flops_are_its_budget():
    """09's arms all spend B, the training FLOPs of the sweep's ResNet-13 run: each is estimated as that run (the
    paper row of docs/reproducing.md: ~3 minutes alone, 2.2e15 FLOPs), whatever depth it grows to."""
    plan = grow_plan(preset="paper", dataset="cifar10", seeds=[0])
    estimates = {arm: g.grow_run(c) for (arm, _), c in plan.configs.items()}
    config = plan.configs[("none", 0)]
    reference = g.training_run({**config, "depth_n": 5, "train": {**config["train"], "epochs": 200}})
    assert all(e == replace(reference, name=e.name) for e in estimates.values())
    assert 2.1e15 < reference.flops < 2.3e15 and 120 < reference.alone_s < 240
