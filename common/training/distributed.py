"""One process per accelerator, started by ``torchrun`` or by submitit on SLURM, same code path.

``torchrun`` exports ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``. A submitit job with ``tasks_per_node = gpus`` (``launch_from_args(...,
distributed=True)``) has SLURM's variables instead; the launcher's job wrapper turns them into
the same five before the job function starts (:func:`common.launch.launcher.export_submitit_env`), so
:func:`init_distributed` only ever initialises ``torch.distributed`` from the environment
(``env://``) and this module knows nothing about SLURM or submitit. A single process (no
``WORLD_SIZE`` or ``WORLD_SIZE=1``) needs no process group: it is a no-op.

Devices: on an Ascend NPU ``torch_npu`` is imported first (it registers ``torch.npu`` and the
HCCL backend). Each process computes on ``<type>:<local_rank>`` when it sees every device of its
node, and on ``<type>:0`` when SLURM binds one device per task (``--gpus-per-task``,
``--gpu-bind``: each process sees only its own); :func:`local_device_index` decides.

Timeouts: a collective that does not complete within :func:`collective_timeout` (default
:data:`DEFAULT_TIMEOUT_MIN` minutes, ``DS_DIST_TIMEOUT_MIN`` in the environment overrides it; NCCL's
own default is 10) aborts the job. While one rank works alone (downloads a model, probes, writes
the final weights) the others wait in :func:`wait_for_all`: a barrier on a CPU (gloo) group with
the longer :func:`wait_timeout`, outside the accelerator's collective watchdog.

Scripts whose runs are one process each refuse to be started N times by ``torchrun``
(:func:`common.launch.launcher.refuse_torchrun`): the copies would all write the same run directories.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from common.errors import UserError
from common.training.device import import_torch_npu

log = logging.getLogger(__name__)

BACKENDS = {"cuda": "nccl", "npu": "hccl", "cpu": "gloo"}
TIMEOUT_ENV = "DS_DIST_TIMEOUT_MIN"
DEFAULT_TIMEOUT_MIN = 30.0  # a collective's limit; NCCL's default (10) is shorter than a 2.8B checkpoint write
WAIT_TIMEOUT_MIN = 360.0  # the least a rank waits in wait_for_all while another works alone

_wait_group = None  # the CPU (gloo) group of wait_for_all when the job's backend is not gloo


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` of ``world_size`` (``local_rank`` on its node)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    device: str | None = None  # e.g. "cuda:0": the device this process computes on (None: unchanged)

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


def local_device_index(local_rank: int, visible: int, kind: str = "cuda") -> int:
    """Index of this process's device among the ``visible`` ones of type ``kind``.

    ``local_rank`` when the process sees all of its node's devices (torchrun, submitit with
    every GPU visible); 0 when it sees exactly one (SLURM ``--gpus-per-task=1`` or
    ``--gpu-bind``: each task's own device is its ``<type>:0``). Anything else is a user error.
    """
    if visible <= 0:
        raise UserError(
            f"local rank {local_rank} sees no {kind} device; request devices for every task (e.g. --gpus-per-task=1)"
        )
    if local_rank < visible:
        return local_rank
    if visible == 1:
        return 0
    raise UserError(
        f"local rank {local_rank} sees only {visible} {kind} devices; start one process per visible device, "
        "or bind one device per task (SLURM --gpus-per-task=1)"
    )


def visible_devices(kind: str) -> int:
    """How many devices of type ``kind`` ("cuda", "npu") this process sees."""
    return int(torch.npu.device_count()) if kind == "npu" else torch.cuda.device_count()  # type: ignore[attr-defined]


def collective_timeout() -> datetime.timedelta:
    """How long a collective may take before the job aborts: ``DS_DIST_TIMEOUT_MIN`` minutes, else :data:`DEFAULT_TIMEOUT_MIN`."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        minutes = float(text) if text else DEFAULT_TIMEOUT_MIN
    except ValueError:
        minutes = -1.0
    if not minutes > 0:
        raise UserError(
            f"{TIMEOUT_ENV}={text}: give the collective timeout in minutes, a positive number (default {DEFAULT_TIMEOUT_MIN:g})"
        )
    return datetime.timedelta(minutes=minutes)


def wait_timeout() -> datetime.timedelta:
    """How long :func:`wait_for_all` waits: the collective timeout, and at least :data:`WAIT_TIMEOUT_MIN` minutes."""
    return max(collective_timeout(), datetime.timedelta(minutes=WAIT_TIMEOUT_MIN))


def init_distributed(device: str | torch.device = "cpu", *, timeout: datetime.timedelta | None = None) -> DistInfo:
    """Join the process group of this job (torchrun or submitit), or do nothing when alone.

    ``device`` is the device type the job computes on; it picks the backend and, on CUDA or
    NPU, the process's current device (:func:`local_device_index`), returned as ``DistInfo.device``.
    ``timeout``: the collectives' limit (default :func:`collective_timeout`). On CUDA the group is
    bound to the process's device (``device_id``: NCCL connects at once, and barriers know their GPU).
    A node with more visible devices than processes (``LOCAL_WORLD_SIZE``) is logged as a warning.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = backend_for(device)
    kind = device_type(device)
    where = None
    if kind == "npu":
        import_torch_npu()  # registers torch.npu and the hccl backend (a UserError when missing)
    if kind in ("cuda", "npu"):
        visible = visible_devices(kind)
        index = local_device_index(local_rank, visible, kind)
        getattr(torch, kind).set_device(index)
        where = f"{kind}:{index}"
        if local_rank == 0:
            warn_idle_devices(os.environ.get("LOCAL_WORLD_SIZE"), visible, kind)
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend,
            init_method="env://",
            rank=rank,
            world_size=world_size,
            timeout=timeout or collective_timeout(),
            device_id=torch.device(where) if kind == "cuda" else None,
        )
        _start_wait_group(backend)
        log.info(
            "rank %d of %d (local rank %d, %s) joined the %s process group",
            rank,
            world_size,
            local_rank,
            where or kind,
            backend,
        )
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend, device=where)


def warn_idle_devices(local_world_size: str | None, visible: int, kind: str = "cuda") -> bool:
    """Log a warning (and return True) when fewer processes run on this node than it has visible devices.

    ``local_world_size`` is ``LOCAL_WORLD_SIZE`` (torchrun and the submitit wrapper export it; None:
    unknown, no warning). A SLURM profile that asks for 8 GPUs but 4 tasks, or GPUs through ``gres``
    with one task, leaves the rest idle.
    """
    if not local_world_size or not local_world_size.isdigit() or int(local_world_size) >= visible:
        return False
    n = int(local_world_size)
    log.warning(
        "%d processes on this node but %d visible %s devices: %d stay idle; start one process per device "
        "(torchrun --nproc-per-node %d, or tasks_per_node = GPUs per node in the SLURM profile)",
        n,
        visible,
        kind,
        visible - n,
        visible,
    )
    return True


def _start_wait_group(backend: str) -> None:
    """The CPU group of :func:`wait_for_all` (every process calls this once, right after joining)."""
    global _wait_group
    _wait_group = None if backend == "gloo" else dist.new_group(backend="gloo", timeout=wait_timeout())


def wait_for_all() -> None:
    """Barrier for the ranks that wait while another works alone (rank 0 probes, writes, downloads); a no-op when alone.

    ``monitored_barrier`` on a CPU (gloo) group with :func:`wait_timeout`: no collective is queued
    on the accelerator, so its watchdog (the collective timeout) does not run out while rank 0 works;
    a rank that never arrives is named when the wait timeout ends.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    dist.monitored_barrier(group=_wait_group, timeout=wait_timeout(), wait_all_ranks=True)


def destroy_distributed() -> None:
    """Leave the process group, if any (call once at the end of a distributed job)."""
    global _wait_group
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()  # every group, the wait group too
    _wait_group = None


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


def process_device(device: torch.device, info: DistInfo) -> torch.device:
    """This process's device: ``<type>:<current index>`` under DDP on an accelerator (set by init_distributed)."""
    if info.world_size > 1 and device.type in ("cuda", "npu"):
        return torch.device(device.type, getattr(torch, device.type).current_device())
    return device
