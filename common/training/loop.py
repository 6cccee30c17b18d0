"""One run's training loop, its rounds, for classifiers, regressions and token models (paper B.1-B.3 for the sweep).

The optimiser and schedule of a run are one declaration, its recipe (:mod:`common.training.recipes`: SGD,
Adam or AdamW, stored in the run's config and rebuilt from it). :func:`train` runs the rounds (epochs; under an
``AdamWRecipe``, rounds of ``eval_interval`` steps), each one pass of steps,
:func:`common.training.epoch.train_epoch` (per-step learning rate, bf16 autocast on accelerators, gradient
accumulation, a periodic non-finite-loss check), with optional ``torch.compile`` and channels_last memory. After every
epoch: one line in ``metrics.jsonl``; every ``eval_every``-th an evaluation (:func:`common.training.evaluation.evaluate`)
and every ``checkpoint_every``-th an atomic checkpoint (model, optimizer, schedule, RNG states, epoch), the last epoch
always both, so a killed run resumes (:func:`common.training.checkpoints.resume_run`) and ends with bit-identical
weights on the CPU. A non-finite loss stops the run with :class:`common.training.epoch.NonFiniteLossError` naming the
step; nothing is marked finished. ``TrainSettings.stopping`` (an ``EarlyStopping``) may end a run after any epoch;
its state is in every checkpoint, so a resumed run stops at the same epoch. A run whose steps left would take more
than an hour at the rate of its first steps is announced once, with the estimate (:mod:`common.training.long_run`).

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
whatever the training precision, with TF32 and HF32 off (:func:`common.training.evaluation.final_evaluation`);
checkpoints hold the RNG state of the current device of the type the run computes on only, so a run resumes
under any number of visible devices and a CPU run never touches a GPU.

Several processes (``torch.distributed``): DDP or FSDP2, placed by :mod:`common.training.parallel` (which
also gathers the checkpoints' full state dicts and applies a checkpoint to resume from, read by
rank 0 only); evaluations are split over the processes (:func:`common.training.evaluation.evaluate`); a non-finite
loss stops every process at once. Training ends with the gradients freed.

Run lifecycle (with :mod:`common.runs.run_store`): the caller prepares the run directory, calls
:func:`train` (which also writes the final weights ``model.pt``), then
:func:`common.training.checkpoints.finish_run` (``result.json`` last, then the checkpoint is dropped).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from common.errors import UserError
from common.runs import run_store
from common.training import device as devices
from common.training.checkpoints import resume_run, save_weights
from common.training.compile import Compilation, compiled
from common.training.epoch import train_epoch
from common.training.evaluation import evaluate, final_evaluation
from common.training.growing import GrowthState, RunGrowth, refuse_distributed, replay, schedule_at
from common.training.growing import insert as insert_block
from common.training.long_run import StepClock
from common.training.parallel import distribute, fsdp_bf16, full_state, place_model, rank, world_size
from common.training.recipes import Schedule, TrainSettings

log = logging.getLogger(__name__)

COUNTS = ("images", "tokens")  # what the rate of a round counts (train()'s ``counts``)


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
    grown = _replay_growth(growth, model, run_dir)  # the architecture of the checkpoint first: its state goes into it
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
        _train_rounds(run, train_loader, eval_loaders, on_epoch_end)
    return _finish(run, eval_loaders, final_eval_loaders or {})  # eager again: the blocks' compiled forwards are gone


def _replay_growth(growth: RunGrowth | None, model: nn.Module, run_dir: Path) -> GrowthState | None:
    """A growing run's insertions so far, replayed on ``model`` from its checkpoint (:func:`common.training.growing.replay`:
    the architecture the checkpoint's state is loaded into); None for a fixed model. Refused under torch.distributed."""
    if growth is None:
        return None
    refuse_distributed(world_size())
    saved = run_store.resume_state(run_dir, mmap=True)  # only its insertions: resume() in _start reads the tensors
    return replay(growth, model, saved.get("growth") if saved else None)


def _train_rounds(
    run: _Run,
    train_loader: Iterable,
    eval_loaders: dict[str, Iterable],
    on_epoch_end: Callable[[int, dict], None] | None,
) -> None:
    """The rounds from the one after the resumed checkpoint to the recipe's last, until early stopping or a growing
    run's FLOP budget ends them; ``on_epoch_end`` after each."""
    growth = run.growth
    if run.clock is not None:
        run.clock.start(run.step)
    for epoch in range(run.start_epoch, run.settings.recipe.rounds):
        if run.stop is not None and run.stop["stopped"]:
            break  # resumed after the stopping epoch's checkpoint
        if growth is not None:
            _grow(run, epoch)
            if not growth.fits(run.grown):
                break  # the FLOP budget has no room for another round
        record = _train_round(run, train_loader, eval_loaders, epoch)
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)


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
    clock: StepClock | None = None  # times the first steps: one warning if the run looks longer than an hour (rank 0)

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
    resumed = resume_run(run_dir, model, optimizer, shard=shard, device=device)
    if resumed is not None:
        start_epoch, step, wall = resumed["epoch"], resumed["schedule"]["step"], resumed["wall_s"]
        stop = resumed.get("stopping", stop)
        log.info("%s: resuming %s after epoch %d (step %d)", desc, run_dir, start_epoch, step)
    wrapped, no_sync = distribute(model, device, shard)  # DDP when more than one process and no sharding
    run = _Run(run_dir, settings, device, model, optimizer, schedule, shard, wrapped, no_sync, desc, counts)
    run.start_epoch, run.step, run.wall, run.stop = start_epoch, step, wall, stop
    run.steps_per_epoch, run.base_schedule = steps_per_epoch, schedule
    if run.main:
        flag = "--epochs" if settings.recipe.ROUNDS == "epochs" else "--steps"
        fix = f"interrupt and pass a smaller {flag}, or let it run: a killed run resumes from its last checkpoint"
        run.clock = StepClock(settings.recipe.rounds * steps_per_epoch, desc, fix)
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
        on_sync=run.clock.tick if run.clock is not None else None,
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
        _record_branch_ratios(run, epoch)
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


def _record_branch_ratios(run: _Run, epoch: int) -> None:
    """After round ``epoch``, each insertion made before it gets its blocks' branch / input norms
    (``RunGrowth.branch_ratios``; into the checkpoint and the summary with the insertion's record)."""
    if run.growth is None or run.growth.branch_ratios is None or run.grown is None:
        return
    for inserted in (r for r in run.grown.inserted if int(r["epoch"]) == epoch):
        inserted["branch_ratios"] = run.growth.branch_ratios(run.model)


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
        if run.growth is not None and run.growth.branch_ratios is not None:
            summary["growth"]["branch_ratios"] = run.growth.branch_ratios(run.model)
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
        save_weights(run.run_dir, weights)
    return summary


def _loss_acc(record: dict, name: str) -> str:
    """``"<name> loss L acc A "`` for the epoch log line (no accuracy for a regression)."""
    acc = record.get(f"{name}_acc")
    return f"{name} loss {record[f'{name}_loss']:.4f} " + ("" if acc is None else f"acc {acc:.4f} ")
