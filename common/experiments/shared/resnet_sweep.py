"""The ResNet depth sweep of paper B.1-B.3: its settings, its runs and the records they leave.

Shared by scripts 01, 02, 03, 06 and 07, below their job modules (``common/experiments/``):
the sweep's settings per preset and dataset (:func:`sweep_preset`), its run configs
(:func:`sweep_configs`), the data a config names (:func:`load_sweep_data`), the job function that trains one
run (:func:`train_resnet_run`, script 01's; given a model function it also trains script 03's growth stages),
and the plan's cost (:func:`sweep_run_cost`, :func:`warn_cpu_time`). The records API that reads finished runs
back (:func:`~common.experiments.shared.resnet_sweep_records.finished_sweep_runs`, ``require_sweep_runs``,
``load_trained_resnet``, ``load_sweep_run``) is :mod:`common.experiments.shared.resnet_sweep_records`. Script 01's
own job module, ``common/experiments/train_resnet_sweep.py``, keeps only its summary table.

Each run trains ResNet-(8+N) (``common/models/resnet.py``) on one dataset with one seed and
leaves ``config.json``, ``metrics.jsonl``, ``model.pt`` (final weights) and ``result.json``
in its run directory.

Presets (``paper``, ``smoke``, ``mini``) are data: :mod:`common.presets.train_resnet_sweep` (``SweepPreset``, ``MINI``,
``DEFAULT_DATASET``, ...).

On accelerators (``common.training.loop``): bf16 autocast where the device has native bf16, else
float32; ``--compile auto`` compiles on CUDA, and every run starts from a fresh compiler state so
that all depths of an inline sweep are compiled alike; ``train_loss`` / ``test_loss`` of the
result are evaluated in float32 on every device, so they compare across depths.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch

from common.data.loader import TensorLoader
from common.data.vision import DATASETS, VisionData, load_vision, warn_unused_data_root, with_train_subset
from common.errors import ParamError
from common.experiments.shared.resnet_sweep_config import SweepRun, data_source
from common.models.resnet import BLOCK, ResNet, ResNetConfig, count_parameters, depth_label
from common.models.resnet_flops import resnet_training_flops_per_image
from common.presets.train_resnet_sweep import (
    EVAL_BATCH_SIZE,
    PRESETS,
    RECIPE_FIELDS,
    SweepPreset,
    sweep_preset,
    sweep_presets,
)
from common.runs import run_store
from common.runs.run_store import RunSpec
from common.runs.typed_config import to_mapping
from common.science.branch_scale import branch_ratios
from common.training.checkpoints import finish_run
from common.training.device import resolve_device, seed_everything
from common.training.flops import training_flops_per_image
from common.training.growing import RunGrowth
from common.training.long_run import duration_words
from common.training.loop import train
from common.training.recipes import TrainSettings

log = logging.getLogger(__name__)

EXPERIMENT = "resnet_sweep"
CONFIG_KEYS = (
    "dataset",
    "depth_n",
    "depth_label",
    "seed",
)  # what scripts 02, 03, 06, 07 read from a sweep run's config


# ----------------------------------------------------------------------------- presets (common/presets/train_resnet_sweep.py)
def fits(train_loss: float, preset: str, dataset: str) -> bool | None:
    """Whether a sweep run with this final clean ``train_loss`` (its ``result.json`` key) fitted its training images:
    at most the preset's :attr:`SweepPreset.fit_train_loss`; None where the preset sets no target (paper, smoke).
    The claims report marks the depths that did not (docs/decisions.md, section "Mini preset")."""
    target = sweep_preset(preset, dataset).fit_train_loss
    return None if target is None else bool(train_loss <= target)


def preset_seeds(preset: str, seed: int, *, growth: bool = False) -> list[int]:
    """The seeds a script runs without ``--seeds``: ``--seed`` alone, or under mini :data:`MINI_SEEDS` from it
    (``growth``: script 09's, and 03's where its growth preset sets none: :data:`MINI_GROWTH_SEEDS`)."""
    table = sweep_presets(preset)
    return [seed + i for i in range(table.growth_seeds if growth else table.seeds)]


# ----------------------------------------------------------------------------- configs


def sweep_configs(
    *,
    preset: str = "smoke",
    overrides: dict | None = None,
    dataset: str | None = None,
    seeds: Sequence[int] = (0,),
    data_root: str | Path | None = None,
    device: str = "auto",
    compile: str = "auto",
    synthetic: dict | None = None,
) -> list[dict]:
    """One config per (depth N, seed): identity keys plus a ``runtime`` sub-dict.

    ``overrides``: fields of the preset's :class:`SweepPreset` (``depths``, ``batch_size``, ``image_size``,
    ``train_subset``, ``eval_every``, ``checkpoint_every``) and of its recipe (:data:`~common.presets.train_resnet_sweep.RECIPE_FIELDS`:
    ``epochs``, ``lr``), None
    meaning "the preset's" (:func:`sweep_preset`). ``train_subset``: K, train on K / C images per class (C classes),
    drawn with the preset's data seed; stored as ``data.train_subset = {k, seed}`` only when there is one, so the
    identity of a run on every image is unchanged. ``compile``: "auto" (on for CUDA only), "on" or "off".
    ``synthetic``: ``num_train`` / ``num_test`` / ``num_classes`` / ``image_size`` of the synthetic source.
    """
    table = sweep_presets(preset)
    dataset = dataset or table.default_dataset
    if dataset not in DATASETS:
        raise ParamError("dataset", dataset, f"unknown dataset; use one of {', '.join(DATASETS)}")
    base = table.for_dataset(dataset)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    recipe = replace(base.recipe, **{k: given.pop(k) for k in RECIPE_FIELDS if k in given})
    settings = replace(base, recipe=recipe, **{k: tuple(v) if k == "depths" else v for k, v in given.items()})
    train_keys = {**recipe.to_config(), "batch_size": settings.batch_size, "crop_pad": settings.crop_pad}
    train_keys["flip"] = settings.flip
    data, data_root = sweep_data(settings, dataset, data_root, synthetic)
    runtime = {
        "device": device,
        "data_root": str(Path(data_root).expanduser().resolve()) if data_root else None,
        "compile": compile,
        "eval_batch_size": settings.eval_batch_size,
        "test_every_epoch": settings.test_every_epoch,
        "eval_every": settings.eval_every,
        "checkpoint_every": settings.checkpoint_every,
    }
    widths = list(ResNetConfig.for_dataset(dataset, 0, 1).widths)
    return [
        {
            "experiment": EXPERIMENT,
            "name": f"{dataset}-resnet{depth_label(n)}-n{n}-seed{seed}",
            "preset": preset,
            "dataset": dataset,
            "depth_n": n,
            "depth_label": depth_label(n),
            "seed": seed,
            "data": data,
            "model": {"widths": widths, "block": BLOCK},
            "train": dict(train_keys),
            "runtime": dict(runtime),
        }
        for seed, n in itertools.product(seeds, settings.depths)
    ]


def sweep_data(
    settings: SweepPreset, dataset: str, data_root: str | Path | None, synthetic: dict | None
) -> tuple[dict, str | Path | None]:
    """The ``data`` entry of a sweep config on ``dataset``, and where the data is read (CIFAR: ``data/``)."""
    warn_unused_data_root(dataset, data_root)
    if dataset == "npz" and not data_root:
        raise ParamError(
            "dataset", dataset, "needs data_root, the path of a .npz file of x_train, y_train, x_test, y_test"
        )
    if dataset in ("cifar10", "cifar100") and not data_root:
        data_root = "data"  # torchvision downloads into data/cifar-10-batches-py (gitignored)
    data: dict = {}
    if dataset == "imagenet100":
        data["image_size"] = settings.image_size
    elif dataset == "npz":
        data["file"] = Path(data_root).name  # the file's name is part of the run identity
    elif dataset == "synthetic":
        data = {
            "num_train": 512,
            "num_test": 256,
            "num_classes": 10,
            "image_size": 32,
            "data_seed": 0,
            **(synthetic or {}),
        }
    if settings.train_subset:
        if dataset == "synthetic":
            raise ParamError(
                "train_subset",
                settings.train_subset,
                "the synthetic source sets its own size; use it with cifar10, npz or another real dataset",
            )
        data["train_subset"] = {"k": settings.train_subset, "seed": settings.subset_seed}
    return data, data_root


def load_sweep_data(run: SweepRun | Mapping) -> VisionData:
    """The :class:`~common.data.vision.VisionData` a sweep run trains on (its training subset when it names one).

    Scripts 02, 03, 06 and 07 load a sweep run's data through here, so they see exactly its images. ``run``: a typed
    sweep run (03's and 09's subclasses too), or a config dict with the sweep's data keys (a record read back, a
    planned config: :func:`data_source`).
    """
    data = load_source(run)
    subset = data_source(run)[1].train_subset
    return with_train_subset(data, subset.k, subset.seed) if subset else data


def load_source(run: SweepRun | Mapping) -> VisionData:
    """The whole dataset a sweep run (or a config dict: :func:`data_source`) names."""
    dataset, data, root = data_source(run)
    if dataset == "synthetic":
        return load_vision(
            "synthetic",
            None,
            seed=data.data_seed,
            image_size=data.image_size,
            num_train=data.num_train,
            num_test=data.num_test,
            num_classes=data.num_classes,
        )
    return _read_source(dataset, root, data.image_size, _file_stamp(root))


@functools.lru_cache(maxsize=2)
def _read_source(dataset: str, root: str | None, image_size: int | None, stamp: tuple | None) -> VisionData:
    """One read per process of a dataset that several runs load in turn (a growth chain's stages, 02's and
    06's models under ``--launcher inline``); ``stamp`` (size, mtime of a data file) keeps an edited file from
    being served stale. Callers never modify the returned tensors in place (loaders and subsets copy)."""
    return load_vision(dataset, root, image_size=image_size)


def _file_stamp(root: str | None) -> tuple | None:
    path = Path(root) if root else None
    if path is None or not path.is_file():
        return None
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def build_resnet(config: Mapping, num_classes: int) -> ResNet:
    """The untrained ResNet-(8+N) of a sweep config or of any mapping with its ``depth_n``, ``model.widths`` and
    ``dataset`` (the report's architectures; initialised from the current torch RNG). A job builds its model from its
    typed config instead (:meth:`SweepRun.resnet`). Widths: the mapping's ``model.widths``, else the dataset's."""
    widths = config.get("model", {}).get("widths", ResNetConfig.for_dataset(config["dataset"], 0, 1).widths)
    return ResNet(ResNetConfig(extra_blocks=config["depth_n"], widths=tuple(widths), num_classes=num_classes))


ModelFn = Callable[[SweepRun, VisionData], tuple[ResNet, dict]]  # given 03's and 09's subclasses of SweepRun too
GrowthFn = Callable[[SweepRun, VisionData, torch.device], RunGrowth]


CHECK_BATCH = 8  # training images in a growth run's float64 function-preservation check


def growth_hooks(data: VisionData, device: torch.device) -> dict:
    """What every ResNet growth run (03, 09) gives :class:`~common.training.growing.RunGrowth`: ``check_inputs`` (the
    first :data:`CHECK_BATCH` training images normalised), ``flops_per_example`` (:mod:`common.training.flops`) and
    ``branch_ratios`` on the clean training images (:func:`common.science.branch_scale.branch_ratios`)."""
    n = CHECK_BATCH
    x, _ = next(iter(TensorLoader(data.x_train[:n], data.y_train[:n], n, train=False, mean=data.mean, std=data.std)))
    shape, classes = data.image_shape, data.num_classes
    clean = TensorLoader(
        data.x_train, data.y_train, EVAL_BATCH_SIZE, train=False, mean=data.mean, std=data.std, device=device
    )
    return {
        "check_inputs": x.to(device),
        "flops_per_example": lambda model: training_flops_per_image(model, shape, classes),
        "branch_ratios": lambda model: [r.to_record() for r in branch_ratios(model, (x for x, _ in clean))],
    }


def fresh_resnet(run: SweepRun, data: VisionData) -> tuple[ResNet, dict]:
    """A fresh ResNet-(8+N) for ``run`` (no extra result keys): script 01's model."""
    return run.resnet(data.num_classes), {}


def train_resnet_run(
    spec: RunSpec,
    make_model: ModelFn = fresh_resnet,
    growth_of: GrowthFn | None = None,
    finish: Callable[[dict, ResNet], dict] | None = None,
    data: VisionData | None = None,
    run: SweepRun | None = None,
) -> dict:
    """Job function of script 01: train one (dataset, N, seed) run; resumes; returns its result.

    Reads ``spec.config`` once into its :class:`SweepRun` (``run``: the caller's typed config of it instead, 03's
    and 09's subclasses). Trains the ResNet ``make_model(run, data)`` returns (default: a fresh ResNet-(8+N); script
    03's growth runs pass a ResNet-8) with the run's recipe (``run.train.recipe``), data and seed.
    ``make_model`` runs after the data is loaded and the torch RNG is seeded with the run's seed, and returns the
    model and extra keys for ``result.json``. ``growth_of(run, data, device)``: the model grows inside the run
    (:mod:`common.training.growing`); the result then holds ``growth`` (the insertions, FLOPs per image at the final
    depth) and ``train_flops``. ``finish(result, model)``: the result to write instead (keys the caller adds once
    training is over). ``runtime.clean_curve``: the clean training loss (``clean_loss``) at every evaluation round.
    ``data``: train on these images instead of the config's (09's calibration).
    """
    run = run if run is not None else SweepRun.from_config(spec.config)
    path = run_store.prepare_run(spec.out, spec.config)
    runtime = run.runtime
    device = resolve_device(runtime.device or "auto")
    seed_everything(run.seed)
    data = data if data is not None else load_sweep_data(run)
    model, extra = make_model(run, data)
    train_loader, test_loader, clean_train_loader = _loaders(run, data, device)
    settings = TrainSettings(
        recipe=run.train.recipe,
        compile={"on": True, "off": False}.get(runtime.compile, device.type == "cuda"),
        channels_last=True,
        eval_every=runtime.eval_every,
        checkpoint_every=runtime.checkpoint_every,
    )
    every_epoch = runtime.test_every_epoch  # False (mini): the test set once, at the end
    curve = {"clean": clean_train_loader} if runtime.clean_curve else {}
    summary = train(
        model,
        train_loader,
        {**({"test": test_loader} if every_epoch else {}), **curve},
        final_eval_loaders={"train": clean_train_loader, **({} if every_epoch else {"test": test_loader})},
        run_dir=path,
        settings=settings,
        device=device,
        desc=run.name,
        growth=growth_of(run, data, device) if growth_of is not None else None,
    )
    result = {**_run_result(run, data, model, device, settings, summary), **extra}
    if finish is not None:
        result = finish(result, model)
    finish_run(path, result)
    return result


def _loaders(run: SweepRun, data: VisionData, device: torch.device) -> tuple[TensorLoader, TensorLoader, TensorLoader]:
    """A sweep run's training loader (its crops and flips), its test loader and its clean training-set loader (no
    augmentation), channels-last on ``device``; the training images are copied to the device once, for both."""
    hp = run.train
    loader_keys = {"mean": data.mean, "std": data.std, "device": device, "channels_last": True}
    eval_bs = run.runtime.eval_batch_size
    x_train, y_train = data.x_train.to(device), data.y_train.to(device)  # once: both train loaders share it
    train_loader = TensorLoader(
        x_train,
        y_train,
        hp.batch_size,
        train=True,
        seed=run.seed,
        crop_pad=hp.crop_pad,
        flip=hp.flip,
        **loader_keys,
    )
    test_loader = TensorLoader(data.x_test, data.y_test, eval_bs, train=False, **loader_keys)
    return train_loader, test_loader, TensorLoader(x_train, y_train, eval_bs, train=False, **loader_keys)


def _run_result(
    run: SweepRun, data: VisionData, model: ResNet, device: torch.device, settings: TrainSettings, summary: dict
) -> dict:
    """A sweep run's ``result.json`` (before the model function's extra keys): its identity, model and data sizes,
    settings, and what :func:`common.training.loop.train` summarised."""
    return {
        "dataset": run.dataset,
        "depth_n": run.depth_n,
        "depth_label": run.depth_label,
        "seed": run.seed,
        "params": count_parameters(model),
        "num_classes": data.num_classes,
        "num_blocks": len(model.blocks),
        "train_size": len(data.y_train),
        "test_size": len(data.y_test),
        "device": device.type,
        "settings": asdict(settings),
        **{k: summary[k] for k in ("train_loss", "train_acc", "test_loss", "test_acc", "epochs", "steps", "wall_s")},
        "train_loss_running": summary["train_loss_running"],
        "train_acc_running": summary["train_acc_running"],
        "images_per_s": summary["images_per_s"],
        "autocast_dtype": summary["autocast_dtype"],  # training precision (common.training.device.autocast_dtype)
        "final_eval_dtype": summary["final_eval_dtype"],  # train_/test_loss above: float32 on every device
        **{
            k: summary[k] for k in ("compile", "cudnn_benchmark", "cpu_threads") if k in summary
        },  # common.training.loop
        **{k: summary[k] for k in ("growth", "train_flops") if k in summary},  # a growing run (common.training.growing)
    }


def check_sweep_data(configs: Sequence[Mapping]) -> None:
    """Load each distinct data source of ``configs`` (01's, 03's: :func:`data_source`) once: a missing file, folder
    or download is one line now, before any run directory exists (validate before creating: docs/design.md, section
    "Runs, records and launching")."""
    seen = set()
    for config in configs:
        key = _data_key(config)
        if key not in seen:
            seen.add(key)
            load_sweep_data(config)


def _data_key(run: SweepRun | Mapping) -> str:
    """What identifies a sweep run's data source (runs with one key load the same images)."""
    dataset, data, root = data_source(run)
    return json.dumps([dataset, to_mapping(data), root], sort_keys=True, default=str)


def check_sweep_plan(configs: Sequence[dict]) -> None:
    """Script 01's check before any run directory exists: every data source loads (:func:`check_sweep_data`), and a
    ``--preset paper`` plan that would train on a CPU is warned about with its estimated time (:func:`warn_cpu_time`)."""
    check_sweep_data(configs)
    warn_cpu_time(configs)


def warn_cpu_time(configs: Sequence[Mapping]) -> None:
    """One warning line when runs of ``--preset paper`` would train on this machine's CPU: how long, estimated.

    Not a refusal (a CPU may be what one has), but the paper preset is sized for GPUs: 101 depths of 200
    epochs each on CIFAR. The estimate (:func:`estimate_training_s`) is marked as one in the line.
    """
    runs = [SweepRun.from_config(c) for c in configs]
    paper = [r for r in runs if r.preset in PRESETS and PRESETS[r.preset].warn_on_cpu]
    if not paper or resolve_device(paper[0].runtime.device or "auto").type != "cpu":
        return
    seconds, step_s, batch = estimate_training_s(paper)
    log.warning(
        "--preset %s on a CPU: %d runs to train, about %s on this machine (an estimate: %.2f s per training step "
        "of ResNet-8 on %d images, measured here, scaled by each depth's FLOP count and step count; evaluation not "
        "counted); that preset is sized for GPUs (--device cuda, --launcher slurm), --preset mini for a CPU",
        paper[0].preset,
        len(paper),
        duration_words(seconds),
        step_s,
        batch,
    )


def estimate_training_s(configs: Sequence[SweepRun | Mapping], *, steps: int = 2) -> tuple[float, float, int]:
    """Estimated CPU seconds to train ``configs`` (sweep configs), the measured seconds per step and its batch size.

    One measurement: ``steps`` SGD steps of ResNet-8 (after two warm-up steps) on random images of the first
    config's size and batch. Each run then costs ``epochs * (train images // batch)`` steps, each step that time
    scaled by the run's training FLOPs per image over ResNet-8's (:func:`common.models.resnet_flops.resnet_training_flops_per_image`:
    counted on the meta device, no compute). An estimate: it ignores evaluation and data loading, and assumes time follows FLOPs.
    """
    runs = [r if isinstance(r, SweepRun) else SweepRun.from_config(r) for r in configs]
    first = runs[0]
    data = load_sweep_data(first)
    shape = tuple(data.x_train.shape[1:])
    batch = first.train.batch_size
    step_s = _measured_step_s(first, shape, batch, data.num_classes, steps)
    base = _training_flops(first.model.widths, shape, data.num_classes, 0)
    total = 0.0
    images_of = {_data_key(first): len(data.y_train)}
    for run in runs:
        key = _data_key(run)
        if key not in images_of:
            images_of[key] = len(load_sweep_data(run).y_train)
        images = images_of[key]
        run_steps = run.train.epochs * max(1, images // run.train.batch_size)
        ratio = _training_flops(run.model.widths, shape, data.num_classes, run.depth_n) / base
        total += run_steps * step_s * ratio * run.train.batch_size / batch
    return total, step_s, batch


def _measured_step_s(run: SweepRun, shape: tuple, batch: int, num_classes: int, steps: int) -> float:
    model = run.resnet(num_classes, depth_n=0).to(memory_format=torch.channels_last)
    optimizer = run.train.recipe.make_optimizer(model)
    x = torch.randn(batch, *shape).to(memory_format=torch.channels_last)
    y = torch.randint(0, num_classes, (batch,))
    times = []
    for _ in range(2 + steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return sorted(times[2:])[len(times[2:]) // 2]


def _training_flops(widths: Sequence[int], shape: tuple, num_classes: int, n: int) -> int:
    """ResNet-(8+N)'s training FLOPs per image at these stage widths (:mod:`common.models.resnet_flops`: :mod:`common.training.flops`'s count)."""
    return resnet_training_flops_per_image(n, tuple(widths), shape, num_classes)


def sweep_run_cost(config: Mapping) -> float:
    """A sweep run's training FLOPs up to one factor that every run of a plan shares (``--runs-per-device`` starts
    the largest first): epochs x training images (its subset's K; 1 without one) x ResNet-(8+N)'s training FLOPs per
    32 x 32 image (:func:`common.models.resnet_flops.resnet_training_flops_per_image`, counted on the meta device: no data
    read, no compute)."""
    run = SweepRun.from_config(config)
    images = run.data.train_subset.k if run.data.train_subset else 1
    shape = (3, 32, 32)
    return float(run.train.epochs * images * _training_flops(run.model.widths, shape, 10, run.depth_n))


__all__ = [
    "CHECK_BATCH",
    "fresh_resnet",
    "growth_hooks",
    "sweep_data",
    "CONFIG_KEYS",
    "EXPERIMENT",
    "build_resnet",
    "check_sweep_data",
    "check_sweep_plan",
    "fits",
    "load_sweep_data",
    "preset_seeds",
    "sweep_configs",
    "sweep_run_cost",
    "train_resnet_run",
]
