"""The activation-gradient-matched insertion of App. H.1 on the trained sweep, against its exact prediction.

For every finished sweep run at ``--depths`` (paper: ResNet-8, -14, -20, -34 of CIFAR-10; smoke
and mini: every depth of that preset's sweep): freeze the model, fit the terminal projection ``V`` of the protocol's
standard zero-output block at ``--candidate`` (``stage1-end``, the default: the end of stage 1 at
every depth; ``next``: where the cyclic growth rule puts the next block; ``all``; or an index) so
that its output matches ``-alpha g_i`` per training example (least squares over streamed Gram
statistics), insert it, and evaluate the training and test loss at once, with no training. Prints measured against predicted first-order change
``-alpha ||Pi g||^2 / n`` with the paper's values beside them, and the summary's path. The job
function is :func:`common.experiments.matched_insertion.matched_insertion_run`.

    python 06_matched_insertion.py --dataset cifar10
    python 06_matched_insertion.py --preset smoke --candidate all --alpha 1e-3 --alpha 1e-4
"""

from __future__ import annotations

from common.data.vision import DATASETS
from common.experiments.matched_insertion import (
    EXPERIMENT,
    matched_configs,
    matched_insertion_run,
    summary_markdown,
    summary_rows,
    summary_stem,
)
from common.experiments.shared.resnet_sweep_records import check_sweep_inputs
from common.launch.cli import (
    check_flag_use,
    comma_ints,
    entry_point,
    make_parser,
    parse_args,
    positive_float,
    positive_int,
)
from common.launch.decoder_flags import PresetFlag, add_preset_flags, preset_fields
from common.launch.launcher import launch_from_args
from common.presets.matched_insertion import FITS, PRESETS
from common.presets.train_resnet_sweep import DEFAULT_DATASET
from common.runs import atomic, run_store
from common.runs.run_store import make_specs

PAPER = PRESETS["paper"]
PRESET_FLAGS: dict[
    str, PresetFlag
] = {  # each sets the field of common.presets.matched_insertion.MatchedPreset of its dest
    "--depths": (
        "depths",
        comma_ints,
        "extra blocks N of the sweep runs; None: the preset's "
        f"({','.join(map(str, PAPER.depths))}, ResNet-8/14/20/34, with paper; every finished depth with "
        f"{', '.join(name for name, p in PRESETS.items() if p.depths is None)})",
    ),
    "--candidate": (
        "candidate",
        str,
        "stage1-end (the end of stage 1 at every depth, one kind of tensor across depths), next (where the cyclic "
        f"growth rule puts the next block), all, or a candidate index; None: the preset's ({PAPER.candidate})",
    ),
    "--fit": (
        "fit",
        str,
        "closed-form: W = P^+ X; gradient-descent: a check of it on small cases (caches the examples); None: "
        f"{PAPER.fit}",
    ),
    "--gd-steps": ("gd_steps", positive_int, f"steps of --fit gradient-descent; None: {PAPER.gd_steps}"),
}
PRESET_FIELDS = (*preset_fields(PRESET_FLAGS), "alphas")  # --alpha: repeated, added by itself
PLANNER_FLAGS = (*PRESET_FIELDS, "preset", "data_root", "seeds", "seed", "device")
SCRIPT_FLAGS = ("dataset",)  # its default follows --preset


def build_parser():
    parser = make_parser(__doc__, prog="06_matched_insertion.py")
    group = parser.add_argument_group("matched insertion (App. H.1)")
    group.add_argument(
        "--dataset",
        choices=DATASETS,
        default=None,
        help="which sweep; None: cifar10 with --preset paper and mini, digits with smoke",
    )
    group.add_argument("--data-root", default=None, help="as in 01_train_resnet_sweep.py (None: the sweep run's own)")
    add_preset_flags(group, {"--depths": PRESET_FLAGS["--depths"]}, {})
    group.add_argument("--seeds", type=comma_ints, default=None, help="sweep seeds; None: every finished seed")
    add_preset_flags(group, {"--candidate": PRESET_FLAGS["--candidate"]}, {})
    group.add_argument(
        "--alpha",
        dest="alphas",
        type=positive_float,
        action="append",
        default=None,
        help="target scale: the block's output matches -alpha g_i (repeat for several; None: the preset's, "
        f"{','.join(map(str, PAPER.alphas))}, the paper's)",
    )
    add_preset_flags(group, {k: PRESET_FLAGS[k] for k in ("--fit", "--gd-steps")}, {"fit": FITS})
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    overrides = {field: getattr(args, field) for field in PRESET_FIELDS}
    configs = matched_configs(
        args.preset,
        overrides,
        out=args.out,
        dataset=args.dataset or DEFAULT_DATASET[args.preset],
        seeds=args.seeds,
        seed=args.seed,
        device=args.device,
        data_root=args.data_root,
    )
    specs = make_specs(configs, args.out)
    results = launch_from_args(
        matched_insertion_run, specs, args, job_kind="probe", desc="matched insertion", check=check_sweep_inputs
    )
    if results is None:
        return 0
    found = run_store.finished_like(args.out, configs, summary_stem)  # every matching run, not only this call's
    rows = summary_rows(found)
    table = summary_markdown(rows)
    print(table)
    stem = args.out / EXPERIMENT / summary_stem(configs[0])
    files = [(stem.with_suffix(".csv"), atomic.csv_bytes(rows)), (stem.with_suffix(".md"), (table + "\n").encode())]
    run_store.write_summary(files, runs_found=len(found))
    print(stem.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
