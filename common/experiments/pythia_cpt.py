"""Job module of ``04_pythia_cpt.py``: continued pretraining of Hugging Face decoders (paper B.5), then frozen-model AG.

One run per (model, seed): load a causal LM with its own tokenizer (:func:`common.models.hf_decoder.load_causal_lm`:
a Hub id at a revision, or a local directory; the run records the id, revision, resolved commit
and the sha256 of every weight file), measure its validation loss, continue pretraining it on
token shards made with that tokenizer (:mod:`common.data.token_shards`, the shard format of script 05)
through :func:`common.training.loop.train` (AdamW, warm-up + cosine by steps, gradient clipping,
accumulation, bf16 autocast on accelerators, gradient checkpointing where asked or where
:mod:`common.training.memory`'s estimate says the run would not fit the device without it, DDP when several
processes run it), then freeze it and probe it with :func:`common.science.probe.probe_activation_gradients` through
:class:`common.models.hf_decoder.HFDecoder`: ``AG_l`` at the ``n_layer + 1`` residual-stream
candidates under script 02's keys, with ShortGPT's Block Influence of each layer recorded in the
same forward passes.

Presets (:data:`PRESETS`, the table of :mod:`common.presets.pythia_cpt`): ``paper`` is the six smallest
deduplicated Pythia models at revision ``step143000`` on FineWeb-Edu; ``smoke`` builds two tiny GPT-NeoX
models, saves each with ``save_pretrained`` and loads it back from disk by path, then runs the same code on
CPython's help texts with the byte tokenizer in well under two minutes on a CPU; ``mini`` probes the two
smallest Pythia models frozen on Tiny Shakespeare.

Record (``result.json``, read by ``08_make_figures.py``): ``model``, ``revision``, ``commit_hash``,
``weight_files``, ``n_layer``, ``d_model``, ``val_loss_before``, ``val_loss_after``, ``cpt_tokens``,
every key of :meth:`common.science.probe.ProbeResult.summary` and ``candidates`` (one dict per candidate
with ``index``, ``name``, ``ag_norm``, ``per_example_rms``, ``block_input``, ``block_influence``:
None for the final stream). The steps script 05 shares (presets, data, training rounds, the probe) are
in :mod:`common.experiments.shared.decoder_runs`; which model a run loads, its tokenizer, and fetching and loading
it are in :mod:`common.experiments.pythia_cpt_models`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch

from common.data.text_sources import FINEWEB_SUBSET, text_data_spec
from common.data.token_shards import TokenBatches, TokenData, TokenLoader
from common.errors import ParamError
from common.experiments.pythia_cpt_config import CPTRun, CPTRuntime
from common.experiments.pythia_cpt_models import (
    BASE_DIR,
    config_tokenizer,
    fetch_on_each_node,
    load_run_model,
    save_tiny_model,
    tokenizer_name,
    user_model,
)
from common.experiments.shared import decoder_runs
from common.models.hf_decoder import (
    BlockInfluence,
    HFDecoder,
)
from common.presets.pythia_cpt import PRESETS, CPTPreset, ModelEntry
from common.runs import atomic, record_io
from common.runs.run_store import RunSpec
from common.runs.typed_config import typed
from common.science.precision import full_precision
from common.training import memory as memory_training
from common.training.checkpoints import finish_run, load_weights
from common.training.device import autocast_dtype, cpu_threads, resolve_device, seed_everything
from common.training.distributed import DistInfo, broadcast_from_main
from common.training.evaluation import evaluate
from common.training.parallel import place_model
from common.training.recipes import TrainSettings

log = logging.getLogger(__name__)

EXPERIMENT = "pythia_cpt"
SCRIPT = "04_pythia_cpt.py"


# ----------------------------------------------------------------------------- configs
def cpt_configs(
    *,
    preset: str = "smoke",
    models: Sequence[str] | None = None,
    model_paths: Sequence[str] = (),
    revision: str | None = None,
    seeds: Sequence[int] = (0,),
    overrides: dict | None = None,
    text_path: str | Path | None = None,
    data_root: str | Path | None = None,
    fineweb_subset: str = FINEWEB_SUBSET,
    device: str = "auto",
    amp: bool = True,
    fsdp: bool = False,
    fsdp_bf16: bool = False,
) -> list[dict]:
    """One config per (model, seed). ``models`` (``--model``: Hub ids or local directories) and ``model_paths``
    (``--model-path``: local directories only) replace the preset's (``revision`` applies to them, and to the
    preset's when given); ``overrides``: :class:`CPTPreset` fields. ``fsdp_bf16``: FSDP2 with bf16 unsharded
    parameters (``runtime.fsdp_bf16_params``, present only when asked for)."""
    p, text_path = decoder_runs.choose_decoder_preset(PRESETS, preset, overrides, text_path)
    chosen = [user_model(m, revision) for m in models or ()] + [
        user_model(m, revision, local="model_paths") for m in model_paths
    ]
    entries = chosen or [e if revision is None else replace(e, revision=revision) for e in p.models]
    if fsdp_bf16 and not fsdp:
        raise ParamError("fsdp_bf16", fsdp_bf16, "sets FSDP2's parameter dtype, so it needs fsdp")
    runtime = {
        **decoder_runs.runtime_config(p, device=device, amp=amp, text_path=text_path, data_root=data_root),
        "fsdp": fsdp,
        "gradient_checkpointing": "auto" if p.gradient_checkpointing is None else p.gradient_checkpointing,
        "cpu_threads": p.cpu_threads,
        "probe_sub_batch": p.probe_sub_batch,
        **({"fsdp_bf16_params": True} if fsdp_bf16 else {}),
    }
    data = {"text_path": text_path, "subset": fineweb_subset}
    return [_cpt_config(p, preset, e, seed, data, runtime) for seed in seeds for e in entries]


def _cpt_config(p: CPTPreset, preset: str, e: ModelEntry, seed: int, data: dict, runtime: dict) -> dict:
    """The config of model ``e`` at ``seed`` under the settings ``p`` of ``preset``; ``data``: the text's
    ``text_path`` and FineWeb ``subset`` (:func:`common.data.text_sources.text_data_spec`)."""
    spec = text_data_spec(
        p.source,
        tokenizer_name(e, p.tokenizer),
        val_tokens=p.val_tokens,
        train_tokens=p.train_tokens,
        **data,
    )
    recipe = {"steps": 0} if p.steps == 0 else decoder_runs.make_recipe(p, p.lr or e.lr).to_config()
    recipe_keys = {"batch_tokens": p.batch_tokens, "block_size": p.block_size}
    return {
        "experiment": EXPERIMENT,
        "name": f"{e.name}-{e.revision or 'local'}-seed{seed}",
        "preset": preset,
        "seed": seed,
        "model": {"model": e.model, "revision": e.revision, "tiny": e.tiny},
        "data": spec.identity(),
        "train": {**recipe, **recipe_keys},  # steps 0 (mini): the frozen model is probed as loaded
        "probe": decoder_runs.probe_config(p, seed),
        "runtime": dict(runtime),
    }


# ----------------------------------------------------------------------------- data and models
def prepare_data(run: CPTRun | Mapping, *, dataset=None, progress: bool = True) -> Path:
    """Tokenise the run's data (``run``: typed, or a planned config dict) with its tokenizer under the data root
    (resumable; once prepared, the tokenizer is not loaded)."""
    run = typed(CPTRun, run)
    return decoder_runs.prepare_data(run, tokenizer=config_tokenizer, dataset=dataset, progress=progress)


def require_prepared(run: CPTRun | Mapping) -> Path:
    """The run's prepared token directory (``run``: typed, or a planned config dict); under torchrun a one-line
    error naming ``--prepare-only`` when it is missing."""
    return decoder_runs.require_prepared(run, SCRIPT)


# ----------------------------------------------------------------------------- the job
def pythia_cpt_run(spec: RunSpec) -> dict:
    """Job function of script 04: load, measure, continue pretraining, probe one model; resumes.

    Every process of a torchrun / multi-task SLURM job calls it for the same run (DDP); rank 0
    prepares the run directory and the data, writes the records and probes. On the CPU a preset's
    ``cpu_threads`` (smoke: 1) bounds the intra-op threads: tiny matrices gain nothing from threads,
    and on a busy machine waiting threads slow them many times over.
    """
    run = CPTRun.from_config(spec.config)
    device = resolve_device(run.runtime.device or "auto")
    threads = run.runtime.cpu_threads
    with cpu_threads(threads) if device.type == "cpu" and threads else contextlib.nullcontext():
        return _run(spec, run, device)


def _run(spec: RunSpec, run: CPTRun, device: torch.device) -> dict:
    """Every process: join, load, measure, train; rank 0 alone probes and records while the others wait.

    Rank-0-only work is kept short or waited for outside the collective watchdog: the validation
    losses are split over the processes (:func:`common.training.evaluation.evaluate`), the download happens once
    per node, and the others wait for the probe in :func:`common.training.distributed.wait_for_all`.
    """
    path = spec.dir
    info, device = decoder_runs.join_run(spec, device, lambda: _prepare(run, path))
    fetch_on_each_node(run, info)  # also the barrier after rank 0's preparation
    data = TokenData.open(require_prepared(run))
    loaded = load_run_model(
        run, path, hash_weights=info.is_main, local_only=info.world_size > 1
    )  # only rank 0 writes the record
    decoder = HFDecoder(loaded.model)
    loaded.model.config.use_cache = False
    t = run.train.block_size
    val = decoder_runs.val_batches(data, t, run.runtime.eval_batch_size, device)
    loader = (
        decoder_runs.train_loader(run, data, t, device, info) if run.train.steps else None
    )  # steps 0: probe only (mini)
    settings = _train_settings(run, loader) if loader is not None else None
    if settings is not None:
        place_model(decoder, device, settings)  # under --fsdp: sharded before anything reaches the device
    else:
        decoder.to(device)
    before = path / "before.json"
    if _first_time(
        before, info
    ):  # the loaded model's validation loss, once (float32, eval mode, split over the processes)
        loss = _val_loss(decoder, val, device)
        if info.is_main:
            atomic.atomic_write_json(before, {"val_loss_before": loss})
    seed_everything(run.seed)
    if loader is not None and settings is not None:
        summary = _train(decoder, run, loader, settings, val, path, device, info)
    else:  # no continued pretraining: the loaded model is the probed one
        summary = {
            "val_loss_after": record_io.read_json(before)["val_loss_before"],
            "steps": 0,
            "cpt_tokens": 0,
            "train_loss": None,
            "lr": None,
            "wall_s": 0.0,
            **decoder_runs.trained_on(info, device),
        }
    if info.is_main and run.runtime.fsdp and info.world_size > 1:  # sharded over the processes: probe an unsharded copy
        decoder = _unsharded(decoder, run, path)

    def probe_and_finish() -> dict:
        return _probe_and_finish(
            decoder.to(device), loaded.record, run, data, path, device, {**record_io.read_json(before), **summary}
        )

    return decoder_runs.finish_on_main(info, device, path, probe_and_finish)


def _prepare(run: CPTRun, run_dir: Path) -> None:
    """Rank 0's preparation of a run: its tokens, and a tiny smoke model saved where every process loads it from."""
    prepare_data(run)
    if run.model.tiny is not None:
        save_tiny_model(run.model.tiny, run.seed, run_dir / BASE_DIR)


def _unsharded(decoder: HFDecoder, run: CPTRun, run_dir: Path) -> HFDecoder:
    """An unsharded copy of a model trained sharded over the processes (FSDP), with the trained weights, for the probe."""
    copy = HFDecoder(load_run_model(run, run_dir, hash_weights=False, local_only=True).model)
    copy.load_state_dict(load_weights(run_dir))
    return copy


def _first_time(marker: Path, info: DistInfo) -> bool:
    """Whether ``marker`` is missing, as rank 0 sees it (every process gets the same answer)."""
    missing = not marker.is_file()
    return broadcast_from_main(missing) if info.world_size > 1 else missing


def _val_loss(decoder: HFDecoder, val: TokenBatches, device: torch.device) -> float:
    """Mean token cross-entropy over the validation shard: float32, TF32 and HF32 off, split over the processes."""
    with full_precision():
        return evaluate(decoder, val, device, amp=False)["loss"]


def _train_settings(run: CPTRun, loader: TokenLoader) -> TrainSettings:
    runtime = run.runtime
    return TrainSettings(
        recipe=run.train.recipe,
        amp=runtime.amp,
        compile=False,
        accum_steps=loader.accum,
        fsdp=runtime.fsdp,
        fsdp_bf16_params=runtime.fsdp_bf16_params,
    )


def _train(
    decoder: HFDecoder,
    run: CPTRun,
    loader: TokenLoader,
    settings: TrainSettings,
    val: TokenBatches,
    path: Path,
    device,
    info: DistInfo,
) -> dict:
    hp = run.train
    memory = _memory_choice(decoder, run.runtime, settings, loader, hp.block_size, device, info)
    checkpointing = memory["gradient_checkpointing"] and decoder.lm.supports_gradient_checkpointing
    if checkpointing:
        decoder.lm.activation_checkpointing_enable({"use_reentrant": False})  # layer hooks stay outside the recompute
    elif memory["gradient_checkpointing"]:
        log.warning("%s: %s has no gradient checkpointing; training without it", run.name, type(decoder.lm).__name__)
    summary = decoder_runs.train_decoder(decoder, run, loader, val, settings, path, device)
    if checkpointing:
        decoder.lm.activation_checkpointing_disable()
    return {
        "val_loss_after": summary["val_loss"],
        **{
            k: summary[k]
            for k in ("train_loss", "steps", "wall_s", "autocast_dtype", "final_eval_dtype", "final_eval_math_mode")
        },
        "lr": settings.recipe.lr,
        "cpt_tokens": summary["steps"] * hp.batch_tokens,
        "tokens_per_s": decoder_runs.token_rates(path, hp.block_size)[0],
        **decoder_runs.trained_on(info, device),
        "settings": {
            **asdict(settings),
            "micro_batch_size": loader.micro_batch,
            "gradient_checkpointing": checkpointing,
            "gradient_checkpointing_by": memory["by"],
            "memory_estimate": memory["estimate"],
        },
    }


def _memory_choice(
    decoder: HFDecoder,
    runtime: CPTRuntime,
    settings: TrainSettings,
    loader: TokenLoader,
    block_size: int,
    device: torch.device,
    info: DistInfo,
) -> dict:
    """Gradient checkpointing of this run: ``runtime.gradient_checkpointing`` True / False (the flag or the preset),
    or ``"auto"``: on where :mod:`common.training.memory`'s estimate at the
    micro-batch does not fit the device's memory, off where it fits. The choice, why, and the estimate (bytes)."""
    shape = memory_training.hf_shape(decoder.lm, decoder.n_layer, decoder.d_model)
    estimate = memory_training.training_memory(
        shape,
        micro_batch=loader.micro_batch,
        block_size=block_size,
        amp=settings.amp and autocast_dtype(device) is not None,
        shards=info.world_size if settings.fsdp else 1,
    )
    capacity = memory_training.device_memory(device)
    wanted, by = memory_training.choose_checkpointing(runtime.gradient_checkpointing, estimate, capacity)
    if by == "memory estimate":
        log.info(
            "gradient checkpointing %s: %.1f GB estimated without it, %s of device memory",
            "on" if wanted else "off",
            estimate.total(False) / 1e9,
            f"{capacity / 1e9:.1f} GB" if capacity else "unknown",
        )
    record = {**estimate.record(), "device_memory": capacity, "fit_fraction": memory_training.FIT_FRACTION}
    return {"gradient_checkpointing": wanted, "by": by, "estimate": record}


def _probe_and_finish(
    decoder: HFDecoder, record: dict, run: CPTRun, data: TokenData, path: Path, device, summary: dict
) -> dict:
    t = run.train.block_size
    chosen, batches = decoder_runs.probe_windows(run.probe, data, t, device)
    sub_batch = run.runtime.probe_sub_batch  # memory only: every score is the whole batch's
    with BlockInfluence(decoder) as influence:  # the probe's own forward passes
        result = decoder_runs.probe_decoder(decoder, batches, run.probe, sub_batch)
    bi = influence.values()
    records = [{**r, "block_influence": bi[r["index"]] if r["block_input"] else None} for r in result.records()]
    decoder_runs.write_probe_records(path, [{"model": record["model"], **r} for r in records], chosen, t)
    out = {
        **record,  # model, revision, commit_hash, weight_files, model_class
        "name": run.name,
        "seed": run.seed,
        "n_layer": decoder.n_layer,
        "d_model": decoder.d_model,
        "params": sum(p.numel() for p in decoder.parameters()),
        "layers_path": decoder.parts.layers_path,
        "norm_path": decoder.parts.norm_path,
        "tokenizer": run.data.tokenizer,
        **summary,  # val_loss_before, val_loss_after, cpt_tokens, train_loss, steps, ...
        **result.summary(),  # ag_max, ag_max_per_example, ag_max_blocks and their candidates
        "block_influence": bi,
        "candidates": records,
    }
    finish_run(path, out)
    return out


# ----------------------------------------------------------------------------- summary
# A model's shape, its AGmax readings and its losses: the columns of B.5's table here and in 08's pythia table.
MODEL_COLUMNS = (
    "n_layer",
    "d_model",
    "ag_max",
    "ag_max_per_example",
    "ag_max_blocks",
    "val_loss_before",
    "val_loss_after",
)
SUMMARY_KEYS = (
    "name",
    "model",
    *MODEL_COLUMNS,
    "cpt_tokens",
    "lr",
    "seed",
    "revision",
    "commit_hash",
)


def summary_rows(results: Sequence[dict]) -> list[dict]:
    """One row per run, by depth then width: the cross-model table of B.5."""
    return [
        {k: r.get(k) for k in SUMMARY_KEYS}
        for r in sorted(results, key=lambda r: (r["n_layer"], r["d_model"], r["seed"]))
    ]


def summary_table(rows: Sequence[dict], low_signal: float) -> str:
    """Model, layers, width, AGmax (both readings) and the losses before and after CPT; ``*``: below the low-signal line."""
    header = (
        f"{'run':<28} {'L':>3} {'d':>5} {decoder_runs.ag_header(low_signal)} {'loss before':>11} {'loss after':>10}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        name = str(r["name"])[:28]
        lines.append(
            f"{name:<28} {r['n_layer']:>3} {r['d_model']:>5} {decoder_runs.ag_columns(r, low_signal)} "
            f"{r['val_loss_before']:>11.4f} {r['val_loss_after']:>10.4f}"
        )
    lines.append(
        f"Cross-model evidence: width changes with depth. * below {low_signal:g}, the paper's low-signal line."
    )
    return "\n".join(lines)


def summary_name(preset: str) -> str:
    return f"summary-{preset}.csv"


def summary_key(config: dict) -> str:
    """The summary a run belongs in: every finished run of its preset is listed in ``summary-<preset>.csv``."""
    return summary_name(config.get("preset"))


__all__ = [
    "MODEL_COLUMNS",
    "EXPERIMENT",
    "SCRIPT",
    "cpt_configs",
    "prepare_data",
    "pythia_cpt_run",
    "require_prepared",
    "save_tiny_model",
    "summary_key",
    "summary_name",
    "summary_rows",
    "summary_table",
]
