"""The ResNet depth sweep of paper B.1-B.3: its settings, its runs and the records they leave.

Shared by scripts 01, 02, 03, 06 and 07, below their job modules (``common/experiments/``):
the sweep's settings per preset and dataset (:func:`sweep_preset`), its run configs
(:func:`sweep_configs`), the job function that trains one run (:func:`train_resnet_run`, script
01's; given a model function it also trains script 03's growth stages), and the records API that
reads finished runs back (:func:`finished_sweep_runs`, :func:`require_sweep_runs`,
:func:`load_trained_resnet`, :func:`load_sweep_run`, :func:`load_sweep_data`). Script 01's own job
module, ``common/experiments/train_resnet_sweep.py``, keeps only its summary table.

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
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from common.data.loader import TensorLoader
from common.data.vision import DATASETS, VisionData, load_vision, warn_unused_data_root, with_train_subset
from common.errors import ParamError, UserError
from common.models.resnet import ResNet, ResNetConfig, count_parameters, depth_label
from common.presets.train_resnet_sweep import PRESETS, RECIPE_FIELDS, SweepPreset, sweep_preset, sweep_presets
from common.runs import run_store
from common.runs.run_store import RunSpec
from common.training.device import resolve_device, seed_everything
from common.training.flops import training_flops_per_image
from common.training.growing import RunGrowth
from common.training.loop import WEIGHTS, finish_run, load_weights, train
from common.training.recipes import SGDRecipe, TrainSettings

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


def balanced_runs(directories: Sequence[Path]) -> list[Path]:
    """The sweep runs of the seeds that have a run at every depth among ``directories``: what 02, 06 and 07 read
    without ``--seeds``, so that a seed trained at a few depths only (09's third seed under mini, its ResNet-8 only) leaves their depth
    designs balanced."""
    keys = {d: run_store.read_config(d, CONFIG_KEYS) for d in directories}
    depths = {k["depth_n"] for k in keys.values()}
    seeds = {k["seed"] for k in keys.values()}
    full = {s for s in seeds if {k["depth_n"] for k in keys.values() if k["seed"] == s} == depths}
    return [d for d in directories if keys[d]["seed"] in full]


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
            "model": {"widths": widths},
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


def load_sweep_data(config: dict) -> VisionData:
    """The :class:`~common.data.vision.VisionData` a sweep config trains on (its training subset when it names one).

    Scripts 02, 03, 06 and 07 load a sweep run's data through here, so they see exactly its images.
    """
    data = load_source(config)
    subset = config.get("data", {}).get("train_subset")
    return with_train_subset(data, subset["k"], subset["seed"]) if subset else data


def load_source(config: dict) -> VisionData:
    """The whole dataset a sweep config names."""
    data = dict(config.get("data", {}))
    root = config.get("runtime", {}).get("data_root")
    if config["dataset"] == "synthetic":
        return load_vision(
            "synthetic",
            None,
            seed=data.get("data_seed", 0),
            image_size=data.get("image_size"),
            num_train=data.get("num_train"),
            num_test=data.get("num_test"),
            num_classes=data.get("num_classes"),
        )
    return _read_source(config["dataset"], root, data.get("image_size"), _file_stamp(root))


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


def build_resnet(config: dict, num_classes: int) -> ResNet:
    """The untrained ResNet-(8+N) of a sweep config (initialised from the current torch RNG)."""
    widths = tuple(config.get("model", {}).get("widths", ResNetConfig.for_dataset(config["dataset"], 0, 1).widths))
    return ResNet(ResNetConfig(extra_blocks=config["depth_n"], widths=widths, num_classes=num_classes))


ModelFn = Callable[[dict, VisionData], tuple[ResNet, dict]]
GrowthFn = Callable[[dict, VisionData, torch.device], RunGrowth]


CHECK_BATCH = 8  # training images in a growth run's float64 function-preservation check


def growth_hooks(data: VisionData, device: torch.device) -> dict:
    """What every ResNet growth run (03, 09) gives :class:`~common.training.growing.RunGrowth`: ``check_inputs``, the
    first :data:`CHECK_BATCH` training images normalised, and ``flops_per_example``, training FLOPs per image at a
    model's current depth (:func:`common.training.flops.training_flops_per_image`)."""
    n = CHECK_BATCH
    x, _ = next(iter(TensorLoader(data.x_train[:n], data.y_train[:n], n, train=False, mean=data.mean, std=data.std)))
    shape, classes = data.image_shape, data.num_classes
    return {
        "check_inputs": x.to(device),
        "flops_per_example": lambda model: training_flops_per_image(model, shape, classes),
    }


def fresh_resnet(config: dict, data: VisionData) -> tuple[ResNet, dict]:
    """A fresh ResNet-(8+N) for ``config`` (no extra result keys): script 01's model."""
    return build_resnet(config, data.num_classes), {}


def train_resnet_run(
    spec: RunSpec,
    make_model: ModelFn = fresh_resnet,
    growth_of: GrowthFn | None = None,
    finish: Callable[[dict, ResNet], dict] | None = None,
    data: VisionData | None = None,
) -> dict:
    """Job function of script 01: train one (dataset, N, seed) run; resumes; returns its result.

    Trains the ResNet ``make_model(config, data)`` returns (default: a fresh ResNet-(8+N); script 03's growth
    runs pass a ResNet-8) with the run's recipe (rebuilt from ``config["train"]``), data and seed.
    ``make_model`` runs after the data is loaded and the torch RNG is seeded with the run's seed, and returns the
    model and extra keys for ``result.json``. ``growth_of(config, data, device)``: the model grows inside the run
    (:mod:`common.training.growing`); the result then holds ``growth`` (the insertions, FLOPs per image at the final
    depth) and ``train_flops``. ``finish(result, model)``: the result to write instead (keys the caller adds once
    training is over). ``runtime.clean_curve``: the clean training loss (``clean_loss``) at every evaluation round.
    ``data``: train on these images instead of the config's (09's calibration).
    """
    config = spec.config
    path = run_store.prepare_run(spec.out, config)
    runtime = config.get("runtime", {})
    device = resolve_device(runtime.get("device") or "auto")
    hp = config["train"]
    seed_everything(config["seed"])
    data = data if data is not None else load_sweep_data(config)
    model, extra = make_model(config, data)
    use_compile = {"on": True, "off": False}.get(runtime.get("compile", "auto"), device.type == "cuda")
    channels_last = True
    loader_keys = {"mean": data.mean, "std": data.std, "device": device, "channels_last": channels_last}
    eval_bs = runtime.get("eval_batch_size", 500)
    x_train, y_train = data.x_train.to(device), data.y_train.to(device)  # once: both train loaders share it
    train_loader = TensorLoader(
        x_train,
        y_train,
        hp["batch_size"],
        train=True,
        seed=config["seed"],
        crop_pad=hp["crop_pad"],
        flip=hp["flip"],
        **loader_keys,
    )
    test_loader = TensorLoader(data.x_test, data.y_test, eval_bs, train=False, **loader_keys)
    clean_train_loader = TensorLoader(x_train, y_train, eval_bs, train=False, **loader_keys)
    settings = TrainSettings(
        recipe=SGDRecipe.from_config(hp),
        compile=use_compile,
        channels_last=channels_last,
        eval_every=runtime.get("eval_every", 1),
        checkpoint_every=runtime.get("checkpoint_every", 1),
    )
    every_epoch = runtime.get("test_every_epoch", True)  # False (mini): the test set once, at the end
    curve = {"clean": clean_train_loader} if runtime.get("clean_curve") else {}
    summary = train(
        model,
        train_loader,
        {**({"test": test_loader} if every_epoch else {}), **curve},
        final_eval_loaders={"train": clean_train_loader, **({} if every_epoch else {"test": test_loader})},
        run_dir=path,
        settings=settings,
        device=device,
        desc=config["name"],
        growth=growth_of(config, data, device) if growth_of is not None else None,
    )
    result = {
        "dataset": config["dataset"],
        "depth_n": config["depth_n"],
        "depth_label": config["depth_label"],
        "seed": config["seed"],
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
        **extra,
    }
    if finish is not None:
        result = finish(result, model)
    finish_run(path, result)
    return result


RESULT_KEYS = ("train_loss", "test_loss")  # what every reader of a finished sweep run needs in its result.json


def read_sweep_run(run_dir: str | Path) -> run_store.Run:
    """A finished sweep run's records, read the one way every script reads them (:func:`common.runs.run_store.read_run`:
    :data:`CONFIG_KEYS` in the config, whose identity must match the directory; :data:`RESULT_KEYS` as finite
    numbers in the result); anything else is a :class:`UserError` naming the file and the fix."""
    return run_store.read_run(run_dir, config_keys=CONFIG_KEYS, result_keys=RESULT_KEYS, numbers=RESULT_KEYS)


def load_trained_resnet(run_dir: str | Path, map_location="cpu") -> ResNet:
    """The trained model of a finished sweep run, in eval mode (from config.json + model.pt)."""
    run_dir = Path(run_dir)
    if not run_store.is_done(run_dir):
        raise UserError(f"{run_dir} is not a finished sweep run (no result.json); run 01_train_resnet_sweep.py first")
    config = read_sweep_run(run_dir).config
    state = load_weights(run_dir, map_location)
    if "head.fc.weight" not in state:
        raise UserError(
            f"{run_dir / WEIGHTS} holds no ResNet head; delete the run directory {run_dir} and rerun script 01"
        )
    model = build_resnet(config, num_classes=state["head.fc.weight"].shape[0])
    try:
        model.load_state_dict(state)
    except RuntimeError:  # missing or misshapen tensors: not the weights of this config
        raise UserError(
            f"{run_dir / WEIGHTS} does not fit the model of {run_dir / run_store.CONFIG}; delete the run directory {run_dir} and rerun script 01"
        ) from None
    return model.to(map_location).eval()


def load_sweep_run(sweep_dir: str | Path, *, data_root: str | None = None, device="cpu") -> tuple[ResNet, VisionData]:
    """The trained model of a finished sweep run (eval mode, on ``device``) and the data it trained on.

    ``data_root`` replaces the data location stored in the run (the same data, found elsewhere).
    """
    return load_trained_resnet(sweep_dir, map_location=device), load_sweep_data(sweep_data_config(sweep_dir, data_root))


def sweep_data_config(sweep_dir: str | Path, data_root: str | None = None) -> dict:
    """A finished sweep run's config, its data found under ``data_root`` when given (what :func:`load_sweep_data` reads)."""
    config = run_store.read_config(sweep_dir, CONFIG_KEYS)
    if data_root:
        config = {**config, "runtime": {**config.get("runtime", {}), "data_root": str(data_root)}}
    return config


def check_sweep_data(configs: Sequence[dict]) -> None:
    """Load each distinct data source of ``configs`` once: a missing file, folder or download is one line now,
    before any run directory exists (validate before creating: docs/design.md, section "Runs, records and
    launching")."""
    seen = set()
    for config in configs:
        key = _data_key(config)
        if key not in seen:
            seen.add(key)
            load_sweep_data(config)


def _data_key(config: dict) -> str:
    """What identifies a sweep config's data source (configs with one key load the same images)."""
    return json.dumps(
        [config["dataset"], config.get("data"), config.get("runtime", {}).get("data_root")], sort_keys=True, default=str
    )


def check_sweep_plan(configs: Sequence[dict]) -> None:
    """Script 01's check before any run directory exists: every data source loads (:func:`check_sweep_data`), and a
    ``--preset paper`` plan that would train on a CPU is warned about with its estimated time (:func:`warn_cpu_time`)."""
    check_sweep_data(configs)
    warn_cpu_time(configs)


def warn_cpu_time(configs: Sequence[dict]) -> None:
    """One warning line when runs of ``--preset paper`` would train on this machine's CPU: how long, estimated.

    Not a refusal (a CPU may be what one has), but the paper preset is sized for GPUs: 101 depths of 200
    epochs each on CIFAR. The estimate (:func:`estimate_training_s`) is marked as one in the line.
    """
    paper = [c for c in configs if c.get("preset") in PRESETS and PRESETS[c["preset"]].warn_on_cpu]
    if not paper or resolve_device(paper[0].get("runtime", {}).get("device") or "auto").type != "cpu":
        return
    seconds, step_s, batch = estimate_training_s(paper)
    log.warning(
        "--preset %s on a CPU: %d runs to train, about %s on this machine (an estimate: %.2f s per training step "
        "of ResNet-8 on %d images, measured here, scaled by each depth's FLOP count and step count; evaluation not "
        "counted); that preset is sized for GPUs (--device cuda, --launcher slurm), --preset mini for a CPU",
        paper[0]["preset"],
        len(paper),
        _duration(seconds),
        step_s,
        batch,
    )


def estimate_training_s(configs: Sequence[dict], *, steps: int = 2) -> tuple[float, float, int]:
    """Estimated CPU seconds to train ``configs`` (sweep configs), the measured seconds per step and its batch size.

    One measurement: ``steps`` SGD steps of ResNet-8 (after two warm-up steps) on random images of the first
    config's size and batch. Each run then costs ``epochs * (train images // batch)`` steps, each step that time
    scaled by the run's forward FLOP count over ResNet-8's (``torch.utils.flop_counter`` on the meta device: no
    compute). An estimate: it ignores evaluation and data loading, and assumes time follows FLOPs.
    """
    first = configs[0]
    data = load_sweep_data(first)
    shape = tuple(data.x_train.shape[1:])
    batch = int(first["train"]["batch_size"])
    step_s = _measured_step_s(first, shape, batch, data.num_classes, steps)
    base = _forward_flops(first, shape, data.num_classes, 0)
    total = 0.0
    images_of = {_data_key(first): len(data.y_train)}
    for config in configs:
        key = _data_key(config)
        if key not in images_of:
            images_of[key] = len(load_sweep_data(config).y_train)
        images = images_of[key]
        run_steps = config["train"]["epochs"] * max(1, images // config["train"]["batch_size"])
        ratio = _forward_flops(config, shape, data.num_classes, config["depth_n"]) / base
        total += run_steps * step_s * ratio * config["train"]["batch_size"] / batch
    return total, step_s, batch


def _measured_step_s(config: dict, shape: tuple, batch: int, num_classes: int, steps: int) -> float:
    model = build_resnet({**config, "depth_n": 0}, num_classes).to(memory_format=torch.channels_last)
    optimizer = SGDRecipe.from_config(config["train"]).make_optimizer(model)
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


@functools.cache
def _block_flops(widths: tuple, shape: tuple, num_classes: int, n: int) -> int:
    with torch.device("meta"):
        model = ResNet(ResNetConfig(extra_blocks=n, widths=widths, num_classes=num_classes))
        x = torch.empty(1, *shape)
    with FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops()


def _forward_flops(config: dict, shape: tuple, num_classes: int, n: int) -> int:
    """ResNet-(8+N)'s forward FLOPs per image: blocks are added to the stages in turn, so N = 3q + r costs ResNet-8's
    plus q cycles of three blocks plus the first r blocks of one (four counts, for any N)."""
    widths = tuple(config.get("model", {}).get("widths", ResNetConfig.for_dataset(config["dataset"], 0, 1).widths))
    f = [_block_flops(widths, shape, num_classes, k) for k in range(4)]
    q, r = divmod(n, 3)
    return f[0] + q * (f[3] - f[0]) + (f[r] - f[0])


def sweep_run_cost(config: dict) -> float:
    """A sweep run's training FLOPs up to one factor that every run of a plan shares (``--runs-per-device`` starts
    the largest first): epochs x training images (its subset's K; 1 without one) x ResNet-(8+N)'s forward FLOPs per
    32 x 32 image (:func:`_forward_flops`, counted on the meta device: no data read, no compute)."""
    if "depth_n" not in config:
        return 0.0
    images = (config.get("data", {}).get("train_subset") or {}).get("k", 1)
    shape = (3, 32, 32)
    return float(config["train"]["epochs"] * images * _forward_flops(config, shape, 10, config["depth_n"]))


def _duration(seconds: float) -> str:
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:.0f} s"


def check_sweep_inputs(configs: Sequence[dict], *, data: bool = True) -> None:
    """For configs of runs that read a finished sweep run (``runtime.sweep_dir``; scripts 02, 06, 07): every
    trained model loads and, with ``data``, every data source it was trained on loads (once each)."""
    for config in configs:
        load_trained_resnet(config["runtime"]["sweep_dir"])
    if data:
        check_sweep_data([sweep_data_config(c["runtime"]["sweep_dir"], c["runtime"].get("data_root")) for c in configs])


def train_command(
    preset: str,
    dataset: str,
    out: str | Path,
    *,
    depths: Sequence[int] | None = None,
    seeds: Sequence[int] | None = None,
) -> str:
    """The script-01 command that trains the sweep runs a message asks for (following it must help)."""
    parts = [
        "python 01_train_resnet_sweep.py",
        *([f"--preset {preset}"] if sweep_presets(preset).in_commands else []),
        f"--dataset {dataset}",
    ]
    parts += [f"--depths {','.join(map(str, depths))}"] if depths else []
    parts += [f"--seeds {','.join(map(str, seeds))}"] if seeds else []
    return " ".join([*parts, f"--out {out}"])


def require_sweep_runs(out: str | Path, dataset: str, *, preset: str, seeds: Sequence[int] | None = None) -> list[Path]:
    """The finished sweep runs on ``dataset`` under ``out`` (of ``seeds`` when given, else of every seed that has a
    run at every depth there: :func:`balanced_runs`); none, or a requested seed without any, is a
    :class:`UserError` naming the script-01 command that trains them."""
    found = finished_sweep_runs(out, dataset)
    seed_of = {d: run_store.read_config(d, CONFIG_KEYS)["seed"] for d in found}
    missing = [s for s in seeds if s not in seed_of.values()] if seeds is not None else []
    found = [d for d in found if seed_of[d] in seeds] if seeds is not None else balanced_runs(found)
    if not found or missing:
        which = f" and seeds {','.join(map(str, missing or seeds))}" if seeds is not None else ""
        raise UserError(
            f"no finished sweep runs for --dataset {dataset}{which} under {Path(out) / EXPERIMENT}; train them first: "
            f"{train_command(preset, dataset, out, seeds=missing or seeds)}"
        )
    return found


def finished_sweep_runs(
    out: str | Path, dataset: str, *, preset: str | None = None, seed: int | None = None
) -> list[Path]:
    """Directories of the finished sweep runs on ``dataset`` under ``out``, sorted by (N, seed)."""
    found = []
    for directory in run_store.run_dirs(Path(out) / EXPERIMENT):
        if not run_store.is_done(directory):
            continue
        config = read_sweep_run(directory).config  # a malformed finished run is one line, never left out in silence
        if config.get("dataset") != dataset:
            continue
        if (preset is not None and config.get("preset") != preset) or (seed is not None and config.get("seed") != seed):
            continue
        found.append((config["depth_n"], config["seed"], directory))
    return [d for _, _, d in sorted(found)]


__all__ = [
    "CHECK_BATCH",
    "fresh_resnet",
    "growth_hooks",
    "sweep_data",
    "CONFIG_KEYS",
    "EXPERIMENT",
    "balanced_runs",
    "build_resnet",
    "check_sweep_data",
    "check_sweep_inputs",
    "check_sweep_plan",
    "finished_sweep_runs",
    "fits",
    "load_sweep_data",
    "load_sweep_run",
    "load_trained_resnet",
    "require_sweep_runs",
    "preset_seeds",
    "read_sweep_run",
    "sweep_configs",
    "sweep_data_config",
    "sweep_run_cost",
    "train_command",
    "train_resnet_run",
]
