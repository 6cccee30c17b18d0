"""Job module of ``05_gpt2_ascend.py``: the GPT-2 decoder depth sweep of paper B.4, then AG across depth.

One run per (depth ``L``, seed): train a GPT-2 (``common/models/gpt.py``) with ``L`` decoder
blocks on token shards (``common/data/token_shards.py``) through :func:`common.train.train` (AdamW,
warm-up + cosine by steps, gradient clipping, gradient accumulation to a token batch, bf16
autocast and ``torch.compile`` on accelerators, DDP when several processes run it), then probe
the trained model with :func:`common.probe.probe_activation_gradients` on ``B`` held-out batches
of the validation shard: ``AG_l`` at the ``L + 1`` candidates and AGmax under script 02's keys.

Presets (:data:`PRESETS`): ``paper`` has the paper's dimensions (B.4: d = 768, feed-forward
3072, 12 heads) and a FineWeb-Edu budget of 310,000,347 tokens; the depth grid, context length,
vocabulary padding, token batch and every optimiser value are this reproduction's decisions
(README, "Reproduction decisions"). ``smoke`` runs the same code paths on CPython's bundled help
texts with the byte tokenizer in minutes on a CPU; ``mini`` trains a small decoder at five depths
on Tiny Shakespeare with the byte tokenizer (downloaded into ``data/`` and checked against its
sha256 unless ``--text-file`` gives it, with the same run hashes either way).

Under ``torchrun`` or a multi-task SLURM job every process calls :func:`train_gpt_run` for the
same run: they train it together through DDP and only rank 0 writes records, checkpoints and the
probe's results.
"""

from __future__ import annotations

import gc
import json
import logging
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from common import runs
from common.data.text_sources import (
    FINEWEB_SUBSET,
    TINY_SHAKESPEARE,
    RemoteText,
    TextDataSpec,
    prepare_tokens,
    preset_text_path,
    text_data_spec,
)
from common.data.token_shards import META, TokenBatches, TokenData, TokenLoader, TokenWindows, sample_windows
from common.data.tokenizers import tokenizer_vocab_size
from common.device import device_name, empty_cache, resolve_device, seed_everything
from common.distributed import DistInfo, init_distributed, process_device, wait_for_all
from common.errors import UserError, one_of
from common.models.gpt import GPT, GPTConfig
from common.probe import probe_activation_gradients
from common.runs import RunSpec
from common.train import WEIGHTS, AdamWRecipe, TrainSettings, classification_loss, finish_run, load_weights, train

log = logging.getLogger(__name__)

EXPERIMENT = "gpt2_ascend"
PAPER_DEPTHS = (1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24)  # L; 12 is GPT-2 Small (B.4's baseline)
DEFAULT_DATA_ROOT = "data/tokens"

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


# ----------------------------------------------------------------------------- presets
@dataclass(frozen=True)
class GPTPreset:
    """What one preset fixes: depths, model dimensions, data, token batch, optimiser and probe."""

    depths: tuple[int, ...]
    n_embd: int
    n_head: int
    block_size: int  # context length T
    source: str
    tokenizer: str
    val_tokens: int  # held-out validation shard (the first documents of the stream)
    train_tokens: int | None  # the training token budget (None: all the source has)
    batch_tokens: int  # tokens per optimizer step (gradient accumulation reaches it)
    micro_batch_size: int  # sequences per forward and backward on one device (runtime)
    steps: int | None  # optimizer steps; None: train_tokens // batch_tokens (one pass over the budget)
    n_evals: int  # evaluations (and checkpoints) over the run; steps is rounded down to a multiple
    lr: float
    warmup_steps: int
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    dropout: float = 0.0
    probe_batch_size: int = 8  # sequences per analysis batch
    probe_batches: int = 10  # B
    exact: bool = False
    eval_batch_size: int = 16
    text: RemoteText | None = None  # a text source without --text-file: this file, downloaded into data/


PAPER = GPTPreset(
    depths=PAPER_DEPTHS, n_embd=768, n_head=12, block_size=1024,
    source="fineweb-edu", tokenizer="gpt2", val_tokens=1 << 21, train_tokens=310_000_347,
    batch_tokens=1 << 17, micro_batch_size=16, steps=None, n_evals=10, lr=6e-4, warmup_steps=100,
)  # fmt: skip
SMOKE = GPTPreset(
    depths=(1, 2, 4), n_embd=64, n_head=4, block_size=128,
    source="python-docs", tokenizer="byte", val_tokens=1 << 14, train_tokens=None,
    batch_tokens=16 * 128, micro_batch_size=8, steps=60, n_evals=3, lr=3e-3, warmup_steps=6,
    probe_batch_size=8, probe_batches=4, exact=True, eval_batch_size=32,
)  # fmt: skip
# mini (README, "Reproduction decisions", mini): Tiny Shakespeare with the byte tokenizer, five depths, one seed.
MINI = GPTPreset(
    depths=(1, 2, 3, 4, 6), n_embd=64, n_head=4, block_size=128,
    source="text", tokenizer="byte", val_tokens=1 << 15, train_tokens=None,
    batch_tokens=16 * 128, micro_batch_size=16, steps=300, n_evals=4, lr=3e-3, warmup_steps=30,
    probe_batch_size=8, probe_batches=4, exact=True, eval_batch_size=32, text=TINY_SHAKESPEARE,
)  # fmt: skip
PRESETS = {"paper": PAPER, "smoke": SMOKE, "mini": MINI}


def gpt_preset(preset: str) -> GPTPreset:
    return one_of("--preset", preset, PRESETS)


# ----------------------------------------------------------------------------- configs
def gpt_configs(
    *,
    preset: str = "smoke",
    depths: Sequence[int] | None = None,
    seeds: Sequence[int] = (0,),
    overrides: dict | None = None,
    text_path: str | Path | None = None,
    data_root: str | Path | None = None,
    fineweb_subset: str = FINEWEB_SUBSET,
    device: str = "auto",
    compile: str = "auto",
    amp: bool = True,
    peak_tflops: float | None = None,
) -> list[dict]:
    """One config per (depth L, seed). ``overrides``: :class:`GPTPreset` fields (flags), None meaning "the preset's"."""
    chosen = gpt_preset(preset)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(given) - set(GPTPreset.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown preset fields {sorted(unknown)}")
    if text_path is not None and "source" not in given:
        given["source"] = "text"
    p = replace(chosen, **given)
    text_path = preset_text_path(text_path, p.source, p.text)  # mini: Tiny Shakespeare, as if --text-file data/tinyshakespeare.txt
    depths = list(p.depths if depths is None else depths)
    if not depths or min(depths) < 1:
        raise UserError(f"--depths {depths}: give decoder depths L >= 1, e.g. 1,2,4 or 1:24")
    _check_positive(p)
    if p.batch_tokens % p.block_size:
        raise UserError(f"--batch-tokens {p.batch_tokens} is not a multiple of --block-size {p.block_size}")
    spec = text_data_spec(
        p.source, p.tokenizer, val_tokens=p.val_tokens, train_tokens=p.train_tokens, text_path=text_path, subset=fineweb_subset
    )
    recipe = make_recipe(p)
    model = {
        "n_embd": p.n_embd, "n_head": p.n_head, "n_inner": 4 * p.n_embd, "block_size": p.block_size,
        "vocab_size": tokenizer_vocab_size(p.tokenizer), "dropout": p.dropout, "bias": True,
    }  # fmt: skip
    GPTConfig(n_layer=1, **model)  # a bad --n-head is one line here, before anything runs
    runtime = {
        "device": device,
        "data_root": str(Path(data_root or DEFAULT_DATA_ROOT).expanduser().resolve()),
        "text_path": str(Path(text_path).expanduser().resolve()) if text_path else None,
        "compile": compile,
        "amp": amp,
        "micro_batch_size": p.micro_batch_size,
        "eval_batch_size": p.eval_batch_size,
        "peak_tflops": peak_tflops,
    }
    data_tag = spec.source if spec.source != "text" else f"text-{spec.text_name}"
    configs = []
    for seed in seeds:
        for depth in depths:
            configs.append(
                {
                    "experiment": EXPERIMENT,
                    "name": f"{data_tag}-{spec.tokenizer}-L{depth}-d{p.n_embd}-seed{seed}",
                    "preset": preset,
                    "n_layer": depth,
                    "seed": seed,
                    "model": model,
                    "data": spec.identity(),
                    "train": {**recipe.to_config(), "batch_tokens": p.batch_tokens},
                    "probe": {
                        "split": "val", "batch_size": p.probe_batch_size, "n_batches": p.probe_batches,
                        "exact": p.exact, "seed": seed, "loss": "token_cross_entropy_mean",
                    },  # fmt: skip
                    "runtime": dict(runtime),
                }
            )
    return configs


def make_recipe(p: GPTPreset) -> AdamWRecipe:
    """The AdamW recipe of a preset: ``steps`` rounded down to a multiple of the evaluation interval."""
    steps = p.steps if p.steps is not None else (p.train_tokens or 0) // p.batch_tokens
    if p.steps is None and p.train_tokens is None:
        raise UserError("without a --train-tokens budget give --steps")
    interval = steps // p.n_evals
    if interval == 0:
        raise UserError(f"{steps} optimizer steps cannot hold {p.n_evals} evaluations; raise --steps / --train-tokens or lower --n-evals")
    return AdamWRecipe(
        steps=interval * p.n_evals, lr=p.lr, eval_interval=interval, warmup_steps=p.warmup_steps,
        min_lr_ratio=p.min_lr_ratio, weight_decay=p.weight_decay, beta1=p.beta1, beta2=p.beta2, grad_clip=p.grad_clip,
    )  # fmt: skip


def _check_positive(p: GPTPreset) -> None:
    check_values(p, ("n_embd", "n_head", "block_size", "val_tokens", "batch_tokens", "micro_batch_size", "n_evals",
                     "probe_batch_size", "probe_batches", "eval_batch_size"))  # fmt: skip
    if p.n_embd % p.n_head:
        raise UserError(f"--n-head {p.n_head}: must divide the width --n-embd {p.n_embd} (each head gets n_embd / n_head)")


def check_values(p, positive: Sequence[str]) -> None:
    """The preset fields ``positive``, ``lr`` and ``grad_clip`` must be > 0 and ``warmup_steps`` >= 0; else one
    line naming the flag and its value (scripts 04 and 05; their parsers refuse most of these already)."""
    for name in (*positive, "lr", "grad_clip"):
        value = getattr(p, name)
        if value is not None and not value > 0:
            raise UserError(f"--{name.replace('_', '-')} {value}: must be positive")
    if p.warmup_steps < 0:
        raise UserError(f"--warmup-steps {p.warmup_steps}: must be >= 0")


def data_spec(config: dict) -> TextDataSpec:
    return TextDataSpec(**config["data"])


def prepare_data(config: dict, *, dataset=None, progress: bool = True) -> Path:
    """Tokenise the run's data under its data root (resumable; a no-op once prepared); the directory."""
    runtime = config.get("runtime", {})
    return prepare_tokens(
        data_spec(config), runtime.get("data_root") or DEFAULT_DATA_ROOT, text_path=runtime.get("text_path"),
        dataset=dataset, progress=progress,
    )  # fmt: skip


def require_prepared(config: dict) -> Path:
    """The run's prepared token directory; a one-line error naming ``--prepare-only`` when it is not there.

    Under torchrun every process waits in the process group while one tokenises, and a long
    preparation outlasts the group's timeout: there the data must be prepared beforehand.
    """
    runtime = config.get("runtime", {})
    directory = Path(runtime.get("data_root") or DEFAULT_DATA_ROOT) / data_spec(config).dirname()
    if not (directory / META).is_file():
        raise UserError(
            f"the tokens of this sweep are not prepared under {directory.parent}; under torchrun prepare them first "
            "in one process: python 05_gpt2_ascend.py --prepare-only with the same data flags"
        )
    return directory


def build_gpt(config: dict) -> GPT:
    """The untrained GPT-2 of a config (initialised from the current torch RNG)."""
    return GPT(GPTConfig(n_layer=config["n_layer"], **config["model"]))


# ----------------------------------------------------------------------------- the job
def train_gpt_run(spec: RunSpec) -> dict:
    """Job function of script 05: train one (L, seed) GPT-2, then probe it; resumes.

    Every process of a torchrun / multi-task SLURM job calls it for the same run (DDP); rank 0
    prepares the run directory and the data, writes the records and probes, while the others wait
    outside the collective watchdog (:func:`common.distributed.wait_for_all`).
    """
    config = spec.config
    runtime = config.get("runtime", {})
    device = resolve_device(runtime.get("device") or "auto")
    info = init_distributed(device)
    device = process_device(device, info)
    path = spec.dir
    if info.is_main:
        runs.prepare_run(spec.out, config)
        prepare_data(config)
    wait_for_all()
    data = TokenData.open(require_prepared(config))
    seed_everything(config["seed"])
    model = build_gpt(config)
    twin = trained_twin(spec)
    if twin is not None:  # same training, other probe settings: reuse its weights
        model.load_state_dict(load_weights(twin))
        summary = {k: v for k, v in runs.read_result(twin).items() if k in TRAINING_KEYS}
        summary["trained_in"] = twin.name
    else:
        summary = _train(model, config, data, path, device, info)
    result = None
    if info.is_main:
        gc.collect()  # the optimizer and DDP's buckets of training are garbage now
        empty_cache(device)
        result = _probe_and_finish(model.to(device), config, data, path, device, summary, info)
    wait_for_all()
    return result if result is not None else runs.read_result(path)


TRAINING_KEYS = ("val_loss", "val_acc", "train_loss", "train_acc", "steps", "epochs", "wall_s", "tokens_per_s",
                 "tokens_per_s_rounds", "train_tokens_seen", "world_size", "device_name", "settings")  # fmt: skip


def _train(model: GPT, config: dict, data: TokenData, path: Path, device: torch.device, info: DistInfo) -> dict:
    runtime, hp = config.get("runtime", {}), config["train"]
    recipe = AdamWRecipe.from_config(hp)
    t = config["model"]["block_size"]
    sequences = hp["batch_tokens"] // t
    loader = TokenLoader(
        TokenWindows(data.train, t), global_batch=sequences, micro_batch=runtime.get("micro_batch_size", sequences),
        steps_per_epoch=recipe.eval_interval, seed=config["seed"], rank=info.rank, world_size=info.world_size, device=device,
    )  # fmt: skip
    val = TokenBatches(TokenWindows([data.val], t), runtime.get("eval_batch_size", 16), device=device)
    use_compile = {"on": True, "off": False}.get(runtime.get("compile", "auto"), device.type == "cuda")
    settings = TrainSettings(recipe=recipe, amp=runtime.get("amp", True), compile=use_compile, accum_steps=loader.accum)
    summary = train(model, loader, {"val": val}, run_dir=path, settings=settings, device=device, desc=config["name"])
    rounds = [r["images_per_s"] * t for r in runs.read_metrics(path)]
    steady = rounds[1:] if len(rounds) > 1 else rounds  # the first round holds compilation and warm-up
    return {
        **{k: summary[k] for k in ("val_loss", "val_acc", "train_loss", "train_acc", "steps", "epochs", "wall_s")},
        "tokens_per_s": statistics.median(steady) if steady else None,
        "tokens_per_s_rounds": rounds,
        "train_tokens_seen": summary["steps"] * hp["batch_tokens"],
        "world_size": info.world_size,
        "device_name": device_name(device),
        "settings": {**asdict(settings), "micro_batch_size": loader.micro_batch},
    }


def _probe_and_finish(model: GPT, config: dict, data: TokenData, path: Path, device: torch.device, summary: dict, info) -> dict:
    probe = config["probe"]
    t = config["model"]["block_size"]
    windows = TokenWindows([data.val], t)
    chosen = sample_windows(windows, probe["batch_size"], probe["n_batches"], probe["seed"])
    batches = TokenBatches(windows, probe["batch_size"], indices=chosen, device=device)
    # classification_loss: mean token cross-entropy = mean over sequences of each sequence's mean token loss.
    result = probe_activation_gradients(model, batches, loss_fn=classification_loss, exact=probe["exact"], seed=probe["seed"])
    records = [{"n_layer": config["n_layer"], "seed": config["seed"], "split": "val", **r} for r in result.records()]
    runs.atomic_write_csv(path / "candidates.csv", records)
    runs.atomic_write_json(path / "samples.json", {"split": "val", "block_size": t, "windows": chosen.tolist()})
    flops = model.flops_per_token(t)
    peak = peak_flops(summary.get("device_name"), config.get("runtime", {}).get("peak_tflops"))
    tokens_per_s = summary.get("tokens_per_s")
    world = summary.get("world_size", info.world_size)
    out = {
        "n_layer": config["n_layer"],
        "seed": config["seed"],
        "params": model.num_params(exclude_position=False),
        "params_flops": model.num_params(),
        "flops_per_token": flops,
        "peak_flops_per_device": peak,
        "mfu": tokens_per_s * flops / (peak * world) if peak and tokens_per_s else None,
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
        return {k: v for k, v in runs.identity(config).items() if k != "probe"}

    mine = training(json.loads(json.dumps(spec.config, default=str)))
    for directory in sorted(spec.dir.parent.glob("*")):
        if directory == spec.dir or not runs.is_done(directory) or not (directory / WEIGHTS).is_file():
            continue
        if training(runs.read_json(directory / runs.CONFIG)) == mine:
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
SUMMARY_KEYS = ("n_layer", "seed", "params", "val_loss", "ag_max", "ag_max_candidate", "ag_max_per_example",
                "ag_max_blocks", "batch_size", "n_batches", "tokens_per_s", "mfu", "steps", "train_tokens_seen")  # fmt: skip


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
    mark = "<" + format(low_signal, ".0e")
    header = (f"{'L':>3} {'params':>12} {'val_loss':>9} {'AGmax':>10} {mark:>6} {'AGmax/seq':>10} {mark:>6} "
              f"{'AGmax blk':>10} {'tokens/s':>10} {'MFU':>6} {'seed':>4}")  # fmt: skip
    lines = [header, "-" * len(header)]
    for r in rows:
        mfu = f"{100 * r['mfu']:5.1f}%" if r.get("mfu") else f"{'-':>6}"
        lines.append(
            f"{r['n_layer']:>3} {r['params']:>12,} {r['val_loss']:>9.4f} {r['ag_max']:>10.3e} {'*' if r['ag_max'] < low_signal else '':>6} "
            f"{r['ag_max_per_example']:>10.3e} {'*' if r['ag_max_per_example'] < low_signal else '':>6} {r['ag_max_blocks']:>10.3e} "
            f"{r['tokens_per_s'] or float('nan'):>10.0f} {mfu} {r['seed']:>4}"
        )
    first = rows[0] if rows else {"batch_size": "?", "n_batches": "?"}
    lines.append(
        f"AGmax: batch-mean gradient norm at {first['batch_size']} sequences x {first['n_batches']} held-out batches; "
        f"AGmax/seq: per-sequence RMS (loss of a sequence = its mean token loss); AGmax blk: block inputs only. "
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
    "FINEWEB_SUBSET",
    "PAPER_DEPTHS",
    "PEAK_BF16_TFLOPS",
    "PRESETS",
    "GPTPreset",
    "build_gpt",
    "gpt_configs",
    "gpt_preset",
    "peak_flops",
    "prepare_data",
    "require_prepared",
    "summary_key",
    "summary_name",
    "summary_rows",
    "summary_table",
    "train_gpt_run",
]
