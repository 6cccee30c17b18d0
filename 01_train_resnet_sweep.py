"""Train the ResNet depth sweep of paper B.1-B.3: ResNet-8 plus N blocks added cyclically.

One run per (depth N, seed) on CIFAR-10/100 (N = 0..100, 200 epochs), ImageNet-100
(N in {1, 5, ..., 49}, 300 epochs), an .npz file, scikit-learn's digits (the offline smoke
default) or synthetic data. Finished runs are skipped, unfinished ones resume; a summary
table of every planned run is printed at the end. Each run is one process: start the script once
(not under ``torchrun``) and use ``--launcher local`` or ``slurm`` to train depths in parallel. The job function is
:func:`common.experiments.shared.resnet_sweep.train_resnet_run`.

    python 01_train_resnet_sweep.py --preset smoke
    python 01_train_resnet_sweep.py --dataset cifar10 --data-root data --depths 0:100 --launcher slurm
"""

from __future__ import annotations

from common.data.vision import DATASETS
from common.experiments.shared.resnet_sweep import (
    check_sweep_plan,
    preset_seeds,
    sweep_configs,
    sweep_run_cost,
    train_resnet_run,
)
from common.experiments.train_resnet_sweep import summary_table
from common.launch.cli import (
    check_flag_use,
    comma_ints,
    entry_point,
    make_parser,
    parse_args,
    positive_float,
    positive_int,
)
from common.launch.launcher import launch_from_args
from common.presets.train_resnet_sweep import DEFAULT_DATASET, sweep_preset
from common.runs.run_store import make_specs

# The flags that set a field of the sweep's preset (common.presets.train_resnet_sweep.SweepPreset and its recipe): dest == field.
PRESET_FLAGS = ("depths", "epochs", "batch_size", "lr", "image_size", "train_subset", "eval_every", "checkpoint_every")
PLANNER_FLAGS = ("preset", "dataset", "data_root", *PRESET_FLAGS, "device", "compile")
SCRIPT_FLAGS = ("seeds", "seed")  # the seeds to plan: --seeds, else --seed


def build_parser():
    parser = make_parser(__doc__, prog="01_train_resnet_sweep.py")
    sweep = parser.add_argument_group("ResNet sweep (paper B.1-B.3)")
    sweep.add_argument(
        "--dataset",
        choices=DATASETS,
        default=None,
        help="data source; None: cifar10 with --preset paper and mini, digits (offline, bundled with scikit-learn) with smoke",
    )
    sweep.add_argument(
        "--data-root",
        default=None,
        help="CIFAR download directory (None: data/), ImageNet-100 folder holding train/ and val/, or the .npz file",
    )
    sweep.add_argument(
        "--depths",
        type=comma_ints,
        default=None,
        help="extra blocks N, e.g. 0,1,2 or 1:100 or 1:49:4; None: the preset's grid",
    )
    sweep.add_argument(
        "--seeds", type=comma_ints, default=None, help="seeds, one run each; None: --seed (mini: --seed and --seed + 1)"
    )
    sweep.add_argument("--epochs", type=positive_int, default=None, help="epochs per run; None: the preset's")
    sweep.add_argument("--batch-size", type=positive_int, default=None, help="training batch size; None: the preset's")
    sweep.add_argument("--lr", type=positive_float, default=None, help="peak SGD learning rate; None: the preset's")
    sweep.add_argument(
        "--image-size",
        type=positive_int,
        default=None,
        help="ImageNet-100 resolution in pixels; None: the preset's (64)",
    )
    sweep.add_argument(
        "--train-subset",
        type=positive_int,
        default=None,
        metavar="K",
        help="train on K / C images per class (C classes), drawn with the preset's data seed; None: the preset's (mini: 1000), else all",
    )
    sweep.add_argument(
        "--eval-every",
        type=positive_int,
        default=None,
        metavar="E",
        help="evaluate the test set every E-th epoch (and the last); None: the preset's (paper: 5, else 1)",
    )
    sweep.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=None,
        metavar="E",
        help="checkpoint every E-th epoch (and the last; a killed run redoes at most E - 1); None: the preset's (paper: 10)",
    )
    sweep.add_argument(
        "--compile", choices=("auto", "on", "off"), default="auto", help="torch.compile the model; auto: on CUDA only"
    )
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    overrides = {field: getattr(args, field) for field in PRESET_FLAGS}
    if args.seeds is not None:
        groups = [(args.depths, args.seeds)]
    else:  # the preset's seeds (mini: 2) at every depth
        depths = args.depths or sweep_preset(args.preset, args.dataset or DEFAULT_DATASET[args.preset]).depths
        groups = [(list(depths), preset_seeds(args.preset, args.seed))]
    where = {"dataset": args.dataset, "data_root": args.data_root, "device": args.device, "compile": args.compile}
    configs = [
        c
        for depths, seeds in groups
        for c in sweep_configs(preset=args.preset, overrides={**overrides, "depths": depths}, seeds=seeds, **where)
    ]
    specs = make_specs(configs, args.out)
    results = launch_from_args(
        train_resnet_run,
        specs,
        args,
        job_kind="train",
        desc="resnet sweep",
        check=check_sweep_plan,
        cost=sweep_run_cost,
    )
    if results is not None:
        print(summary_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
