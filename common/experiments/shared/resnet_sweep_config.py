"""A ResNet sweep run's config, typed: what :func:`~common.experiments.shared.resnet_sweep.train_resnet_run` reads.

:class:`SweepRun` holds the keys :func:`~common.experiments.shared.resnet_sweep.sweep_configs` writes, one section
per nested dataclass (``data``: :class:`SweepData`, ``model``: :class:`SweepModel`, ``train``: :class:`SweepTrain`,
``runtime``: :class:`SweepRuntime`), built once from the dict by :meth:`SweepRun.from_config`
(:func:`common.runs.typed_config.from_mapping`: an unknown or missing key is refused by name). Scripts 03 and 09 train
their ResNets with the same job function; their configs add sections, so their typed configs are subclasses of
:class:`SweepRun` (``common/experiments/growth_vs_scratch_config.py``, ``grow_by_criterion_config.py``). Every
setting's default is its preset's (:mod:`common.presets.train_resnet_sweep`); docs/design.md, section "A job reads
its config once".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from common.errors import UserError
from common.models.resnet import BLOCK, ResNet, ResNetConfig
from common.runs.typed_config import TypedConfig, from_mapping, optional
from common.training.recipes import SGDRecipe


@dataclass(frozen=True)
class TrainSubset:
    """``data.train_subset``: train on ``k`` / C images per class, drawn with the data seed ``seed``."""

    k: int
    seed: int


@dataclass(frozen=True)
class SweepData:
    """``data``: what a sweep run reads beside its dataset's name (every key is one some datasets leave out)."""

    file: str | None = optional()  # npz: the file's name (part of the identity)
    image_size: int | None = optional()  # imagenet100, synthetic
    num_train: int | None = optional()  # synthetic: its sizes and data seed
    num_test: int | None = optional()
    num_classes: int | None = optional()
    data_seed: int | None = optional()
    train_subset: TrainSubset | None = optional()


@dataclass(frozen=True)
class SweepModel:
    """``model``: the stage widths of ResNet-(8+N) and its residual block (:data:`common.models.resnet.BLOCK`, the only
    one: a record without it, or with another, was made with an earlier block and is not this run)."""

    widths: tuple[int, ...]
    block: str

    def __post_init__(self) -> None:
        if self.block != BLOCK:
            raise UserError(
                f"model.block {self.block!r}: this code builds the {BLOCK!r} block only; the record was made by "
                "another version of the code (rerun it)"
            )


@dataclass(frozen=True)
class SweepTrain:
    """``train``: the run's :class:`~common.training.recipes.SGDRecipe` (its fields) and the training batch and
    augmentation."""

    epochs: int
    lr: float
    momentum: float
    weight_decay: float
    nesterov: bool
    warmup_epochs: float
    label_smoothing: float
    batch_size: int
    crop_pad: int
    flip: bool

    @property
    def recipe(self) -> SGDRecipe:
        """The optimiser and schedule these keys store (:meth:`SGDRecipe.from_config`)."""
        return SGDRecipe.from_config({f.name: getattr(self, f.name) for f in fields(SGDRecipe)})


@dataclass(frozen=True)
class SweepRuntime:
    """``runtime``: how the run executes (not part of its identity)."""

    device: str
    data_root: str | None
    compile: str
    eval_batch_size: int
    test_every_epoch: bool  # False: the test set once, at the end
    eval_every: int
    checkpoint_every: int
    clean_curve: bool = optional(False)  # written by script 09 only: the clean training loss at every evaluation round


@dataclass(frozen=True)
class SweepRun(TypedConfig):
    """One sweep run's config (:func:`~common.experiments.shared.resnet_sweep.sweep_configs`), typed."""

    experiment: str
    name: str
    preset: str
    dataset: str
    depth_n: int
    depth_label: int
    seed: int
    data: SweepData
    model: SweepModel
    train: SweepTrain
    runtime: SweepRuntime

    def resnet(self, num_classes: int, depth_n: int | None = None) -> ResNet:
        """The untrained ResNet-(8+N) of this run (``depth_n``: another N at its widths), from the current torch RNG."""
        n = self.depth_n if depth_n is None else depth_n
        return ResNet(ResNetConfig(extra_blocks=n, widths=self.model.widths, num_classes=num_classes))


@dataclass(frozen=True)
class SweepRunRef(TypedConfig):
    """The keys a run that reads one finished sweep run starts with (02's probe, 06's matched insertion): its own
    ``experiment`` and ``name``, then the sweep run's ``dataset``, ``depth_n``, ``depth_label``, ``seed`` and
    directory name ``sweep_run``."""

    experiment: str
    name: str
    dataset: str
    depth_n: int
    depth_label: int
    seed: int
    sweep_run: str


def data_source(run: SweepRun | Mapping) -> tuple[str, SweepData, str | None]:
    """The dataset, ``data`` section and data root of a typed sweep run, or read from a config dict's ``dataset``,
    ``data`` and ``runtime.data_root`` (a sweep record's, or 03's and 09's, whose other sections these ignore)."""
    if isinstance(run, SweepRun):
        return run.dataset, run.data, run.runtime.data_root
    return run["dataset"], from_mapping(SweepData, run["data"], "data."), run["runtime"]["data_root"]


__all__ = [
    "SweepData",
    "SweepModel",
    "SweepRun",
    "SweepRunRef",
    "SweepRuntime",
    "SweepTrain",
    "TrainSubset",
    "data_source",
]
