"""Script 07's run configs, typed: a fully connected run (:class:`FCRun`, what
:func:`~common.experiments.weight_scaling.train_fc_run` reads) and a sweep run's analysis (:class:`SweepAnalysisRun`,
what :func:`~common.experiments.weight_scaling.analyse_sweep_run` reads).

Each holds the keys :func:`~common.experiments.weight_scaling.fc_configs` or ``sweep_analysis_configs`` writes; the
model is :class:`~common.models.fc_resnet.FCResNetConfig` itself, the early stopping
:class:`~common.training.recipes.EarlyStopping` itself. A job reads its config once (``from_config``: an unknown or
missing key is refused by name); every setting's default is its preset's (:mod:`common.presets.weight_scaling`);
docs/design.md, section "A job reads its config once".
"""

from __future__ import annotations

from dataclasses import dataclass

from common.models.fc_resnet import FCResNetConfig
from common.runs.typed_config import TypedConfig, optional, to_mapping
from common.training.recipes import AdamRecipe, EarlyStopping


@dataclass(frozen=True)
class FCData:
    """``data``: the synthetic neural-ODE data (:func:`common.data.neural_ode.make_neural_ode_data`)."""

    kind: str
    dim: int
    num_train: int
    num_test: int
    steps: int
    noise: float
    data_seed: int


@dataclass(frozen=True)
class FCTrain:
    """``train``: the run's :class:`~common.training.recipes.AdamRecipe` (its fields), the batch and, with the
    constant schedule, Cohen et al.'s early stopping."""

    epochs: int
    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    warmup_epochs: float
    batch_size: int
    decay: str | None = optional()  # an AdamRecipe LATER_FIELD: absent where it is the recipe's default
    early_stopping: EarlyStopping | None = optional()  # the constant schedule only

    @property
    def recipe(self) -> AdamRecipe:
        """The optimiser and schedule these keys store (:meth:`AdamRecipe.from_config`)."""
        return AdamRecipe.from_config(to_mapping(self))


@dataclass(frozen=True)
class FCRuntime:
    """``runtime``: the device."""

    device: str


@dataclass(frozen=True)
class FCRun(TypedConfig):
    """One (family, L, seed) run of a fully connected family, typed."""

    experiment: str
    name: str
    family: str
    preset: str
    depth: int
    seed: int
    data: FCData
    model: FCResNetConfig
    train: FCTrain
    runtime: FCRuntime


@dataclass(frozen=True)
class SweepDirRuntime:
    """``runtime``: the sweep run's directory."""

    sweep_dir: str


@dataclass(frozen=True)
class SweepAnalysisRun(TypedConfig):
    """The analysis of one sweep run (``dataset``, ``depth_n``, ``depth_label``, ``seed``, ``sweep_run``), its FFT at
    ``input_size`` with every BatchNorm folded (``fold_batchnorm``), typed."""

    experiment: str
    name: str
    family: str
    dataset: str
    depth_n: int
    depth_label: int
    seed: int
    sweep_run: str
    input_size: int
    fold_batchnorm: bool
    runtime: SweepDirRuntime


__all__ = ["FCData", "FCRun", "FCRuntime", "FCTrain", "SweepAnalysisRun", "SweepDirRuntime"]
