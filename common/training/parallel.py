"""Where a model computes during training: one device, DDP, or FSDP2 shards; and the checkpoint's way back in.

Several processes (``torch.distributed``): DDP (gradients as views into its buckets, :func:`distribute`),
or FSDP2 with ``TrainSettings.fsdp`` (the model sharded on the CPU, each unit moved to the device as it
is sharded: :func:`place_model`). Checkpoints hold full state dicts however the model is spread
(:func:`full_state` gathers them). Only rank 0 reads a checkpoint to resume from, the others receive
its tensors one at a time (:func:`resume`). The loop that uses all this is :mod:`common.training.loop`; the
processes themselves are started by :mod:`common.training.distributed`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
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

from common.errors import UserError
from common.runs import run_store
from common.training import device as devices
from common.training.distributed import broadcast_from_main
from common.training.recipes import TrainSettings


def world_size() -> int:
    """The number of processes of ``torch.distributed`` (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def place_model(model: nn.Module, device: torch.device, settings: TrainSettings) -> bool:
    """Put ``model`` where :func:`common.training.loop.train` computes with it; True when it is sharded (FSDP2).

    Without sharding: ``model.to(device)`` (and channels_last memory when asked). With ``settings.fsdp``
    and several processes the model is sharded while still on the CPU, and FSDP2 moves each unit to
    ``device`` as it shards it (:func:`shard_model`): no device ever holds the whole model, only its
    shards and, for a moment, one unit in full. A model sharded already stays sharded (parameters a
    forward left gathered are resharded, so that an optimizer made next holds the shards).
    """
    shard = settings.fsdp and world_size() > 1
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
    mesh = init_device_mesh(device.type, (world_size(),)) if device is not None else None
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16_params
        else MixedPrecisionPolicy()
    )
    for block in getattr(model, "blocks", ()):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def distribute(model: nn.Module, device: torch.device, shard: bool) -> tuple[nn.Module, Callable | None]:
    """What computes the forwards of a placed ``model``, and the context that skips a gradient reduction (or None).

    With several processes and no sharding: DDP (gradients averaged over the processes, living in its
    buckets: ``gradient_as_bucket_view``, no second copy), with its ``no_sync``; sharded: the model
    itself, with FSDP2's counterpart of ``no_sync``; one process: the model, None.
    """
    if world_size() > 1 and not shard:
        ddp = DistributedDataParallel(
            model, device_ids=[device] if device.type != "cpu" else None, gradient_as_bucket_view=True
        )
        return ddp, ddp.no_sync
    return model, functools.partial(_no_gradient_sync, model) if shard else None


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
    world = world_size()
    state = run_store.resume_state(run_dir, mmap=device.type != "cpu") if rank() == 0 else None
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
    return f"checkpoint {run_store.checkpoint_path(run_dir)} {what}; delete it to restart that run from scratch"


def _misfit(run_dir: Path, exc: BaseException) -> str:
    """The one line for a checkpoint whose tensors do not fit this run's model or optimizer (another depth, ...)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"checkpoint {run_store.checkpoint_path(run_dir)} does not fit this run's model ({first[:160]}); it was written "
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
    main = rank() == 0
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
        f"(or delete {run_store.checkpoint_path(run_dir)} to start over)"
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
