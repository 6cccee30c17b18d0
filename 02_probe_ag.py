"""Probe the trained ResNet sweep: AG_l at every candidate, AGmax vs depth (paper B.1, Experiments).

For every finished sweep run of ``--dataset`` under ``--out`` (from 01_train_resnet_sweep.py):
B analysis batches (``--n-batches``, default 10; mini 7) of ``--batch-size`` (default 128) examples
from ``--split`` (default train; no augmentation, BatchNorm in eval mode unless ``--bn-mode
train``), one forward and one backward pass each, give ``AG_l``, ``AG~_l`` and the per-example
RMS at every candidate; ``--exact`` adds the tangent-space growth value ``V_S,l`` of the
protocol's zero-output block. The separated saturation test of App. G runs on an independent
sample (``--saturation-split``, default test: never trained on, disjoint from the analysis
batches; every example left unless ``--saturation-n``) on Theorem 3's statistic
``max_l ||C_l||``, the cross-gradient of the mean loss pooled over that whole sample, and
reports the error bound ``sum_l tr(Sigma_hat_l) / (n t^2)``. One run per model (experiment
``ag_probe``): finished runs are skipped.

Prints depth vs AGmax in both normalisations the paper's words allow (the batch-mean ``AG_l``
and the per-example RMS), each with the paper's 5e-3 low-signal line marked, the App. G
verdict with its bound, and ends with the path of the summary CSV (one row per depth and
seed). The job function is :func:`common.experiments.probe_ag.probe_sweep_run`.

    python 02_probe_ag.py --dataset cifar100
    python 02_probe_ag.py --dataset cifar10 --exact --split test
    python 02_probe_ag.py --dataset cifar10 --saturation-delta 0.01 --saturation-t 0.005
"""

from __future__ import annotations

import argparse

from common import runs
from common.cli import comma_ints, entry_point, flags_for, make_parser, parse_args, positive_float, positive_int
from common.data.vision import DATASETS
from common.errors import UserError
from common.experiments.probe_ag import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_N_BATCHES,
    EXPERIMENT,
    MINI_N_BATCHES,
    SATURATION_ALPHA,
    SATURATION_DELTA,
    SPLITS,
    probe_configs,
    probe_sweep_run,
    probe_tag,
    summary_rows,
    summary_table,
)
from common.experiments.train_resnet_sweep import DEFAULT_DATASET, finished_sweep_runs
from common.experiments.train_resnet_sweep import EXPERIMENT as SWEEP_EXPERIMENT
from common.launch import launch_from_args
from common.paper import LOW_SIGNAL_AG
from common.probe import BN_MODES
from common.runs import make_specs


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__.split("\n\n")[0], prog="02_probe_ag.py")
    probe = parser.add_argument_group("activation-gradient probe (paper B.1, DESIGN.md section 2)")
    probe.add_argument("--dataset", choices=DATASETS, default=None,
                       help="which sweep to probe; None: cifar10 with --preset paper and mini, digits with smoke")
    probe.add_argument("--data-root", default=None,
                       help="as in 01_train_resnet_sweep.py (None: the data root the sweep run was trained with)")
    probe.add_argument("--seeds", type=comma_ints, default=None, help="sweep seeds to probe; None: every finished run")
    probe.add_argument("--split", choices=SPLITS, default="train", help="where the analysis batches come from")
    probe.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE,
                       help="analysis batch size (AG_l of the batch-mean loss scales like 1/sqrt(batch size))")
    probe.add_argument("--n-batches", type=positive_int, default=None,
                       help=f"B: analysis batches per model; None: {DEFAULT_N_BATCHES} ({MINI_N_BATCHES} with --preset mini, "
                       "whose 1,000 training images hold 7 batches of 128)")
    probe.add_argument("--bn-mode", choices=BN_MODES, default="eval",
                       help="BatchNorm during the probe: running statistics (eval) or batch statistics (train)")
    probe.add_argument("--exact", action=argparse.BooleanOptionalAction, default=None,
                       help="also compute the exact growth value V_S,l per candidate; None: on with --preset smoke and mini, off with paper")
    sat = parser.add_argument_group("separated saturation test (App. G)")
    sat.add_argument("--saturation-delta", type=float, default=SATURATION_DELTA,
                     help="delta: 'saturated within delta' when max_l ||C_l|| < delta + t on the independent sample "
                          "(H0: Gamma <= delta vs H1: Gamma >= delta + 2t); default 0, Theorem 1's boundary (README)")
    sat.add_argument("--saturation-t", type=positive_float, default=None,
                     help="t > 0: the separation margin, in the units of ||C_l||; None: the t at which the error "
                          "bound sum_l tr(Sigma_hat_l) / (n t^2) equals --saturation-alpha")
    sat.add_argument("--saturation-alpha", type=float, default=SATURATION_ALPHA,
                     help="the error bound that sets t when --saturation-t is not given (0 < alpha < 1)")
    sat.add_argument("--saturation-n", type=positive_int, default=None,
                     help="n: examples in the App. G sample; None: every example of the split outside the analysis batches")
    sat.add_argument("--saturation-split", choices=SPLITS, default="test",
                     help="the independent probe sample (test: never trained on; train is flagged as reused training data)")
    return parser


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    dataset = args.dataset or DEFAULT_DATASET[args.preset]
    exact = args.exact if args.exact is not None else args.preset in ("smoke", "mini")
    n_batches = args.n_batches or (MINI_N_BATCHES if args.preset == "mini" else DEFAULT_N_BATCHES)
    sweep_dirs = finished_sweep_runs(args.out, dataset)
    if args.seeds is not None:
        sweep_dirs = [d for d in sweep_dirs if runs.read_json(d / runs.CONFIG)["seed"] in args.seeds]
    if not sweep_dirs:
        smoke = f" --preset {args.preset}" if args.preset != "paper" else ""
        raise UserError(
            f"no finished sweep runs for --dataset {dataset} under {args.out / SWEEP_EXPERIMENT}; train them first: "
            f"python 01_train_resnet_sweep.py{smoke} --dataset {dataset} --out {args.out}"
        )
    configs = probe_configs(sweep_dirs, **flags_for(probe_configs, args, exact=exact, n_batches=n_batches))
    results = launch_from_args(probe_sweep_run, make_specs(configs, args.out), args, job_kind="probe", desc="ag probe")
    if results is None:
        return 0
    rows = summary_rows(results)
    print(summary_table(rows, LOW_SIGNAL_AG))
    tag = probe_tag(args.split, args.batch_size, n_batches, exact, args.bn_mode)
    path = args.out / EXPERIMENT / f"summary-{dataset}-{tag}.csv"
    runs.atomic_write_csv(path, rows)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
