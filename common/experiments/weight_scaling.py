"""Job module of ``07_weight_scaling.py``: the weight-scaling diagnostics of Cohen et al. (2021).

Families (``FAMILIES``):

- ``fc-tanh`` / ``fc-relu``: their setting reproduced. One run per (family, depth L, seed) trains
  :class:`common.models.fc_resnet.FCResNet` (tanh with a shared delta; ReLU with a per-layer
  delta) on the synthetic neural-ODE regression data (:mod:`common.data.neural_ode`, d = 10,
  generated from the run's seed) with the MSE loss through :func:`common.training.loop.train`
  (:func:`train_fc_run`), then computes the statistics of its trained weights.
- ``sweep``: one analysis run per finished run of script 01 (:func:`analyse_sweep_run`). Each block is
  ``shortcut(z) + V relu(BN(conv_U z))``: the BatchNorm after ``U`` is folded into it (eval mode,
  ``W * gamma / sqrt(var + eps)``) and ``V``, which nothing follows, is taken raw; per stage, the sequence
  ``A_k`` is each block's folded ``U`` and ``delta_k`` its ``V``. The downsampling block (first block of stages 2 and 3: stride 2, other
  input width) is **left out** of the stage's sequences and fits; its folded norms are listed in
  the run's ``layers.csv`` with ``downsample = True``.

Fits (:func:`common.experiments.weight_scaling_fits.exponent_rows`; the weight sequences they read in
:mod:`common.experiments.weight_scaling_weights`): per (family, dataset, stage, tensor, norm) the exponents of
:data:`common.science.scaling.STEPS` over the depths with at least :data:`MIN_BLOCKS` layers; with fewer
than :data:`common.science.scaling.MIN_DEPTHS` such depths the row says "insufficient depths" and
nothing is fitted. Cohen et al.'s reported exponents (:mod:`common.presets.paper`) stand beside them.

Records (plain CSV, one file per family and dataset, written by the script under
``<out>/weight_scaling/``):

``records-<tag>.csv``, one row per (analysed network, stage, tensor, norm):
  ``family`` ("fc-tanh", "fc-relu", "sweep"), ``dataset`` ("neural-ode" or the sweep's),
  ``seed``, ``run`` (run directory name), ``stage`` (0: the whole network of an FC family;
  1, 2, 3: sweep stages), ``tensor`` ("A", "b", "delta", "delta_A" = ``|delta_k| A_k``; sweep:
  "A" = first conv U with its BatchNorm folded in, "delta" = terminal conv V, raw), ``norm`` ("fro" or "spectral"), ``depth`` (L: layers in
  the sequence; sweep: blocks of the stage without the downsampling block), ``network_depth``
  (FC: L; sweep: d of ResNet-d), ``depth_n`` (sweep: N), ``max_norm``, ``max_increment``
  (unscaled ``max_k ||A_k+1 - A_k||``; the beta-scaled norm is ``depth**beta`` times it),
  ``cumsum_norm``, ``root_sum_squares``, ``noise_max``, ``trend_max``, ``noise_fraction``,
  ``trend_window`` (see :mod:`common.science.scaling`), ``input_size`` (sweep: feature-map size of the FFT
  spectral norm), ``train_loss``, ``test_loss`` (FC: MSE; sweep: cross-entropy from script 01).

``layers.csv`` in every run directory, one row per (stage, tensor, layer k): ``stage``,
``tensor``, ``k`` (0-based position in the analysed sequence; -1 for a downsampling block),
``t`` = k / L, ``fro`` and ``spectral`` norms of the layer tensor,
``downsample`` (sweep; the spectral norm of a downsampling block's stride-2 conv is that of the
same kernel at stride 1 on its input, an upper bound), ``input_size`` (sweep), and for FC runs one fixed entry (``A_k[0, 1]``, ``b_k[0]``, ``delta_k``)
with its cumulative sum ``S_k+1`` split into ``entry_trend`` + ``entry_noise``, and the norms
``path_norm``, ``trend_norm``, ``noise_norm`` of ``S_k+1`` and of its parts.

``exponents-<tag>.csv`` / ``.md``: one row per (stage, tensor, norm, exponent): ``estimator`` (which
beta the exponent rests on: :data:`common.science.scaling.ESTIMATORS`; empty when none), ``estimate``,
``ci_low``, ``ci_high`` (``level``), ``stderr``, ``n``, ``n_depths``, ``depth_min``,
``depth_max``, ``r_squared``, ``status`` ("ok", "insufficient depths", "non-positive statistic",
"needs beta"), ``rule``, ``paper`` (Cohen et al.'s value, where they report one) and ``interval``:
"slope" (the statistic's own slope interval) or, for ``nu`` and ``nu_max_norm``, "joint fit (beta's
uncertainty included)": their fit columns are then those of the regression of
``log(max_increment / S)`` on ``log L`` (``statistic`` names it; ``S`` the statistic beta is read
from, :func:`common.science.scaling.joint_exponent`), and ``ci_low_beta_fixed`` / ``ci_high_beta_fixed``
give the interval with beta held at its estimate (the one reported before issue 29).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch

from common.data.neural_ode import BatchLoader, make_neural_ode_data
from common.errors import ParamError
from common.experiments.shared.resnet_sweep import CONFIG_KEYS as SWEEP_CONFIG_KEYS
from common.experiments.shared.resnet_sweep_records import load_trained_resnet
from common.experiments.weight_scaling_config import FCData, FCRun, SweepAnalysisRun
from common.experiments.weight_scaling_fits import MIN_BLOCKS
from common.experiments.weight_scaling_weights import fc_statistics, stage_sequences
from common.models.fc_resnet import FCResNet, FCResNetConfig
from common.presets.weight_scaling import COHEN_STOPPING, SCHEDULES, fc_preset
from common.runs import atomic, run_store, tables
from common.science import scaling
from common.training.checkpoints import finish_run
from common.training.device import cpu_threads, resolve_device, seed_everything
from common.training.evaluation import evaluate
from common.training.loop import train
from common.training.recipes import TrainSettings

log = logging.getLogger(__name__)

EXPERIMENT = "weight_scaling"
FC_FAMILIES = {"fc-tanh": ("tanh", "shared"), "fc-relu": ("relu", "per_layer")}  # family -> (activation, delta)
FAMILIES = (*FC_FAMILIES, "sweep")
FC_DATASET = "neural-ode"
LAYERS = "layers.csv"
RECORD_COLUMNS = (  # the per-depth records, in this order (module docstring)
    "family",
    "dataset",
    "seed",
    "run",
    "stage",
    "tensor",
    "norm",
    "depth",
    "network_depth",
    "depth_n",
    "max_norm",
    "max_increment",
    "cumsum_norm",
    "root_sum_squares",
    "noise_max",
    "trend_max",
    "noise_fraction",
    "trend_window",
    "input_size",
    "train_loss",
    "test_loss",
)


def fc_configs(
    family: str,
    *,
    preset: str = "smoke",
    overrides: dict | None = None,
    seeds: Sequence[int] = (0,),
    device: str = "auto",
) -> list[dict]:
    """One config per (depth L, seed) of an FC family. ``overrides``: fields of the preset's ``FCPreset`` (``depths``,
    ``batch_size``) and of its recipe (``epochs``, ``lr``, and ``schedule``: its ``decay``, one of :data:`SCHEDULES`),
    None meaning "the preset's" (:data:`FC_PRESETS`, in ``common/presets/weight_scaling.py``). "constant" trains
    with Cohen et al.'s early stopping (``COHEN_STOPPING``, stored under ``train.early_stopping``), "cosine" every
    epoch."""
    if family not in FC_FAMILIES:
        raise ParamError("family", family, f"not a fully connected family; use one of {', '.join(FC_FAMILIES)}")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if given.get("schedule", "cosine") not in SCHEDULES:
        raise ParamError("schedule", given["schedule"], f"use one of {', '.join(SCHEDULES)}")
    base = fc_preset(preset)
    recipe = {"decay" if k == "schedule" else k: given.pop(k) for k in ("epochs", "lr", "schedule") if k in given}
    settings = replace(base, recipe=replace(base.recipe, **recipe), **given)
    activation, delta = FC_FAMILIES[family]
    shape = {"dim": settings.dim, "activation": activation, "delta": delta, "init_scale": settings.init_scale}
    stopping = {"early_stopping": COHEN_STOPPING.to_config()} if settings.recipe.decay == "constant" else {}
    return [
        {
            "experiment": EXPERIMENT,
            "name": f"{family}-L{depth}-seed{seed}",
            "family": family,
            "preset": preset,
            "depth": depth,
            "seed": seed,
            "data": {
                "kind": FC_DATASET,
                "dim": settings.dim,
                "num_train": settings.num_train,
                "num_test": settings.num_test,
                "steps": 100,
                "noise": 0.0,
                "data_seed": seed,
            },
            "model": asdict(FCResNetConfig(depth=depth, **shape)),
            "train": {**settings.recipe.to_config(), "batch_size": settings.batch_size, **stopping},
            "runtime": {"device": device},
        }
        for seed, depth in itertools.product(seeds, settings.depths)
    ]


# ----------------------------------------------------------------------------- FC job
def train_fc_run(spec: run_store.RunSpec) -> dict:
    """Job function of script 07, FC families: train one (family, L, seed) run, then record its weight statistics.

    On the CPU the run uses one intra-op thread: its operations are d x d = 10 x 10 matrix products,
    which threads cannot speed up and which a busy machine slows many times over when threads wait.
    """
    run = FCRun.from_config(spec.config)
    device = resolve_device(run.runtime.device or "auto")
    with cpu_threads(1) if device.type == "cpu" else contextlib.nullcontext():
        return _train_fc_run(spec, run, device)


def _train_fc_run(spec: run_store.RunSpec, run: FCRun, device: torch.device) -> dict:
    path = run_store.prepare_run(spec.out, spec.config)
    hp = run.train
    seed_everything(run.seed)
    data = _fc_data(run.data)
    model = FCResNet(run.model).to(device)
    train_loader = BatchLoader(data.x_train, data.y_train, hp.batch_size, shuffle=True, device=device, seed=run.seed)
    clean_train = BatchLoader(data.x_train, data.y_train, 512, shuffle=False, device=device)
    test_loader = BatchLoader(data.x_test, data.y_test, 512, shuffle=False, device=device)
    initial = evaluate(model, clean_train, device, amp=False, loss="mse")["loss"]  # the fresh init, also on resume
    settings = TrainSettings(recipe=hp.recipe, amp=False, loss="mse", stopping=hp.early_stopping)
    summary = train(
        model,
        train_loader,
        {"test": test_loader},
        final_eval_loaders={"train": clean_train},
        run_dir=path,
        settings=settings,
        device=device,
        desc=run.name,
    )
    model = model.cpu()
    losses = {"train_loss": summary["train_loss"], "test_loss": summary["test_loss"]}
    base = {
        "family": run.family,
        "dataset": FC_DATASET,
        "seed": run.seed,
        "run": path.name,
        "stage": 0,
        "network_depth": run.depth,
        "depth_n": None,
        "input_size": None,
        **losses,
    }
    records, layers = fc_statistics(model, base)
    atomic.atomic_write_csv(path / LAYERS, layers)
    result = {
        "family": run.family,
        "depth": run.depth,
        "seed": run.seed,
        "initial_train_loss": initial,
        **losses,
        "train_loss_running": summary["train_loss_running"],
        "epochs": summary["epochs"],  # trained (with early stopping, at most the recipe's)
        "schedule": settings.recipe.decay,  # type: ignore[union-attr]
        # best running loss, bad epochs, why it stopped; None without early stopping
        "stopping": summary.get("stopping"),
        "steps": summary["steps"],
        "wall_s": summary["wall_s"],
        "device": device.type,
        "records": records,
    }
    finish_run(path, result)
    return result


def _fc_data(d: FCData):
    """The run's synthetic neural-ODE data (:func:`common.data.neural_ode.make_neural_ode_data`) from its ``data``."""
    return make_neural_ode_data(
        dim=d.dim, num_train=d.num_train, num_test=d.num_test, seed=d.data_seed, steps=d.steps, noise=d.noise
    )


# ----------------------------------------------------------------------------- sweep analysis
def sweep_analysis_configs(sweep_dirs: Iterable[Path], *, input_size: int | None = None) -> list[dict]:
    """One analysis config per finished sweep run (identity: the sweep run and the FFT input size); runs on the CPU."""
    configs = []
    for sweep_dir in sweep_dirs:
        sweep = run_store.read_config(sweep_dir, SWEEP_CONFIG_KEYS)
        size = input_size or sweep.get("data", {}).get("image_size") or 32
        configs.append(
            {
                "experiment": EXPERIMENT,
                "name": f"sweep-{sweep['dataset']}-resnet{sweep['depth_label']}-n{sweep['depth_n']}-seed{sweep['seed']}",
                "family": "sweep",
                "dataset": sweep["dataset"],
                "depth_n": sweep["depth_n"],
                "depth_label": sweep["depth_label"],
                "seed": sweep["seed"],
                "sweep_run": Path(sweep_dir).name,
                "input_size": size,
                "fold_batchnorm": True,
                "runtime": {"sweep_dir": str(Path(sweep_dir).resolve())},
            }
        )
    return configs


def analyse_sweep_run(spec: run_store.RunSpec) -> dict:
    """Job function of script 07, sweep family: per-stage statistics of one trained sweep model (on the CPU,
    one intra-op thread: one dummy forward of a single image, then numpy)."""
    with cpu_threads(1):
        return _analyse_sweep_run(spec)


def _analyse_sweep_run(spec: run_store.RunSpec) -> dict:
    run = SweepAnalysisRun.from_config(spec.config)
    path = run_store.prepare_run(spec.out, spec.config)
    sweep_dir = Path(run.runtime.sweep_dir)
    model = load_trained_resnet(sweep_dir).double()
    sweep_result = run_store.read_result(sweep_dir)
    blocks = stage_sequences(model, run.input_size)
    base = {
        "family": "sweep",
        "dataset": run.dataset,
        "seed": run.seed,
        "run": path.name,
        "network_depth": run.depth_label,
        "depth_n": run.depth_n,
        "train_loss": sweep_result.get("train_loss"),
        "test_loss": sweep_result.get("test_loss"),
    }
    records, layers = [], []
    for stage in sorted({b["stage"] for b in blocks}):
        in_stage = [b for b in blocks if b["stage"] == stage]
        kept = [b for b in in_stage if not b["downsample"]]
        for tensor in ("A", "delta"):
            for b in in_stage:  # k: position in the analysed sequence; the downsampling block has k = -1
                k = next((i for i, x in enumerate(kept) if x is b), -1)
                layers.append(
                    {
                        "stage": stage,
                        "tensor": tensor,
                        "k": k,
                        "t": k / len(kept) if k >= 0 else math.nan,
                        "downsample": b["downsample"],
                        "fro": float(b[tensor].norm()),
                        "input_size": b["size"][tensor],
                        "spectral": float(scaling.conv_spectral_norms(b[tensor], b["size"][tensor])[0]),
                    }
                )
            if not kept:
                continue
            seq, size = torch.stack([b[tensor] for b in kept]), kept[0]["size"][tensor]
            for norm in ("fro", "spectral"):  # the trend/noise split in the Frobenius norm only
                records.append(
                    {
                        **base,
                        "stage": stage,
                        "tensor": tensor,
                        "norm": norm,
                        "input_size": size,
                        **scaling.weight_statistics(seq, norm, size, trend_noise=norm == "fro"),
                    }
                )
    atomic.atomic_write_csv(path / LAYERS, layers)
    keys = ("family", "dataset", "depth_n", "depth_label", "seed", "sweep_run", "input_size")
    result = {k: getattr(run, k) for k in keys}
    result["blocks_per_stage"] = [sum(1 for b in blocks if b["stage"] == s and not b["downsample"]) for s in (1, 2, 3)]
    result["records"] = records
    run_store.write_result(path, result)
    return result


# ----------------------------------------------------------------------------- fits and tables
def _estimate_cell(r: dict) -> str:
    return f"{r['estimate']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if r["status"] == "ok" else "-"


def _depths_cell(r: dict) -> str:
    return f"{r['depth_min']}-{r['depth_max']} ({r['n']})" if r["status"] == "ok" else f"({r.get('n', 0)})"


EXPONENT_COLUMNS = (  # the markdown table of exponent_rows
    tables.Column("family"),
    tables.Column("dataset"),
    tables.Column("stage", lambda r: "all" if r["stage"] == 0 else r["stage"], fmt=""),
    tables.Column("tensor"),
    tables.Column("norm"),
    tables.Column("exponent"),
    tables.Column("beta from", lambda r: r.get("estimator", ""), fmt=""),
    tables.Column("estimate [CI]", _estimate_cell),
    tables.Column("depths (n)", _depths_cell),
    tables.Column("status"),
    tables.Column("Cohen et al.", "paper", fmt=""),
)


def exponent_markdown(rows: Sequence[dict]) -> str:
    """The exponent table as markdown: estimate with its interval, depths used, status, Cohen et al.'s value.

    A stage whose every row is "insufficient depths" is one line (tensor, norm and exponent "*")."""
    by_stage = defaultdict(list)
    for r in rows:
        by_stage[(r["family"], r["dataset"], r["stage"])].append(r)
    shown = []
    for r in rows:
        stage_rows = by_stage[(r["family"], r["dataset"], r["stage"])]
        if all(x["status"] == scaling.INSUFFICIENT_DEPTHS for x in stage_rows):
            if r is stage_rows[0]:
                shown.append(
                    {
                        **r,
                        "tensor": "*",
                        "norm": "*",
                        "exponent": "*",
                        "estimator": "",
                        "paper": "",
                        "n": max(x.get("n", 0) for x in stage_rows),
                    }
                )
            continue
        shown.append(r)
    level = rows[0]["level"] if rows else scaling.DEFAULT_LEVEL
    note = (
        f"Intervals: {level:.0%} Student-t intervals of the log-log slope. Depths with fewer than {MIN_BLOCKS} layers "
        f"(blocks) are left out; with fewer than {scaling.MIN_DEPTHS} depths left a row says 'insufficient depths'. "
        "Rules: common.science.scaling.STEPS; Cohen et al.'s values: common.presets.paper (side by side only). 'beta from': the two "
        f"estimators of beta, '{scaling.STEP2_ESTIMATOR}' (beta = 1 - slope of the cumulative-sum norm) and "
        f"'{scaling.MAX_NORM_ESTIMATOR}' (beta = -slope of the max norm); they agree only for smooth weights. "
        "nu's interval is a joint fit (the slope of log(max_increment / S), S the statistic beta is read from), "
        "so beta's uncertainty and its covariance with the increments' slope are in it."
    )
    return f"{tables.markdown_table(shown, EXPONENT_COLUMNS)}\n\n{note}"


def record_rows(results: Iterable[dict]) -> list[dict]:
    """Every per-depth record of finished runs, columns in :data:`RECORD_COLUMNS` order (missing ones empty)."""
    return [{k: record.get(k) for k in RECORD_COLUMNS} for result in results for record in result["records"]]


def summary_key(config: dict) -> list:
    """The runs one summary lists: an FC family's runs of one preset, or the sweep analyses of one dataset."""
    family = config.get("family")
    return [family, config.get("dataset") if family == "sweep" else config.get("preset")]


def summary_tag(family: str, dataset: str | None = None) -> str:
    """File-name tag of a family's summary files: ``fc-tanh`` or ``sweep-cifar10``."""
    return family if family in FC_FAMILIES else f"{family}-{dataset}"


def fc_training_table(results: Sequence[dict]) -> str:
    """Depth vs initial and final MSE of the FC runs, with the schedule that ran and the epochs it took."""
    header = (
        f"{'family':<8} {'L':>5} {'seed':>4} {'initial MSE':>11} {'train MSE':>10} {'test MSE':>10} "
        f"{'schedule':<8} {'epochs':>6} stopped"
    )
    lines = [header, "-" * len(header)]
    for r in sorted(results, key=lambda r: (r["family"], r["depth"], r["seed"])):
        stopped = (r.get("stopping") or {}).get("stopped") or "-"
        lines.append(
            f"{r['family']:<8} {r['depth']:>5} {r['seed']:>4} {r['initial_train_loss']:>11.5f} "
            f"{r['train_loss']:>10.5f} {r['test_loss']:>10.5f} {r.get('schedule', 'cosine'):<8} {r['epochs']:>6} {stopped}"
        )
    return "\n".join(lines)
