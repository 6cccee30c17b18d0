"""Function-preserving growth against training from scratch: ResNet-10 to -13 (paper, "Function-preserving growth").

Per final depth and seed, one growth run starts from a randomly initialised ResNet-8 and trains the sweep's epochs
on the sweep's one schedule, inserting one zero-output basic block at a time in the sweep's cyclic order after the
fractions of the run that --insert-at gives; the optimizer keeps every old parameter's state and the schedule never
restarts (common/training/growing.py). Scratch is the sweep's own run of the final depth (same epochs and schedule; a
finished one is reused). --ablation-depths adds, at those depths, the same growth restarted at every insertion
(fresh optimizer, warm-up and cosine over each segment). Prints the table of growth against scratch (markdown; CSV
beside it), the ablation's, and their paths. The job function is
:func:`common.experiments.growth_vs_scratch.growth_vs_scratch_run`.

    python 03_growth_vs_scratch.py --preset smoke
    python 03_growth_vs_scratch.py --seeds 0,1,2 --launcher slurm --slurm-profile slurm/mycluster.toml
    python 03_growth_vs_scratch.py --insert-at 0.05,0.1,0.15,0.2,0.25 --ablation-depths 5
"""

from __future__ import annotations

import argparse

from common.data.vision import DATASETS
from common.experiments.growth_vs_scratch import (
    ablation_markdown,
    collect_records,
    default_seeds,
    growth_plan,
    growth_vs_scratch_run,
    markdown_table,
    table_stem,
    write_table,
)
from common.experiments.growth_vs_scratch_tables import ablation_table, growth_table
from common.experiments.shared.resnet_sweep import check_sweep_data
from common.launch.cli import (
    add_training_data_flags,
    check_flag_use,
    comma_ints,
    comma_list,
    entry_point,
    make_parser,
    parse_args,
)
from common.launch.launcher import launch_from_args
from common.presets.growth_vs_scratch import INSERT_AT, PAPER_DEPTHS, SMOKE_DEPTHS
from common.presets.train_resnet_sweep import DEFAULT_DATASET
from common.runs.run_store import make_specs

# The flags that set a field of the growth preset (common.presets.growth_vs_scratch.GrowthPreset): dest == field.
PRESET_FLAGS = ("depths", "insert_at", "ablation_depths", "train_subset")
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
        help="seeds, one growth run and one scratch run per depth each; None: the preset's from --seed (smoke, paper: "
        "--seed; mini: --seed, --seed + 1, the sweep's seeds, so that every scratch run is the sweep's own; gpu-hour: 5)",
    )
    group.add_argument(
        "--insert-at",
        type=comma_list,  # the values are checked by the plan (common.presets.growth_vs_scratch.insert_fractions)
        default=None,
        help="fractions of the run (0 < f < 1, increasing, rounded to whole epochs) after which the 1st, 2nd, ... "
        f"block goes in, one per block up to the deepest depth; None: {','.join(map(str, INSERT_AT))}",
    )
    group.add_argument(
        "--ablation-depths",
        type=comma_ints,
        default=None,
        help="depths N (among --depths) whose growth also runs restarted at every insertion (fresh optimizer, "
        "warm-up and cosine per segment), to measure what the restart alone costs; None: the preset's (mini: 5)",
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
    rows = growth_table(collect_records(plan, args.out))
    print(markdown_table(rows))
    for path in write_table(rows, args.out, table_stem(dataset, plan)):
        print(path)
    if plan.ablation:
        rows = ablation_table(collect_records(plan, args.out), collect_records(plan, args.out, "restart"))
        print("restart ablation:")
        print(ablation_markdown(rows))
        for path in write_table(rows, args.out, table_stem(dataset, plan, "ablation"), ablation_markdown(rows)):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
