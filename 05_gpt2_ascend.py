"""Train the GPT-2 decoder depth sweep of paper B.4 on CUDA, an Ascend NPU or the CPU, then probe AG across depth.

One run per (decoder depth L, seed): GPT-2 Small dimensions (d = 768, feed-forward 3072, 12 heads,
context 1024) with L in {1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24}, trained with AdamW on a
310M-token FineWeb-Edu budget (``--preset paper``), or a tiny model on CPython's bundled help
texts with a byte tokenizer (``--preset smoke``, offline, minutes on a CPU), or a small decoder on
Tiny Shakespeare (``--preset mini``: downloaded into data/tinyshakespeare.txt with its sha256
checked, exactly as ``--text-file data/tinyshakespeare.txt``). The data is tokenised
once into shards (resumable, ``--prepare-only`` to do just that). After training, B held-out
batches give AG_l at the L + 1 candidates and AGmax per depth (script 02's keys). Several
processes (``torchrun``, or one SLURM task per GPU) train each run together through DDP. Prints L
against validation loss, AGmax and tokens/s, then the summary CSV path. The job function is
:func:`common.experiments.gpt2_ascend.train_gpt_run`.

    python 05_gpt2_ascend.py --preset smoke
    python 05_gpt2_ascend.py --preset mini --text-file ~/data/tinyshakespeare.txt
    python 05_gpt2_ascend.py --prepare-only                      # FineWeb-Edu sample-10BT -> data/tokens/
    torchrun --nproc-per-node 8 05_gpt2_ascend.py --device cuda   # every depth, 8 GPUs per run (after --prepare-only)
    python 05_gpt2_ascend.py --device npu --depths 12             # Ascend (pip install -r requirements-npu.txt)
"""

from __future__ import annotations

import argparse

from common.data.text_sources import FINEWEB_SUBSET, SOURCES
from common.data.token_shards import DEFAULT_DATA_ROOT
from common.data.tokenizers import TOKENIZERS
from common.experiments.gpt2_ascend import (
    EXPERIMENT,
    gpt_configs,
    prepare_data,
    require_prepared,
    summary_key,
    summary_name,
    summary_rows,
    summary_table,
    train_gpt_run,
)
from common.launch.cli import (
    check_flag_use,
    comma_ints,
    entry_point,
    make_parser,
    parse_args,
    positive_float,
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
from common.runs import atomic, run_store
from common.runs.run_store import make_specs
from common.training.device import resolve_device

# flag -> (GPTPreset field, type, help); None: the preset's value (docs/decisions.md)
PRESET_FLAGS = preset_flags(
    {
        "--depths": ("depths", comma_ints, "decoder depths L, e.g. 1,2,4 or 1:24"),
        "--n-embd": ("n_embd", positive_int, "width d"),
        "--n-head": ("n_head", positive_int, "attention heads"),
    },
    helps={"--tokenizer": f"{' or '.join(TOKENIZERS)} (byte needs no download; gpt2 is tiktoken's, fetched once)"},
)
PLANNER_FLAGS = (
    "preset",
    *preset_fields(PRESET_FLAGS),
    "text_file",
    "fineweb_subset",
    "data_root",
    "device",
    "compile",
    "amp",
    "peak_tflops",
)
SCRIPT_FLAGS = ("seeds", "seed", "prepare_only")  # the seeds: --seeds, else --seed


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="05_gpt2_ascend.py")
    sweep = parser.add_argument_group("GPT-2 depth sweep (paper B.4); None: the preset's value")
    add_preset_flags(sweep, PRESET_FLAGS, choices={"source": SOURCES, "tokenizer": TOKENIZERS})
    sweep.add_argument(
        "--text-file", default=None, help="a text file or a folder of .txt/.md/.rst files (implies --source text)"
    )
    sweep.add_argument("--fineweb-subset", default=FINEWEB_SUBSET, help="FineWeb-Edu's named sample config to stream")
    sweep.add_argument("--data-root", default=DEFAULT_DATA_ROOT, help="where the token shards are prepared")
    sweep.add_argument("--seeds", type=comma_ints, default=None, help="seeds, one run each; None: --seed")
    sweep.add_argument(
        "--prepare-only", action="store_true", help="tokenise the data into shards, print where, and stop"
    )
    speed = parser.add_argument_group("execution (not part of a run's identity)")
    speed.add_argument(
        "--compile", choices=("auto", "on", "off"), default="auto", help="torch.compile the model; auto: on CUDA only"
    )
    speed.add_argument(
        "--amp",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bf16 autocast where the device has it (CUDA, NPU); float32 on the CPU",
    )
    speed.add_argument(
        "--peak-tflops",
        type=positive_float,
        default=None,
        help="the device's dense bf16 peak for the MFU; None: from the built-in table (H100/H200: 989)",
    )
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    configs = gpt_configs(
        preset=args.preset,
        overrides=preset_overrides(args, PRESET_FLAGS),
        **data_and_device_kwargs(args),
        compile=args.compile,
        peak_tflops=args.peak_tflops,
    )
    if args.prepare_only:  # tokenise into shards, nothing else (one process)
        return prepare_only(configs, prepare_data)
    if args.launcher == "inline" and not args.dry_run:
        resolve_device(args.device)  # e.g. --device npu without torch_npu: one line before any work
    if not args.dry_run:
        prepare_once(
            configs, prepare_data, require_prepared
        )  # tokenised once, before any job starts (under torchrun: beforehand)
    specs = make_specs(configs, args.out)
    results = launch_from_args(train_gpt_run, specs, args, job_kind="gpt2", desc="gpt2 sweep", distributed=True)
    if results is None:
        return 0
    rows = summary_rows(
        run_store.finished_like(args.out, configs, summary_key)
    )  # every matching run, not only this call's
    print(summary_table(rows, LOW_SIGNAL_AG))
    path = args.out / EXPERIMENT / summary_name(configs)
    run_store.write_summary([(path, atomic.csv_bytes(rows))], runs_found=len(rows))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
