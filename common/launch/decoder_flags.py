"""The command line that scripts 04 and 05 share: the decoder preset flags and the one-time data preparation.

Each preset flag sets one field of the script's preset (:class:`common.presets.shared_decoder.DecoderPreset` and the
experiment's own fields), its ``dest`` the field's name; left out it is None, meaning "the preset's value"
(docs/decisions.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from common.data.text_sources import SOURCES
from common.launch.cli import non_negative_float, non_negative_int, positive_float, positive_int, unit_interval
from common.training.distributed import env_info

PresetFlag = tuple[str, Callable | type[argparse.Action], str]  # (preset field, type or action, help)

SHARED_FLAGS: dict[str, PresetFlag] = {
    "--source": ("source", str, f"documents: {', '.join(SOURCES)} (text: --text-file)"),
    "--tokenizer": ("tokenizer", str, "the tokenizer of the token shards"),
    "--train-tokens": ("train_tokens", positive_int, "training token budget (the last document is cut there)"),
    "--val-tokens": ("val_tokens", positive_int, "held-out validation tokens (the first whole documents)"),
    "--block-size": ("block_size", positive_int, "context length T"),
    "--batch-tokens": ("batch_tokens", positive_int, "tokens per optimizer step (gradient accumulation reaches it)"),
    "--micro-batch-size": ("micro_batch_size", positive_int, "sequences per forward/backward on one device"),
    "--steps": ("steps", positive_int, "optimizer steps (None with a budget: train-tokens // batch-tokens)"),
    "--n-evals": ("n_evals", positive_int, "validation evaluations and checkpoints over the run"),
    "--lr": ("lr", positive_float, "peak AdamW learning rate"),
    "--warmup-steps": ("warmup_steps", non_negative_int, "linear warm-up steps, then cosine decay"),
    "--min-lr-ratio": ("min_lr_ratio", unit_interval, "the cosine ends at this fraction of the peak"),
    "--weight-decay": ("weight_decay", non_negative_float, "AdamW weight decay on matrices and embeddings"),
    "--grad-clip": ("grad_clip", positive_float, "clip the gradient's global norm to this"),
    "--probe-batch-size": ("probe_batch_size", positive_int, "sequences per analysis batch of the AG probe"),
    "--probe-batches": ("probe_batches", positive_int, "B: held-out analysis batches"),
    "--exact": ("exact", argparse.BooleanOptionalAction, "also the exact growth value V_S,l of the linear family"),
}


def preset_flags(
    first: dict[str, PresetFlag], helps: dict[str, str], last: dict[str, PresetFlag] | None = None
) -> dict[str, PresetFlag]:
    """A script's preset flags: its own ``first``, the shared ones (with the script's help text where ``helps`` has one),
    then its own ``last`` (the order of ``--help``)."""
    shared = {flag: (field, kind, helps.get(flag, text)) for flag, (field, kind, text) in SHARED_FLAGS.items()}
    return {**first, **shared, **(last or {})}


def add_preset_flags(
    group: argparse._ArgumentGroup, flags: dict[str, PresetFlag], choices: dict[str, Sequence[str]]
) -> None:
    """Each flag of ``flags`` into ``group`` with default None; ``choices``: allowed values per preset field."""
    for flag, (field, kind, text) in flags.items():
        if kind is argparse.BooleanOptionalAction:
            group.add_argument(flag, dest=field, action=kind, default=None, help=text)
        else:
            group.add_argument(
                flag,
                dest=field,
                type=kind,
                default=None,
                help=text,
                **({"choices": choices[field]} if field in choices else {}),
            )


def preset_fields(flags: dict[str, PresetFlag]) -> tuple[str, ...]:
    """The preset fields that ``flags`` set (their ``dest``)."""
    return tuple(field for field, _, _ in flags.values())


def preset_overrides(args: argparse.Namespace, flags: dict[str, PresetFlag]) -> dict:
    """The planner's ``overrides``: each preset field that ``flags`` set, None where the flag was left out."""
    return {field: getattr(args, field) for field in preset_fields(flags)}


def data_and_device_kwargs(args) -> dict:
    """The config keywords that scripts 04 and 05 take from the same flags: seeds, text source, token directory,
    FineWeb-Edu subset, device and autocast (``--seeds``, else ``--seed`` alone)."""
    return {
        "seeds": args.seeds if args.seeds is not None else [args.seed],
        "text_path": args.text_file,
        "data_root": args.data_root,
        "fineweb_subset": args.fineweb_subset,
        "device": args.device,
        "amp": args.amp,
    }


def prepare_once(
    configs: Iterable[dict], prepare: Callable[[dict], Path], require: Callable[[dict], Path]
) -> list[Path]:
    """Each distinct token directory of ``configs`` prepared before any job starts, by one process (``prepare``); under
    torchrun (several processes) it must be prepared already (``require``: one line naming ``--prepare-only``), since
    every process would wait in the process group, past its timeout, while one tokenises."""
    ready = require if env_info().world_size > 1 else prepare
    return list(dict.fromkeys(ready(c) for c in configs))


def prepare_only(configs: Iterable[dict], prepare: Callable[[dict], Path]) -> int:
    """``--prepare-only``: tokenise the data of every run (one process: rank 0 of a torchrun alone), print each
    directory once, and stop (exit status 0)."""
    if env_info().is_main:
        for path in dict.fromkeys(prepare(c) for c in configs):
            print(path)
    return 0
