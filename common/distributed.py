"""One process per accelerator, started by ``torchrun`` or by submitit on SLURM, same code path.

``torchrun`` exports ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``. A submitit job with ``tasks_per_node = gpus`` (``launch_from_args(...,
distributed=True)``) has SLURM's variables instead; the launcher's job wrapper turns them into
the same five before the job function starts (:func:`common.launch.export_submitit_env`), so
:func:`init_distributed` only ever initialises ``torch.distributed`` from the environment
(``env://``) and this module knows nothing about SLURM or submitit. A single process (no
``WORLD_SIZE`` or ``WORLD_SIZE=1``) needs no process group: it is a no-op.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

BACKENDS = {"cuda": "nccl", "npu": "hccl", "cpu": "gloo"}


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` of ``world_size`` (``local_rank`` on its node)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the records; the other ranks only compute."""
        return self.rank == 0


def device_type(device: str | torch.device) -> str:
    """``"cuda"`` for ``"cuda:1"`` or ``torch.device("cuda", 1)``; ``"npu"`` even without torch_npu."""
    return device.type if isinstance(device, torch.device) else str(device).split(":")[0]


def backend_for(device: str | torch.device) -> str:
    """``nccl`` on CUDA, ``hccl`` on an Ascend NPU, ``gloo`` on the CPU."""
    kind = device_type(device)
    if kind not in BACKENDS:
        raise ValueError(f"no torch.distributed backend for device type {kind!r}; use one of {', '.join(BACKENDS)}")
    return BACKENDS[kind]


def init_distributed(device: str | torch.device = "cpu") -> DistInfo:
    """Join the process group of this job (torchrun or submitit), or do nothing when alone.

    ``device`` is the device type the job computes on; it picks the backend and, on CUDA or
    NPU, the process's device becomes ``<type>:<local_rank>``.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = backend_for(device)
    kind = device_type(device)
    if kind == "cuda":
        torch.cuda.set_device(local_rank)
    elif kind == "npu":
        torch.npu.set_device(local_rank)  # type: ignore[attr-defined]  (registered by torch_npu)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world_size)
        log.info("rank %d of %d (local rank %d) joined the %s process group", rank, world_size, local_rank, backend)
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend)


def destroy_distributed() -> None:
    """Leave the process group, if any (call once at the end of a distributed job)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def env_info() -> DistInfo:
    """Where this process sits according to torchrun's variables, before any process group exists.

    ``DistInfo()`` (rank 0 of 1) outside torchrun; the backend is None until :func:`init_distributed`.
    """
    return DistInfo(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )


def broadcast_from_main(obj):
    """Rank 0's ``obj`` on every process (a pickled object; the group must be initialised)."""
    payload = [obj]
    dist.broadcast_object_list(payload, src=0)
    return payload[0]

