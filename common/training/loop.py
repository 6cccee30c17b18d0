"""One training loop for classifiers, regressions and token models (paper B.1-B.3 for the ResNet sweep).

The optimiser and schedule of a run are one declaration, its recipe (:mod:`common.training.recipes`: SGD,
Adam or AdamW, stored in the run's config and rebuilt from it). :func:`train_epoch` is one pass of
steps (per-step learning rate, bf16 autocast on accelerators, gradient accumulation, a periodic
non-finite-loss check); :func:`train` runs the epochs (under an ``AdamWRecipe``, rounds of
``eval_interval`` steps), with optional ``torch.compile`` and channels_last memory. After every
epoch: one line in ``metrics.jsonl``; every ``eval_every``-th an evaluation and every ``checkpoint_every``-th an
atomic checkpoint (model, optimizer, schedule, RNG states, epoch), the last epoch always both, so a killed run
resumes and ends with bit-identical weights on the CPU. A non-finite loss stops the run with :class:`NonFiniteLossError` naming the step; nothing is
marked finished. ``TrainSettings.stopping`` (an ``EarlyStopping``) may end a run after any epoch;
its state is in every checkpoint, so a resumed run stops at the same epoch.

Batches are ``(inputs, targets)``; the model maps inputs to logits ``(..., classes)`` and the
loss is the mean cross-entropy over all target positions (images: one per image; tokens: one
per position). ``TrainSettings(loss="mse")`` trains a regression instead (outputs and float
targets of one shape, mean squared error over every coordinate, no accuracy recorded). Loaders
with a ``set_epoch`` method get the epoch before each pass.

Devices: ``compile`` compiles the model's repeated blocks, not the whole model (:mod:`common.training.compile`: the
compile work of a run is that of its block types, whatever its depth; a fresh compiler state per run; the counts
in the summary's ``compile``); ``cudnn.benchmark`` is on for training where :func:`common.training.device.cudnn_benchmark`
says (CUDA, static shapes, no deterministic mode, a device of its own; the summary's ``cudnn_benchmark``); epoch times
synchronise any accelerator (:func:`common.training.device.synchronize`); loss sums are float64
(on the CPU for devices without float64); the final reported losses are evaluated in float32
whatever the training precision, with TF32 and HF32 off (:func:`final_evaluation`); checkpoints
hold the RNG state of the current device of the type the run computes on only, so a run resumes
under any number of visible devices and a CPU run never touches a GPU.

Several processes (``torch.distributed``): DDP or FSDP2, placed by :mod:`common.training.parallel` (which
also gathers the checkpoints' full state dicts and applies a checkpoint to resume from, read by
rank 0 only); evaluations are split over the processes (:func:`evaluate`); a non-finite loss stops
every process at once. Training ends with the gradients freed.

Run lifecycle (with :mod:`common.runs.run_store`): the caller prepares the run directory, calls
:func:`train` (which also writes the final weights ``model.pt``), then :func:`finish_run`
(``result.json`` last, then the checkpoint is dropped).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from common.errors import UserError
from common.runs import atomic, record_io, run_store
from common.science.precision import float32_reduced_on, float64_device, full_precision, supports_float64
from common.training import device as devices
from common.training.compile import Compilation, compiled
from common.training.growing import GrowthState, RunGrowth, refuse_distributed, replay, schedule_at
from common.training.growing import insert as insert_block
from common.training.losses import chunked_cross_entropy
from common.training.parallel import distribute, fsdp_bf16, full_state, place_model, rank, resume, world_size
from common.training.recipes import Schedule, TrainSettings

log = logging.getLogger(__name__)

WEIGHTS = "model.pt"  # final weights of a finished run: {"model": state_dict}
COUNTS = ("images", "tokens")  # what the rate of a round counts (train()'s ``counts``)


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
    world, me = (world_size(), rank()) if split else (1, 0)
    for x, y, counted in shard_batches(loader, me, world):
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
            lr = _set_lr(optimizer, schedule.lr(step))
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
    if world_size() > 1:  # every process's share of the epoch
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


def _set_lr(optimizer: torch.optim.Optimizer, lr: float) -> float:
    """Every parameter group of ``optimizer`` at learning rate ``lr`` (the next step's); ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


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
    growth: RunGrowth | None = None,
) -> dict:
    """Train ``model`` for ``settings.recipe.rounds`` rounds (epochs; a recipe by steps: evaluation rounds) in
    ``run_dir``, resuming from its checkpoint.

    ``eval_loaders`` (e.g. ``{"test": ...}``) are evaluated every ``settings.eval_every``-th epoch (and the last) as
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
    rounds trained under the recipe's ``ROUNDS`` (``epochs``; ``eval_rounds`` for an ``AdamWRecipe``),
    ``cudnn_benchmark`` and, with ``settings.compile``, ``compile`` (:meth:`common.training.compile.Compilation.counts`).
    Writes the final weights to ``run_dir/model.pt``; the caller writes ``result.json``.

    ``growth``: the model grows at the epoch boundaries it plans (:mod:`common.training.growing`: one schedule, the
    optimizer state kept, the insertions in every checkpoint and in the summary's ``growth``, training FLOPs counted
    as ``train_flops`` per round); ``model`` is then the starting model. Refused under torch.distributed.

    Three parts: :func:`_start` (the schedule, the resumed checkpoint, DDP), :func:`_train_round` per
    round, :func:`_finish` (the summary and the final weights).
    """
    if counts not in COUNTS:
        raise ValueError(f"counts {counts!r}: use one of {COUNTS}")
    run_dir = Path(run_dir)
    grown = None
    if growth is not None:  # the architecture of the checkpoint first: its state is loaded into it below
        refuse_distributed(world_size())
        saved = run_store.resume_state(run_dir, mmap=True)  # only its insertions: resume() below reads the tensors
        grown = replay(growth, model, saved.get("growth") if saved else None)
        del saved
    run_dir.mkdir(parents=True, exist_ok=True)
    shard = place_model(model, device, settings)  # before the optimizer, which must hold the sharded parameters
    optimizer = settings.recipe.make_optimizer(model)
    static = getattr(train_loader, "drop_last", True)  # a loader that keeps a partial last batch has two shapes
    with compiled(model, settings.compile) as compilation, devices.cudnn_benchmark_for(device, static) as benchmark:
        run = _start(model, optimizer, train_loader, run_dir, settings, device, shard=shard, desc=desc, counts=counts)
        run.forward, run.compilation, run.cudnn_benchmark = compilation.forward(run.forward), compilation, benchmark
        if growth is not None:
            run.growth, run.grown = growth, grown
            run.schedule = _schedule(run)
        for epoch in range(run.start_epoch, settings.recipe.rounds):
            if run.stop is not None and run.stop["stopped"]:
                break  # resumed after the stopping epoch's checkpoint
            if growth is not None:
                _grow(run, epoch)
                if not growth.fits(grown):
                    break  # the FLOP budget has no room for another round
            record = _train_round(run, train_loader, eval_loaders, epoch)
            if on_epoch_end is not None:
                on_epoch_end(epoch + 1, record)
    return _finish(run, eval_loaders, final_eval_loaders or {})  # eager again: the blocks' compiled forwards are gone


@dataclass
class _Run:
    """One :func:`train` call's state between its rounds: set up (and resumed) by :func:`_start`."""

    run_dir: Path
    settings: TrainSettings
    device: torch.device
    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    shard: bool  # FSDP2 (the model's parameters are shards)
    forward: Callable[
        [torch.Tensor], torch.Tensor
    ]  # the model, DDP-wrapped (and compiled whole: common.training.compile)
    no_sync: Callable[[], contextlib.AbstractContextManager] | None
    desc: str
    counts: str
    steps_per_epoch: int = 0
    base_schedule: Schedule | None = None  # the run's one schedule (a growth ablation trains on its segments)
    start_epoch: int = 0
    step: int = 0  # global optimizer step
    wall: float = 0.0  # training time summed over resumptions
    stop: dict | None = None  # the early-stopping state (None: no early stopping)
    compilation: Compilation | None = None  # what train() compiled (common.training.compile), and its counts
    cudnn_benchmark: bool = False  # cudnn.benchmark during the training rounds (common.training.device.cudnn_benchmark)
    growth: RunGrowth | None = None  # the growth plan (common.training.growing), None: a fixed model
    grown: GrowthState | None = None  # the insertions applied so far and the FLOPs counted

    @property
    def main(self) -> bool:
        """Under torch.distributed only rank 0 writes records and checkpoints."""
        return rank() == 0


def _start(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_loader: Iterable,
    run_dir: Path,
    settings: TrainSettings,
    device: torch.device,
    *,
    shard: bool,
    desc: str,
    counts: str,
) -> _Run:
    """The run's schedule, its checkpoint applied (or its metrics cleared for a fresh start), and the forward."""
    batches = len(train_loader)  # type: ignore[arg-type]
    if batches % settings.accum_steps:
        raise ValueError(
            f"{batches} batches per epoch do not split into steps of {settings.accum_steps} accumulated batches"
        )
    steps_per_epoch = batches // settings.accum_steps
    if steps_per_epoch == 0:
        raise UserError(f"{desc}: the training set is smaller than one batch; lower --batch-size")
    schedule = Schedule.of(settings.recipe, steps_per_epoch)
    stop = settings.stopping.initial_state() if settings.stopping is not None else None
    start_epoch, step, wall = 0, 0, 0.0
    main = rank() == 0
    if main:  # a crash mid-append left a torn last line: cut it off once, before the lines are counted
        record_io.repair_jsonl(run_dir / run_store.METRICS)
    resumed = resume(run_dir, model, optimizer, shard=shard, device=device)
    if resumed is None and main:
        _truncate_metrics(run_dir, 0)  # a fresh start (e.g. after a deleted checkpoint): no earlier epochs remain
    if resumed is not None:
        start_epoch, step, wall = resumed["epoch"], resumed["schedule"]["step"], resumed["wall_s"]
        stop = resumed.get("stopping", stop)
        if main:
            _truncate_metrics(run_dir, start_epoch)
        log.info("%s: resuming %s after epoch %d (step %d)", desc, run_dir, start_epoch, step)
    wrapped, no_sync = distribute(model, device, shard)  # DDP when more than one process and no sharding
    run = _Run(run_dir, settings, device, model, optimizer, schedule, shard, wrapped, no_sync, desc, counts)
    run.start_epoch, run.step, run.wall, run.stop = start_epoch, step, wall, stop
    run.steps_per_epoch, run.base_schedule = steps_per_epoch, schedule
    return run


def _grow(run: _Run, epoch: int) -> None:
    """Apply the insertions planned before round ``epoch`` (:mod:`common.training.growing`): the optimizer rebuilt with the
    old parameters' state, the new block compiled as the others, the schedule the step goes on with."""
    growth, grown = run.growth, run.grown
    assert growth is not None and grown is not None
    memory_format = torch.channels_last if run.settings.channels_last else None
    for insertion in growth.due(run.model, epoch, grown):
        run.optimizer, block = insert_block(
            growth,
            grown,
            run.model,
            run.optimizer,
            run.settings.recipe.make_optimizer,
            insertion=insertion,
            step=run.step,
            where=str(run.run_dir),
            memory_format=memory_format,
        )
        if run.compilation is not None:
            run.compilation.add_block(block)
        place = grown.inserted[-1]["place"]
        log.info("%s: inserted a block at place %d before epoch %d (step %d)", run.desc, place, epoch + 1, run.step)
    run.schedule = _schedule(run)


def _schedule(run: _Run):
    """The schedule the next round trains on (:func:`common.training.growing.schedule_at`)."""
    growth, grown = run.growth, run.grown
    assert growth is not None and grown is not None
    per_step = grown.per_example * growth.epoch_examples // max(run.steps_per_epoch, 1)
    return schedule_at(growth, run.base_schedule, run.steps_per_epoch, grown, run.step, per_step)


def _train_round(run: _Run, train_loader: Iterable, eval_loaders: dict[str, Iterable], epoch: int) -> dict:
    """Round ``epoch`` (0-based): a pass of steps, the evaluations, a metrics line and a checkpoint; its record."""
    settings, device, counts = run.settings, run.device, run.counts
    if hasattr(train_loader, "set_epoch"):
        train_loader.set_epoch(epoch)
    run.model.train()
    start = time.perf_counter()
    stats = train_epoch(
        run.forward,
        run.optimizer,
        train_loader,
        schedule=run.schedule,
        step=run.step,
        settings=settings,
        device=device,
        where=str(run.run_dir),
        epoch=epoch,
        no_sync=run.no_sync,
    )
    run.step = stats.step
    record = {
        "epoch": epoch + 1,
        "step": run.step,
        "lr": stats.lr,
        "train_loss": stats.loss,
        "train_acc": stats.acc,
        f"{counts}_per_s": stats.examples_per_s if counts == "images" else stats.targets_per_s,
        "epoch_time_s": stats.seconds,
    }
    if run.grown is not None:  # a growing run: its FLOPs so far, at each round's depth, and its insertions so far
        run.grown.flops += run.grown.per_example * stats.examples
        record.update(train_flops=run.grown.flops, insertions=len(run.grown.inserted))
        if run.growth is not None and run.growth.decide is not None:
            record.update(probe_flops=run.grown.probe_flops, probes=len(run.grown.probes))
    stop = settings.stopping.update(run.stop, stats.loss) if run.stop is not None else None  # type: ignore[union-attr]
    last = epoch + 1 == settings.recipe.rounds or bool(stop and stop["stopped"])  # always evaluated and checkpointed
    if last or (epoch + 1) % settings.eval_every == 0:
        for name, loader in eval_loaders.items():
            metrics = evaluate(run.forward, loader, device, amp=settings.amp, loss=settings.loss)
            record.update({f"{name}_{k}": metrics[k] for k in ("loss", "acc") if k in metrics})
    run.wall += time.perf_counter() - start
    record["wall_s"] = run.wall
    if stop is not None:
        run.stop = record["stopping"] = stop
    _save_round(run, record, epoch, checkpoint=last or (epoch + 1) % settings.checkpoint_every == 0)
    recipe = settings.recipe
    log.info(
        "%s: %s %d/%d lr %.4g %s%.0f %s/s",
        run.desc,
        recipe.ROUNDS.removesuffix("s"),
        epoch + 1,
        recipe.rounds,
        stats.lr,
        "".join(_loss_acc(record, n) for n in ("train", *eval_loaders) if f"{n}_loss" in record),
        record[f"{counts}_per_s"],
        counts,
    )
    return record


def _save_round(run: _Run, record: dict, epoch: int, *, checkpoint: bool) -> None:
    """The round's metrics line and, with ``checkpoint``, the checkpoint a killed run resumes from (a resumed run
    drops the metrics lines after its checkpoint's round and trains those rounds again, bit-identically)."""
    model_state, optimizer_state = full_state(run.model, run.optimizer, run.shard) if checkpoint else (None, None)
    if not run.main:  # full_state is a collective when sharded: every process called it above
        return
    run_store.append_metrics(run.run_dir, record)
    if checkpoint:
        run_store.save_checkpoint(
            run_store.checkpoint_path(run.run_dir),
            {
                "model": model_state,
                "optimizer": optimizer_state,
                "schedule": {**asdict(run.schedule), "step": run.step},
                "rng": devices.rng_state(run.device),
                "epoch": epoch + 1,
                "wall_s": run.wall,
                **({"stopping": run.stop} if run.stop is not None else {}),
                **({"growth": run.grown.to_checkpoint()} if run.grown is not None else {}),
            },
        )


def _finish(run: _Run, eval_loaders: dict[str, Iterable], final_eval_loaders: dict[str, Iterable]) -> dict:
    """The summary of the rounds trained (the final evaluations included); the final weights in ``model.pt``."""
    settings, device, recipe, stop = run.settings, run.device, run.settings.recipe, run.stop
    run.optimizer.zero_grad(set_to_none=True)  # no gradients outlive training (the probe that follows needs the memory)
    if world_size() > 1:
        dist.barrier()  # rank 0's last metrics line is on disk before anyone reads it
    history = run_store.read_metrics(run.run_dir)
    summary = dict(history[-1]) if history else {}
    summary["train_loss_running"] = summary.get("train_loss")
    summary["train_acc_running"] = summary.get("train_acc")
    amp_dtype = devices.precision_name(device, settings.amp)
    summary.update(final_evaluation(run.model, eval_loaders, final_eval_loaders, device, settings))
    summary.update({recipe.ROUNDS: recipe.rounds}, steps=run.step, wall_s=run.wall, autocast_dtype=amp_dtype)
    summary["cudnn_benchmark"] = run.cudnn_benchmark
    if device.type == "cpu":  # a CPU result depends on its intra-op thread count (common.launch.local_pool.CPU_THREADS)
        summary["cpu_threads"] = torch.get_num_threads()
    if run.compilation is not None and run.compilation.enabled:  # this process's compile work (since it resumed)
        summary["compile"] = run.compilation.counts()
    if run.grown is not None:
        restart = bool(run.growth and run.growth.restart)
        summary["growth"] = {
            **run.grown.to_checkpoint(),
            "flops_per_example": run.grown.per_example,
            "restart": restart,
        }
        summary["train_flops"] = run.grown.flops
        if run.growth is not None and run.growth.budget_flops is not None:  # ended by its budget: the rounds it trained
            summary[recipe.ROUNDS] = summary.get("epoch", 0)
            summary["growth"]["budget_flops"] = run.growth.budget_flops
    if run.shard:
        summary["fsdp_param_dtype"] = "bfloat16" if fsdp_bf16(settings, device) else "float32"
    if stop is not None:  # the epochs trained, and why they ended
        summary.update(
            {recipe.ROUNDS: summary.get("epoch", 0)}, stopping={**stop, "stopped": stop["stopped"] or "epoch limit"}
        )
    weights = full_state(run.model, None, run.shard)[0]
    if run.main:
        run_store.save_checkpoint(run.run_dir / WEIGHTS, {"model": {k: v.cpu() for k, v in weights.items()}})
    return summary


def final_evaluation(
    model: nn.Module, eval_loaders: dict, final_loaders: dict, device: torch.device, settings: TrainSettings
) -> dict:
    """The reported losses: ``final_loaders``, and ``eval_loaders`` again unless their per-epoch values already are float32.

    Float32 without autocast (bf16 evaluation moved a ResNet-8's loss by 0.16%), under
    :func:`common.science.precision.full_precision`: TF32 (CUDA's default for convolutions on Ampere and later)
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
    dtype = "bfloat16" if settings.fsdp and world_size() > 1 and fsdp_bf16(settings, device) else "float32"
    return {**out, "final_eval_dtype": dtype, "final_eval_math_mode": mode}


def finish_run(run_dir: str | Path, result: dict, *, keep_checkpoint: bool = False) -> None:
    """Write ``result.json`` (last: the run is finished), then drop the resumable checkpoint."""
    run_store.write_result(run_dir, result)
    if not keep_checkpoint:
        with contextlib.suppress(FileNotFoundError):
            run_store.checkpoint_path(run_dir).unlink()


def load_weights(run_dir: str | Path, map_location="cpu") -> dict:
    """The final ``state_dict`` a finished run saved with :func:`train`.

    A missing or unreadable ``model.pt`` is a :class:`UserError` whose fix is to delete the whole run
    directory: deleting ``model.pt`` alone would leave ``result.json`` marking the run finished.
    """
    path = Path(run_dir) / WEIGHTS
    fix = f"delete the run directory {run_dir} and rerun the command that trained it (it trains that run again)"
    if not path.is_file():
        raise UserError(f"{path} is missing from a finished run; {fix}")
    state = run_store.load_checkpoint(path, map_location, fix=fix)
    if not isinstance(state.get("model"), dict):
        raise UserError(f"{path} holds no model weights; {fix}")
    return state["model"]


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


def _loss_acc(record: dict, name: str) -> str:
    """``"<name> loss L acc A "`` for the epoch log line (no accuracy for a regression)."""
    acc = record.get(f"{name}_acc")
    return f"{name} loss {record[f'{name}_loss']:.4f} " + ("" if acc is None else f"acc {acc:.4f} ")


def _truncate_metrics(run_dir: Path, epochs_done: int) -> None:
    """Drop metric lines of epochs after the checkpoint (written just before a crash)."""
    records = run_store.read_metrics(run_dir)
    kept = [r for r in records if r.get("epoch", 0) <= epochs_done]
    if len(kept) != len(records):
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
        atomic.atomic_write_bytes(Path(run_dir) / run_store.METRICS, text.encode())
