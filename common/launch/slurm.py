"""SLURM profiles, resolved sbatch parameters, and queued-job bookkeeping (launching: docs/design.md).

A *profile* is a small TOML file under ``slurm/`` (see ``slurm/example.toml``). Its top-level
keys apply to every job; a table named after a job kind (``[train]``, ``[probe]``, ``[gpt2]``,
...) overrides them for that kind, since a probe job is not a training job. Command-line flags
(``--partition``, ``--time-min``, ...) override both. :func:`resolve` merges the three layers
into submitit ``AutoExecutor`` parameters; :func:`sbatch_preview` shows the ``#SBATCH`` lines
they produce, which is what ``--dry-run`` prints.

Jobs are tracked without ``sacct`` (a cluster without accounting has none): each submitted
run leaves ``slurm_job.json`` in its run directory, :func:`squeue_states` asks ``squeue`` what
is still queued, and :func:`wait_for_jobs` waits for submitit's result files, noticing jobs that
left the queue without one (killed, out of memory, node failure).
"""

from __future__ import annotations

import getpass
import logging
import os
import shlex
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit
from submitit.slurm.slurm import SlurmExecutor, _convert_mem, _make_sbatch_string
from tqdm.auto import tqdm

from common.errors import UserError
from common.runs import atomic, record_io
from common.training.device import RUNS_PER_DEVICE_ENV

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILE_DIR = REPO_ROOT / "slurm"
JOB_RECORD = "slurm_job.json"

# key -> (accepted types, smallest allowed value or None, meaning). Kept in step with
# slurm/example.toml and slurm/README.md (a test checks that example.toml names every key).
PROFILE_KEYS: dict[str, tuple[tuple[type, ...], float | None, str]] = {
    "partition": ((str,), None, "sbatch --partition"),
    "account": ((str,), None, "sbatch --account"),
    "qos": ((str,), None, "sbatch --qos"),
    "constraint": ((str,), None, "sbatch --constraint (node features, e.g. 'a100')"),
    "time_min": ((int,), 1, "time limit per job, minutes"),
    "nodes": ((int,), 1, "nodes per job"),
    "gpus_per_node": ((int,), 0, "GPUs per node (0: none requested)"),
    "tasks_per_node": ((int,), 1, "tasks per node; distributed jobs default to one per GPU"),
    "cpus_per_task": ((int,), 1, "CPUs per task"),
    "mem_gb": ((int, float), 0, "memory per node, GB"),
    "array_parallelism": ((int,), 1, "at most this many jobs of one array run at once"),
    "max_num_timeout": ((int,), 0, "how often a job may be requeued after a timeout"),
    "signal_delay_s": ((int,), 0, "seconds between the checkpoint signal and the kill"),
    "job_name": ((str,), None, "job name in squeue (default ds-<job kind>)"),
    "setup": ((list,), None, "shell lines run before the job (module load ..., source venv)"),
    "sbatch": ((dict,), None, "any other sbatch option, e.g. {gres = 'gpu:a100:4', exclusive = true}"),
    "gpu_share": ((str,), None, "how the cluster splits a GPU between jobs, 'shard:N' or 'mps:N' (--runs-per-device)"),
}
SHARE_GRES = ("shard", "mps")  # SLURM's GPU-sharing GRES (gres.conf Name=shard / Name=mps)
BUILTIN = {"time_min": 60, "max_num_timeout": 3, "signal_delay_s": 90}
# Command-line flags that override profile keys (argparse dest == profile key).
FLAG_KEYS = (
    "partition",
    "account",
    "qos",
    "time_min",
    "gpus_per_node",
    "cpus_per_task",
    "mem_gb",
    "constraint",
    "array_parallelism",
)
ALIVE_STATES = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "RESV_DEL_HOLD",
    "PREEMPTED",  # with PreemptMode=REQUEUE it is pending again a moment later
}


# ----------------------------------------------------------------------------- profiles
@dataclass(frozen=True)
class Profile:
    """A parsed profile: keys for every job, and per-job-kind overrides."""

    path: Path | None = None
    defaults: dict = field(default_factory=dict)
    kinds: dict[str, dict] = field(default_factory=dict)


def load_profile(path: str | os.PathLike | None) -> Profile:
    """Parse and check a profile; a missing or malformed file is a one-line :class:`UserError`."""
    if path is None:
        return Profile()
    path = Path(path)
    fix = f"pass --slurm-profile one of {_available_profiles()} or a copy of slurm/example.toml"
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"--slurm-profile {path}: no such file; {fix}") from None
    except OSError as exc:
        raise UserError(f"--slurm-profile {path}: cannot read it ({exc.strerror}); {fix}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"--slurm-profile {path}: not valid TOML ({exc}); compare with slurm/example.toml") from None
    defaults = {k: v for k, v in data.items() if not _is_kind_table(k, v)}
    kinds = {k: v for k, v in data.items() if _is_kind_table(k, v)}
    _check_keys(path, "top level", defaults)
    for kind, table in kinds.items():
        _check_keys(path, f"[{kind}]", table)
    return Profile(path=path, defaults=defaults, kinds=kinds)


def _is_kind_table(key: str, value: Any) -> bool:
    return isinstance(value, dict) and key != "sbatch"


def _check_keys(path: Path, where: str, table: Mapping[str, Any]) -> None:
    for key, value in table.items():
        if key not in PROFILE_KEYS:
            raise UserError(
                f"--slurm-profile {path}: unknown key {key!r} at {where}; "
                f"valid keys: {', '.join(PROFILE_KEYS)} (see slurm/example.toml)"
            )
        types, minimum, _ = PROFILE_KEYS[key]
        ok = isinstance(value, types) and not isinstance(value, bool)
        if ok and minimum is not None:
            ok = value > minimum if key == "mem_gb" else value >= minimum
        if ok and key == "setup":
            ok = all(isinstance(line, str) for line in value)
        if ok and key == "sbatch":
            ok = all(isinstance(v, str | int | float | bool) for v in value.values())
        if ok and key == "gpu_share":
            kind, _, count = value.partition(":")
            ok = kind in SHARE_GRES and count.isdigit() and int(count) >= 1
        if not ok:
            want = {
                "setup": "a list of strings",
                "sbatch": "a table of strings, numbers or booleans",
                "gpu_share": "'shard:N' or 'mps:N', N the shards (MPS units) per GPU of the cluster's gres.conf",
            }.get(key, " or ".join(t.__name__ for t in types) + _bound(key, minimum))
            raise UserError(f"--slurm-profile {path}: {key} = {value!r} at {where} must be {want}; fix the file")


def _bound(key: str, minimum: float | None) -> str:
    if minimum is None:
        return ""
    return f" > {minimum}" if key == "mem_gb" else f" >= {minimum}"


def _available_profiles() -> str:
    names = sorted(str(p.relative_to(REPO_ROOT)) for p in PROFILE_DIR.glob("*.toml"))
    return ", ".join(names) if names else "slurm/<name>.toml"


# ----------------------------------------------------------------------------- resolution
KILL_ON_BAD_EXIT = "--kill-on-bad-exit=1"  # srun: a task that fails ends every task of the job


@dataclass(frozen=True)
class Resolved:
    """Profile keys after merging built-ins, the profile, its job-kind table and the flags."""

    values: dict
    sources: list[str]
    job_kind: str
    distributed: bool = False

    def executor_params(self) -> dict[str, Any]:
        """``AutoExecutor`` parameters (generic names plus ``slurm_*``), max_num_timeout included."""
        v = self.values
        params: dict[str, Any] = {
            "name": v.get("job_name") or f"ds-{self.job_kind}",
            "timeout_min": v["time_min"],
            "nodes": v.get("nodes", 1),
            "tasks_per_node": v.get("tasks_per_node", 1),
            "slurm_max_num_timeout": v["max_num_timeout"],
            "slurm_signal_delay_s": v["signal_delay_s"],
        }
        if v.get("gpus_per_node"):  # 0 means none: no --gpus-per-node on clusters without GRES
            params["gpus_per_node"] = v["gpus_per_node"]
        for key in ("cpus_per_task", "mem_gb"):
            if v.get(key) is not None:
                params[key] = v[key]
        for key in ("partition", "account", "qos", "constraint", "array_parallelism", "setup"):
            if v.get(key) is not None:
                params[f"slurm_{key}"] = v[key]
        if v.get("sbatch"):
            params["slurm_additional_parameters"] = dict(v["sbatch"])
        if self.distributed:  # a rank that raises must not leave the others waiting in a collective
            params["slurm_srun_args"] = [KILL_ON_BAD_EXIT]
        return params

    def describe(self) -> str:
        return f"SLURM parameters for '{self.job_kind}' jobs from {' < '.join(self.sources)}"


def resolve(
    profile: Profile,
    job_kind: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    distributed: bool = False,
    runs_per_device: int = 1,
) -> Resolved:
    """Merge built-in defaults < profile top level < ``[job_kind]`` < flags (None = not given).

    ``runs_per_device`` K > 1 (``--runs-per-device``): K array tasks share each GPU, through the GPU sharing the
    profile's ``gpu_share`` declares (:func:`_share_gpu`).

    A ``distributed`` job (GPT-2, Pythia: one process per GPU) gets one task per GPU it
    requests (:func:`requested_gpus`: ``gpus_per_node``, else ``sbatch = {gres = "gpu:N"}``); a
    profile whose ``tasks_per_node`` differs is refused (GPUs would sit idle, or processes would
    share one). Any other job runs one task per node.
    """
    where = str(profile.path) if profile.path else None
    values = dict(BUILTIN)
    sources = ["built-in defaults"]
    if profile.defaults:
        values.update(profile.defaults)
        sources.append(f"{where}")
    if job_kind in profile.kinds:
        values.update(profile.kinds[job_kind])
        sources.append(f"{where} [{job_kind}]")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}  # checked by argparse
    if given:
        values.update(given)
        sources.append("flags " + " ".join(f"--{k.replace('_', '-')}" for k in given))
    if distributed:
        _one_task_per_gpu(values, where, job_kind)
    elif values.get("tasks_per_node", 1) > 1:
        raise UserError(
            f"--slurm-profile {where}: tasks_per_node = {values['tasks_per_node']} for '{job_kind}' jobs, "
            "which run one process per job; remove it (only GPT-2/Pythia jobs run one task per GPU)"
        )
    elif (gpus := requested_gpus(values)) > 1:
        log.warning(
            "'%s' jobs run one process on one GPU, but request %d GPUs per job: %d sit idle", job_kind, gpus, gpus - 1
        )
    if runs_per_device > 1:
        _share_gpu(values, where, job_kind, runs_per_device, distributed)
        sources.append(f"--runs-per-device {runs_per_device}")
    return Resolved(values=values, sources=sources, job_kind=job_kind, distributed=distributed)


def _share_gpu(values: dict, where: str | None, job_kind: str, k: int, distributed: bool) -> None:
    """K jobs per GPU: each job requests ``1/K`` of one GPU's shards (``--gres=shard:N/K``) or MPS units
    (``--gres=mps:N/K``) instead of a whole GPU, so SLURM places K of them on each GPU.

    The cluster must offer that GRES (``GresTypes=gpu,shard`` or ``gpu,mps`` in slurm.conf, ``Name=shard Count=N``
    or ``Name=mps Count=N`` per GPU in gres.conf, the ``select/cons_tres`` plugin; MPS also needs its control daemon
    on the nodes); the profile's ``gpu_share = "shard:N"`` names it and N. Refused: no ``gpu_share``, N not a
    multiple of K, a distributed job kind, or a job that asks for more than one GPU.
    """
    share = values.get("gpu_share")
    if distributed:
        raise UserError(
            f"--runs-per-device {k}: '{job_kind}' jobs are distributed (every GPU of a job for one run); leave it at 1"
        )
    if not share:
        raise UserError(
            f"--runs-per-device {k} with --launcher slurm needs the profile's gpu_share key ('shard:N' or 'mps:N': how "
            f"the cluster splits a GPU, slurm/README.md); {where or 'no profile'} has none, so each job gets a whole GPU"
        )
    kind, _, count = share.partition(":")
    if int(count) % k:
        raise UserError(
            f"--runs-per-device {k}: gpu_share = {share!r} in {where} splits a GPU into {count} {kind} units, "
            f"which K = {k} jobs cannot share evenly; use a K that divides {count}"
        )
    sbatch = dict(values.get("sbatch") or {})
    if requested_gpus(values) > 1:
        raise UserError(
            f"--runs-per-device {k}: '{job_kind}' jobs request {requested_gpus(values)} GPUs each in {where}; "
            "sharing needs jobs of one GPU (gpus_per_node = 1)"
        )
    values.pop("gpus_per_node", None)  # the shard (MPS) GRES binds the job to one GPU
    sbatch["gres"] = f"{kind}:{int(count) // k}"
    values["sbatch"] = sbatch
    values["setup"] = [
        *(values.get("setup") or []),
        f"export {RUNS_PER_DEVICE_ENV}={k}",
    ]  # cudnn.benchmark off when shared


def _one_task_per_gpu(values: dict, where: str | None, job_kind: str) -> None:
    """Set a distributed job's ``tasks_per_node`` to its GPUs per node, or refuse a profile's other value."""
    gpus = requested_gpus(values)
    tasks = values.setdefault("tasks_per_node", max(1, gpus))
    if gpus and tasks != gpus:
        raise UserError(
            f"--slurm-profile {where}: tasks_per_node = {tasks} for '{job_kind}' jobs, which run one task per GPU, "
            f"but they request {gpus} GPUs per node; remove tasks_per_node (it follows the GPUs) or make the two equal"
        )


def requested_gpus(values: Mapping[str, Any]) -> int:
    """GPUs per node that resolved profile ``values`` request: ``gpus_per_node``, else the GPU
    count of ``sbatch = {gres = "gpu:N"}`` (``gpu``, ``gpu:a100:4``, ``gpu:4,nvme:1``); 0 for none."""
    if values.get("gpus_per_node"):
        return int(values["gpus_per_node"])
    return gres_gpus(str((values.get("sbatch") or {}).get("gres", "")))


def gres_gpus(gres: str) -> int:
    """GPUs in a ``--gres`` value: ``gpu`` and ``gpu:a100`` are 1, ``gpu:a100:4``, ``gpu:4`` and ``gres/gpu:4`` are 4."""
    total = 0
    for item in filter(None, (part.split("(")[0].strip() for part in gres.split(","))):  # (S:0-1): sockets
        name, *rest = item.split(":")
        if name.removeprefix("gres/") == "gpu":
            total += int(rest[-1]) if rest and rest[-1].isdigit() else 1
    return total


def overrides_from_args(args: Any) -> dict[str, Any]:
    """The SLURM override flags of a parsed command line (missing attributes count as not given)."""
    return {key: getattr(args, key, None) for key in FLAG_KEYS}


# ----------------------------------------------------------------------------- sbatch lines
def with_repo_on_path(params: Mapping[str, Any]) -> dict[str, Any]:
    """Add a setup line putting the repository first on PYTHONPATH, so jobs can unpickle
    ``common.*`` and ``tests.*`` whatever directory the script was started from."""
    params = dict(params)
    line = f"export PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"
    params["slurm_setup"] = [line, *params.get("slurm_setup", [])]
    return params


def sbatch_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Translate ``AutoExecutor`` parameters into ``SlurmExecutor`` ones, as ``AutoExecutor`` does."""
    equivalent = SlurmExecutor._equivalence_dict()
    native: dict[str, Any] = {}
    for key, value in params.items():
        if key == "slurm_max_num_timeout" or value is None:
            continue
        if key.startswith("slurm_"):
            native[key.removeprefix("slurm_")] = value
        else:
            native[equivalent.get(key, key)] = value
    if "mem" in native:
        native["mem"] = _convert_mem(native["mem"])
    return native


def sbatch_preview(params: Mapping[str, Any], folder: str | os.PathLike, n_jobs: int) -> str:
    """The ``#SBATCH`` lines and setup of the script submitit would submit for ``n_jobs`` runs."""
    text = _make_sbatch_string(
        command="<python> -u -m submitit.core._submit <folder>",
        folder=str(folder),
        map_count=n_jobs if n_jobs > 1 else None,
        **sbatch_params(params),
    )
    keep, in_setup = [], False
    for line in text.splitlines():
        if line.startswith("# setup"):
            in_setup = True
        elif line.startswith("# command"):
            in_setup = False
        if line.startswith("#SBATCH") or (in_setup and line and not line.startswith("#")):
            keep.append(line)
    return "\n".join(keep)


# ----------------------------------------------------------------------------- job bookkeeping
def record_submission(run_dir: str | os.PathLike, job: submitit.Job, folder: str | os.PathLike) -> None:
    """Remember in the run directory which SLURM job runs it (``slurm_job.json``)."""
    atomic.atomic_write_json(
        Path(run_dir) / JOB_RECORD,
        {"job_id": job.job_id, "folder": str(folder), "num_tasks": job.num_tasks, "submitted": time.time()},
    )


def attach(record: Mapping[str, Any]) -> submitit.SlurmJob:
    """A submitit job handle for a recorded submission (no SLURM call)."""
    return submitit.SlurmJob(folder=record["folder"], job_id=record["job_id"], tasks=range(record.get("num_tasks", 1)))


def queued_jobs(run_dirs: Iterable[str | os.PathLike]) -> dict[Path, submitit.SlurmJob]:
    """Run directories whose recorded SLURM job is still queued or running, with its handle."""
    records = {}
    for run_dir in map(Path, run_dirs):
        path = run_dir / JOB_RECORD
        if path.is_file():
            try:
                records[run_dir] = record_io.read_json(path)
            except UserError:
                log.warning("%s is unreadable; the run will be submitted again", path)
    if not records:
        return {}
    states = squeue_states()
    if states is None:
        log.warning("squeue did not answer: cannot tell which runs are still queued; submitting all unfinished runs")
        return {}
    return {d: attach(r) for d, r in records.items() if states.get(r["job_id"]) in ALIVE_STATES}


def squeue_states(user: str | None = None) -> dict[str, str] | None:
    """``{job_id: state}`` of the user's jobs known to slurmctld (array elements one per line,
    as ``<array id>_<index>``); None when ``squeue`` fails."""
    cmd = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T", f"--user={user or getpass.getuser()}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("squeue failed: %s", exc)
        return None
    states = {}
    for line in out.splitlines():
        job_id, _, state = line.strip().partition("|")
        if job_id:
            states[job_id] = state.strip()
    return states


def result_pickles(job: submitit.Job) -> list[Path]:
    """Where each task of ``job`` writes its outcome (submitit writes it even for an exception)."""
    return [job.task(t).paths.result_pickle for t in range(job.num_tasks)]


def wait_for_jobs(
    jobs: Sequence[submitit.Job],
    *,
    desc: str = "runs",
    poll_s: float = 2.0,
    lost_after_s: float = 30.0,
    timeout_s: float | None = None,
) -> dict[str, str]:
    """Block until every job has written its result files or left the queue without them.

    Returns ``{job_id: reason}`` for jobs that ended without a result (killed, out of memory,
    node failure: what ``sacct`` would report, found with ``squeue`` alone). A job counts as
    lost once it has been absent from the queue, or in a final state, for ``lost_after_s``
    (a requeued job passes through PENDING, so it is never lost). ``timeout_s`` bounds the
    whole wait with a :class:`UserError`.
    """
    start = time.monotonic()
    pending = {job.job_id: job for job in jobs}
    gone_since: dict[str, float] = {}
    lost: dict[str, str] = {}
    with tqdm(total=len(pending), desc=desc, unit="job", disable=not pending, file=sys.stderr) as bar:
        while pending:
            finished = [jid for jid, job in pending.items() if all(p.exists() for p in result_pickles(job))]
            states = squeue_states() if len(finished) < len(pending) else {}
            now = time.monotonic()
            for jid in list(pending):
                if jid in finished:
                    pending.pop(jid)
                    bar.update()
                    continue
                if states is None:  # squeue did not answer this time: only result files count
                    continue
                state = states.get(jid)
                if state in ALIVE_STATES:
                    gone_since.pop(jid, None)
                elif now - gone_since.setdefault(jid, now) >= lost_after_s:
                    lost[jid] = f"left the queue in state {state or 'unknown (purged)'} without a result"
                    pending.pop(jid)
                    bar.update()
            if not pending:
                break
            if timeout_s is not None and now - start > timeout_s:
                raise UserError(
                    f"{len(pending)} jobs still unfinished after {timeout_s:.0f} s ({', '.join(sorted(pending))}); "
                    "rerun with --wait to keep waiting (queued runs are not submitted again)"
                )
            time.sleep(poll_s)
    return lost
