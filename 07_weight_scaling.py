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
import logging

from common import runs
from common.cli import comma_ints, entry_point, make_parser, parse_args, positive_float, positive_int
from common.data.vision import DATASETS
from common.errors import UserError
from common.experiments.train_resnet_sweep import DEFAULT_DATASET, finished_sweep_runs
from common.experiments.train_resnet_sweep import EXPERIMENT as SWEEP_EXPERIMENT
from common.experiments.weight_scaling import (
    EXPERIMENT,
    FAMILIES,
    FC_FAMILIES,
    analyse_sweep_run,
    exponent_markdown,
    exponent_rows,
    fc_configs,
    fc_training_table,
    record_rows,
    summary_tag,
    sweep_analysis_configs,
    train_fc_run,
)
from common.launch import launch_from_args
from common.runs import make_specs
from common.scaling import DEFAULT_LEVEL

log = logging.getLogger("07_weight_scaling")


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__.split("\n\n")[0], prog="07_weight_scaling.py")
    group = parser.add_argument_group("weight scaling (Cohen et al. 2021)")
    group.add_argument("--family", choices=FAMILIES, default=None,
                       help="fc-tanh, fc-relu (train and analyse) or sweep (analyse script 01's runs); "
                            "None: both FC families, and the sweep when it has finished runs")
    group.add_argument("--dataset", choices=DATASETS, default=None,
                       help="which sweep to analyse; None: cifar10 with --preset paper and mini, digits with smoke")
    group.add_argument("--depths", type=comma_ints, default=None,
                       help="FC network depths L, e.g. 4,8,16 or 4:64:4; None: the preset's geometric grid")
    group.add_argument("--seeds", type=comma_ints, default=None, help="FC seeds (data and initialisation); None: --seed")
    group.add_argument("--epochs", type=positive_int, default=None, help="FC epochs per run; None: the preset's")
    group.add_argument("--lr", type=positive_float, default=None, help="FC peak Adam learning rate; None: the preset's")
    group.add_argument("--batch-size", type=positive_int, default=None, help="FC batch size; None: the preset's")
    group.add_argument("--input-size", type=positive_int, default=None,
                       help="sweep: image size whose feature maps set the FFT spectral norms; None: the sweep's (32 if unrecorded)")
    group.add_argument("--level", type=positive_float, default=DEFAULT_LEVEL, help="confidence level of the exponent intervals")
    return parser


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    if not 0 < args.level < 1:
        raise UserError(f"--level {args.level}: give a confidence level between 0 and 1, e.g. 0.95")
    dataset = args.dataset or DEFAULT_DATASET[args.preset]
    families = [args.family] if args.family else [*FC_FAMILIES, "sweep"]
    seeds = args.seeds if args.seeds is not None else [args.seed]
    reports = []
    for family in families:
        if args.dry_run:
            print(f"{family}:")
        if family == "sweep":
            sweep_dirs = finished_sweep_runs(args.out, dataset)
            if not sweep_dirs:
                smoke = f" --preset {args.preset}" if args.preset != "paper" else ""
                fix = f"train them first: python 01_train_resnet_sweep.py{smoke} --dataset {dataset} --out {args.out}"
                if args.family == "sweep":
                    raise UserError(f"no finished sweep runs for --dataset {dataset} under {args.out / SWEEP_EXPERIMENT}; {fix}")
                print(f"sweep: no finished runs for {dataset} under {args.out / SWEEP_EXPERIMENT}, skipped ({fix})")
                continue
            configs = sweep_analysis_configs(sweep_dirs, input_size=args.input_size)
            results = launch_from_args(analyse_sweep_run, make_specs(configs, args.out), args, job_kind="probe", desc="sweep weights")
        else:
            configs = fc_configs(
                family, preset=args.preset, depths=args.depths, seeds=seeds, epochs=args.epochs, lr=args.lr,
                batch_size=args.batch_size, device=args.device,
            )  # fmt: skip
            results = launch_from_args(train_fc_run, make_specs(configs, args.out), args, job_kind="train", desc=family)
            if results is not None:
                print(fc_training_table(results))
        if results is not None:
            reports.append(write_summary(args, family, dataset, results))
    for paths in reports:
        print("\n".join(str(p) for p in paths))
    return 0


def write_summary(args, family: str, dataset: str, results: list[dict]) -> list:
    """Fit, print and write one family's exponent table and per-depth records; returns the file paths."""
    records = record_rows(results)
    rows = exponent_rows(records, level=args.level)
    table = exponent_markdown(rows)
    print(table)
    folder = args.out / EXPERIMENT
    tag = summary_tag(family, dataset)
    paths = [folder / f"exponents-{tag}.csv", folder / f"exponents-{tag}.md", folder / f"records-{tag}.csv"]
    runs.atomic_write_csv(paths[0], rows)
    runs.atomic_write_bytes(paths[1], (table + "\n").encode())
    runs.atomic_write_csv(paths[2], records)
    return paths


if __name__ == "__main__":
    raise SystemExit(main())
