"""submitit's side of launching: an executor, a job array submitted, and each job's outcome read back.

:func:`submit_array` submits the unfinished runs of :func:`common.launch.launcher.launch` as one job array through
:func:`make_executor` (a cluster that does not answer is one :class:`UserError`); :func:`raise_failures` waits for
each job of ``--launcher local`` or ``slurm`` and turns every failed run into one :class:`UserError` naming the run,
its error (:func:`failed_task`, :func:`failure_reason`) and its log.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import submitit

from common.errors import UserError
from common.launch import slurm
from common.runs import run_store
from common.runs.run_store import RunSpec


def make_executor(launcher: str, folder: str | Path, params: dict[str, Any]) -> submitit.AutoExecutor:
    """A submitit ``AutoExecutor`` for ``local`` or ``slurm`` with ``params`` applied.

    SLURM jobs get the repository on ``PYTHONPATH`` (see :func:`common.launch.slurm.with_repo_on_path`).
    """
    params = dict(params)
    max_num_timeout = params.pop("slurm_max_num_timeout", 3)
    executor = submitit.AutoExecutor(folder=str(folder), cluster=launcher, slurm_max_num_timeout=max_num_timeout)
    params.setdefault("timeout_min", 60)
    if launcher == "slurm":
        params = slurm.with_repo_on_path(params)
    else:
        params = {k: v for k, v in params.items() if not k.startswith("slurm_")}
    executor.update_parameters(**params)
    return executor


def submit_array(
    job: submitit.helpers.Checkpointable, todo: list[RunSpec], launcher: str, params: dict, folder: Path
) -> list[submitit.Job]:
    """Submit ``todo`` as one job array; a cluster that does not answer (``sbatch`` failing, or missing) is one
    :class:`UserError` carrying sbatch's own message (which submitit would print apart)."""
    executor = make_executor(launcher, folder, params)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), executor.batch():
            jobs = [executor.submit(job, spec) for spec in todo]
    except (submitit.core.utils.FailedJobError, OSError) as exc:
        text = " ".join((str(exc).strip() or said.getvalue().strip() or type(exc).__name__).split())
        raise UserError(
            f"--launcher {launcher}: sbatch could not submit the jobs ({text[:300]}); check that the cluster "
            "answers (sinfo, squeue) and the profile's partition and account, or use --launcher local or inline"
        ) from None
    return jobs


def raise_failures(pairs: list[tuple[RunSpec, submitit.Job]], lost: Mapping[str, str]) -> None:
    """Wait for each job's outcome; raise one :class:`UserError` listing every failed run."""
    failures = []
    for spec, sub in pairs:
        log_path = sub.task(0).paths.stderr
        if sub.job_id in lost:
            failed = failed_task(sub)
            if failed is not None:  # one task raised and the job ended the others (srun --kill-on-bad-exit)
                task, reason = failed
                log_path = sub.task(task).paths.stderr
                failures.append(f"{spec.name}: job {sub.job_id} ended: task {task} failed: {reason} (log: {log_path})")
            else:
                failures.append(f"{spec.name}: job {sub.job_id} {lost[sub.job_id]} (log: {log_path})")
            continue
        try:
            sub.results()
        except Exception as exc:  # submitit wraps the job's exception with its traceback
            failures.append(f"{spec.name}: {failure_reason(exc)} (log: {log_path})")
            continue
        if not run_store.is_done(spec.dir):
            failures.append(f"{spec.name}: job {sub.job_id} ended without writing {run_store.RESULT} (log: {log_path})")
    if failures:
        raise UserError(
            f"{len(failures)} of {len(pairs)} runs failed; fix and rerun (finished runs are skipped): "
            + "; ".join(failures)
        )


def failed_task(sub: submitit.Job) -> tuple[int, str] | None:
    """The first task of a job that wrote an error as its outcome: ``(task, its exception line)``."""
    for task in range(sub.num_tasks):
        path = sub.task(task).paths.result_pickle
        try:
            outcome, payload = submitit.core.utils.pickle_load(path)
        except Exception:  # no outcome (killed), or an unreadable one
            continue
        if outcome == "error":
            return task, failure_reason(payload)
    return None


def failure_reason(exc: BaseException | str) -> str:
    """The job's own exception line (``RuntimeError: ...``) out of submitit's wrapped traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*", line)]
    return raised[-1] if raised else (lines[0] if lines else type(exc).__name__)
