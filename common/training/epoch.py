"""One pass of optimizer steps over a loader (paper B.1-B.3's training step), and the loss it minimises.

- :func:`classification_loss`: the mean cross-entropy over every target position (images: one per image; tokens:
  one per position); :func:`batch_loss`: a run's ``TrainSettings.loss`` of one batch (that, or the mean squared
  error of a regression);
- :func:`train_epoch`: one pass (per-step learning rate, bf16 autocast on accelerators, gradient accumulation,
  gradient clipping) and what it measured, :class:`EpochStats`;
- the periodic non-finite-loss check: :class:`NonFiniteLossError` names the first bad step, the same in every
  process under ``torch.distributed``, so every process stops at once.

The training loop of every run (:func:`common.training.loop.train` runs one pass per round), and what
``benchmarks/bench_train_step.py`` times.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from common.errors import UserError
from common.science.precision import supports_float64
from common.training import device as devices
from common.training.evaluation import all_reduce_sums
from common.training.losses import chunked_cross_entropy
from common.training.parallel import world_size
from common.training.recipes import Schedule, TrainSettings


class NonFiniteLossError(UserError):
    """The training loss became NaN or inf; a :class:`UserError` (one line, exit 2): the fix is
    a smaller learning rate or longer warm-up, and the run stays unfinished."""


def classification_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy over every target position (a token model: the mean over sequences of each
    sequence's mean token loss), in float32 (float64 logits: float64). bf16/float16 logits (autocast) without
    label smoothing go through :func:`common.training.losses.chunked_cross_entropy`, which never holds the whole batch's
    float32 logits; float32 and float64 logits, and label smoothing, through ``F.cross_entropy`` as always."""
    logits = logits.flatten(0, -2)
    if logits.dtype in (torch.bfloat16, torch.float16) and not label_smoothing:
        return chunked_cross_entropy(logits, targets.flatten())
    logits = logits if logits.dtype == torch.float64 else logits.float()
    return F.cross_entropy(logits, targets.flatten(), label_smoothing=label_smoothing)


def batch_loss(settings: TrainSettings, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The training loss ``settings.loss`` of one batch (cross-entropy with the recipe's label smoothing, or MSE)."""
    if settings.loss == "mse":
        return F.mse_loss(outputs.float(), targets.float())
    return classification_loss(outputs, targets, settings.recipe.label_smoothing)


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
    on_sync: Callable[[int], None] | None = None,
) -> EpochStats:
    """One pass over ``loader``: per step the scheduled learning rate, a forward (autocast), the loss, a
    backward and an optimizer step; every ``settings.nan_check_every`` steps one host sync checks that
    the losses were finite (:class:`NonFiniteLossError` names the first bad step and ``where``; under
    ``torch.distributed`` the check is agreed by all processes, so every one of them stops).

    With ``settings.accum_steps = k`` every ``k`` batches make one step (gradient accumulation): each
    loss is divided by ``k`` and the gradients add up, so the step sees the gradient of the mean loss
    over the ``k`` batches (under DDP, ``no_sync`` skips the gradient all-reduce of all but the last).
    A recipe with ``grad_clip`` clips the gradient's global norm before the step. Under
    ``torch.distributed`` the returned loss, accuracy and example count cover every process. ``on_sync(step)``
    runs after each finite-loss check, a host sync (:class:`common.training.long_run.StepClock` times it).

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
            lr = _set_lr(optimizer, schedule.lr(step))
        loss, hits = _accumulate(forward, optimizer, x, y, settings, device, first, None if last else no_sync)
        step_loss = loss if first else step_loss + loss
        if hits is not None:
            correct += hits
        seen, targets = seen + x.shape[0], targets + y.numel()
        if not last:
            continue
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        pending.append(step_loss / accum if accum > 1 else step_loss)
        batches += 1
        step += 1
        if len(pending) >= settings.nan_check_every:
            loss_sum += _synced(pending, step, epoch, batches - 1, where, device, on_sync)
            pending = []
    if pending:
        loss_sum += _synced(pending, step, epoch, batches - 1, where, device, on_sync)
    sums = {"loss_sum": loss_sum, "batches": batches, "correct": correct, "seen": seen, "targets": targets}
    return _epoch_stats(settings, device, start, step, lr, **sums)


def _accumulate(
    forward: Callable[[torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainSettings,
    device: torch.device,
    first: bool,
    no_sync: Callable[[], contextlib.AbstractContextManager] | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One batch of :func:`train_epoch`: a forward (autocast), the loss and a backward of the loss divided by
    ``settings.accum_steps``, the gradients zeroed first on a step's first batch (``first``); under ``no_sync`` (DDP,
    all but a step's last batch) without the gradient all-reduce. The detached loss, and the number of targets
    classified right (None for a regression)."""
    accum = settings.accum_steps
    with no_sync() if no_sync is not None else contextlib.nullcontext():
        with devices.autocast(device, settings.amp):
            logits = forward(x)
        loss = batch_loss(settings, logits, y)
        if first:
            optimizer.zero_grad(set_to_none=True)
        (loss / accum if accum > 1 else loss).backward()
    if settings.loss == "mse":
        return loss.detach(), None
    with torch.no_grad():
        return loss.detach(), (logits.detach().flatten(0, -2).argmax(-1) == y.flatten()).sum()


def _epoch_stats(
    settings: TrainSettings,
    device: torch.device,
    start: float,
    step: int,
    lr: float,
    *,
    loss_sum: float,
    batches: int,
    correct: torch.Tensor,
    seen: int,
    targets: int,
) -> EpochStats:
    """The :class:`EpochStats` of a pass that began at ``start`` (``time.perf_counter``): its sums over every process
    under ``torch.distributed``, its time up to a device synchronisation."""
    correct_n = correct.item()
    if world_size() > 1:  # every process's share of the epoch
        loss_sum, batches, correct_n, seen, targets = all_reduce_sums(
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


def _set_lr(optimizer: torch.optim.Optimizer, lr: float) -> float:
    """Every parameter group of ``optimizer`` at learning rate ``lr`` (the next step's); ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def _synced(
    losses: list[torch.Tensor],
    step: int,
    epoch: int,
    batch: int,
    where: str,
    device: torch.device,
    on_sync: Callable[[int], None] | None,
) -> float:
    """:func:`_check_finite` (a host synchronisation), then ``on_sync(step)``."""
    total = _check_finite(losses, step, epoch, batch, where, device)
    if on_sync is not None:
        on_sync(step)
    return total


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
    if world_size() > 1:
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
