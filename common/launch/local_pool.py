"""``--launcher local``: a rolling pool of submitit local jobs, one per slot of this machine's devices
(docs/design.md, section "Runs, records and launching").

Each run gets one visible GPU (NPU) of its own and at most as many run at once as there are devices, or as
there are CPU cores on a machine without any (:func:`local_slots`); a distributed run gets every visible device,
one task each, and runs alone. ``--runs-per-device K`` gives every device K slots (K runs share it, time-sliced,
or under CUDA MPS where its daemon runs), and a CPU core K runs. A CPU job computes with :data:`CPU_THREADS` intra-op
threads whatever K is, so its records are those of the same run alone (apart from timings): a CPU result depends on
its thread count, never on what else runs. :func:`longest_first` orders the runs (the pool's rolling start then
ends with the short runs), :func:`run_in_slots` is the pool, :func:`run_local` its use by
:func:`common.launch.launcher.launch`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import submitit
from tqdm.auto import tqdm

from common.errors import UserError
from common.runs.run_store import RunSpec
from common.training.device import RUNS_PER_DEVICE_ENV, cpu_count, resolve_device
from common.training.distributed import visible_devices

log = logging.getLogger(__name__)

JobFn = Callable[[RunSpec], dict]
CPU_THREADS = 1  # intra-op threads of a --launcher local CPU job: one core per slot, fixed whatever K is
LOCAL_POLL_S = 0.5  # how often --launcher local looks for a finished job to start the next run
VISIBLE_DEVICES_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}


@dataclass(frozen=True)
class LocalSlot:
    """One place where a ``--launcher local`` job runs: its devices and number of processes.

    ``params`` are submitit ``LocalExecutor`` parameters (``tasks_per_node``, and on CUDA
    ``gpus_per_node`` and ``visible_gpus``: submitit sets the job's ``CUDA_VISIBLE_DEVICES`` to
    ``visible_gpus[:gpus_per_node]``, and to ``range(gpus_per_node)`` without it, ``''`` for
    none). ``env`` holds variables the job process starts with (an NPU's
    ``ASCEND_RT_VISIBLE_DEVICES``, which submitit does not set).
    """

    label: str = "cpu"
    params: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)


def local_slots(device: str, *, distributed: bool, runs_per_device: int = 1) -> list[LocalSlot]:
    """Where ``--launcher local`` runs jobs for ``--device device``; one job per slot at a time.

    - CUDA GPUs or Ascend NPUs: a one-process run gets one device (``runs_per_device`` slots per
      visible device, so K times as many runs at once as devices, the devices' first slots first);
      a ``distributed`` run gets every visible device, one task each, and runs alone (one slot).
    - MPS: ``runs_per_device`` slots (one GPU); the CPU: ``runs_per_device`` slots per core, each job seeing no
      GPU and computing with :data:`CPU_THREADS` threads (``OMP_NUM_THREADS``; :class:`common.launch.launcher.RunJob` sets
      torch's count from it).

    Devices are named as this process sees them (``CUDA_VISIBLE_DEVICES=2,3`` gives jobs ``2``
    and ``3``, not ``0`` and ``1``). A distributed run with ``runs_per_device`` > 1 is a :class:`UserError`.
    """
    if runs_per_device < 1:
        raise UserError(f"--runs-per-device {runs_per_device}: give a positive number of runs per device")
    if distributed and runs_per_device > 1:
        raise UserError(
            f"--runs-per-device {runs_per_device}: this script's runs are distributed (one process per device, every "
            "device for one run), so devices cannot be shared between runs; leave --runs-per-device at 1"
        )
    kind = resolve_device(device).type
    shared = {RUNS_PER_DEVICE_ENV: str(runs_per_device)} if runs_per_device > 1 else {}  # cudnn.benchmark off there
    if kind == "mps":
        return [LocalSlot(label="mps", env=shared) for _ in range(runs_per_device)]
    if kind not in VISIBLE_DEVICES_ENV:
        threads = {"OMP_NUM_THREADS": str(CPU_THREADS)}
        return [LocalSlot(env=threads) for _ in range(cpu_count() * runs_per_device)]
    ids = visible_device_ids(kind, visible_devices(kind))
    if distributed:
        return [_device_slot(kind, ids)]
    slots = [_device_slot(kind, [one]) for _ in range(runs_per_device) for one in ids]
    return [replace(slot, env={**slot.env, **shared}) for slot in slots]


def longest_first(specs: Sequence[RunSpec], cost: Callable[[dict], float] | None) -> list[RunSpec]:
    """``specs`` by ``cost(config)`` (an estimate of a run's training FLOPs), the largest first; the plan's order
    among equal costs, and without ``cost``. With K runs per device the pool then never ends waiting on one long run
    started last (longest-processing-time-first scheduling)."""
    if cost is None:
        return list(specs)
    return sorted(specs, key=lambda spec: -cost(spec.config))


def visible_device_ids(kind: str, count: int) -> list[str]:
    """The ``count`` devices of ``kind`` this process sees, as its ``*_VISIBLE_DEVICES`` names them.

    Unset: ``0 .. count-1``. Set: its first ``count`` entries (CUDA ignores every entry from the
    first invalid one on, so ``count`` devices are exactly those).
    """
    listed = os.environ.get(VISIBLE_DEVICES_ENV[kind])
    if listed is None:
        return [str(i) for i in range(count)]
    return [entry.strip() for entry in listed.split(",")][:count]


def _device_slot(kind: str, ids: Sequence[str]) -> LocalSlot:
    """A slot owning the devices ``ids`` of ``kind``, one task per device."""
    label = f"{kind}:{','.join(ids)}"
    params: dict[str, Any] = {"tasks_per_node": len(ids)}
    if kind != "cuda":
        return LocalSlot(label=label, params=params, env={VISIBLE_DEVICES_ENV[kind]: ",".join(ids)})
    if not all(entry.isdigit() for entry in ids):
        variable = VISIBLE_DEVICES_ENV[kind]
        raise UserError(
            f"{variable}={os.environ.get(variable)}: --launcher local hands GPUs to its jobs by index (submitit's "
            f"visible_gpus), and GPU UUIDs or MIG names are not indices; set {variable} to indices such as 0,1, "
            "or use --launcher inline"
        )
    return LocalSlot(label=label, params={**params, "gpus_per_node": len(ids), "visible_gpus": tuple(map(int, ids))})


def run_in_slots(
    specs: Sequence[RunSpec],
    slots: Sequence[LocalSlot],
    start,
    *,
    poll_s: float = LOCAL_POLL_S,
    on_done: Callable[[], Any] | None = None,
) -> list:
    """``start(spec, slot)`` for each spec, in order, while at most one job per slot is unfinished.

    ``start`` returns a job with ``done()``; a slot takes the next spec once its job is done (a
    rolling pool: a long run never holds up the other slots). Returns the jobs in ``specs``
    order after every one is done; ``on_done`` is called once per finished job.
    """
    if not slots:
        raise ValueError("run_in_slots needs at least one slot")
    queue, free = deque(specs), deque(range(len(slots)))
    jobs, running = [], []
    while queue or running:
        while queue and free:
            index = free.popleft()
            job = start(queue.popleft(), slots[index])
            jobs.append(job)
            running.append((job, index))
        time.sleep(poll_s)
        for job, index in [pair for pair in running if pair[0].done()]:
            running.remove((job, index))
            free.append(index)
            if on_done is not None:
                on_done()
    return jobs


def run_local(
    job: JobFn, todo: list[RunSpec], params: dict, folder: Path, slots: Sequence[LocalSlot], desc: str
) -> list[submitit.Job]:
    """Every run of ``todo`` as a submitit local job, in the ``slots`` pool; waits for all."""

    def start(spec: RunSpec, slot: LocalSlot) -> submitit.Job:
        executor = _local_executor(folder, params, slot)
        with _environ(slot.env):  # the job's process copies this environment when it starts
            sub = executor.submit(job, spec)
        log.info("%s: local job %s on %s (logs under %s)", spec.name, sub.job_id, slot.label, folder)
        return sub

    log.info("%s: %d runs on %d local slots (%s)", desc, len(todo), len(slots), ", ".join(s.label for s in slots[:8]))
    with tqdm(total=len(todo), desc=desc, unit="run") as bar:
        return run_in_slots(todo, slots, start, on_done=bar.update)


def _local_executor(folder: Path, params: Mapping[str, Any], slot: LocalSlot) -> submitit.LocalExecutor:
    """submitit's ``LocalExecutor`` itself: ``AutoExecutor`` does not pass ``visible_gpus`` on."""
    executor = submitit.LocalExecutor(folder=str(folder))
    generic = {k: v for k, v in params.items() if not k.startswith("slurm_")}
    executor.update_parameters(**{"timeout_min": 60, **generic, **slot.params})
    return executor


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the duration, then restore what was there."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
