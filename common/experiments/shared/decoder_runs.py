"""What the two decoder experiments share: choosing a preset, token data, training rounds and the probe (paper B.4, B.5).

Script 05 (:mod:`common.experiments.gpt2_ascend`) trains GPT-2 decoders from scratch and script 04
(:mod:`common.experiments.pythia_cpt`) continues pretraining Hugging Face decoders. Both fix their data, token
batch, AdamW schedule and probe in a preset (:class:`common.presets.shared_decoder.DecoderPreset`, their tables in
:mod:`common.presets.pythia_cpt` and :mod:`common.presets.gpt2_ascend`; the flags override its fields), tokenise the data
once into token shards (:mod:`common.data.text_sources`, :mod:`common.data.token_preparation`), train with :func:`common.training.loop.train` in evaluation
rounds of ``steps / n_evals`` optimizer steps, then probe the trained model with
:func:`common.science.probe.probe_activation_gradients` on ``B`` held-out batches of
the validation shard, and record ``AG_l`` at every candidate under script 02's keys.

Under ``torchrun`` or a multi-task SLURM job every process runs the same run: rank 0 prepares the
run directory and the data (:func:`join_run`), all train it together, and rank 0 alone probes and
writes the records while the others wait outside the collective watchdog (:func:`finish_on_main`).
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from common.data.text_sources import preset_text_path
from common.data.token_preparation import prepare_tokens
from common.data.token_shards import (
    DEFAULT_DATA_ROOT,
    META,
    TokenBatches,
    TokenData,
    TokenLoader,
    read_meta,
    sample_windows,
)
from common.data.tokenizers import Tokenizer
from common.errors import ParamError, UserError
from common.experiments.shared.decoder_runs_config import DecoderProbe, text_source
from common.presets.choose import choose_preset
from common.presets.shared_decoder import DecoderPreset
from common.runs import atomic, run_store
from common.runs.run_store import RunSpec
from common.science.probe import ProbeResult, probe_activation_gradients
from common.training.device import bf16_supported, device_name, empty_cache, synchronize
from common.training.distributed import DistInfo, init_distributed, process_device, wait_for_all
from common.training.epoch import classification_loss
from common.training.loop import train
from common.training.recipes import AdamWRecipe, TrainSettings

PROBE_LOSS = "token_cross_entropy_mean"  # the probe's loss: mean over sequences of each sequence's mean token loss
RENAMED_KEYS = {"epochs": "eval_rounds"}  # result keys of decoder runs recorded before the rename -> their names now

P = TypeVar("P", bound=DecoderPreset)


# ----------------------------------------------------------------------------- presets
def choose_decoder_preset(
    presets: dict[str, P], name: str, overrides: dict | None, text_path: str | os.PathLike | None
) -> tuple[P, str | os.PathLike | None]:
    """Preset ``name`` of ``presets`` with the flags' values (``overrides``: preset fields, None meaning "the preset's";
    the preset checks them, :class:`common.presets.shared_decoder.DecoderPreset`), and the text it reads: ``text_path``
    (which implies source ``text``), or for a ``text`` source without one the preset's own text, downloaded (mini:
    Tiny Shakespeare, as if ``--text-file data/tinyshakespeare.txt``)."""
    given = dict(overrides or {})
    if text_path is not None and given.get("source") is None:
        given["source"] = "text"
    chosen = choose_preset(presets, name, given)
    return chosen, preset_text_path(text_path, chosen.source, chosen.text)


def runtime_config(
    p: DecoderPreset,
    *,
    device: str,
    amp: bool,
    text_path: str | os.PathLike | None,
    data_root: str | os.PathLike | None,
) -> dict:
    """The ``runtime`` keys both decoder experiments share: device, autocast, batch sizes and where the data is."""
    return {
        "device": device,
        "amp": amp,
        "micro_batch_size": p.micro_batch_size,
        "eval_batch_size": p.eval_batch_size,
        "text_path": str(Path(text_path).expanduser().resolve()) if text_path else None,
        "data_root": str(Path(data_root or DEFAULT_DATA_ROOT).expanduser().resolve()),
    }


def make_recipe(p: DecoderPreset, lr: float) -> AdamWRecipe:
    """AdamW by steps at peak ``lr``: ``steps`` rounded down to a multiple of the evaluation interval."""
    steps = p.steps if p.steps is not None else (p.train_tokens or 0) // p.batch_tokens
    if p.steps is None and p.train_tokens is None:
        raise ParamError("steps", None, "without a train_tokens budget give steps")
    interval = steps // p.n_evals
    if interval == 0:
        raise ParamError(
            "n_evals",
            p.n_evals,
            f"{steps} optimizer steps cannot hold {p.n_evals} evaluations; raise steps / train_tokens or lower n_evals",
        )
    return AdamWRecipe(
        steps=interval * p.n_evals,
        lr=lr,
        eval_interval=interval,
        warmup_steps=p.warmup_steps,
        min_lr_ratio=p.min_lr_ratio,
        weight_decay=p.weight_decay,
        beta1=p.beta1,
        beta2=p.beta2,
        grad_clip=p.grad_clip,
    )


def probe_config(p: DecoderPreset, seed: int) -> dict:
    """The ``probe`` part of a run's identity: ``B`` batches of held-out validation windows, drawn with ``seed``."""
    return {
        "split": "val",
        "batch_size": p.probe_batch_size,
        "n_batches": p.probe_batches,
        "exact": p.exact,
        "seed": seed,
        "loss": PROBE_LOSS,
    }


# ----------------------------------------------------------------------------- data
def data_dir(run: Any) -> Path:
    """The run's prepared token directory under its data root (``run``: a typed decoder run or a planned config dict,
    :func:`~common.experiments.shared.decoder_runs_config.text_source`)."""
    spec, root, _, _ = text_source(run)
    return Path(root or DEFAULT_DATA_ROOT) / spec.dirname()


def prepare_data(
    run: Any, *, tokenizer: Callable[[Any], Tokenizer] | None = None, dataset=None, progress: bool = True
) -> Path:
    """Tokenise the run's data under its data root (resumable; once prepared, a check of ``meta.json`` only).

    ``tokenizer(run)`` gives the tokenizer (None: the one the data identity names); it is not
    loaded when the data is prepared already.
    """
    directory = data_dir(run)
    if (directory / META).is_file():
        read_meta(directory)  # a corrupt meta.json is named before any run starts
        return directory
    spec, root, text_path, _ = text_source(run)
    return prepare_tokens(
        spec,
        root or DEFAULT_DATA_ROOT,
        text_path=text_path,
        dataset=dataset,
        tokenizer=tokenizer(run) if tokenizer else None,
        progress=progress,
    )


def require_prepared(run: Any, script: str) -> Path:
    """The run's prepared token directory; a one-line error naming ``script --prepare-only`` when it is not there.

    Under torchrun every process waits in the process group while one tokenises, and a long
    preparation outlasts the group's timeout: there the data must be prepared beforehand.
    """
    if not (data_dir(run) / META).is_file():
        raise UserError(
            f"the tokens of {text_source(run)[3]} are not prepared under {data_dir(run).parent}; under torchrun prepare them first "
            f"in one process: python {script} --prepare-only with the same flags"
        )
    return data_dir(run)


# ----------------------------------------------------------------------------- the job
def join_run(spec: RunSpec, device: torch.device, prepare: Callable[[], object]) -> tuple[DistInfo, torch.device]:
    """Every process joins the run (its process group and device); rank 0 prepares the run directory, then calls ``prepare``
    (the data, ...). The caller waits for rank 0 before reading what it prepared."""
    info = init_distributed(device)
    device = process_device(device, info)
    if info.is_main:
        run_store.prepare_run(spec.out, spec.config)
        prepare()
    return info, device


def train_loader(run: Any, data: TokenData, block_size: int, device: torch.device, info: DistInfo) -> TokenLoader:
    """This process's share of each step's ``batch_tokens / T`` sequences, in micro-batches accumulated to the step;
    one round of the loader is one evaluation interval. ``run``: a typed decoder run (``train``, ``runtime``, ``seed``)."""
    hp = run.train
    return TokenLoader(
        data.windows("train", block_size),
        global_batch=hp.batch_tokens // block_size,
        micro_batch=run.runtime.micro_batch_size,
        steps_per_epoch=hp.eval_interval,
        seed=run.seed,
        rank=info.rank,
        world_size=info.world_size,
        device=device,
    )


def val_batches(data: TokenData, block_size: int, batch_size: int, device: torch.device) -> TokenBatches:
    """Every window of the validation shard, in order."""
    return TokenBatches(data.windows("val", block_size), batch_size, device=device)


def train_decoder(
    model: nn.Module,
    run: Any,
    loader: TokenLoader,
    val: TokenBatches,
    settings: TrainSettings,
    path: Path,
    device: torch.device,
) -> dict:
    """:func:`common.training.loop.train` on tokens: one round per evaluation interval, each round's rate in ``tokens_per_s``."""
    return train(
        model,
        loader,
        {"val": val},
        run_dir=path,
        settings=settings,
        device=device,
        desc=run.name,
        counts="tokens",
    )


def token_rates(path: Path, block_size: int) -> tuple[float | None, list[float]]:
    """The median tokens per second of a run's training rounds after the first (which holds compilation and warm-up), and
    every round's; metrics lines written before ``tokens_per_s`` hold sequences per second as ``images_per_s``."""
    rounds = [
        r["tokens_per_s"] if "tokens_per_s" in r else r["images_per_s"] * block_size
        for r in run_store.read_metrics(path)
    ]
    steady = rounds[1:] or rounds
    return (statistics.median(steady) if steady else None), rounds


def trained_on(info: DistInfo, device: torch.device) -> dict:
    """Where a run trained: the number of processes and the device's name."""
    return {"world_size": info.world_size, "device_name": device_name(device)}


# ----------------------------------------------------------------------------- model FLOPs utilisation
MATMUL_SIZE = 8192  # the square bf16 matrices of :func:`matmul_rate` (2 n^3 = 1.1 TFLOP a product, 384 MiB in all)


def matmul_rate(device: torch.device, size: int = MATMUL_SIZE, iters: int = 10, repeats: int = 3) -> float | None:
    """The dense bf16 matmul rate of ``device`` in FLOP/s, measured: ``torch.matmul`` of two ``size`` x ``size`` bf16
    matrices, ``2 size^3`` FLOPs each, the fastest of ``repeats`` timed loops of ``iters`` after 3 warm-up products
    (each loop ends with a device synchronisation). None on the CPU and where bf16 is not native
    (:func:`common.training.device.bf16_supported`): there no bf16 rate is a meaningful denominator. About 50 ms on an H100.
    """
    if device.type == "cpu" or not bf16_supported(device):
        return None
    a, b = (torch.randn(size, size, device=device, dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(a)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b, out=out)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    del a, b, out
    empty_cache(device)
    return 2 * size**3 * iters / best


def mfu(tokens_per_s: float | None, flops_per_token: float, rate: float | None, world: int = 1) -> float | None:
    """Model FLOPs utilisation: ``tokens_per_s x flops_per_token / (world x rate)`` (PaLM, App. B), ``rate`` a device's
    FLOP/s (a datasheet peak, or :func:`matmul_rate`'s measurement); None where the rate or the throughput is unknown."""
    if not rate or not tokens_per_s:
        return None
    return tokens_per_s * flops_per_token / (rate * world)


def renamed(record: dict) -> dict:
    """A decoder run's record with the keys of :data:`RENAMED_KEYS` under their current names (older records)."""
    return {RENAMED_KEYS.get(k, k): v for k, v in record.items()}


def probe_windows(
    probe: DecoderProbe, data: TokenData, block_size: int, device: torch.device
) -> tuple[np.ndarray, TokenBatches]:
    """The probe's seeded sample of validation windows and its ``B`` batches."""
    windows = data.windows("val", block_size)
    chosen = sample_windows(windows, probe.batch_size, probe.n_batches, probe.seed)
    return chosen, TokenBatches(windows, probe.batch_size, indices=chosen, device=device)


def probe_decoder(
    model: nn.Module, batches: Iterable, probe: DecoderProbe, sub_batch: int | None = None
) -> ProbeResult:
    """``AG_l`` at every candidate of ``model`` over ``batches`` (and ``V_S,l`` with ``exact``)."""
    # classification_loss: mean token cross-entropy = mean over sequences of each sequence's mean token loss.
    return probe_activation_gradients(
        model, batches, loss_fn=classification_loss, exact=probe.exact, seed=probe.seed, sub_batch=sub_batch
    )


def write_probe_records(path: Path, candidates: list[dict], chosen: np.ndarray, block_size: int) -> None:
    """``candidates.csv`` (one row per candidate) and ``samples.json`` (the probed validation windows)."""
    atomic.atomic_write_csv(path / "candidates.csv", candidates)
    atomic.atomic_write_json(
        path / "samples.json", {"split": "val", "block_size": block_size, "windows": chosen.tolist()}
    )


def finish_on_main(info: DistInfo, device: torch.device, path: Path, probe_and_finish: Callable[[], dict]) -> dict:
    """Rank 0 frees training's memory and runs ``probe_and_finish`` (the probe and ``result.json``) while the others wait
    outside the collective watchdog (:func:`common.training.distributed.wait_for_all`); every process returns the result."""
    result = None
    if info.is_main:
        gc.collect()  # the optimizer, DDP's buckets and FSDP's shards of training are garbage now
        empty_cache(device)
        result = probe_and_finish()
    wait_for_all()
    return result if result is not None else run_store.read_result(path)


def ag_columns(r: dict, low_signal: float) -> str:
    """A summary row's AGmax (batch mean) and AGmax/seq (per-sequence RMS), each with ``*`` below ``low_signal``."""
    return (
        f"{r['ag_max']:>10.3e} {'*' if r['ag_max'] < low_signal else '':>6} "
        f"{r['ag_max_per_example']:>10.3e} {'*' if r['ag_max_per_example'] < low_signal else '':>6}"
    )


def ag_header(low_signal: float) -> str:
    """The header of :func:`ag_columns`."""
    mark = "<" + format(low_signal, ".0e")
    return f"{'AGmax':>10} {mark:>6} {'AGmax/seq':>10} {mark:>6}"
