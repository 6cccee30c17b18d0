"""Run job functions inline or through submitit (DESIGN.md section 4).

A *job function* lives in ``common/`` (so submitit can pickle it), takes one
:class:`RunSpec` and returns the run's result dict. It prepares its run directory with
:func:`common.runs.prepare_run`, resumes from :func:`common.runs.resume_state`, and writes
``result.json`` last. The launcher only decides *where* it runs; finished runs are skipped
before anything is started or submitted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit
from tqdm.auto import tqdm

from common import runs
from common.errors import UserError

log = logging.getLogger(__name__)

JobFn = Callable[["RunSpec"], dict]


@dataclass(frozen=True)
class RunSpec:
    """One planned run: its config (identity plus ``runtime``) and the output root."""

    config: dict
    out: str

    @property
    def dir(self) -> Path:
        return runs.run_dir(self.out, self.config)

    @property
    def name(self) -> str:
        return self.dir.name


def make_specs(configs: Sequence[dict], out: str | Path) -> list[RunSpec]:
    return [RunSpec(config=dict(c), out=str(out)) for c in configs]


class RunJob(submitit.helpers.Checkpointable):
    """What submitit runs: ``fn(spec)``.

    As a ``Checkpointable``, on preemption or timeout submitit requeues the same call; the
    job function then resumes from the checkpoint in its run directory, so nothing is lost
    and nothing finished is redone.
    """

    def __init__(self, fn: JobFn) -> None:
        self.fn = fn

    def __call__(self, spec: RunSpec) -> dict:
        if runs.is_done(spec.dir):
            return runs.read_result(spec.dir)
        return self.fn(spec)


@dataclass
class Plan:
    """Which planned runs are finished and which remain."""

    specs: list[RunSpec]
    done: list[RunSpec] = field(default_factory=list)
    todo: list[RunSpec] = field(default_factory=list)

    @classmethod
    def of(cls, specs: Sequence[RunSpec]) -> Plan:
        plan = cls(specs=list(specs))
        for spec in plan.specs:
            (plan.done if runs.is_done(spec.dir) else plan.todo).append(spec)
        return plan

    def describe(self) -> str:
        lines = [f"{len(self.specs)} planned runs: {len(self.done)} finished, {len(self.todo)} to run"]
        for spec in self.specs:
            state = "done" if spec in self.done else "todo"
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
) -> list[dict]:
    """Run every unfinished spec with ``fn`` and return all results in ``specs`` order.

    ``inline``: sequentially in this process, with a tqdm bar.
    ``local`` / ``slurm``: one submitit job array (``executor.batch()``) through
    ``submitit.AutoExecutor(cluster=...)``; waits for every job and raises a
    :class:`UserError` listing failed runs with their log paths.
    """
    plan = Plan.of(specs)
    log.info("%s: %d planned, %d already finished, %d to run (%s)", desc, len(plan.specs), len(plan.done), len(plan.todo), launcher)
    for spec in plan.todo:  # surface a config mismatch before anything starts
        runs.prepare_run(spec.out, spec.config)
    job = RunJob(fn)
    if launcher == "inline":
        for spec in tqdm(plan.todo, desc=desc, unit="run", disable=not plan.todo):
            job(spec)
    elif launcher in ("local", "slurm"):
        _submit_and_wait(job, plan.todo, launcher, executor_params or {}, log_folder, desc)
    else:
        raise UserError(f"--launcher {launcher}: unknown launcher; use inline, local or slurm")
    return [runs.read_result(spec.dir) for spec in plan.specs]


def launch_from_args(fn: JobFn, specs: Sequence[RunSpec], args, *, job_kind: str = "train", desc: str = "runs") -> list[dict] | None:
    """What every numbered script calls: ``--dry-run`` prints the plan, else :func:`launch`.

    ``job_kind`` ("train", "probe", ...) selects the per-experiment section of a SLURM profile.
    Returns None on a dry run.
    """
    if getattr(args, "dry_run", False):
        print(Plan.of(specs).describe())
        return None
    return launch(fn, specs, launcher=args.launcher, desc=desc)


def make_executor(launcher: str, folder: str | Path, params: dict[str, Any]) -> submitit.AutoExecutor:
    """A submitit ``AutoExecutor`` for ``local`` or ``slurm`` with ``params`` applied."""
    params = dict(params)
    max_num_timeout = params.pop("slurm_max_num_timeout", 3)
    executor = submitit.AutoExecutor(folder=str(folder), cluster=launcher, slurm_max_num_timeout=max_num_timeout)
    params.setdefault("timeout_min", 60)
    executor.update_parameters(**params)
    return executor


def _submit_and_wait(job: RunJob, todo: list[RunSpec], launcher: str, params: dict, log_folder, desc: str) -> None:
    if not todo:
        return
    folder = Path(log_folder) if log_folder else Path(todo[0].out) / "submitit" / "%j"
    executor = make_executor(launcher, folder, params)
    with executor.batch():
        jobs = [executor.submit(job, spec) for spec in todo]
    log.info("submitted %d jobs (%s): ids %s; logs under %s", len(jobs), launcher, ", ".join(j.job_id for j in jobs), folder)
    failures = []
    for spec, sub in tqdm(list(zip(todo, jobs, strict=True)), desc=desc, unit="run"):
        try:
            sub.result()
        except Exception as exc:  # submitit wraps the job's exception with its traceback
            failures.append(f"{spec.name}: {failure_reason(exc)} (log: {sub.paths.stderr})")
    if failures:
        raise UserError(f"{len(failures)} of {len(todo)} runs failed; fix and rerun (finished runs are skipped): " + "; ".join(failures))


def failure_reason(exc: BaseException) -> str:
    """The job's own exception line (``RuntimeError: ...``) out of submitit's wrapped traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*", line)]
    return raised[-1] if raised else (lines[0] if lines else type(exc).__name__)
