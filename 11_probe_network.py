"""Is my network deep enough? The paper's criterion on one's own model: AG_l and V_S,l at every place, and App. G.

Beyond the reproduction: the paper's question asked of any residual network. The model is a torchvision model by
name with a state_dict checkpoint (--model resnet18 --weights ckpt.pt, read with torch.load(weights_only=True)),
any function returning an nn.Module (--model pkg.module:function), or a Hugging Face causal LM folder
(--model-path DIR); the examples are an image folder or an .npz (--data), or a text file (--text-file) for a
language model. Every input is loaded and checked before the run folder exists, and the exact probe's memory is
estimated first (one line naming the flag to change when it would not fit). It probes every place of the residual
stream (each block's input and the state entering the head; --places for a model no rule knows)
on --n-batches batches of --batch-size examples and prints the ranking (AG_l, the exact growth value V_S,l pooled over
the examples, the tangent family, rows against tangent features, and flags where V_S,l says no more than AG_l or the
gradients are zero), App. G's verdict on an independent sample (--app-g-n examples; Theorem 3's interval and the
asymptotic one beside it) and where a block would help most. It writes places.csv, places.png, places.pdf and
result.json under --out (experiment probe_network). The job function is
:func:`common.experiments.probe_network.probe_network_run`; the one call behind it is
:func:`common.models.probe_network.probe_network`.

    python 11_probe_network.py --preset smoke
    python 11_probe_network.py --model resnet18 --weights ckpt.pt --data images/ --image-size 224
    python 11_probe_network.py --model mypkg.models:build_net --weights net.pt --data data/cifar10.npz
    python 11_probe_network.py --model mypkg.models:build_net --places 'blocks.*,head' --data data/cifar10.npz
    python 11_probe_network.py --model-path models/pythia-70m-deduped --text-file notes.txt --seq-len 128
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.experiments.probe_network import (
    EXPERIMENT,
    PLACES_CSV,
    check_network_inputs,
    network_configs,
    probe_network_run,
)
from common.experiments.probe_network_report import app_g_lines, best_line, ranking_table
from common.launch.cli import (
    check_flag_use,
    entry_point,
    fraction,
    make_parser,
    non_negative_float,
    non_negative_int,
    parse_args,
    positive_int,
)
from common.launch.decoder_flags import PresetFlag, add_preset_flags, preset_fields
from common.launch.launcher import launch_from_args
from common.presets.probe_network import PRESETS
from common.runs.run_store import make_specs, run_dir

PAPER = PRESETS["paper"]
PROBE_FLAGS: dict[str, PresetFlag] = {  # each sets the field of common.presets.probe_network.NetworkPreset of its dest
    "--batch-size": (
        "batch_size",
        positive_int,
        f"examples per analysis batch; None: the preset's ({PAPER.batch_size})",
    ),
    "--n-batches": ("n_batches", positive_int, f"B: analysis batches; None: {PAPER.n_batches}"),
    "--exact": (
        "exact",
        argparse.BooleanOptionalAction,
        "the exact growth value V_S,l pooled over the analysis examples (one factorisation per place); None: on",
    ),
    "--per-batch": (
        "per_batch",
        argparse.BooleanOptionalAction,
        "V_S,l on every batch too (one factorisation per place and batch); None: off",
    ),
    "--image-size": ("image_size", positive_int, f"images of a folder resized to this; None: {PAPER.image_size}"),
    "--seq-len": ("seq_len", positive_int, f"tokens per window of --text-file; None: {PAPER.seq_len}"),
    "--app-g-n": (
        "app_g_n",
        non_negative_int,
        f"examples of App. G's independent sample (0: no App. G test); None: {PAPER.app_g_n}",
    ),
    "--app-g-alpha": ("app_g_alpha", fraction, f"App. G's intervals hold with 1 - alpha; None: {PAPER.app_g_alpha:g}"),
    "--app-g-cal-fraction": (
        "app_g_cal_fraction",
        fraction,
        f"share of App. G's sample that calibrates the traces; None: {PAPER.app_g_cal_fraction:g}",
    ),
    "--app-g-delta": (
        "app_g_delta",
        non_negative_float,
        "tolerance delta, in the units of ||C_l||; None: none, so never 'saturated within delta'",
    ),
}
PRESET_FIELDS = preset_fields(PROBE_FLAGS)
PLANNER_FLAGS = (
    *PRESET_FIELDS,
    *("preset", "model", "weights", "model_path", "places", "data", "text_file", "seed", "device"),
)
SCRIPT_FLAGS = ()


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="11_probe_network.py")
    parser.allow_abbrev = False
    group = parser.add_argument_group("the model (one of --model and --model-path; smoke: a small torchvision ResNet)")
    group.add_argument(
        "--model", default=None, help="a torchvision model name (resnet18, vit_b_16, ...) or pkg.module:function"
    )
    group.add_argument(
        "--weights", default=None, help="its state_dict (torch.save(model.state_dict(), path)); None: random"
    )
    group.add_argument(
        "--model-path", default=None, help="a Hugging Face causal LM folder (save_pretrained); works offline"
    )
    group.add_argument(
        "--places",
        default=None,
        help="where to probe: module names (blocks.0,blocks.1) or patterns (* is one name part: 'blocks.*'), the "
        "input of each a place; None: the rule of a torchvision ResNet or ViT or a Hugging Face causal LM",
    )
    group = parser.add_argument_group("the examples (one of --data and --text-file; smoke: synthetic images)")
    group.add_argument(
        "--data", default=None, help="an image folder (one subfolder per class) or an .npz of 01's layout"
    )
    group.add_argument("--text-file", default=None, help="a text file, for --model-path")
    add_preset_flags(parser.add_argument_group("the probe and App. G; None: the preset's value"), PROBE_FLAGS, {})
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    configs = network_configs(
        preset=args.preset,
        overrides={field: getattr(args, field) for field in PRESET_FIELDS},
        model=args.model,
        weights=args.weights,
        model_path=args.model_path,
        data=args.data,
        text_file=args.text_file,
        places=args.places,
        seed=args.seed,
        device=args.device,
    )
    specs = make_specs(configs, args.out)
    results = launch_from_args(
        probe_network_run, specs, args, job_kind="probe", desc="probe network", check=check_network_inputs
    )
    if results is None:
        return 0
    result = results[0]
    print(ranking_table(result["places"], result["normalisation"]))
    print(app_g_lines(result["app_g"]))
    print(best_line(result["places"], result["exact"]))
    for warning in result.get("warnings", []):
        print(f"warning: {warning}")
    print(run_dir(args.out, configs[0]) / PLACES_CSV)
    print(Path(args.out) / EXPERIMENT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
