"""Grow the sweep's ResNet-8 one zero-output block at a time, placed by a policy: the criterion as a growth controller.

Beyond the paper: the paper's criterion says where extra depth has first-order value (the growth value V_S,l); this
script uses it to grow. One trajectory per (policy, seed): round 0 is the sweep's trained ResNet-8 (01's run, reused,
or trained here); each of K rounds ranks every candidate by V_S,l and AG_l on training batches, reads App. G's
interval and a validation loss on held-apart images, inserts one block where the policy says (criterion: largest
V_S,l; ag: largest AG_l; cyclic: 03's schedule; random: seeded), checks the function is unchanged and trains E
epochs. Each round is a run with its own record; a killed trajectory resumes at its round. Prints the trajectories'
table (markdown; CSV beside it) and its paths. The job function is
:func:`common.experiments.grow_by_criterion.grow_trajectory_run`.

    python 09_grow_by_criterion.py --preset smoke
    python 09_grow_by_criterion.py --preset smoke --policy criterion,cyclic --rounds 2 --epochs-per-round 1
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
from common.experiments.grow_by_criterion import (
    check_grow_data,
    collect_records,
    default_seeds,
    grow_plan,
    grow_trajectory_run,
    markdown_table,
    table_stem,
    trajectory_table,
    write_table,
)
from common.launch import launch_from_args
from common.presets.grow import POLICIES
from common.presets.sweep import DEFAULT_DATASET
from common.runs import make_specs

# The flags that set a field of the grow preset (common.presets.grow.GrowPreset): dest == field.
PRESET_FLAGS = ("policies", "rounds", "epochs_per_round", "train_subset")
PLANNER_FLAGS = ("preset", "data_root", *PRESET_FLAGS, "device", "compile")
SCRIPT_FLAGS = ("dataset", "seeds", "seed")  # --dataset's default follows --preset; the seeds: --seeds, else --seed


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="09_grow_by_criterion.py")
    group = parser.add_argument_group("growth by the criterion (beyond the paper)")
    add_training_data_flags(group, DATASETS)
    group.add_argument(
        "--seeds",
        type=comma_ints,
        default=None,
        help="seeds, one trajectory per policy each; None: --seed (mini: --seed .. --seed + 2)",
    )
    group.add_argument(
        "--policy",
        dest="policies",
        default=None,
        help=f"where each round's block goes, comma-separated, one trajectory each: {', '.join(POLICIES)}; None: all",
    )
    group.add_argument("--rounds", type=positive_int, default=None, help="K: blocks added; None: the preset's")
    group.add_argument(
        "--epochs-per-round",
        type=positive_int,
        default=None,
        help="E: epochs after each insertion (the sweep's recipe, schedule restarted); None: the preset's",
    )
    group.add_argument(
        "--compile", choices=("auto", "on", "off"), default="auto", help="torch.compile the model; auto: on CUDA only"
    )
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    dataset = args.dataset or DEFAULT_DATASET[args.preset]
    seeds = args.seeds if args.seeds is not None else default_seeds(args.preset, args.seed)
    overrides = {field: getattr(args, field) for field in PRESET_FLAGS}
    where = {"data_root": args.data_root, "device": args.device, "compile": args.compile}
    plan = grow_plan(preset=args.preset, overrides=overrides, dataset=dataset, seeds=seeds, **where)
    print(plan.describe(args.out))
    results = launch_from_args(
        grow_trajectory_run,
        make_specs(plan.jobs(), args.out),
        args,
        job_kind="train",
        desc="grow by criterion",
        check=check_grow_data,
    )
    if results is None:
        return 0
    rows = trajectory_table(collect_records(plan, args.out))
    print(markdown_table(rows))
    for path in write_table(rows, args.out, table_stem(dataset, plan)):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
