"""Evaluation during and after training: the per-round evaluations and the final float32 ones of a run.

- :func:`evaluate`: mean cross-entropy and accuracy (a regression: the mean squared error) over every target of a
  loader, in eval mode; under ``torch.distributed`` split over the processes (:func:`shard_batches`: every process
  runs as many forwards as the others) and the float64 sums all-reduced (:func:`all_reduce_sums`);
- :func:`final_evaluation`: the losses a run's summary reports, in float32 without autocast and with TF32/HF32 off
  (:func:`common.science.precision.full_precision`), so they compare across depths and devices.

Loss sums are float64 (on the CPU for devices without float64). :func:`common.training.loop.train` evaluates with
these after its rounds and at its end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from common.science.precision import float32_reduced_on, float64_device, full_precision, supports_float64
from common.training import device as devices
from common.training.parallel import fsdp_bf16, rank, world_size
from common.training.recipes import TrainSettings


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
        total, right, count = all_reduce_sums(device, total, right, count)
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


def all_reduce_sums(device: torch.device, *values: float) -> list[float]:
    """Each value summed over the processes (one all-reduce)."""
    dtype = torch.float64 if supports_float64(device) else torch.float32  # on the device, where the collective runs
    totals = torch.tensor(values, dtype=dtype, device=device)
    dist.all_reduce(totals)
    return totals.tolist()
