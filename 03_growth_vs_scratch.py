"""Function-preserving growth against training from scratch: ResNet-10 to -13 (paper, "Function-preserving growth").

Per seed, one growth chain starts from the sweep's trained ResNet-8 (trained here with the
sweep's own job when missing) and inserts one zero-output basic block at a time in the sweep's
cyclic order, training after each insertion; the trained model at N = 2, 3, 4, 5 is the grown
ResNet-10, -11, -12, -13. Scratch trains the same architectures from random initialisation
with the sweep's job, by default in two arms: with the epochs the grown model has in all (the
arm the claims report's verdicts read) and with the sweep's epochs (its finished runs are reused). Each stage is a run with its own directory; each chain is one job that runs its
unfinished stages in order, so a requeued or rerun chain resumes from the last finished stage.
Prints one table per scratch arm (markdown; CSV beside it) and its paths. The job function is
:func:`common.experiments.growth_vs_scratch.growth_vs_scratch_run`.

    python 03_growth_vs_scratch.py --preset smoke
    python 03_growth_vs_scratch.py --seeds 0,1,2 --launcher slurm --slurm-profile slurm/mycluster.toml
    python 03_growth_vs_scratch.py --scratch-budget total,per-stage
"""

from __future__ import annotations

import argparse

from common.cli import (
    add_training_data_flags,
    check_flag_use,
    comma_ints,
    entry_point,
    make_parser,
    parse_args,
    positive_int,
)
from common.data.vision import DATASETS
from common.experiments.growth_vs_scratch import (
    collect_records,
    growth_plan,
    growth_table,
    growth_vs_scratch_run,
    markdown_table,
    table_stem,
    write_table,
)
from common.launch import launch_from_args
from common.presets.growth import (
    DEFAULT_BUDGETS,
    MINI_PARENT_EPOCHS,
    MINI_STAGE_EPOCHS,
    PAPER_DEPTHS,
    SCRATCH_BUDGETS,
    SMOKE_DEPTHS,
    SMOKE_STAGE_EPOCHS,
    scratch_budgets,
)
from common.presets.sweep import DEFAULT_DATASET
from common.resnet_sweep import check_sweep_data, preset_seeds
from common.runs import make_specs

# The flags that set a field of the growth preset (common.presets.growth.GrowthPreset): dest == field.
PRESET_FLAGS = ("depths", "stage_epochs", "parent_epochs", "scratch_epochs", "scratch_budget", "train_subset")
PLANNER_FLAGS = ("preset", "data_root", *PRESET_FLAGS, "device", "compile")
SCRIPT_FLAGS = ("dataset", "seeds", "seed")  # --dataset's default follows --preset; the seeds: --seeds, else --seed


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="03_growth_vs_scratch.py")
    group = parser.add_argument_group("growth vs scratch (paper, Function-preserving growth)")
    add_training_data_flags(group, DATASETS)
    group.add_argument(
        "--depths",
        type=comma_ints,
        default=None,
        help=f"extra blocks N of the final architectures (ResNet-(8+N)); None: {','.join(map(str, PAPER_DEPTHS))} (ResNet-10..13; "
        f"smoke: {','.join(map(str, SMOKE_DEPTHS))}, which 01's smoke sweep trains)",
    )
    group.add_argument(
        "--seeds",
        type=comma_ints,
        default=None,
        help="seeds, one chain and one scratch run per depth and arm each; None: --seed (mini: --seed .. --seed + 2)",
    )
    group.add_argument(
        "--stage-epochs",
        type=positive_int,
        default=None,
        help=f"epochs of each growth stage; None: the sweep's epochs (smoke: {SMOKE_STAGE_EPOCHS}, mini: {MINI_STAGE_EPOCHS})",
    )
    group.add_argument(
        "--parent-epochs",
        type=positive_int,
        default=None,
        help=f"epochs of the chain's ResNet-8; None: the sweep's epochs, so that the chain starts from the sweep's own "
        f"run (mini: {MINI_PARENT_EPOCHS}, a run of this experiment)",
    )
    group.add_argument(
        "--scratch-epochs",
        type=positive_int,
        default=None,
        help="one scratch arm of this many epochs at every depth, instead of --scratch-budget's arms",
    )
    group.add_argument(
        "--scratch-budget",
        type=scratch_budgets,
        default=None,
        help=f"scratch arms, comma-separated, each with its own table: {SCRATCH_BUDGETS[0]} (the epochs the grown "
        "model has in all: the parent ResNet-8's plus every stage's up to its depth; the claims report's verdicts "
        "read it), sweep (the sweep's epochs: its finished runs are reused), per-stage (one stage's epochs); "
        f"None: {','.join(DEFAULT_BUDGETS)}",
    )
    group.add_argument(
        "--compile", choices=("auto", "on", "off"), default="auto", help="torch.compile the model; auto: on CUDA only"
    )
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    dataset = args.dataset or DEFAULT_DATASET[args.preset]
    seeds = args.seeds if args.seeds is not None else preset_seeds(args.preset, args.seed, growth=True)
    overrides = {field: getattr(args, field) for field in PRESET_FLAGS}
    where = {"data_root": args.data_root, "device": args.device, "compile": args.compile}
    plan = growth_plan(preset=args.preset, overrides=overrides, dataset=dataset, seeds=seeds, **where)
    print(plan.describe(args.out))
    results = launch_from_args(
        growth_vs_scratch_run,
        make_specs(plan.jobs(), args.out),
        args,
        job_kind="train",
        desc="growth vs scratch",
        check=check_sweep_data,
    )
    if results is None:
        return 0
    for arm in plan.arms:
        rows = growth_table(collect_records(plan, args.out, arm))
        print(f"scratch arm {arm.budget}:")
        print(markdown_table(rows))
        for path in write_table(rows, args.out, table_stem(dataset, plan, arm)):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
