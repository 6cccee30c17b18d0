"""Growth inside one training run: the model grows at epoch boundaries a plan fixes, on the run's one schedule.

The engine that :func:`common.training.loop.train` runs when given a :class:`RunGrowth` (script 03; docs/decisions.md,
section "Function-preserving growth"). One loop, not a second one: before round ``e`` (0-based, i.e. after ``e``
epochs) every :class:`Insertion` planned for ``e`` is applied, then the round trains as any other. At an insertion:

- the block goes in at a zero output (``RunGrowth.insert``: the model's own rule, in place) and the grown model must
  give the parent's outputs bit for bit in float64, in train and eval mode
  (:func:`common.science.growth.check_function_preserved`), or the run fails;
- the optimizer is rebuilt over the grown model's parameters by the run's recipe, and every existing parameter
  keeps its state (SGD momentum, Adam moments and step count): the new block's parameters join with none, i.e.
  zero state (the paper's zero-state first update concerns exactly these), at the learning rate of the next step;
- the learning rate keeps following the run's one :class:`~common.training.recipes.Schedule`, a function of the fraction
  ``step / total_steps`` of the run's step budget spent: no second warm-up, no restart.

``RunGrowth.restart`` is the ablation (today's stage-by-stage recipe inside the engine): at every insertion the
optimizer starts empty (momentum 0) and the schedule restarts, its warm-up and then a cosine to the end of the
segment (the next planned insertion, or the run's end): :class:`SegmentSchedule`.

A run may instead be grown by a *controller* (``RunGrowth.decide``, script 09): at each epoch boundary it is
asked whether to insert and where (it measures an eager copy of the model); whatever it measured goes into
``GrowthState.probes`` (every checkpoint holds them, so a resumed run decides again from the same state). A run may
also have a training budget in FLOPs (``RunGrowth.budget_flops``): its learning rate is then the schedule's at the
fraction of the budget spent (:class:`BudgetSchedule`), so a run that grows, and one that never does, follow the
same schedule; an epoch is trained only if it fits in what is left of the budget.

Records: each applied insertion (round, step, place, seed, the function check) goes into every checkpoint and
into the summary; on resume the insertions a checkpoint holds are replayed on the freshly built starting model
(:func:`replay`, same places and seeds: the blocks' weights come from their own seeded generators, never the
global RNG) before its state is loaded, so a run killed before or just after an insertion resumes bit-identically
on the CPU. Insertions fall on epoch boundaries, so checkpoints stay at the run's own cadence (every
``checkpoint_every`` rounds): a run killed after an insertion resumes from the checkpoint before it and inserts
again. Training FLOPs are counted as the run goes (``RunGrowth.flops_per_example``, :mod:`common.training.flops`'s count
at the current depth, times the examples each round trained). Growth under DDP or FSDP is refused
(:func:`refuse_distributed`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from common.errors import UserError
from common.science.growth import check_function_preserved
from common.training.recipes import Schedule


@dataclass(frozen=True)
class Insertion:
    """One insertion: before round ``epoch`` (0-based: after ``epoch`` rounds), its block drawn from ``seed``, at
    candidate ``place`` (None: where the model's own rule puts it)."""

    epoch: int
    seed: int
    place: int | None = None


@dataclass(frozen=True)
class RunGrowth:
    """How one run grows (given to :func:`common.training.loop.train` as ``growth``).

    ``insert(model, seed, place)`` inserts one zero-output block in place (at candidate ``place``; None: the model's
    own rule decides where) and returns ``(place, block)``; it must draw the block's weights from ``seed`` alone.
    ``check_inputs``: the inputs of the float64 function check (on the model's device). ``flops_per_example(model)``:
    training FLOPs of one example at the model's current depth (:func:`common.training.flops.training_flops_per_image`).

    ``insertions``: a fixed plan; or ``decide(model, epoch, state)``, a controller asked before every round
    ``epoch >= 1`` (``model``: the training model, which it must not change: it measures an :func:`eager_copy`;
    ``state``: the run's :class:`GrowthState`, whose ``probes`` it may append to), returning the insertion to apply
    then or None. ``budget_flops`` with ``epoch_examples`` (the
    examples one round trains): the run's budget (module docstring); the learning rate at a fraction ``f`` of it is
    the schedule of ``schedule_epochs`` epochs (the recipe's warm-up, then its decay) at ``f`` of its steps, while the
    recipe's epochs only bound the loop. ``branch_ratios(model)``: what each block's branch output measures against its
    input (:func:`common.science.branch_scale.branch_ratios`), recorded in an insertion's record after the round it
    was inserted before, and in the summary's ``growth`` at the end of the run.
    """

    insertions: tuple[Insertion, ...]
    insert: Callable[[nn.Module, int, int | None], tuple[int, nn.Module]]
    check_inputs: torch.Tensor
    flops_per_example: Callable[[nn.Module], int]
    restart: bool = False  # the ablation: optimizer and schedule restarted at every insertion
    decide: Callable[[nn.Module, int, GrowthState], Insertion | None] | None = None
    budget_flops: int | None = None
    epoch_examples: int = 0
    schedule_epochs: int | None = None  # with a budget: the epochs of the schedule it follows (None: the recipe's)
    branch_ratios: Callable[[nn.Module], list[dict]] | None = None  # per block, branch / input norm (records only)

    def __post_init__(self) -> None:
        epochs = [i.epoch for i in self.insertions]
        if any(e < 1 for e in epochs) or epochs != sorted(epochs):
            raise ValueError(f"insertion rounds {epochs} must be >= 1 and in order")
        if self.decide is not None and self.insertions:
            raise ValueError("a run is grown by a fixed plan or by a controller, not both")
        if self.budget_flops is not None and (self.restart or self.epoch_examples <= 0):
            raise ValueError("a FLOP budget needs epoch_examples > 0 and one schedule (no restart)")

    def due(self, model: nn.Module, epoch: int, state: GrowthState) -> list[Insertion]:
        """The insertions to apply before round ``epoch``: the plan's, or the controller's decision."""
        if self.decide is None:
            return [i for i in self.insertions if i.epoch == epoch]
        if epoch < 1:
            return []
        chosen = self.decide(model, epoch, state)
        return [] if chosen is None else [chosen]

    def fits(self, state: GrowthState) -> bool:
        """Whether one more round at the current depth fits in the budget (always, without one)."""
        return self.budget_flops is None or state.flops + state.per_example * self.epoch_examples <= self.budget_flops


@dataclass(frozen=True)
class SegmentSchedule:
    """The restart ablation's schedule: ``inner`` (warm-up, cosine to 0 over the segment) from step ``offset`` on."""

    inner: Schedule
    offset: int

    @property
    def base_lr(self) -> float:
        return self.inner.base_lr

    def lr(self, step: int) -> float:
        return self.inner.lr(step - self.offset)


@dataclass(frozen=True)
class BudgetSchedule:
    """The learning rate as a function of the fraction of a FLOP budget spent: ``base`` at step
    ``fraction x base.total_steps``, the fraction counted from ``flops`` at step ``step`` on, ``per_step`` FLOPs a
    step (constant within a round: the depth changes only between rounds)."""

    base: Schedule
    budget: int
    flops: int
    step: int
    per_step: int

    @property
    def base_lr(self) -> float:
        return self.base.base_lr

    def fraction(self, step: int) -> float:
        return (self.flops + (step - self.step) * self.per_step) / self.budget

    def lr(self, step: int) -> float:
        return self.base.lr(min(self.fraction(step), 1.0) * self.base.total_steps)


@dataclass
class GrowthState:
    """What a growing run carries between rounds and in its checkpoints."""

    inserted: list[dict] = field(default_factory=list)  # per applied insertion: epoch, step, place, seed, check
    flops: int = 0  # training FLOPs so far
    per_example: int = 0  # training FLOPs of one example at the current depth
    probes: list[dict] = field(default_factory=list)  # a controller's records, one per decision (RunGrowth.decide)
    probe_flops: int = 0  # FLOPs a controller spent measuring (counted apart from training)

    def to_checkpoint(self) -> dict:
        return {
            "inserted": list(self.inserted),
            "flops": int(self.flops),
            "probes": list(self.probes),
            "probe_flops": int(self.probe_flops),
        }


def refuse_distributed(world: int) -> None:
    """Growth inside a run rebuilds the optimizer and the model's module list: not under DDP or FSDP (yet)."""
    if world > 1:
        raise UserError(
            f"growth inside a training run is not supported under torch.distributed ({world} processes): "
            "run it in one process (--launcher inline or local, one device per run)"
        )


def replay(growth: RunGrowth, model: nn.Module, saved: dict | None) -> GrowthState:
    """The insertions a checkpoint recorded (``saved``: its ``growth`` entry; None: a fresh start), applied again to
    the freshly built starting ``model`` before the checkpoint's state is loaded into it; the state to go on with."""
    state = GrowthState()
    for record in (saved or {}).get("inserted", []):
        place, _ = growth.insert(model, int(record["seed"]), record.get("chosen"))
        if place != record["place"]:
            raise UserError(
                f"the checkpoint records an insertion at place {record['place']}, the model's rule now gives {place}; "
                "delete the run directory and rerun it"
            )
        state.inserted.append(dict(record))
    state.flops = int((saved or {}).get("flops", 0))
    state.probes = [dict(p) for p in (saved or {}).get("probes", [])]
    state.probe_flops = int((saved or {}).get("probe_flops", 0))
    state.per_example = growth.flops_per_example(model)
    return state


def insert(
    growth: RunGrowth,
    state: GrowthState,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    *,
    insertion: Insertion,
    step: int,
    where: str,
    memory_format: torch.memory_format | None = None,
) -> tuple[torch.optim.Optimizer, nn.Module]:
    """Apply ``insertion`` to ``model`` in place (checked in float64); the optimizer to train on with, and the block.

    The new optimizer is ``make_optimizer(model)`` (the recipe's own parameter groups) holding the old optimizer's
    state for every parameter the parent had, none for the new block's (``growth.restart``: none at all).
    """
    parent = eager_copy(model)
    place, block = growth.insert(model, insertion.seed, insertion.place)
    if memory_format is not None:
        block.to(memory_format=memory_format)  # as the rest of the model (common.training.parallel.place_model)
    child = eager_copy(model)
    check = check_function_preserved(parent, child, growth.check_inputs, what=f"{where}: insertion at place {place}")
    record = {"epoch": insertion.epoch, "step": step, "place": place, "seed": insertion.seed, "function_check": check}
    if insertion.place is not None:
        record["chosen"] = insertion.place  # replayed at the same place (a controller's choice)
    state.inserted.append(record)
    state.per_example = growth.flops_per_example(child)
    del parent, child
    grown = make_optimizer(model)
    if not growth.restart:
        grown.state.update(optimizer.state)  # keyed by parameter: the parent's, which the grown model still holds
    return grown, block


def schedule_at(
    growth: RunGrowth, base: Schedule, steps_per_epoch: int, state: GrowthState, step: int, per_step: int = 0
):
    """The schedule the step ``step`` trains on: ``base`` itself; with a budget the :class:`BudgetSchedule` from the
    FLOPs spent so far (``per_step``: FLOPs of one step at the current depth); under ``growth.restart`` the segment
    since the last insertion at or before ``step`` (warm-up and cosine to the next planned insertion or the run's
    end)."""
    if growth.budget_flops is not None:
        if growth.schedule_epochs is not None:
            base = replace(base, total_steps=growth.schedule_epochs * steps_per_epoch)
        return BudgetSchedule(base, growth.budget_flops, state.flops, step, per_step)
    if not growth.restart:
        return base
    inserted = state.inserted
    starts = [int(r["step"]) for r in inserted if int(r["step"]) <= step]
    start = max(starts, default=0)
    ends = [i.epoch * steps_per_epoch for i in growth.insertions if i.epoch * steps_per_epoch > start]
    end = min(ends, default=base.total_steps)
    inner = Schedule(base.base_lr, end - start, base.warmup_steps, min_lr=base.min_lr, decay=base.decay)
    return SegmentSchedule(inner, start) if start else inner


def eager_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` without the compiled forwards that :func:`common.training.compile.compiled` sets on its blocks
    (instance attributes bound to the original blocks: a copy would run the original's weights)."""
    twin = copy.deepcopy(model)
    for module in twin.modules():
        vars(module).pop("forward", None)
    return twin


__all__ = [
    "BudgetSchedule",
    "GrowthState",
    "Insertion",
    "RunGrowth",
    "SegmentSchedule",
    "eager_copy",
    "insert",
    "refuse_distributed",
    "replay",
    "schedule_at",
]
