"""The records of finished ResNet depth-sweep runs, read back: what scripts 02, 03, 06, 07 and 09 read the sweep through.

Script 01 (:func:`common.experiments.shared.resnet_sweep.train_resnet_run`) leaves ``config.json``, ``metrics.jsonl``,
``model.pt`` and ``result.json`` in each run directory; here they are found (:func:`finished_sweep_runs`,
:func:`require_sweep_runs`, :func:`balanced_runs`), read the one checked way (:func:`read_sweep_run`), and turned back
into the trained model and its data (:func:`load_trained_resnet`, :func:`load_sweep_run`, :func:`sweep_data_config`);
:func:`check_sweep_inputs` loads them all before a dependent script creates a run directory, and
:func:`train_command` is the script-01 command that a message about missing runs names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from common.data.vision import VisionData
from common.errors import UserError
from common.experiments.shared.resnet_sweep import (
    CONFIG_KEYS,
    EXPERIMENT,
    build_resnet,
    check_sweep_data,
    load_sweep_data,
)
from common.models.resnet import ResNet
from common.presets.train_resnet_sweep import sweep_presets
from common.runs import run_store
from common.training.checkpoints import WEIGHTS, load_weights

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


def balanced_runs(directories: Sequence[Path]) -> list[Path]:
    """The sweep runs of the seeds that have a run at every depth among ``directories``: what 02, 06 and 07 read
    without ``--seeds``, so that a seed trained at a few depths only (09's third seed under mini, its ResNet-8 only) leaves their depth
    designs balanced."""
    keys = {d: run_store.read_config(d, CONFIG_KEYS) for d in directories}
    depths = {k["depth_n"] for k in keys.values()}
    seeds = {k["seed"] for k in keys.values()}
    full = {s for s in seeds if {k["depth_n"] for k in keys.values() if k["seed"] == s} == depths}
    return [d for d in directories if keys[d]["seed"] in full]


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
    "RESULT_KEYS",
    "balanced_runs",
    "check_sweep_inputs",
    "finished_sweep_runs",
    "load_sweep_run",
    "load_trained_resnet",
    "read_sweep_run",
    "require_sweep_runs",
    "sweep_data_config",
    "train_command",
]
