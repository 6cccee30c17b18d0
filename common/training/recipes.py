"""How a run trains, declared once and stored in its config: the recipes, their schedules, early stopping.

A recipe is the optimiser and schedule of a run, rebuilt from the run's config: :class:`SGDRecipe`
(SGD with momentum and weight decay, a per-step cosine schedule with optional linear warm-up: the
ResNet sweep), :class:`AdamRecipe` (Adam by epochs, cosine or constant rate: the fully connected
ResNets) or :class:`AdamWRecipe` (AdamW by optimizer steps with gradient clipping: the decoders).
Each builds its optimizer (``make_optimizer``) and its per-step :class:`Schedule`.
:class:`EarlyStopping` may end a run after any epoch. :class:`TrainSettings` joins a recipe with
the loss and how the run executes (autocast, compilation, DDP or FSDP2); the loop that uses them is
:mod:`common.training.loop`, how a model is spread over devices and processes :mod:`common.training.parallel`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import torch
from torch import nn


class _Recipe:
    """Config round trip shared by the recipes: the dataclass fields *are* the config keys.

    Fields named in ``LATER_FIELDS`` were added after runs existed: they are written only when they
    differ from their default, and read back as the default when absent, so earlier run identities stay.
    """

    LATER_FIELDS: ClassVar[tuple[str, ...]] = ()
    ROUNDS: ClassVar[str] = "epochs"  # what the rounds of train() are: the recipe's attribute and the summary's key

    @property
    def rounds(self) -> int:
        """How many rounds :func:`common.training.loop.train` runs (each: a pass of steps, evaluation, a metrics line, a checkpoint)."""
        return getattr(self, self.ROUNDS)

    def to_config(self) -> dict:
        """The recipe as plain config keys."""
        keys = asdict(self)  # type: ignore[call-overload]
        defaults = {f.name: f.default for f in fields(self)}  # type: ignore[arg-type]
        return {k: v for k, v in keys.items() if k not in self.LATER_FIELDS or v != defaults[k]}

    @classmethod
    def from_config(cls, keys: dict):
        """The recipe stored in a config (other keys beside it, e.g. ``batch_size``, are ignored)."""
        return cls(**{f.name: keys[f.name] for f in fields(cls) if f.name in keys or f.name not in cls.LATER_FIELDS})  # type: ignore[arg-type]


@dataclass(frozen=True)
class SGDRecipe(_Recipe):
    """Optimiser and schedule of a run, declared once (the sweep's values: ``common/experiments/shared/resnet_sweep.py``).

    SGD with momentum and weight decay on every parameter, a linear warm-up over ``warmup_epochs``
    and a per-step cosine decay to 0 at ``epochs``; cross-entropy with ``label_smoothing``. A run's
    config stores exactly these fields (:meth:`to_config`) and the job rebuilds the recipe from
    them (:meth:`from_config`), so the field names *are* the config keys: adding a field changes
    every run identity.
    """

    epochs: int
    lr: float
    momentum: float = 0.9
    weight_decay: float = 5e-4
    nesterov: bool = False
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    grad_clip: ClassVar[float | None] = None  # not a field: the sweep's config keys stay as they are

    def make_optimizer(self, model: nn.Module) -> torch.optim.SGD:
        """SGD with momentum; weight decay on every parameter (as in the CIFAR ResNet recipes)."""
        return torch.optim.SGD(
            model.parameters(),
            lr=self.lr,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            nesterov=self.nesterov,
        )

    def schedule(self, steps_per_epoch: int) -> Schedule:
        """Warm-up over ``warmup_epochs``, then cosine to 0 at ``epochs`` (per step)."""
        return Schedule(self.lr, self.epochs * steps_per_epoch, round(self.warmup_epochs * steps_per_epoch))


@dataclass(frozen=True)
class AdamRecipe(_Recipe):
    """Adam by epochs (the fully connected ResNets of ``common/experiments/weight_scaling.py``, after Cohen
    et al.'s code): after an optional linear warm-up, per-step cosine decay to 0 as :class:`SGDRecipe`
    (``decay="cosine"``) or the peak rate throughout (``decay="constant"``, Cohen et al.'s)."""

    epochs: int
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_epochs: float = 0.0
    decay: str = "cosine"  # one of DECAYS
    grad_clip: ClassVar[float | None] = None
    label_smoothing: ClassVar[float] = 0.0
    LATER_FIELDS: ClassVar[tuple[str, ...]] = ("decay",)

    def __post_init__(self) -> None:
        if self.decay not in DECAYS:
            raise ValueError(f"decay {self.decay!r}: use one of {DECAYS}")

    def make_optimizer(self, model: nn.Module) -> torch.optim.Adam:
        return torch.optim.Adam(
            model.parameters(), lr=self.lr, betas=(self.beta1, self.beta2), eps=self.eps, weight_decay=self.weight_decay
        )

    def schedule(self, steps_per_epoch: int) -> Schedule:
        """Warm-up over ``warmup_epochs``, then cosine to 0 at ``epochs`` or constant (per step)."""
        return Schedule(
            self.lr, self.epochs * steps_per_epoch, round(self.warmup_epochs * steps_per_epoch), decay=self.decay
        )


@dataclass(frozen=True)
class AdamWRecipe(_Recipe):
    """AdamW by optimizer steps (the decoder runs; the GPT-2 sweep's values: ``common/experiments/gpt2_ascend.py``).

    Linear warm-up over ``warmup_steps``, cosine decay to ``min_lr_ratio * lr`` at ``steps``,
    decoupled weight decay on matrices and embeddings only (biases and LayerNorm parameters: none),
    gradients clipped to a global norm of ``grad_clip`` (None: no clipping). :func:`common.training.loop.train` runs
    ``steps / eval_interval`` evaluation rounds (:attr:`eval_rounds`) of ``eval_interval`` steps, each
    followed by evaluation, a metrics line and a checkpoint. Its own dataclass, so that the sweep's SGD
    keys never change.
    """

    ROUNDS: ClassVar[str] = "eval_rounds"

    steps: int
    lr: float
    eval_interval: int  # optimizer steps per round of train(): evaluation + checkpoint
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float | None = 1.0
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        if self.steps <= 0 or self.eval_interval <= 0 or self.steps % self.eval_interval:
            raise ValueError(f"steps {self.steps} must be a positive multiple of eval_interval {self.eval_interval}")

    @property
    def eval_rounds(self) -> int:
        """The rounds of :func:`common.training.loop.train`: ``steps / eval_interval``."""
        return self.steps // self.eval_interval

    def make_optimizer(self, model: nn.Module) -> torch.optim.AdamW:
        """AdamW; weight decay on parameters with >= 2 dimensions (fused on CUDA)."""
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": self.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        fused = bool(params) and all(p.device.type == "cuda" for p in params)
        return torch.optim.AdamW(groups, lr=self.lr, betas=(self.beta1, self.beta2), eps=self.eps, fused=fused or None)

    def schedule(self, steps_per_epoch: int) -> Schedule:
        if steps_per_epoch != self.eval_interval:
            raise ValueError(f"the loader gives {steps_per_epoch} steps per epoch, the recipe {self.eval_interval}")
        return Schedule(self.lr, self.steps, self.warmup_steps, min_lr=self.lr * self.min_lr_ratio)


def cosine_lr(step: int, total_steps: int, base_lr: float, warmup_steps: int = 0, min_lr: float = 0.0) -> float:
    """Learning rate of ``step`` (0-based): linear warm-up to ``base_lr``, then cosine to ``min_lr``."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    if min_lr:
        return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + math.cos(math.pi * progress))
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * progress))


DECAYS = ("cosine", "constant")


@dataclass(frozen=True)
class Schedule:
    """The per-step learning rates of a run: ``total_steps`` steps, the first ``warmup_steps`` warming up,
    then a cosine decay to ``min_lr`` (``decay="cosine"``) or ``base_lr`` to the end (``"constant"``)."""

    base_lr: float
    total_steps: int
    warmup_steps: int
    min_lr: float = 0.0
    decay: str = "cosine"

    @classmethod
    def of(cls, recipe: SGDRecipe | AdamRecipe | AdamWRecipe, steps_per_epoch: int) -> Schedule:
        return recipe.schedule(steps_per_epoch)

    def lr(self, step: int) -> float:
        if self.decay == "constant":
            return self.base_lr * (step + 1) / self.warmup_steps if step < self.warmup_steps else self.base_lr
        return cosine_lr(step, self.total_steps, self.base_lr, self.warmup_steps, self.min_lr)


@dataclass(frozen=True)
class EarlyStopping(_Recipe):
    """Cohen et al.'s stopping rule (``scaling_experiments.train_final_net``), on the epoch's running training loss.

    After each epoch, the running loss (mean over the epoch's batches) that beats the best so far by the
    fraction ``min_improvement`` becomes the best and resets the bad-epoch count; otherwise the count
    grows. Training stops after the epoch whose running loss is below ``below`` ("converged") or whose
    count reaches ``patience`` ("no improvement"). The state (best, count, why stopped) is saved in every
    checkpoint, so a resumed run stops at the same epoch.
    """

    below: float = 1e-3
    patience: int = 5
    min_improvement: float = 0.01

    def initial_state(self) -> dict:
        return {"best": math.inf, "bad_epochs": 0, "stopped": None}

    def update(self, state: dict, loss: float) -> dict:
        """The state after an epoch whose running training loss is ``loss``."""
        best, bad = (
            (loss, 0) if loss < (1 - self.min_improvement) * state["best"] else (state["best"], state["bad_epochs"] + 1)
        )
        stopped = "converged" if loss < self.below else "no improvement" if bad >= self.patience else None
        return {"best": best, "bad_epochs": bad, "stopped": stopped}


@dataclass(frozen=True)
class TrainSettings:
    """How one run trains: its recipe (:class:`SGDRecipe`, :class:`AdamRecipe` or :class:`AdamWRecipe`),
    the loss it minimises, gradient accumulation, an optional early stop, and how it executes
    (autocast, compilation, memory format, non-finite checks, DDP or FSDP2).

    ``fsdp``: with several processes, :func:`common.training.loop.train` shards the model with FSDP2 (``fully_shard`` on each
    of ``model.blocks``, then the model; :func:`common.training.parallel.shard_model`) instead of wrapping it in DDP; checkpoints
    and ``model.pt`` then hold the gathered full state dicts (:func:`common.training.parallel.full_state`), the same as DDP's.
    ``fsdp_bf16_params`` adds FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``
    where bf16 autocast runs (half the all-gather traffic and unsharded-parameter memory; every
    forward, evaluations included, then computes with bf16 parameters: the summary says so).
    """

    recipe: SGDRecipe | AdamRecipe | AdamWRecipe
    amp: bool = True  # bf16 autocast where common.training.device.autocast_dtype has one (not on the CPU)
    compile: bool = False
    channels_last: bool = False
    nan_check_every: int = 25  # steps between host syncs that look for a non-finite loss
    loss: str = "cross_entropy"  # one of LOSSES; "mse": regression, no accuracy
    accum_steps: int = 1  # micro-batches per optimizer step (gradient accumulation)
    fsdp: bool = False  # several processes: shard parameters, gradients and optimizer state (FSDP2) instead of DDP
    stopping: EarlyStopping | None = None  # an early-stopping rule on the running training loss (None: every epoch)
    fsdp_bf16_params: bool = False  # with fsdp and bf16 autocast: bf16 unsharded parameters, float32 gradient reduction
    eval_every: int = 1  # rounds between the per-round evaluations; the last round always
    checkpoint_every: int = 1  # rounds between checkpoints; the last round (and an early stop) always


LOSSES = ("cross_entropy", "mse")
