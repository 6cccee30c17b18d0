"""Run job functions inline or through submitit, locally or on SLURM (docs/design.md, section "Runs, records
and launching").

A *job function* lives in ``common/experiments/`` (so submitit can pickle it), takes one
:class:`common.runs.run_store.RunSpec` and returns the run's result dict. It prepares its run directory with
:func:`common.runs.run_store.prepare_run`, resumes from :func:`common.runs.run_store.resume_state`, and writes
``result.json`` last. The launcher only decides *where* it runs:

- ``inline``: in this process, one run after another;
- ``local``: submitit's local executor, one process per run, waited for; each run gets one
  visible GPU (NPU) and at most as many run at once as there are devices, or as
  there are CPU cores on a machine without any, times ``--runs-per-device`` (the longest runs
  first: :func:`common.launch.local_pool.local_slots`, :func:`common.launch.local_pool.longest_first`);
- ``slurm``: one SLURM job array per call (parameters from a profile, see
  :mod:`common.launch.slurm`; submitted by :mod:`common.launch.submitit_jobs`), requeued on preemption or timeout
  and resumed from the run's last checkpoint; waited for only with ``--wait``.

A failed local or SLURM job is read back by :func:`common.launch.submitit_jobs.raise_failures`: one error names
every failed run, its exception and its log.

Finished runs are skipped before anything is started or submitted, and runs whose SLURM job is
still queued or running are not submitted again: rerunning a command never does a run twice.
A script whose runs are one process each refuses to be started several times by ``torchrun``
(:func:`refuse_torchrun`); only distributed job kinds cooperate across such processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit
from tqdm.auto import tqdm

from common.errors import UserError
from common.launch import gpu_estimates, slurm
from common.launch.local_pool import LocalSlot, local_slots, longest_first, run_local
from common.launch.logs import setup_logging
from common.launch.submitit_jobs import raise_failures, submit_array
from common.runs import locks as locks_io
from common.runs import run_store
from common.runs.run_store import RunSpec
from common.training.device import resolve_device
from common.training.distributed import broadcast_from_main, destroy_distributed, env_info, init_distributed

log = logging.getLogger(__name__)

JobFn = Callable[[RunSpec], dict]
LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # submitit's local executor kills a job after timeout_min


class RunJob(submitit.helpers.Checkpointable):
    """What submitit runs: ``fn(spec)`` (the shape of facebookresearch's ``run_with_submitit``).

    On preemption or timeout submitit calls :meth:`checkpoint`, which returns the same call
    for the requeued job; the job function then resumes from the checkpoint in its run
    directory, so nothing is lost and nothing finished is redone. The job function itself
    knows nothing about SLURM.
    """

    def __init__(self, fn: JobFn) -> None:
        self.fn = fn

    def __call__(self, spec: RunSpec) -> dict:
        if os.environ.get("SUBMITIT_EXECUTOR"):  # in a submitit job: INFO logs go to the .err log
            setup_logging()
            logging.getLogger("submitit").propagate = False  # it has its own handler
            export_submitit_env()
            _threads_from_env()
        if run_store.is_done(spec.dir):
            return run_store.read_result(spec.dir)
        if env_info().rank != 0:  # a multi-task job: its rank 0 holds the run's lock for every task
            return self.fn(spec)
        with locks_io.RunLock(spec.dir):  # another live process training this run: RunLocked (one line)
            if run_store.is_done(spec.dir):  # another process finished it since the plan was made
                return run_store.read_result(spec.dir)
            return self.fn(spec)

    def checkpoint(self, spec: RunSpec) -> submitit.helpers.DelayedSubmission:
        """Requeue the same call; the job function resumes from ``spec.dir``'s checkpoint."""
        ckpt = run_store.checkpoint_path(spec.dir)
        where = f"its checkpoint {ckpt}" if ckpt.exists() else "the start (no checkpoint yet)"
        log.warning("%s: preempted or timed out; requeued, it resumes from %s", spec.name, where)
        return submitit.helpers.DelayedSubmission(RunJob(self.fn), spec)


def _threads_from_env() -> None:
    """A job started with ``OMP_NUM_THREADS`` (a ``--launcher local`` CPU slot) computes with that many threads."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch  # only in a job process: the launcher itself never needs torch

        torch.set_num_threads(int(threads))


def export_submitit_env() -> bool:
    """Inside a multi-task submitit job, export torchrun's variables; True when it did.

    Every task then joins one process group through :func:`common.training.distributed.init_distributed`,
    exactly as under ``torchrun``.
    """
    if not os.environ.get("SUBMITIT_EXECUTOR") or "RANK" in os.environ:
        return False
    env = submitit.JobEnvironment()
    if env.num_tasks <= 1:
        return False
    # Keep every GPU visible, as under torchrun; each process picks cuda:<local_rank>.
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return True


@dataclass
class Plan:
    """Which planned runs are finished and which remain."""

    specs: list[RunSpec]
    done: list[RunSpec] = field(default_factory=list)
    todo: list[RunSpec] = field(default_factory=list)

    @classmethod
    def of(cls, specs: Sequence[RunSpec]) -> Plan:
        """Each spec finished or to run; a finished run's records are read back first (:func:`common.runs.run_store.read_run`):
        a malformed one, or one whose config was edited since, is a :class:`UserError`, never counted finished."""
        plan = cls(specs=list(specs))
        for spec in plan.specs:
            if run_store.is_done(spec.dir):
                run_store.read_run(spec.dir)
                plan.done.append(spec)
            else:
                plan.todo.append(spec)
        return plan

    def describe(self, queued: Mapping[Path, submitit.Job] | None = None) -> str:
        """One line per run: ``[done]``, ``[todo]``, or ``[queued <job id>]`` (SLURM)."""
        queued = queued or {}
        counts = f"{len(self.done)} finished, {len(self.todo)} to run"
        if queued:
            counts += f" ({len(queued)} of them already queued on SLURM)"
        lines = [f"{len(self.specs)} planned runs: {counts}"]
        for spec in self.specs:
            if spec in self.done:
                state = "done"
            elif spec.dir in queued:
                state = f"queued {queued[spec.dir].job_id}"
            else:
                state = "todo"
            lines.append(f"  [{state}] {spec.dir}")
        return "\n".join(lines)


def launch(
    fn: JobFn,
    specs: Sequence[RunSpec],
    *,
    launcher: str = "inline",
    executor_params: dict[str, Any] | None = None,
    log_folder: str | Path | None = None,
    desc: str = "runs",
    wait: bool = True,
    wait_timeout_s: float | None = None,
    slots: Sequence[LocalSlot] | None = None,
    cost: Callable[[dict], float] | None = None,
) -> list[dict] | None:
    """Run every unfinished spec with ``fn``; return all results in ``specs`` order.

    ``inline``: sequentially in this process, with a tqdm bar.
    ``local``: one submitit local job per run, one per free slot of ``slots`` at a time
    (default :func:`~common.launch.local_pool.local_slots` for ``--device auto``; see :func:`~common.launch.local_pool.run_in_slots`),
    started in order of ``cost(config)``, the largest first (:func:`~common.launch.local_pool.longest_first`).
    ``slurm``: one submitit job array (``executor.batch()``) through
    ``submitit.AutoExecutor(cluster=...)``. Both take ``executor_params`` (AutoExecutor names:
    ``timeout_min``, ``slurm_partition``, ..., ``slurm_max_num_timeout``) and write logs under
    ``log_folder`` (default ``<out>/submitit/%j``). ``local`` always waits. ``slurm`` prints
    the job ids, the log folder and how to collect the results; with ``wait=False`` it returns
    None right after submitting ("submitted, not waited"). Failed runs raise a
    :class:`UserError` naming each run, its error and its log; they are not marked finished.
    """
    plan = Plan.of(specs)
    log.info(
        "%s: %d planned, %d already finished, %d to run (%s)",
        desc,
        len(plan.specs),
        len(plan.done),
        len(plan.todo),
        launcher,
    )
    prepare_run_dirs(plan.todo)
    job = RunJob(fn)
    folder = Path(log_folder) if log_folder else default_log_folder(specs)
    if launcher == "inline":
        _run_inline(job, plan, desc)
    elif launcher == "local":
        if plan.todo:
            slots = slots if slots is not None else local_slots("auto", distributed=False)
            todo = longest_first(plan.todo, cost)
            jobs = run_local(job, todo, executor_params or {}, folder, slots, desc)
            raise_failures(list(zip(todo, jobs, strict=True)), {})
    elif launcher == "slurm":
        if not _launch_slurm(job, plan, executor_params or {}, folder, desc, wait, wait_timeout_s):
            return None
    else:
        raise UserError(f"--launcher {launcher}: unknown launcher; use inline, local or slurm")
    return [run_store.read_result(spec.dir) for spec in plan.specs]


def _run_inline(job: RunJob, plan: Plan, desc: str) -> None:
    """``plan``'s unfinished runs one after another in this process; a run another process is training is skipped
    and, if still unfinished at the end, refused (:func:`_refuse_busy`), unless it was the only run (then it raises)."""
    busy = []
    for spec in tqdm(plan.todo, desc=desc, unit="run", disable=not plan.todo):
        try:
            job(spec)
        except locks_io.RunLocked as exc:
            if len(plan.todo) == 1:
                raise
            log.warning("%s; skipped here, the other runs go on", exc)
            busy.append(spec)
    _refuse_busy([spec for spec in busy if not run_store.is_done(spec.dir)], len(plan.specs))


def _refuse_busy(busy: Sequence[RunSpec], planned: int) -> None:
    """After an inline sweep: the runs it skipped because another process trains them, and which are still
    unfinished, are one :class:`UserError` (the others ran; rerunning collects them once they are finished)."""
    if busy:
        raise UserError(
            f"{len(busy)} of {planned} planned runs are being trained by another process and were skipped here "
            f"({', '.join(spec.name for spec in busy)}); the others are finished: rerun this command when that "
            "process is done to collect them (finished runs are skipped)"
        )


def launch_from_args(
    fn: JobFn,
    specs: Sequence[RunSpec],
    args,
    *,
    job_kind: str = "train",
    desc: str = "runs",
    distributed: bool = False,
    check: Callable[[list[dict]], None] | None = None,
    cost: Callable[[dict], float] | None = None,
) -> list[dict] | None:
    """What every numbered script calls: ``--dry-run`` prints the plan, else :func:`launch`.

    ``check(configs)`` validates the experiment's inputs (data, trained models) of the unfinished runs
    before any run directory is created, with ``--launcher inline`` or ``local``
    (:func:`check_before_creating`). An empty list of runs is a :class:`UserError`. ``cost(config)``: an estimate
    of a run's training FLOPs; ``--launcher local`` starts the largest first (``--runs-per-device`` K > 1 shares
    every device between K runs: :func:`~common.launch.local_pool.local_slots`, :func:`common.launch.slurm.resolve`).

    ``job_kind`` ("train", "probe", "gpt2", ...) selects the ``[job_kind]`` table of the SLURM
    profile; ``distributed`` marks multi-GPU jobs (one task per GPU, see
    :mod:`common.training.distributed`). Returns the results in ``specs`` order, or **None** when
    nothing was waited for: a dry run, or ``--launcher slurm`` without ``--wait`` (the jobs
    are submitted; rerunning the command with ``--wait`` collects them). A script reports
    only when it gets results.
    """
    launcher = args.launcher
    require_runs(specs, desc)
    if env_info().world_size > 1:
        if not distributed:
            refuse_torchrun()
        return launch_torchrun_ranks(fn, specs, args, desc=desc)
    per_device = getattr(args, "runs_per_device", 1)
    params, resolved, slots = _executor_setup(args, job_kind, distributed, per_device)
    if getattr(args, "slurm_profile", None) and launcher != "slurm":
        log.warning("--slurm-profile is used only with --launcher slurm; ignored")
    if getattr(args, "dry_run", False):
        _print_dry_run(specs, launcher, per_device, resolved, params)
        return None
    check_before_creating(specs, launcher, check)
    wait = getattr(args, "wait", False)
    return launch(fn, specs, launcher=launcher, executor_params=params, desc=desc, wait=wait, slots=slots, cost=cost)


def _executor_setup(
    args, job_kind: str, distributed: bool, per_device: int
) -> tuple[dict[str, Any], slurm.Resolved | None, list[LocalSlot] | None]:
    """``(executor parameters, the SLURM profile resolved for job_kind, the local slots)`` of ``args.launcher``: the
    latter two None where that launcher has none."""
    resolved, slots = None, None
    if args.launcher == "slurm":
        profile = slurm.load_profile(getattr(args, "slurm_profile", None))
        overrides = slurm.overrides_from_args(args)
        resolved = slurm.resolve(profile, job_kind, overrides, distributed=distributed, runs_per_device=per_device)
        params = resolved.executor_params()
    elif args.launcher == "local":
        params = {"timeout_min": LOCAL_TIMEOUT_MIN}
        slots = local_slots(getattr(args, "device", "auto"), distributed=distributed, runs_per_device=per_device)
    else:
        params = {}
        if per_device != 1:
            log.warning("--runs-per-device is used only with --launcher local or slurm; ignored")
    return params, resolved, slots


def _print_dry_run(
    specs: Sequence[RunSpec], launcher: str, per_device: int, resolved: slurm.Resolved | None, params: dict[str, Any]
) -> None:
    """``--dry-run``: the plan, the unfinished runs' estimated GPU time and, with SLURM, what would be submitted."""
    plan = Plan.of(specs)
    queued = slurm.queued_jobs(s.dir for s in plan.todo) if launcher == "slurm" else {}
    print(plan.describe(queued))
    estimate = gpu_estimates.describe(gpu_estimates.plan_estimate(plan.todo), per_device)
    if estimate is not None:  # the unfinished runs' FLOPs and GPU time, each an estimate (issue 33)
        print(estimate)
    if resolved is not None:
        n = len(plan.todo) - len(queued)
        shape = "one job array" if n > 1 else "one job" if n == 1 else "nothing"
        print(f"--launcher slurm would submit {n} jobs ({shape}); {resolved.describe()}:")
        print(slurm.sbatch_preview(slurm.with_repo_on_path(params), default_log_folder(specs), n))


def refuse_torchrun() -> None:
    """Raise a :class:`UserError` when started as one of several processes (``torchrun``, ``WORLD_SIZE > 1``).

    For every script whose job kind is not distributed (one process per run): every copy would
    run the whole plan and write the same run directories.
    """
    world_size = env_info().world_size
    if world_size > 1:
        raise UserError(
            f"started as one of {world_size} processes (torchrun or WORLD_SIZE={world_size}), but it runs one process "
            "per run and every copy would run every run; start it once, with plain python, and use --launcher local "
            "or --launcher slurm to run several runs in parallel"
        )


def prepare_run_dirs(todo: Sequence[RunSpec]) -> None:
    """Prepare every unfinished run's directory, the existing ones first: a stored config that is corrupt or differs
    stops the call before any new directory is created."""
    for spec in sorted(todo, key=lambda s: not (s.dir / run_store.CONFIG).exists()):
        run_store.prepare_run(spec.out, spec.config)


def require_runs(specs: Sequence[RunSpec], desc: str) -> None:
    """An empty run set is an error (docs/design.md, section "Runs, records and launching"), never an empty summary."""
    if not specs:
        raise UserError(f"{desc}: the flags select no runs; check --depths, --seeds and the other selections")


def check_before_creating(
    specs: Sequence[RunSpec], launcher: str, check: Callable[[list[dict]], None] | None = None
) -> None:
    """With ``inline`` or ``local`` (this machine runs the jobs), refuse an absent device, then run the experiment's
    ``check`` on the unfinished runs' configs, before any run directory is created (docs/design.md, section
    "Runs, records and launching").

    With ``slurm`` nothing is checked here: the login node usually has no GPU, so the device is checked where the
    job runs, and there a run directory holding only ``config.json`` is an unfinished run, not an error.
    """
    if launcher not in ("inline", "local"):
        return
    todo = [spec.config for spec in specs if not run_store.is_done(spec.dir)]
    for device in dict.fromkeys(str(c.get("runtime", {}).get("device") or "auto") for c in todo):
        resolve_device(device)
    if check is not None and todo:
        check(todo)


def launch_torchrun_ranks(fn: JobFn, specs: Sequence[RunSpec], args, *, desc: str = "runs") -> list[dict] | None:
    """Under ``torchrun`` (``WORLD_SIZE > 1``): the processes cooperate on one run at a time.

    Rank 0 plans: it checks the configs, decides which runs are unfinished and sends that list
    to the other ranks, which never plan or write runs of their own. Then every process calls
    ``fn`` on each of those runs in the same order, inline; ``fn`` trains through DDP and only rank 0
    writes. Rank 0 returns the results of all ``specs`` (None on a dry run); the others return None.
    """
    if args.launcher != "inline":
        raise UserError(
            f"--launcher {args.launcher} under torchrun: the processes are already started; use --launcher inline "
            "(or --launcher slurm without torchrun, which starts one task per GPU itself)"
        )
    info = init_distributed(resolve_device(getattr(args, "device", "auto")))
    todo: list[RunSpec] | None = None
    error = None
    locks = contextlib.ExitStack()  # rank 0 holds every planned run's lock while the processes train them
    if info.is_main:
        try:
            plan = Plan.of(specs)
            if getattr(args, "dry_run", False):
                print(plan.describe())
            else:
                for spec in plan.todo:  # a config mismatch stops every rank before anything starts
                    run_store.prepare_run(spec.out, spec.config)
                for spec in plan.todo:  # so does a run another process is training
                    locks.enter_context(locks_io.RunLock(spec.dir))
                todo = plan.todo
                log.info(
                    "%s: %d planned, %d to run on %d processes (torchrun)",
                    desc,
                    len(plan.specs),
                    len(todo),
                    info.world_size,
                )
        except UserError as exc:
            locks.close()
            error = str(exc)
    message = broadcast_from_main({"todo": todo, "error": error})
    if message["error"] is not None:
        raise UserError(message["error"])
    if message["todo"] is None:
        return None
    with locks:
        for spec in tqdm(message["todo"], desc=desc, unit="run", disable=not info.is_main or not message["todo"]):
            fn(spec)
    destroy_distributed()
    return [run_store.read_result(spec.dir) for spec in specs] if info.is_main else None


def default_log_folder(specs: Sequence[RunSpec]) -> Path:
    """``<out>/submitit/%j``: submitit logs live under the run root (``%j`` becomes the job id)."""
    out = specs[0].out if specs else "runs"
    return Path(out) / "submitit" / "%j"


def _launch_slurm(job: RunJob, plan: Plan, params: dict, folder: Path, desc: str, wait: bool, wait_timeout_s) -> bool:
    """Submit what is neither finished nor queued; report; wait when asked. False: not waited."""
    queued = slurm.queued_jobs(spec.dir for spec in plan.todo)
    to_submit = [spec for spec in plan.todo if spec.dir not in queued]
    submitted = []
    if to_submit:
        submitted = submit_array(job, to_submit, "slurm", params, folder)
        ids = ", ".join(j.job_id for j in submitted)
        log.info("submitted %d jobs (%s): ids %s; logs under %s", len(submitted), "slurm", ids, folder)
    for spec, sub in zip(to_submit, submitted, strict=True):
        slurm.record_submission(spec.dir, sub, folder)
    print(_submission_report(plan, submitted, queued, folder, waiting=wait), flush=True)
    if not wait:
        return False
    handles = {spec.dir: sub for spec, sub in zip(to_submit, submitted, strict=True)} | dict(queued)
    pairs = [(spec, handles[spec.dir]) for spec in plan.todo]
    lost = slurm.wait_for_jobs([sub for _, sub in pairs], desc=desc, timeout_s=wait_timeout_s)
    raise_failures(pairs, lost)
    return True


def _submission_report(
    plan: Plan, submitted: list[submitit.Job], queued: Mapping[Path, submitit.Job], folder: Path, *, waiting: bool
) -> str:
    ids = [sub.job_id for sub in submitted]
    if not ids:
        what = "submitted nothing"
    elif len(ids) == 1:
        what = f"submitted 1 run as SLURM job {ids[0]}"
    else:
        what = f"submitted {len(ids)} runs as SLURM job array {ids[0].split('_')[0]} ({ids[0]} .. {ids[-1]})"
    extra = [f"{len(plan.done)} already finished"]
    if queued:
        extra.append(f"{len(queued)} already queued ({', '.join(sorted(sub.job_id for sub in queued.values()))})")
    lines = [f"{what}; {', '.join(extra)}"]
    if ids or queued:
        lines.append(f"logs:    {folder.parent}/<job id>/<job id>_0_log.out and .err")
    if ids:
        lines.append(f"watch:   squeue -j {ids[0].split('_')[0]}")
    if not waiting and (ids or queued):
        experiments = sorted({str(spec.dir.parent) for spec in plan.specs})
        lines.append(
            "collect: rerun this command with --wait (finished runs are skipped, queued runs are not "
            "submitted again), or in Python: "
            + "; ".join(f'common.runs.run_store.collect("{e}/*")' for e in experiments)
        )
    return "\n".join(lines)
