"""One training loop for classifiers, regressions and token models (paper B.1-B.3 for the ResNet sweep).

The optimiser and schedule of a run are one declaration, its recipe, stored in the run's config
and rebuilt from it: :class:`SGDRecipe` (SGD with momentum and weight decay, a per-step cosine
schedule with optional linear warm-up: the ResNet sweep), :class:`AdamRecipe` (Adam by epochs,
cosine or constant rate: the fully connected ResNets) or :class:`AdamWRecipe` (AdamW by optimizer
steps with gradient clipping: the decoders). :func:`train_epoch` is one pass of steps (per-step
learning rate, bf16 autocast on accelerators, gradient accumulation, a periodic non-finite-loss
check); :func:`train` runs the epochs (under :class:`AdamWRecipe`, rounds of ``eval_interval``
steps), with optional ``torch.compile`` and channels_last memory. After every epoch: evaluation,
one line in ``metrics.jsonl`` and an atomic checkpoint (model, optimizer, schedule, RNG states,
epoch), so a killed run resumes and ends with bit-identical weights on the CPU. A non-finite loss
stops the run with :class:`NonFiniteLossError` naming the step; nothing is marked finished.
``TrainSettings.stopping`` (an :class:`EarlyStopping`) may end a run after any epoch; its state is
in every checkpoint, so a resumed run stops at the same epoch.

Batches are ``(inputs, targets)``; the model maps inputs to logits ``(..., classes)`` and the
loss is the mean cross-entropy over all target positions (images: one per image; tokens: one
per position). ``TrainSettings(loss="mse")`` trains a regression instead (outputs and float
targets of one shape, mean squared error over every coordinate, no accuracy recorded). Loaders
with a ``set_epoch`` method get the epoch before each pass.

Devices: with ``compile`` every run starts from a fresh compiler state (``torch.compiler.reset()``:
dynamo keeps at most 8 compiled versions of one function per process, and every depth shares
``ResNet.forward``, so an inline sweep would stop compiling after a few depths); epoch times
synchronise any accelerator (:func:`common.device.synchronize`); loss sums are float64
(on the CPU for devices without float64); the final reported losses are evaluated in float32
whatever the training precision, with TF32 and HF32 off (:func:`final_evaluation`); checkpoints
hold the RNG state of the current device of the type the run computes on only, so a run resumes
under any number of visible devices and a CPU run never touches a GPU.

Several processes (``torch.distributed``): DDP (gradients as views into its buckets), or FSDP2
with ``TrainSettings.fsdp`` (the model sharded on the CPU, each unit moved to the device as it is
sharded: :func:`place_model`); evaluations are split over the processes (:func:`evaluate`); a
non-finite loss stops every process at once; only rank 0 reads a checkpoint to resume from, the
others receive its tensors one at a time (:func:`resume`). Training ends with the gradients freed.

Run lifecycle (with :mod:`common.runs`): the caller prepares the run directory, calls
:func:`train` (which also writes the final weights ``model.pt``), then :func:`finish_run`
(``result.json`` last, then the checkpoint is dropped).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import ClassVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.utils._pytree import tree_flatten, tree_unflatten

from common import device as devices
from common import runs
from common.distributed import broadcast_from_main
from common.errors import UserError
from common.precision import float32_reduced_on, float64_device, full_precision, supports_float64

log = logging.getLogger(__name__)

WEIGHTS = "model.pt"  # final weights of a finished run: {"model": state_dict}


class NonFiniteLossError(UserError):
    """The training loss became NaN or inf; a :class:`UserError` (one line, exit 2): the fix is
    a smaller learning rate or longer warm-up, and the run stays unfinished."""


class _Recipe:
    """Config round trip shared by the recipes: the dataclass fields *are* the config keys.

    Fields named in ``LATER_FIELDS`` were added after runs existed: they are written only when they
    differ from their default, and read back as the default when absent, so earlier run identities stay.
    """

    LATER_FIELDS: ClassVar[tuple[str, ...]] = ()
    ROUNDS: ClassVar[str] = "epochs"  # what the rounds of train() are: the recipe's attribute and the summary's key

    @property
    def rounds(self) -> int:
        """How many rounds :func:`train` runs (each: a pass of steps, evaluation, a metrics line, a checkpoint)."""
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
    """Optimiser and schedule of a run, declared once (the sweep's values: ``common/resnet_sweep.py``).

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
    gradients clipped to a global norm of ``grad_clip`` (None: no clipping). :func:`train` runs
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
        """The rounds of :func:`train`: ``steps / eval_interval``."""
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


@dataclass(frozen=True)
class TrainSettings:
    """How one run trains: its recipe (:class:`SGDRecipe`, :class:`AdamRecipe` or :class:`AdamWRecipe`),
    the loss it minimises, gradient accumulation, an optional early stop, and how it executes
    (autocast, compilation, memory format, non-finite checks, DDP or FSDP2).

    ``fsdp``: with several processes, :func:`train` shards the model with FSDP2 (``fully_shard`` on each
    of ``model.blocks``, then the model; :func:`shard_model`) instead of wrapping it in DDP; checkpoints
    and ``model.pt`` then hold the gathered full state dicts (:func:`full_state`), the same as DDP's.
    ``fsdp_bf16_params`` adds FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``
    where bf16 autocast runs (half the all-gather traffic and unsharded-parameter memory; every
    forward, evaluations included, then computes with bf16 parameters: the summary says so).
    """

    recipe: SGDRecipe | AdamRecipe | AdamWRecipe
    amp: bool = True  # bf16 autocast where common.device.autocast_dtype has one (not on the CPU)
    compile: bool = False
    channels_last: bool = False
    nan_check_every: int = 25  # steps between host syncs that look for a non-finite loss
    loss: str = "cross_entropy"  # one of LOSSES; "mse": regression, no accuracy
    accum_steps: int = 1  # micro-batches per optimizer step (gradient accumulation)
    fsdp: bool = False  # several processes: shard parameters, gradients and optimizer state (FSDP2) instead of DDP
    stopping: EarlyStopping | None = None  # an early-stopping rule on the running training loss (None: every epoch)
    fsdp_bf16_params: bool = False  # with fsdp and bf16 autocast: bf16 unsharded parameters, float32 gradient reduction


LOSSES = ("cross_entropy", "mse")
COUNTS = ("images", "tokens")  # what the rate of a round counts (train()'s ``counts``)


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


def classification_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy over every target position (a token model: the mean over sequences of each
    sequence's mean token loss); bf16/float16 logits are upcast to float32, float64 stays float64."""
    logits = logits.flatten(0, -2)
    logits = logits if logits.dtype == torch.float64 else logits.float()
    return F.cross_entropy(logits, targets.flatten(), label_smoothing=label_smoothing)


def batch_loss(settings: TrainSettings, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The training loss ``settings.loss`` of one batch (cross-entropy with the recipe's label smoothing, or MSE)."""
    if settings.loss == "mse":
        return F.mse_loss(outputs.float(), targets.float())
    return classification_loss(outputs, targets, settings.recipe.label_smoothing)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable,
    device: torch.device,
    *,
    amp: bool = True,
    loss: str = "cross_entropy",
    split: bool = True,
) -> dict:
    """Mean cross-entropy and accuracy over every target of ``loader`` (eval mode, no augmentation);
    with ``loss="mse"`` the mean squared error over every coordinate and no ``acc``.

    Under ``torch.distributed`` (with ``split``) every process evaluates every ``world_size``-th batch
    and the sums are all-reduced: each process must call it, and all get what one process evaluating
    every batch gets (the float64 sums added in another order). ``loader`` must have a length there.
    """
    was_training = model.training
    model.eval()
    # float64 sum of per-batch float32 sums; on the CPU when the device has no float64 (MPS, NPU)
    loss_sum = torch.zeros((), dtype=torch.float64, device=float64_device(device))
    correct = torch.zeros((), dtype=torch.int64, device=device)
    count = 0
    world, rank = (_world_size(), _rank()) if split else (1, 0)
    for x, y, counted in shard_batches(loader, rank, world):
        with devices.autocast(device, amp):
            logits = model(x)
        if not counted:
            continue
        if loss == "mse":
            loss_sum += F.mse_loss(logits.float(), y.float(), reduction="sum").to(loss_sum.device).double()
            count += y.numel()
            continue
        logits, y = logits.flatten(0, -2).float(), y.flatten()
        loss_sum += F.cross_entropy(logits, y, reduction="sum").to(loss_sum.device).double()
        correct += (logits.argmax(-1) == y).sum()
        count += y.numel()
    model.train(was_training)
    total, right = loss_sum.item(), correct.item()
    if world > 1:
        total, right, count = _all_reduce_sums(device, total, right, count)
    if loss == "mse":
        return {"loss": total / max(count, 1), "n": int(count)}
    return {"loss": total / max(count, 1), "acc": right / max(count, 1), "n": int(count)}


def shard_batches(loader: Iterable, rank: int, world: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, bool]]:
    """``(x, y, counted)``: this process's share of ``loader``, batches ``rank``, ``rank + world``, ...

    Every process gets ``ceil(len(loader) / world)`` of them: a process with fewer repeats one with
    ``counted=False``, because a forward of a DDP or FSDP model is a collective that every process
    must run as often as the others.
    """
    if world == 1:
        yield from ((x, y, True) for x, y in loader)
        return
    share = -(-len(loader) // world)  # type: ignore[arg-type]
    first = spare = None
    given = 0
    for i, batch in enumerate(loader):
        first = first or batch
        if i % world == rank:
            spare = batch
            given += 1
            yield (*batch, True)
    for _ in range(share - given):
        yield (*(spare or first), False)


@dataclass
class EpochStats:
    """What one pass of :func:`train_epoch` measured (running means over its augmented batches)."""

    step: int  # global step after the epoch
    lr: float  # the last step's learning rate
    loss: float
    acc: float | None  # None for a regression (TrainSettings.loss == "mse")
    examples: int
    seconds: float
    targets: int = 0  # target positions: one per example of a classifier, T per sequence of a token model

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.seconds if self.seconds > 0 else float("nan")

    @property
    def targets_per_s(self) -> float:
        return self.targets / self.seconds if self.seconds > 0 else float("nan")


def train_epoch(
    forward: Callable[[torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    loader: Iterable,
    *,
    schedule: Schedule,
    step: int,
    settings: TrainSettings,
    device: torch.device,
    where: str = "training",
    epoch: int = 0,
    no_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> EpochStats:
    """One pass over ``loader``: per step the scheduled learning rate, a forward (autocast), the loss, a
    backward and an optimizer step; every ``settings.nan_check_every`` steps one host sync checks that
    the losses were finite (:class:`NonFiniteLossError` names the first bad step and ``where``; under
    ``torch.distributed`` the check is agreed by all processes, so every one of them stops).

    With ``settings.accum_steps = k`` every ``k`` batches make one step (gradient accumulation): each
    loss is divided by ``k`` and the gradients add up, so the step sees the gradient of the mean loss
    over the ``k`` batches (under DDP, ``no_sync`` skips the gradient all-reduce of all but the last).
    A recipe with ``grad_clip`` clips the gradient's global norm before the step. Under
    ``torch.distributed`` the returned loss, accuracy and example count cover every process.

    The training loop of every run, and what ``benchmarks/bench_train_step.py`` times. ``step`` is the
    global step the pass starts at; the time includes a device synchronisation at the end.
    """
    start = time.perf_counter()
    accum, clip = settings.accum_steps, settings.recipe.grad_clip
    params = [p for group in optimizer.param_groups for p in group["params"]]
    loss_sum, correct, seen, targets, batches = 0.0, torch.zeros((), dtype=torch.int64, device=device), 0, 0, 0
    pending: list[torch.Tensor] = []
    lr = schedule.base_lr
    step_loss = torch.zeros(())
    for i, (x, y) in enumerate(loader):
        first, last = i % accum == 0, (i + 1) % accum == 0
        if first:
            lr = schedule.lr(step)
            for group in optimizer.param_groups:
                group["lr"] = lr
        with no_sync() if no_sync is not None and not last else contextlib.nullcontext():
            with devices.autocast(device, settings.amp):
                logits = forward(x)
            loss = batch_loss(settings, logits, y)
            if first:
                optimizer.zero_grad(set_to_none=True)
            (loss / accum if accum > 1 else loss).backward()
        step_loss = loss.detach() if first else step_loss + loss.detach()
        if settings.loss != "mse":
            with torch.no_grad():
                correct += (logits.detach().flatten(0, -2).argmax(-1) == y.flatten()).sum()
        seen += x.shape[0]
        targets += y.numel()
        if not last:
            continue
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        pending.append(step_loss / accum if accum > 1 else step_loss)
        batches += 1
        step += 1
        if len(pending) >= settings.nan_check_every:
            loss_sum += _check_finite(pending, step, epoch, batches - 1, where, device)
            pending = []
    if pending:
        loss_sum += _check_finite(pending, step, epoch, batches - 1, where, device)
    correct_n = correct.item()
    if _world_size() > 1:  # every process's share of the epoch
        loss_sum, batches, correct_n, seen, targets = _all_reduce_sums(
            device, loss_sum, batches, correct_n, seen, targets
        )
    devices.synchronize(device)  # the epoch's work has finished, not just been queued
    return EpochStats(
        step=step,
        lr=lr,
        loss=loss_sum / max(batches, 1),
        acc=None if settings.loss == "mse" else correct_n / max(targets, 1),
        examples=int(seen),
        seconds=time.perf_counter() - start,
        targets=int(targets),
    )


def train(
    model: nn.Module,
    train_loader: Iterable,
    eval_loaders: dict[str, Iterable],
    *,
    run_dir: str | Path,
    settings: TrainSettings,
    device: torch.device,
    final_eval_loaders: dict[str, Iterable] | None = None,
    on_epoch_end: Callable[[int, dict], None] | None = None,
    desc: str = "train",
    counts: str = "images",
) -> dict:
    """Train ``model`` for ``settings.recipe.rounds`` rounds (epochs; a recipe by steps: evaluation rounds) in
    ``run_dir``, resuming from its checkpoint.

    ``eval_loaders`` (e.g. ``{"test": ...}``) are evaluated after every epoch and logged as
    ``<name>_loss`` / ``<name>_acc``; ``final_eval_loaders`` (e.g. ``{"train": <clean train
    loader>}``) once at the end, overriding same-named keys of the summary. The summary's losses
    are evaluated in float32 with TF32/HF32 off (``final_eval_dtype``, ``final_eval_math_mode``:
    :func:`final_evaluation`; the per-epoch records use the training
    precision, ``autocast_dtype``), so they compare across depths and devices. The per-epoch
    ``train_loss`` / ``train_acc`` are running means over the epoch's augmented batches.
    ``on_epoch_end(epoch, record)`` runs after each checkpoint (epoch counts from 1).

    ``counts``: what each round's rate counts, ``images`` (``images_per_s``: examples per second) or
    ``tokens`` (``tokens_per_s``: a token model's target positions, ``B * T`` per batch, per second).

    Returns the summary: the last epoch's record, ``train_loss_running`` / ``train_acc_running``,
    the final evaluations, ``wall_s`` (training time summed over resumptions), ``steps`` and the
    rounds trained under the recipe's :attr:`~_Recipe.ROUNDS` (``epochs``; ``eval_rounds`` for :class:`AdamWRecipe`).
    Writes the final weights to ``run_dir/model.pt``; the caller writes ``result.json``.
    """
    if counts not in COUNTS:
        raise ValueError(f"counts {counts!r}: use one of {COUNTS}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    recipe = settings.recipe
    main = _rank() == 0  # under torch.distributed only rank 0 writes records and checkpoints
    shard = place_model(model, device, settings)  # before the optimizer, which must hold the sharded parameters
    optimizer = recipe.make_optimizer(model)
    batches = len(train_loader)  # type: ignore[arg-type]
    if batches % settings.accum_steps:
        raise ValueError(
            f"{batches} batches per epoch do not split into steps of {settings.accum_steps} accumulated batches"
        )
    steps_per_epoch = batches // settings.accum_steps
    if steps_per_epoch == 0:
        raise UserError(f"{desc}: the training set is smaller than one batch; lower --batch-size")
    schedule = Schedule.of(recipe, steps_per_epoch)
    start_epoch, step, wall = 0, 0, 0.0
    stop = settings.stopping.initial_state() if settings.stopping is not None else None

    if main:  # a crash mid-append left a torn last line: cut it off once, before the lines are counted
        runs.repair_jsonl(run_dir / runs.METRICS)
    resumed = resume(run_dir, model, optimizer, shard=shard, device=device)
    if resumed is None and main:
        _truncate_metrics(run_dir, 0)  # a fresh start (e.g. after a deleted checkpoint): no earlier epochs remain
    if resumed is not None:
        start_epoch, step, wall = resumed["epoch"], resumed["schedule"]["step"], resumed["wall_s"]
        stop = resumed.get("stopping", stop)
        if main:
            _truncate_metrics(run_dir, start_epoch)
        log.info("%s: resuming %s after epoch %d (step %d)", desc, run_dir, start_epoch, step)

    if settings.compile:
        torch.compiler.reset()  # dynamo's per-function limit (8 versions) is per process, not per model
    # DDP when more than one process (torchrun, multi-task SLURM): gradients averaged over the processes.
    ddp = None
    if _world_size() > 1 and not shard:  # gradients live in DDP's buckets (gradient_as_bucket_view): no second copy
        ddp = DistributedDataParallel(
            model, device_ids=[device] if device.type != "cpu" else None, gradient_as_bucket_view=True
        )
    forward = torch.compile(ddp or model) if settings.compile else (ddp or model)
    no_sync = ddp.no_sync if ddp is not None else functools.partial(_no_gradient_sync, model) if shard else None
    for epoch in range(start_epoch, recipe.rounds):
        if stop is not None and stop["stopped"]:
            break  # resumed after the stopping epoch's checkpoint
        if hasattr(train_loader, "set_epoch"):
            train_loader.set_epoch(epoch)
        model.train()
        start = time.perf_counter()
        stats = train_epoch(
            forward,
            optimizer,
            train_loader,
            schedule=schedule,
            step=step,
            settings=settings,
            device=device,
            where=str(run_dir),
            epoch=epoch,
            no_sync=no_sync,
        )
        step = stats.step
        record = {
            "epoch": epoch + 1,
            "step": step,
            "lr": stats.lr,
            "train_loss": stats.loss,
            "train_acc": stats.acc,
            f"{counts}_per_s": stats.examples_per_s if counts == "images" else stats.targets_per_s,
            "epoch_time_s": stats.seconds,
        }
        for name, loader in eval_loaders.items():
            metrics = evaluate(forward, loader, device, amp=settings.amp, loss=settings.loss)
            record.update({f"{name}_{k}": metrics[k] for k in ("loss", "acc") if k in metrics})
        wall += time.perf_counter() - start
        record["wall_s"] = wall
        if stop is not None:
            stop = settings.stopping.update(stop, stats.loss)  # type: ignore[union-attr]
            record["stopping"] = stop
        model_state, optimizer_state = full_state(model, optimizer, shard)  # a collective when sharded
        if main:
            runs.append_metrics(run_dir, record)
            runs.save_checkpoint(
                runs.checkpoint_path(run_dir),
                {
                    "model": model_state,
                    "optimizer": optimizer_state,
                    "schedule": {**asdict(schedule), "step": step},
                    "rng": devices.rng_state(device),
                    "epoch": epoch + 1,
                    "wall_s": wall,
                    **({"stopping": stop} if stop is not None else {}),
                },
            )
        log.info(
            "%s: %s %d/%d lr %.4g %s%.0f %s/s",
            desc,
            recipe.ROUNDS.removesuffix("s"),
            epoch + 1,
            recipe.rounds,
            stats.lr,
            "".join(_loss_acc(record, n) for n in ("train", *eval_loaders)),
            record[f"{counts}_per_s"],
            counts,
        )
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)

    optimizer.zero_grad(set_to_none=True)  # no gradients outlive training (the probe that follows needs the memory)
    if _world_size() > 1:
        dist.barrier()  # rank 0's last metrics line is on disk before anyone reads it
    history = runs.read_metrics(run_dir)
    summary = dict(history[-1]) if history else {}
    summary["train_loss_running"] = summary.get("train_loss")
    summary["train_acc_running"] = summary.get("train_acc")
    amp_dtype = devices.precision_name(device, settings.amp)
    summary.update(final_evaluation(model, eval_loaders, final_eval_loaders or {}, device, settings))
    summary.update({recipe.ROUNDS: recipe.rounds}, steps=step, wall_s=wall, autocast_dtype=amp_dtype)
    if shard:
        summary["fsdp_param_dtype"] = "bfloat16" if fsdp_bf16(settings, device) else "float32"
    if stop is not None:  # the epochs trained, and why they ended
        summary.update(
            {recipe.ROUNDS: summary.get("epoch", 0)}, stopping={**stop, "stopped": stop["stopped"] or "epoch limit"}
        )
    weights = full_state(model, None, shard)[0]
    if main:
        runs.save_checkpoint(run_dir / WEIGHTS, {"model": {k: v.cpu() for k, v in weights.items()}})
    return summary


def final_evaluation(
    model: nn.Module, eval_loaders: dict, final_loaders: dict, device: torch.device, settings: TrainSettings
) -> dict:
    """The reported losses: ``final_loaders``, and ``eval_loaders`` again unless their per-epoch values already are float32.

    Float32 without autocast (bf16 evaluation moved a ResNet-8's loss by 0.16%), under
    :func:`common.precision.full_precision`: TF32 (CUDA's default for convolutions on Ampere and later)
    and HF32 (an Ascend NPU's) off, so the numbers compare across depths and devices. Eager, so that
    no extra graph is compiled. Records ``final_eval_dtype`` and the math mode it ran in,
    ``final_eval_math_mode``; under FSDP with bf16 parameters the dtype is ``bfloat16``.
    """
    reduced = devices.precision_name(device, settings.amp) != "float32" or float32_reduced_on(device)
    final = {**(eval_loaders if reduced else {}), **final_loaders}
    out = {}
    with full_precision() as mode:
        for name, loader in final.items():
            metrics = evaluate(model, loader, device, amp=False, loss=settings.loss)
            out.update({f"{name}_{k}": metrics[k] for k in ("loss", "acc") if k in metrics})
    dtype = "bfloat16" if settings.fsdp and _world_size() > 1 and fsdp_bf16(settings, device) else "float32"
    return {**out, "final_eval_dtype": dtype, "final_eval_math_mode": mode}


def place_model(model: nn.Module, device: torch.device, settings: TrainSettings) -> bool:
    """Put ``model`` where :func:`train` computes with it; True when it is sharded (FSDP2).

    Without sharding: ``model.to(device)`` (and channels_last memory when asked). With ``settings.fsdp``
    and several processes the model is sharded while still on the CPU, and FSDP2 moves each unit to
    ``device`` as it shards it (:func:`shard_model`): no device ever holds the whole model, only its
    shards and, for a moment, one unit in full. A model sharded already stays sharded (parameters a
    forward left gathered are resharded, so that an optimizer made next holds the shards).
    """
    shard = settings.fsdp and _world_size() > 1
    if shard and is_sharded(model):
        for module in model.modules():  # a forward since (an evaluation) leaves the root's parameters gathered
            if isinstance(module, FSDPModule):
                module.reshard()
        return True
    if settings.channels_last:
        model.to(memory_format=torch.channels_last)
    if shard:
        shard_model(model, device, bf16_params=fsdp_bf16(settings, device))
    else:
        model.to(device)
    return shard


def is_sharded(model: nn.Module) -> bool:
    """Whether FSDP2 has sharded ``model`` (its parameters are DTensors)."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def fsdp_bf16(settings: TrainSettings, device: torch.device) -> bool:
    """FSDP2 with bf16 unsharded parameters: asked for (``fsdp_bf16_params``) and bf16 autocast runs on ``device``."""
    return settings.fsdp_bf16_params and devices.precision_name(device, settings.amp) == "bfloat16"


def shard_model(model: nn.Module, device: torch.device | None = None, *, bf16_params: bool = False) -> None:
    """FSDP2 in place: each of ``model.blocks`` (when the model has them) is one shard unit, then the rest.

    The mesh is every process on ``device``'s type (default: the accelerator torch finds, else the
    CPU); FSDP2 moves each unit's parameters and buffers there as it shards them. ``bf16_params``:
    ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``: the all-gathered
    parameters are bf16 for compute, gradients are reduced in float32, and the sharded float32
    parameters stay the optimizer's.
    """
    mesh = init_device_mesh(device.type, (_world_size(),)) if device is not None else None
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16_params
        else MixedPrecisionPolicy()
    )
    for block in getattr(model, "blocks", ()):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def resume(
    run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer, *, shard: bool, device: torch.device
) -> dict | None:
    """Apply the run's checkpoint to ``model`` and ``optimizer`` and restore the RNG; its other keys, or None (a fresh start).

    Memory: only rank 0 reads the checkpoint, and drops it once applied. On an accelerator it is
    memory-mapped (``torch.load(mmap=True)``: every tensor is copied to the device, so the mapping
    goes with the dropped state; on the CPU the optimizer would keep slices of it, and with them
    the whole file, mapped). Under ``torch.distributed`` the other processes never hold it: they get
    its small keys (epoch, schedule, RNG states, wall time) as one object and its tensors one at a
    time (:func:`_broadcast_state`; FSDP: ``set_*_state_dict`` with ``broadcast_from_rank0``, each
    process keeping its shards). A checkpoint written under the other ``--fsdp`` setting is a
    :class:`UserError` on every process (its optimizer state is keyed differently).
    """
    world = _world_size()
    state = runs.resume_state(run_dir, mmap=device.type != "cpu") if _rank() == 0 else None
    info = (
        None
        if state is None
        else {
            **{k: v for k, v in state.items() if k not in ("model", "optimizer")},
            "problem": _checkpoint_problem(run_dir, state) or _fsdp_mismatch(run_dir, state["optimizer"], shard),
        }
    )
    if world > 1:
        info = broadcast_from_main(info)
    if info is None:
        return None
    if info["problem"]:
        raise UserError(info["problem"])
    if world > 1 and shard:  # full (unsharded) state dicts on rank 0; each process keeps its shards
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        # Two calls: set_state_dict would skip the model on the processes that pass no (empty) model state.
        set_model_state_dict(model, state["model"] if state is not None else {}, options=options)
        set_optimizer_state_dict(model, optimizer, state["optimizer"] if state is not None else {}, options=options)
    elif world > 1:
        _broadcast_state(model, optimizer, state, device)
    else:
        try:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:  # size mismatch, missing tensors, other parameter groups
            raise UserError(_misfit(run_dir, exc)) from None
    del state
    devices.set_rng_state(info["rng"], device)
    return info


CHECKPOINT_KEYS = ("model", "optimizer", "schedule", "rng", "epoch", "wall_s")  # what train() saves every round


def _checkpoint_problem(run_dir: Path, state: dict) -> str | None:
    """Why a loaded ``checkpoint.pt`` cannot resume this run (keys missing or of the wrong kind), or None."""
    missing = [k for k in CHECKPOINT_KEYS if k not in state]
    wrong = [k for k in ("model", "optimizer", "schedule") if k in state and not isinstance(state[k], dict)]
    if (
        not missing
        and not wrong
        and isinstance(state.get("epoch"), int)
        and isinstance(state["schedule"].get("step"), int)
    ):
        return None
    what = f"lacks the keys {', '.join(missing)}" if missing else "does not hold what this code saves"
    return f"checkpoint {runs.checkpoint_path(run_dir)} {what}; delete it to restart that run from scratch"


def _misfit(run_dir: Path, exc: BaseException) -> str:
    """The one line for a checkpoint whose tensors do not fit this run's model or optimizer (another depth, ...)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"checkpoint {runs.checkpoint_path(run_dir)} does not fit this run's model ({first[:160]}); it was written "
        "by another run: delete it to restart that run from scratch"
    )


def _broadcast_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict | None, device: torch.device
) -> None:
    """Rank 0's checkpoint (``state``; None elsewhere) into every process's unsharded model and optimizer.

    The model: rank 0 loads it, then every parameter and buffer is broadcast in place. The
    optimizer: its ``state_dict`` layout as one object (0-dim tensors, such as Adam's step, inside
    it), then each tensor on ``device``, one at a time; nothing but the optimizer's own state is
    ever allocated on the other processes.
    """
    main = _rank() == 0
    if main:
        model.load_state_dict(state["model"])
    for tensor in model.state_dict().values():  # they share storage with the parameters and buffers
        dist.broadcast(tensor, src=0)
    leaves, layout = tree_flatten(state["optimizer"]) if main else ([], None)
    described = [_TensorShape(tuple(v.shape), v.dtype) if torch.is_tensor(v) and v.dim() > 0 else v for v in leaves]
    layout, described = broadcast_from_main((layout, described))
    values = []
    for i, leaf in enumerate(described):
        if not isinstance(leaf, _TensorShape):
            values.append(leaf)  # a plain value or a 0-dim tensor, as rank 0 has it
            continue
        tensor = leaves[i].to(device) if main else torch.empty(leaf.shape, dtype=leaf.dtype, device=device)
        dist.broadcast(tensor, src=0)
        values.append(tensor)
    optimizer.load_state_dict(tree_unflatten(values, layout))


@dataclass(frozen=True)
class _TensorShape:
    """What the other processes need to receive one tensor of an optimizer state (:func:`_broadcast_state`)."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def _fsdp_mismatch(run_dir: Path, optimizer_state: dict, shard: bool) -> str | None:
    """Why a checkpoint cannot resume under this ``--fsdp`` setting (FSDP's full optimizer state is keyed by name), or None."""
    written_sharded = any(isinstance(k, str) for k in optimizer_state.get("state", {}))
    if written_sharded == shard or not optimizer_state.get("state"):
        return None
    how = "with" if written_sharded else "without"
    return (
        f"{run_dir}: its checkpoint was written {how} FSDP; resume it {how} --fsdp "
        f"(or delete {runs.checkpoint_path(run_dir)} to start over)"
    )


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer | None, shard: bool) -> tuple[dict, dict | None]:
    """The model's (and optimizer's) state dicts; sharded: gathered in full on the CPU (every process must call it)."""
    if not shard:
        return model.state_dict(), optimizer.state_dict() if optimizer is not None else None
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=options)
    return model_state, get_optimizer_state_dict(model, optimizer, options=options) if optimizer is not None else None


@contextlib.contextmanager
def _no_gradient_sync(model: nn.Module):
    """FSDP2's counterpart of DDP's ``no_sync``: accumulate local gradients, reduce them at the last micro-batch."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def finish_run(run_dir: str | Path, result: dict, *, keep_checkpoint: bool = False) -> None:
    """Write ``result.json`` (last: the run is finished), then drop the resumable checkpoint."""
    runs.write_result(run_dir, result)
    if not keep_checkpoint:
        with contextlib.suppress(FileNotFoundError):
            runs.checkpoint_path(run_dir).unlink()


def load_weights(run_dir: str | Path, map_location="cpu") -> dict:
    """The final ``state_dict`` a finished run saved with :func:`train`.

    A missing or unreadable ``model.pt`` is a :class:`UserError` whose fix is to delete the whole run
    directory: deleting ``model.pt`` alone would leave ``result.json`` marking the run finished.
    """
    path = Path(run_dir) / WEIGHTS
    fix = f"delete the run directory {run_dir} and rerun the command that trained it (it trains that run again)"
    if not path.is_file():
        raise UserError(f"{path} is missing from a finished run; {fix}")
    state = runs.load_checkpoint(path, map_location, fix=fix)
    if not isinstance(state.get("model"), dict):
        raise UserError(f"{path} holds no model weights; {fix}")
    return state["model"]


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _all_reduce_sums(device: torch.device, *values: float) -> list[float]:
    """Each value summed over the processes (one all-reduce)."""
    dtype = torch.float64 if supports_float64(device) else torch.float32  # on the device, where the collective runs
    totals = torch.tensor(values, dtype=dtype, device=device)
    dist.all_reduce(totals)
    return totals.tolist()


def _check_finite(
    losses: list[torch.Tensor], step: int, epoch: int, batch: int, where: str, device: torch.device | None = None
) -> float:
    """Sum of ``losses`` (the last ``len(losses)`` steps), or raise naming the first bad step.

    Under ``torch.distributed`` the processes first agree on the first bad step of any of them (one
    all-reduce of a number): all raise together, where a process raising alone would leave the
    others waiting in their next collective until the timeout.
    """
    stacked = torch.stack(losses).float()
    finite = torch.isfinite(stacked)
    first = len(losses) if bool(finite.all()) else int((~finite).nonzero()[0, 0])
    mine = first
    if _world_size() > 1:
        first = _first_everywhere(first, device or stacked.device)
    if first == len(losses):
        return float(stacked.sum())
    bad_step = step - len(losses) + first  # 0-based global step
    bad_batch = batch - len(losses) + 1 + first
    what = f"became {stacked[first].item()}" if mine == first else "became non-finite in another process"
    raise NonFiniteLossError(
        f"training loss {what} at step {bad_step} (epoch {epoch + 1}, batch {bad_batch}) "
        f"in {where}; the run is not marked finished: lower --lr or lengthen the warm-up "
        f"(a rerun resumes from the last epoch checkpoint; delete {where} to start over)"
    )


def _first_everywhere(index: int, device: torch.device) -> int:
    """The smallest ``index`` over the processes (one all-reduce)."""
    dtype = torch.float64 if supports_float64(device) else torch.float32  # exact for any step count here
    value = torch.tensor([float(index)], dtype=dtype, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value.item())


def _loss_acc(record: dict, name: str) -> str:
    """``"<name> loss L acc A "`` for the epoch log line (no accuracy for a regression)."""
    acc = record.get(f"{name}_acc")
    return f"{name} loss {record[f'{name}_loss']:.4f} " + ("" if acc is None else f"acc {acc:.4f} ")


def _truncate_metrics(run_dir: Path, epochs_done: int) -> None:
    """Drop metric lines of epochs after the checkpoint (written just before a crash)."""
    records = runs.read_metrics(run_dir)
    kept = [r for r in records if r.get("epoch", 0) <= epochs_done]
    if len(kept) != len(records):
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
        runs.atomic_write_bytes(Path(run_dir) / runs.METRICS, text.encode())
