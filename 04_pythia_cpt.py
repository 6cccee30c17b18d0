"""Continue pretraining the six deduplicated Pythia models (paper B.5), or any Hugging Face decoder, then probe AG per layer.

One run per model and seed: load it with its own tokenizer (``--preset paper``: the six smallest
deduplicated Pythia models at revision step143000 from the Hugging Face Hub; ``--model ID`` any
causal LM id, ``--model-path DIR`` a local ``save_pretrained`` folder), record the id, revision,
commit and weight-file hashes, measure its validation loss, continue pretraining it on token shards
made with that tokenizer (FineWeb-Edu by default), then probe the frozen model: AG_l at the
residual stream entering each layer and leaving the last one (script 02's keys), with ShortGPT's
Block Influence per layer from the same forward passes. ``--preset smoke`` builds two tiny GPT-NeoX
models, saves and reloads them from disk, and runs the same code offline on CPython's help texts
with the byte tokenizer. ``--preset mini`` probes the frozen pythia-70m-deduped and
pythia-160m-deduped (no continued pretraining) on 32 sequences of 256 tokens of Tiny Shakespeare
(downloaded into data/ unless ``--text-file``); where the Hub cannot be reached it prints one line
and exits 0 (the claims report then says "not run"). Several processes (``torchrun``, or one SLURM task per GPU) train each
run together through DDP. Prints model, layers, width, AGmax and the losses before and after, then
the summary CSV path. The job function is :func:`common.experiments.pythia_cpt.pythia_cpt_run`.

    python 04_pythia_cpt.py --preset smoke
    python 04_pythia_cpt.py --preset mini --text-file data/tinyshakespeare.txt
    python 04_pythia_cpt.py --prepare-only                         # tokenise FineWeb-Edu with each model's tokenizer
    torchrun --nproc-per-node 8 04_pythia_cpt.py --device cuda      # the six models, 8 GPUs per run
    python 04_pythia_cpt.py --model Qwen/Qwen2.5-0.5B --lr 2e-5 --train-tokens 20000000
    HF_HUB_OFFLINE=1 python 04_pythia_cpt.py --model-path ~/models/pythia-70m-deduped
"""

from __future__ import annotations

import argparse

from common.data.text_sources import FINEWEB_SUBSET, SOURCES
from common.data.token_shards import DEFAULT_DATA_ROOT
from common.experiments.pythia_cpt import (
    EXPERIMENT,
    cpt_configs,
    prepare_data,
    pythia_cpt_run,
    require_prepared,
    summary_key,
    summary_name,
    summary_rows,
    summary_table,
)
from common.experiments.pythia_cpt_models import fetch_model, mini_hub_check
from common.launch.cli import (
    check_flag_use,
    comma_ints,
    comma_names,
    entry_point,
    make_parser,
    parse_args,
    positive_int,
)
from common.launch.decoder_flags import (
    add_preset_flags,
    data_and_device_kwargs,
    prepare_once,
    prepare_only,
    preset_fields,
    preset_flags,
    preset_overrides,
)
from common.launch.launcher import launch_from_args
from common.presets.paper import LOW_SIGNAL_AG
from common.presets.pythia_cpt import PRESETS
from common.runs import atomic, run_store
from common.runs.run_store import make_specs
from common.training.device import resolve_device

# flag -> (CPTPreset field, type, help); None: the preset's value (docs/decisions.md)
PRESET_FLAGS = preset_flags(
    {},
    helps={
        "--tokenizer": "model (each model's own, from the same repository and revision) or byte",
        "--train-tokens": "continued-pretraining token budget",
        "--block-size": "context length T of the training and probe windows",
        "--lr": "peak AdamW learning rate for every model (None: per model size, docs/04_pythia_cpt.md)",
    },
    last={
        "--probe-sub-batch": (
            "probe_sub_batch",
            positive_int,
            "sequences per probe forward/backward (memory only: the scores are the batch's)",
        ),
        "--gradient-checkpointing": (
            "gradient_checkpointing",
            argparse.BooleanOptionalAction,
            "recompute each layer in the backward pass (less memory, ~1/3 more compute)",
        ),
    },
)
PLANNER_FLAGS = (
    "preset",
    "models",
    "model_paths",
    "revision",
    *preset_fields(PRESET_FLAGS),
    "text_file",
    "fineweb_subset",
    "data_root",
    "device",
    "amp",
    "fsdp",
    "fsdp_bf16",
)
SCRIPT_FLAGS = ("seeds", "seed", "prepare_only")  # the seeds: --seeds, else --seed


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="04_pythia_cpt.py")
    group = parser.add_argument_group("continued pretraining and probe (paper B.5); None: the preset's value")
    group.add_argument(
        "--model",
        dest="models",
        type=comma_names,
        default=None,
        help="Hugging Face causal LM ids (or local folders), comma-separated; replaces the preset's models",
    )
    group.add_argument(
        "--model-path",
        dest="model_paths",
        action="append",
        default=None,
        help="a local save_pretrained folder (repeatable); works offline",
    )
    group.add_argument(
        "--revision", default=None, help="Hub revision (branch, tag or commit) of every model; paper preset: step143000"
    )
    add_preset_flags(group, PRESET_FLAGS, choices={"source": SOURCES})
    group.add_argument(
        "--text-file", default=None, help="a text file or a folder of .txt/.md/.rst files (implies --source text)"
    )
    group.add_argument("--fineweb-subset", default=FINEWEB_SUBSET, help="FineWeb-Edu's named sample config to stream")
    group.add_argument("--data-root", default=DEFAULT_DATA_ROOT, help="where the token shards are prepared")
    group.add_argument("--seeds", type=comma_ints, default=None, help="seeds, one run each; None: --seed")
    group.add_argument(
        "--prepare-only",
        action="store_true",
        help="tokenise the data of every model into shards, print where, and stop",
    )
    parser.add_argument(
        "--amp",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bf16 autocast where the device has it (CUDA, NPU); float32 on the CPU (not part of a run's identity)",
    )
    parser.add_argument(
        "--fsdp",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="with several processes: shard weights, gradients and AdamW state (FSDP2, one unit per layer) instead of "
        "DDP, for models whose training state does not fit one device (not part of a run's identity)",
    )
    parser.add_argument(
        "--fsdp-bf16",
        action="store_true",
        help="with --fsdp where bf16 autocast runs: bf16 unsharded parameters for compute, float32 gradient reduction "
        "(FSDP2 MixedPrecisionPolicy; evaluations then use bf16 parameters too; recorded in the config's runtime)",
    )
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    models = args.models or []
    if PRESETS[args.preset].offline_not_run and not models and not args.model_paths:
        reason = mini_hub_check(args.revision)  # offline, the Pythia rows are "not run", not an error
        if reason is not None:
            print(f"04_pythia_cpt.py: {reason}")
            return 0
    configs = cpt_configs(
        preset=args.preset,
        models=models or None,
        model_paths=args.model_paths or (),
        revision=args.revision,
        overrides=preset_overrides(args, PRESET_FLAGS),
        **data_and_device_kwargs(args),
        fsdp=args.fsdp,
        fsdp_bf16=args.fsdp_bf16,
    )
    if args.prepare_only:
        return prepare_only(configs, prepare_data)
    if args.launcher == "inline" and not args.dry_run:
        resolve_device(args.device)
    if (
        not args.dry_run
    ):  # each model fetched and its data tokenised once, before any job starts (under torchrun: beforehand)
        for c in configs:
            fetch_model(c)
        prepare_once(configs, prepare_data, require_prepared)
    specs = make_specs(configs, args.out)
    results = launch_from_args(pythia_cpt_run, specs, args, job_kind="pythia", desc="pythia cpt", distributed=True)
    if results is None:
        return 0
    rows = summary_rows(
        run_store.finished_like(args.out, configs, summary_key)
    )  # every matching run, not only this call's
    print(summary_table(rows, LOW_SIGNAL_AG))
    path = args.out / EXPERIMENT / summary_name(args.preset)
    run_store.write_summary([(path, atomic.csv_bytes(rows))], runs_found=len(rows))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
