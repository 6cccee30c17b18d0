"""Job module of ``05_gpt2_ascend.py``: the GPT-2 decoder depth sweep of paper B.4, then AG across depth.

One run per (depth ``L``, seed): train a GPT-2 (``common/models/gpt.py``) with ``L`` decoder
blocks on token shards (``common/data/token_shards.py``) through :func:`common.training.loop.train` (AdamW,
warm-up + cosine by steps, gradient clipping, gradient accumulation to a token batch, bf16
autocast and ``torch.compile`` on accelerators, DDP when several processes run it), then probe
the trained model with :func:`common.science.probe.probe_activation_gradients` on ``B`` held-out batches
of the validation shard: ``AG_l`` at the ``L + 1`` candidates and AGmax under script 02's keys.

Presets (:data:`PRESETS`, the table of :mod:`common.presets.gpt2_ascend`): ``paper`` has the paper's dimensions
(B.4: d = 768, feed-forward 3072, 12 heads) and a FineWeb-Edu budget of 310,000,347 tokens; the depth grid,
context length, vocabulary padding, token batch and every optimiser value are this reproduction's decisions
(docs/decisions.md, section "GPT-2 depth sweep"). ``smoke`` runs the same code paths on CPython's bundled help
texts with the byte tokenizer in minutes on a CPU; ``mini`` trains a small decoder at five depths
on Tiny Shakespeare with the byte tokenizer (downloaded into ``data/`` and checked against its
sha256 unless ``--text-file`` gives it, with the same run hashes either way).

Under ``torchrun`` or a multi-task SLURM job every process calls :func:`train_gpt_run` for the
same run: they train it together through DDP and only rank 0 writes records, checkpoints and the
probe's results. The steps script 04 shares (presets, data, training rounds, the probe) are in
:mod:`common.experiments.shared.decoder_runs`.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from common.data.text_sources import FINEWEB_SUBSET, text_data_spec
from common.data.token_shards import TokenData
from common.data.tokenizers import tokenizer_vocab_size
from common.experiments.gpt2_ascend_config import GPTRun
from common.experiments.shared import decoder_runs
from common.experiments.shared.decoder_runs import prepare_data
from common.experiments.shared.gpt2_runs import EXPERIMENT, SCRIPT, build_gpt
from common.models.gpt import GPT, GPTConfig
from common.presets.gpt2_ascend import PRESETS, GPTPreset
from common.runs import run_store
from common.runs.run_store import RunSpec
from common.training.checkpoints import WEIGHTS, finish_run, load_weights
from common.training.device import resolve_device, seed_everything
from common.training.distributed import DistInfo, wait_for_all
from common.training.recipes import TrainSettings

log = logging.getLogger(__name__)


# Dense bf16 tensor-core peaks (TFLOP/s per device, no sparsity), matched against the device name
# (longest key first); --peak-tflops overrides. Ascend: approximate public FP16 figures.
PEAK_BF16_TFLOPS = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,
    "H200": 989.0,
    "H800": 989.0,
    "GH200": 989.0,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
    "RTX 4090": 165.0,
    "Ascend910B": 320.0,
    "Ascend910": 256.0,
}


# ----------------------------------------------------------------------------- configs
def gpt_configs(
    *,
    preset: str = "smoke",
    overrides: dict | None = None,
    depths: Sequence[int] | None = None,
    seeds: Sequence[int] = (0,),
    text_path: str | Path | None = None,
    data_root: str | Path | None = None,
    fineweb_subset: str = FINEWEB_SUBSET,
    device: str = "auto",
    compile: str = "auto",
    amp: bool = True,
    peak_tflops: float | None = None,
) -> list[dict]:
    """One config per (depth L, seed). ``overrides``: :class:`GPTPreset` fields (flags), None meaning "the preset's";
    ``depths``, when given, those of the preset (as ``overrides["depths"]``)."""
    given = {**(overrides or {}), **({} if depths is None else {"depths": depths})}
    if given.get("depths") is not None:
        given["depths"] = tuple(given["depths"])
    p, text_path = decoder_runs.choose_decoder_preset(PRESETS, preset, given, text_path)
    depths = list(p.depths)
    spec = text_data_spec(
        p.source,
        p.tokenizer,
        val_tokens=p.val_tokens,
        train_tokens=p.train_tokens,
        text_path=text_path,
        subset=fineweb_subset,
    )
    recipe = decoder_runs.make_recipe(p, p.lr)
    model = model_keys(p)
    runtime = {
        **decoder_runs.runtime_config(p, device=device, amp=amp, text_path=text_path, data_root=data_root),
        "compile": compile,
        "peak_tflops": peak_tflops,
    }
    data_tag = spec.source if spec.source != "text" else f"text-{spec.text_name}"
    return [
        {
            "experiment": EXPERIMENT,
            "name": f"{data_tag}-{spec.tokenizer}-L{depth}-d{p.n_embd}-seed{seed}",
            "preset": preset,
            "n_layer": depth,
            "seed": seed,
            "model": model,
            "data": spec.identity(),
            "train": {**recipe.to_config(), "batch_tokens": p.batch_tokens},
            "probe": decoder_runs.probe_config(p, seed),
            "runtime": dict(runtime),
        }
        for seed, depth in itertools.product(seeds, depths)
    ]


def model_keys(p: GPTPreset) -> dict:
    """The GPT-2 model of every run of ``p`` (a config's ``model``; the depth is its ``n_layer``): width ``n_embd``,
    ``n_head`` heads, an MLP of ``4 n_embd``, the tokenizer's vocabulary, biases on."""
    model = {
        "n_embd": p.n_embd,
        "n_head": p.n_head,
        "n_inner": 4 * p.n_embd,
        "block_size": p.block_size,
        "vocab_size": tokenizer_vocab_size(p.tokenizer),
        "dropout": p.dropout,
        "bias": True,
    }
    GPTConfig(n_layer=1, **model)  # a bad model shape is one line here, before anything runs
    return model


def require_prepared(run: GPTRun | dict) -> Path:
    """The run's prepared token directory (``run``: typed, or a planned config dict); under torchrun a one-line error
    naming ``--prepare-only`` when it is missing."""
    return decoder_runs.require_prepared(run, SCRIPT)


# ----------------------------------------------------------------------------- the job
def train_gpt_run(spec: RunSpec) -> dict:
    """Job function of script 05: train one (L, seed) GPT-2, then probe it; resumes.

    Every process of a torchrun / multi-task SLURM job calls it for the same run (DDP); rank 0
    prepares the run directory and the data, writes the records and probes, while the others wait
    outside the collective watchdog (:func:`common.training.distributed.wait_for_all`).
    """
    run, path = GPTRun.from_config(spec.config), spec.dir
    info, device = decoder_runs.join_run(spec, resolve_device(run.runtime.device or "auto"), lambda: prepare_data(run))
    wait_for_all()
    data = TokenData.open(require_prepared(run))
    seed_everything(run.seed)
    model = run.gpt()
    twin = trained_twin(spec)
    if twin is not None:  # same training, other probe settings: reuse its weights
        model.load_state_dict(load_weights(twin))
        summary = {k: v for k, v in decoder_runs.renamed(run_store.read_result(twin)).items() if k in TRAINING_KEYS}
        summary["trained_in"] = twin.name
    else:
        summary = _train(model, run, data, path, device, info)
    return decoder_runs.finish_on_main(
        info, device, path, lambda: _probe_and_finish(model.to(device), run, data, path, device, summary, info)
    )


TRAINING_KEYS = (
    "val_loss",
    "val_acc",
    "train_loss",
    "train_acc",
    "steps",
    "eval_rounds",
    "wall_s",
    "tokens_per_s",
    "tokens_per_s_rounds",
    "train_tokens_seen",
    "world_size",
    "device_name",
    "settings",
    "matmul_bf16_flops_per_device",
)


def _train(model: GPT, run: GPTRun, data: TokenData, path: Path, device: torch.device, info: DistInfo) -> dict:
    runtime, hp = run.runtime, run.train
    t = run.model.block_size
    loader = decoder_runs.train_loader(run, data, t, device, info)
    val = decoder_runs.val_batches(data, t, runtime.eval_batch_size, device)
    use_compile = {"on": True, "off": False}.get(runtime.compile, device.type == "cuda")
    rate = decoder_runs.matmul_rate(device)  # the measured MFU's denominator, at the start of the run (None on a CPU)
    settings = TrainSettings(recipe=hp.recipe, amp=runtime.amp, compile=use_compile, accum_steps=loader.accum)
    summary = decoder_runs.train_decoder(model, run, loader, val, settings, path, device)
    tokens_per_s, rounds = decoder_runs.token_rates(path, t)
    return {
        **{k: summary[k] for k in ("val_loss", "val_acc", "train_loss", "train_acc", "steps", "eval_rounds", "wall_s")},
        **{
            k: summary[k] for k in ("compile", "cudnn_benchmark", "cpu_threads") if k in summary
        },  # common.training.loop
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_rounds": rounds,
        "train_tokens_seen": summary["steps"] * hp.batch_tokens,
        **decoder_runs.trained_on(info, device),
        "settings": {**asdict(settings), "micro_batch_size": loader.micro_batch},
        "matmul_bf16_flops_per_device": rate,
    }


def _probe_and_finish(
    model: GPT, run: GPTRun, data: TokenData, path: Path, device: torch.device, summary: dict, info
) -> dict:
    t = run.model.block_size
    chosen, batches = decoder_runs.probe_windows(run.probe, data, t, device)
    result = decoder_runs.probe_decoder(model, batches, run.probe)
    records = [{"n_layer": run.n_layer, "seed": run.seed, "split": "val", **r} for r in result.records()]
    decoder_runs.write_probe_records(path, records, chosen, t)
    flops = model.flops_per_token(t)
    peak = peak_flops(summary.get("device_name"), run.runtime.peak_tflops)
    tokens_per_s = summary.get("tokens_per_s")
    world = summary.get("world_size", info.world_size)
    out = {
        "n_layer": run.n_layer,
        "seed": run.seed,
        "params": model.num_params(exclude_position=False),
        "params_flops": model.num_params(),
        "flops_per_token": flops,
        "peak_flops_per_device": peak,
        "mfu": decoder_runs.mfu(tokens_per_s, flops, peak, world),  # against the datasheet peak
        # against the bf16 matmul rate measured at the start of training (summary's matmul_bf16_flops_per_device)
        "mfu_measured": decoder_runs.mfu(tokens_per_s, flops, summary.get("matmul_bf16_flops_per_device"), world),
        "train_tokens_available": data.train_tokens,
        "val_tokens": int(len(data.val)),
        **summary,
        **result.summary(),  # ag_max, ag_max_per_example, ag_max_blocks and their candidates
        "candidates": records,
    }
    finish_run(path, out)
    return out


def trained_twin(spec: RunSpec) -> Path | None:
    """A finished run of the same training (identity equal but for ``probe``) with saved weights, if any."""

    def training(config: dict) -> dict:
        return {k: v for k, v in run_store.identity(config).items() if k != "probe"}

    mine = training(json.loads(json.dumps(spec.config, default=str)))
    for directory in sorted(spec.dir.parent.glob("*")):
        if directory == spec.dir or not run_store.is_done(directory) or not (directory / WEIGHTS).is_file():
            continue
        if (
            training(run_store.read_run(directory).config) == mine
        ):  # a malformed twin: one line (common.runs.run_store.read_run)
            return directory
    return None


# ----------------------------------------------------------------------------- devices
def peak_flops(name: str | None, override_tflops: float | None = None) -> float | None:
    """The device's dense bf16 peak in FLOP/s: ``override_tflops``, else :data:`PEAK_BF16_TFLOPS`, else None."""
    if override_tflops:
        return override_tflops * 1e12
    for key in sorted(PEAK_BF16_TFLOPS, key=len, reverse=True):
        if name and key.replace(" ", "").lower() in name.replace(" ", "").lower():
            return PEAK_BF16_TFLOPS[key] * 1e12
    return None


# ----------------------------------------------------------------------------- summary
SUMMARY_KEYS = (
    "n_layer",
    "seed",
    "params",
    "val_loss",
    "ag_max",
    "ag_max_candidate",
    "ag_max_per_example",
    "ag_max_blocks",
    "batch_size",
    "n_batches",
    "tokens_per_s",
    "mfu",
    "mfu_measured",
    "steps",
    "train_tokens_seen",
)


def summary_rows(results: Sequence[dict]) -> list[dict]:
    rows = []
    for r in sorted(results, key=lambda r: (r["n_layer"], r["seed"])):
        row = {k: r.get(k) for k in SUMMARY_KEYS}
        if r.get("exact"):
            row["v_max"] = r["v_max"]
        rows.append(row)
    return rows


def summary_table(rows: Sequence[dict], low_signal: float) -> str:
    """L against validation loss, AGmax (both normalisations) and tokens/s; ``*``: below the paper's low-signal line."""
    header = f"{'L':>3} {'params':>12} {'val_loss':>9} {decoder_runs.ag_header(low_signal)} {'AGmax blk':>10} {'tokens/s':>10} {'MFU':>6} {'MFUmm':>6} {'seed':>4}"
    lines = [header, "-" * len(header)]
    for r in rows:
        mfu, measured = (f"{100 * r[k]:5.1f}%" if r.get(k) else f"{'-':>6}" for k in ("mfu", "mfu_measured"))
        lines.append(
            f"{r['n_layer']:>3} {r['params']:>12,} {r['val_loss']:>9.4f} {decoder_runs.ag_columns(r, low_signal)} {r['ag_max_blocks']:>10.3e} "
            f"{r['tokens_per_s'] or float('nan'):>10.0f} {mfu} {measured} {r['seed']:>4}"
        )
    first = rows[0] if rows else {"batch_size": "?", "n_batches": "?"}
    lines.append(
        f"AGmax: batch-mean gradient norm at {first['batch_size']} sequences x {first['n_batches']} held-out batches; "
        f"AGmax/seq: per-sequence RMS (loss of a sequence = its mean token loss); AGmax blk: block inputs only. "
        f"MFU: of the datasheet's bf16 peak; MFUmm: of the bf16 matmul rate measured on the device. "
        f"* below {low_signal:g}, the paper's low-signal line."
    )
    return "\n".join(lines)


def summary_key(config: dict) -> str | None:
    """The summary a run belongs in (:func:`summary_name`); None for a config without those keys."""
    try:
        return summary_name([config])
    except (KeyError, TypeError):
        return None


def summary_name(configs: Sequence[dict]) -> str:
    """``summary-<data>-<tokenizer>-d<width>-b<batch>x<B>[-exact].csv``: one per probe setting."""
    c = configs[0]
    data = c["data"]["source"] if c["data"]["source"] != "text" else f"text-{c['data']['text_name']}"
    probe = c["probe"]
    return f"summary-{data}-{c['data']['tokenizer']}-d{c['model']['n_embd']}-b{probe['batch_size']}x{probe['n_batches']}{'-exact' if probe['exact'] else ''}.csv"


__all__ = [
    "EXPERIMENT",
    "PEAK_BF16_TFLOPS",
    "SCRIPT",
    "build_gpt",
    "gpt_configs",
    "peak_flops",
    "prepare_data",
    "require_prepared",
    "summary_key",
    "summary_name",
    "summary_rows",
    "summary_table",
    "train_gpt_run",
]
