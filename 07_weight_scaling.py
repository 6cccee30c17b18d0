"""Weight-scaling diagnostics of Cohen et al. (2021): their fully connected setting, and our trained sweep.

``--family fc-tanh`` / ``fc-relu`` trains the fully connected ResNet
``x_{k+1} = x_k + delta_k sigma(A_k x_k + b_k)`` (tanh with a shared delta; ReLU with a per-layer
delta) on their synthetic neural-ODE regression data (d = 10, MSE) across a geometric grid of
depths, one resumable run per depth (``--launcher slurm`` sends them as a job array), then fits
the scaling exponents of the trained weights. ``--family sweep`` analyses the finished runs of
01_train_resnet_sweep.py on ``--dataset``: BatchNorm folded into each conv, per stage the first
conv (A) and last conv (delta) of every block, downsampling blocks left out. Without
``--family``: both FC families, and the sweep when it has finished runs.

Prints the exponent table (estimates with confidence intervals beside Cohen et al.'s values) and
ends with the paths of the summary files under ``<out>/weight_scaling/``:
``exponents-<tag>.csv`` / ``.md`` and ``records-<tag>.csv`` (per-depth statistics; the format
is documented in :mod:`common.experiments.weight_scaling`). Job functions:
:func:`common.experiments.weight_scaling.train_fc_run` and ``analyse_sweep_run``.

    python 07_weight_scaling.py --preset smoke
    python 07_weight_scaling.py --family fc-tanh --launcher slurm --slurm-profile slurm/mycluster.toml
    python 07_weight_scaling.py --family sweep --dataset cifar10
"""

from __future__ import annotations

import argparse
import functools
import logging

from common.data.vision import DATASETS
from common.experiments.shared.resnet_sweep import EXPERIMENT as SWEEP_EXPERIMENT
from common.experiments.shared.resnet_sweep_records import (
    check_sweep_inputs,
    finished_sweep_runs,
    require_sweep_runs,
    train_command,
)
from common.experiments.weight_scaling import (
    EXPERIMENT,
    FAMILIES,
    FC_FAMILIES,
    analyse_sweep_run,
    exponent_markdown,
    fc_configs,
    fc_training_table,
    record_rows,
    summary_key,
    summary_tag,
    sweep_analysis_configs,
    train_fc_run,
)
from common.experiments.weight_scaling_fits import exponent_rows
from common.launch.cli import (
    check_flag_use,
    comma_ints,
    entry_point,
    fraction,
    make_parser,
    parse_args,
    positive_float,
    positive_int,
)
from common.launch.launcher import launch_from_args
from common.presets.train_resnet_sweep import DEFAULT_DATASET
from common.presets.weight_scaling import SCHEDULES
from common.runs import atomic, run_store
from common.runs.run_store import make_specs
from common.science.scaling import DEFAULT_LEVEL

log = logging.getLogger("07_weight_scaling")

# The flags that set a field of the FC preset (common.presets.weight_scaling.FCPreset, its recipe): dest == field.
PRESET_FLAGS = ("depths", "epochs", "lr", "batch_size", "schedule")
PLANNER_FLAGS = ("preset", *PRESET_FLAGS, "device", "input_size")  # fc_configs, sweep_analysis_configs
SCRIPT_FLAGS = (
    "family",
    "dataset",
    "seeds",
    "seed",
    "level",
)  # which families; the seeds: --seeds, else --seed; the fits


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="07_weight_scaling.py")
    group = parser.add_argument_group("weight scaling (Cohen et al. 2021)")
    group.add_argument(
        "--family",
        choices=FAMILIES,
        default=None,
        help="fc-tanh, fc-relu (train and analyse) or sweep (analyse script 01's runs); "
        "None: both FC families, and the sweep when it has finished runs",
    )
    group.add_argument(
        "--dataset",
        choices=DATASETS,
        default=None,
        help="which sweep to analyse; None: cifar10 with --preset paper and mini, digits with smoke",
    )
    group.add_argument(
        "--depths",
        type=comma_ints,
        default=None,
        help="FC network depths L, e.g. 4,8,16 or 4:64:4; None: the preset's geometric grid",
    )
    group.add_argument(
        "--seeds", type=comma_ints, default=None, help="FC seeds (data and initialisation); None: --seed"
    )
    group.add_argument("--epochs", type=positive_int, default=None, help="FC epochs per run; None: the preset's")
    group.add_argument("--lr", type=positive_float, default=None, help="FC peak Adam learning rate; None: the preset's")
    group.add_argument("--batch-size", type=positive_int, default=None, help="FC batch size; None: the preset's")
    group.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default=None,
        help="FC training: 'constant' = Cohen et al.'s protocol (constant Adam rate, early stopping on the "
        "running training MSE: < 1e-3, or 5 epochs without a 1%% gain), 'cosine' = cosine decay to 0 over "
        "every epoch; None: the preset's (paper: constant, smoke: cosine)",
    )
    group.add_argument(
        "--input-size",
        type=positive_int,
        default=None,
        help="sweep: image size whose feature maps set the FFT spectral norms; None: the sweep's (32 if unrecorded)",
    )
    group.add_argument(
        "--level", type=fraction, default=DEFAULT_LEVEL, help="confidence level of the exponent intervals"
    )
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    dataset = args.dataset or DEFAULT_DATASET[args.preset]
    families = [args.family] if args.family else [*FC_FAMILIES, "sweep"]
    seeds = args.seeds if args.seeds is not None else [args.seed]
    reports = []
    for family in families:
        if args.dry_run:
            print(f"{family}:")
        if family == "sweep":
            if args.family != "sweep" and not finished_sweep_runs(args.out, dataset):
                fix = train_command(args.preset, dataset, args.out)
                print(
                    f"sweep: no finished runs for {dataset} under {args.out / SWEEP_EXPERIMENT}, skipped (train them first: {fix})"
                )
                continue
            sweep_dirs = require_sweep_runs(args.out, dataset, preset=args.preset)
            configs = sweep_analysis_configs(sweep_dirs, input_size=args.input_size)
            results = launch_from_args(
                analyse_sweep_run,
                make_specs(configs, args.out),
                args,
                job_kind="probe",
                desc="sweep weights",
                check=functools.partial(check_sweep_inputs, data=False),
            )
        else:
            overrides = {field: getattr(args, field) for field in PRESET_FLAGS}
            configs = fc_configs(family, preset=args.preset, overrides=overrides, seeds=seeds, device=args.device)
            results = launch_from_args(train_fc_run, make_specs(configs, args.out), args, job_kind="train", desc=family)
            if results is not None:
                print(fc_training_table(results))
        if results is not None:
            reports.append(write_summary(args, family, dataset, configs))
    for paths in reports:
        print("\n".join(str(p) for p in paths))
    return 0


def write_summary(args, family: str, dataset: str, configs: list[dict]) -> list:
    """Fit, print and write one family's exponent table and per-depth records of every finished run like ``configs``
    (not only this call's); returns the file paths."""
    found = run_store.finished_like(args.out, configs, summary_key)
    records = record_rows(found)
    rows = exponent_rows(records, level=args.level)
    table = exponent_markdown(rows)
    print(table)
    folder = args.out / EXPERIMENT
    tag = summary_tag(family, dataset)
    files = [
        (folder / f"exponents-{tag}.csv", atomic.csv_bytes(rows)),
        (folder / f"exponents-{tag}.md", (table + "\n").encode()),
        (folder / f"records-{tag}.csv", atomic.csv_bytes(records)),
    ]
    return run_store.write_summary(files, runs_found=len(found))


if __name__ == "__main__":
    raise SystemExit(main())
