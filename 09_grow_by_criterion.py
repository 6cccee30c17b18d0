"""Grow a ResNet-8 inside one training run where the growth value V_S,l is largest; stop when it says.

Beyond the paper: the paper's criterion says where extra depth has first-order value (the growth value V_S,l); this
script uses it to grow. One run per (arm, seed), every run on the same budget B of training FLOPs (the sweep's
ResNet-13 run's at mini) and one schedule over B. A policy arm starts from the sweep's randomly initialised
ResNet-8; every --every epochs while under --grow-until of B it probes V_S,l and AG_l of every candidate and the
existing branches' terminal values V_b on a fixed sample of training images, and inserts one zero-output block
where the policy says (criterion: largest V_S,l; ag: largest AG_l; cyclic: 03's schedule; random: seeded) until
max V_S,l / max V_b stays below --ratio-below on --in-a-row probes, or --cap blocks. Controls: none (the ResNet-8
never grown) and scratch (the criterion's final architecture from random initialisation). Each run resumes from its
checkpoint. Prints one row per run (markdown; CSV beside it) and its paths. The job function is
:func:`common.experiments.grow_by_criterion.grow_run`.

    python 09_grow_by_criterion.py --preset smoke
    python 09_grow_by_criterion.py --preset smoke --policy criterion,none --every 2
"""

from __future__ import annotations

import argparse

from common.data.vision import DATASETS
from common.experiments.grow_by_criterion import (
    check_grow_data,
    collect_records,
    default_seeds,
    grow_plan,
    grow_run,
    markdown_table,
    run_table,
    table_stem,
    write_table,
)
from common.launch.cli import (
    add_training_data_flags,
    check_flag_use,
    comma_ints,
    entry_point,
    make_parser,
    names_flag,
    non_negative_float,
    parse_args,
    positive_float,
    positive_int,
)
from common.launch.launcher import launch_from_args
from common.presets.grow_by_criterion import ARMS, policies_of
from common.presets.train_resnet_sweep import DEFAULT_DATASET
from common.runs.run_store import make_specs

# The flags that set a field of the grow preset (common.presets.grow_by_criterion.GrowPreset): dest == field.
PRESET_FLAGS = (
    "policies", "budget_depth_n", "every", "grow_until", "cap", "ratio_below", "in_a_row", "train_subset",
)  # fmt: skip
PLANNER_FLAGS = ("preset", "data_root", *PRESET_FLAGS, "device", "compile")
SCRIPT_FLAGS = ("dataset", "seeds", "seed")  # --dataset's default follows --preset; the seeds: --seeds, else --seed


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="09_grow_by_criterion.py")
    group = parser.add_argument_group("growth by the criterion (beyond the paper)")
    add_training_data_flags(group, DATASETS)
    group.add_argument(
        "--seeds", type=comma_ints, default=None, help="seeds, one run per arm each; None: the preset's from --seed"
    )
    group.add_argument(
        "--policy",
        dest="policies",
        type=names_flag(policies_of),
        default=None,
        help=f"the arms, comma-separated, one run each per seed: {', '.join(ARMS)}; None: the preset's",
    )
    group.add_argument(
        "--budget-depth",
        dest="budget_depth_n",
        type=int,
        default=None,
        help="B is the training FLOPs of the sweep's run at this N (ResNet-(8+N)); None: the preset's (5)",
    )
    group.add_argument("--every", type=positive_int, default=None, help="P: epochs between probes; None: the preset's")
    group.add_argument(
        "--grow-until",
        type=positive_float,
        default=None,
        help="growth only before this fraction of B is spent, in (0, 1]",
    )
    group.add_argument("--cap", type=positive_int, default=None, help="the most blocks a run adds; None: the preset's")
    group.add_argument(
        "--ratio-below",
        type=non_negative_float,
        default=None,
        help="the stop rule's constant on max V_S,l / max V_b (0: never stops); None: the preset's (chosen on "
        "held-apart images, docs/decisions.md)",
    )
    group.add_argument(
        "--in-a-row", type=positive_int, default=None, help="probes in a row below the constant; None: the preset's"
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
        grow_run,
        make_specs(plan.jobs(), args.out),
        args,
        job_kind="train",
        desc="grow by criterion",
        check=check_grow_data,
    )
    if results is None:
        return 0
    rows = run_table(collect_records(plan, args.out))
    print(markdown_table(rows))
    for path in write_table(rows, args.out, table_stem(dataset, plan)):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
