"""Probe the trained ResNet sweep: AG_l at every candidate, AGmax vs depth (paper B.1, Experiments).

For every finished sweep run of ``--dataset`` under ``--out`` (from 01_train_resnet_sweep.py):
B analysis batches (``--n-batches``, default 10; mini 7) of ``--batch-size`` (default 128) examples
from ``--split`` (default train; no augmentation, BatchNorm in eval mode unless ``--bn-mode
train``), one forward and one backward pass each, give ``AG_l``, ``AG~_l`` and the per-example
RMS at every candidate; ``--exact`` adds the tangent-space growth value ``V_S,l`` of the
protocol's zero-output block. The separated saturation test of App. G runs on an independent
sample (``--saturation-split``, default held-out: every image never trained on, the training
images a ``--train-subset`` left out and the test split, disjoint from the analysis batches;
every example left unless ``--saturation-n``), split with a recorded seed into a
calibration part (``--saturation-cal-fraction``, default 0.25) that estimates the traces
``tr Sigma_l`` and a test part of ``n_test`` examples that gives Theorem 3's statistic
``Gamma_hat = max_l ||C_l||``, the cross-gradient of the mean loss pooled over the test part. It
reports ``Gamma in [max(0, Gamma_hat - t), Gamma_hat + t]`` with ``t = sqrt(sum_l tr_l / (n_test
alpha))`` and, against ``--saturation-delta``, one of "saturated within delta", "not saturated",
"undecided" (no delta: "not saturated" or "undecided"); ``--saturation-t`` fixes t instead (no
split; the implied alpha is reported). Beside it, labelled asymptotic and not used for the
verdict, a Bonferroni normal-theory interval on Gamma, and for both intervals the n_test at which
each would exclude 0 (and delta). ``--saturation-depths deepest`` (mini's default) runs the test
only on the models of the deepest depth probed. One run per model (experiment
``ag_probe``): finished runs are skipped.

Prints depth vs AGmax in both normalisations the paper's words allow (the batch-mean ``AG_l``
and the per-example RMS), each with the paper's 5e-3 low-signal line marked, the App. G
interval, t, the asymptotic interval, the number of candidates and the verdict, and ends with the path of the summary CSV (one row per depth and
seed). The job function is :func:`common.experiments.probe_ag.probe_sweep_run`.

    python 02_probe_ag.py --dataset cifar100
    python 02_probe_ag.py --dataset cifar10 --exact --split test
    python 02_probe_ag.py --dataset cifar10 --saturation-delta 0.01
    python 02_probe_ag.py --dataset cifar10 --saturation-delta 0.01 --saturation-t 0.005
"""

from __future__ import annotations

import argparse

from common.data.vision import DATASETS
from common.experiments.probe_ag import (
    EXPERIMENT,
    probe_configs,
    probe_sweep_run,
    summary_stem,
)
from common.experiments.probe_ag_summary import summary_rows, summary_table
from common.experiments.shared.resnet_sweep_records import check_sweep_inputs, require_sweep_runs
from common.launch.cli import (
    check_flag_use,
    comma_ints,
    entry_point,
    fraction,
    make_parser,
    non_negative_float,
    parse_args,
    positive_float,
    positive_int,
)
from common.launch.decoder_flags import PresetFlag, add_preset_flags, preset_fields
from common.launch.launcher import launch_from_args
from common.presets.paper import LOW_SIGNAL_AG
from common.presets.probe_ag import PRESETS, SATURATION_DEPTHS, SATURATION_SPLITS, SPLITS
from common.presets.train_resnet_sweep import DEFAULT_DATASET
from common.runs import atomic, run_store
from common.runs.run_store import make_specs
from common.science.activations import BN_MODES

PAPER, MINI = PRESETS["paper"], PRESETS["mini"]
PROBE_FLAGS: dict[str, PresetFlag] = {  # each sets the field of common.presets.probe_ag.ProbePreset of its dest
    "--split": ("split", str, f"where the analysis batches come from; None: the preset's ({PAPER.split})"),
    "--batch-size": (
        "batch_size",
        positive_int,
        f"analysis batch size (AG_l of the batch-mean loss scales like 1/sqrt(batch size)); None: {PAPER.batch_size}",
    ),
    "--n-batches": (
        "n_batches",
        positive_int,
        f"B: analysis batches per model; None: {PAPER.n_batches} ({MINI.n_batches} with --preset mini, "
        "whose 1,000 training images hold 7 batches of 128)",
    ),
    "--bn-mode": (
        "bn_mode",
        str,
        f"BatchNorm during the probe: running statistics (eval) or batch statistics (train); None: {PAPER.bn_mode}",
    ),
    "--exact": (
        "exact",
        argparse.BooleanOptionalAction,
        "also compute the exact growth value V_S,l per candidate; None: the preset's (on with --preset "
        f"{', '.join(name for name, p in PRESETS.items() if p.exact)}, off with the others)",
    ),
}
SATURATION_FLAGS: dict[str, PresetFlag] = {
    "--saturation-delta": (
        "saturation_delta",
        non_negative_float,
        "delta >= 0, in the units of ||C_l||: 'saturated within delta' when the interval's upper end is "
        "<= delta, 'not saturated' when its lower end is > delta, else 'undecided'; None: no tolerance, "
        "so only 'not saturated' (lower end > 0) or 'undecided'",
    ),
    "--saturation-t": (
        "saturation_t",
        positive_float,
        "t > 0: the interval's half-width, fixed in advance; no calibration split, the implied alpha = "
        "sum_l tr_l / (n t^2) is reported; None: t = sqrt(sum_l tr_l / (n_test alpha)) from the calibration part",
    ),
    "--saturation-alpha": (
        "saturation_alpha",
        fraction,
        f"the interval's confidence is 1 - alpha (0 < alpha < 1), when --saturation-t is not given; None: "
        f"{PAPER.saturation_alpha:g}",
    ),
    "--saturation-cal-fraction": (
        "saturation_cal_fraction",
        fraction,
        "share of the App. G sample that calibrates the traces tr Sigma_l (the rest, n_test examples, gives C_l); "
        f"None: {PAPER.saturation_cal_fraction:g}",
    ),
    "--saturation-n": (
        "saturation_n",
        positive_int,
        "n: examples in the App. G sample; None: every example of the split outside the analysis batches",
    ),
    "--saturation-split": (
        "saturation_split",
        str,
        "the independent probe sample: held-out (every image never trained on: the training images a "
        "--train-subset left out and the test split), test, or train (flagged as reused training data); "
        f"None: {PAPER.saturation_split}",
    ),
    "--saturation-depths": (
        "saturation_depths",
        str,
        "all: App. G's test on every probed model; deepest: only on the models of the deepest depth probed (what the "
        f"claims report's App. G row reads); None: {PAPER.saturation_depths} ({MINI.saturation_depths} with --preset mini)",
    ),
}
CHOICES = {
    "split": SPLITS,
    "bn_mode": BN_MODES,
    "saturation_split": SATURATION_SPLITS,
    "saturation_depths": SATURATION_DEPTHS,
}
PRESET_FIELDS = preset_fields({**PROBE_FLAGS, **SATURATION_FLAGS})
PLANNER_FLAGS = (*PRESET_FIELDS, "seed", "device", "data_root")
SCRIPT_FLAGS = ("dataset", "seeds", "preset")  # which sweep runs to probe


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="02_probe_ag.py")
    probe = parser.add_argument_group("activation-gradient probe (paper B.1; docs/design.md)")
    probe.add_argument(
        "--dataset",
        choices=DATASETS,
        default=None,
        help="which sweep to probe; None: cifar10 with --preset paper and mini, digits with smoke",
    )
    probe.add_argument(
        "--data-root",
        default=None,
        help="as in 01_train_resnet_sweep.py (None: the data root the sweep run was trained with)",
    )
    probe.add_argument("--seeds", type=comma_ints, default=None, help="sweep seeds to probe; None: every finished run")
    add_preset_flags(probe, PROBE_FLAGS, CHOICES)
    add_preset_flags(parser.add_argument_group("separated saturation test (App. G)"), SATURATION_FLAGS, CHOICES)
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    dataset = args.dataset or DEFAULT_DATASET[args.preset]
    sweep_dirs = require_sweep_runs(args.out, dataset, preset=args.preset, seeds=args.seeds)
    overrides = {field: getattr(args, field) for field in PRESET_FIELDS}
    configs = probe_configs(
        sweep_dirs, args.preset, overrides, seed=args.seed, device=args.device, data_root=args.data_root
    )
    specs = make_specs(configs, args.out)
    results = launch_from_args(
        probe_sweep_run, specs, args, job_kind="probe", desc="ag probe", check=check_sweep_inputs
    )
    if results is None:
        return 0
    rows = summary_rows(
        run_store.finished_like(args.out, configs, summary_stem)
    )  # every matching run, not only this call's
    print(summary_table(rows, LOW_SIGNAL_AG))
    path = args.out / EXPERIMENT / f"{summary_stem(configs[0])}.csv"
    run_store.write_summary([(path, atomic.csv_bytes(rows))], runs_found=len(rows))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
