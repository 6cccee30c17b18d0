"""Run directories and their records (docs/design.md, section "Runs, records and launching").

A run is a pure function of its config. Its directory ``<out>/<experiment>/<name>-<hash8>``
is derived from the config; it holds

- ``config.json``   the config, written when the run is first prepared;
- ``metrics.jsonl`` one JSON object per line, appended as the run goes;
- ``checkpoint.pt`` the latest resumable state (atomic, loaded with ``weights_only=True``);
- ``result.json``   written last and atomically: its presence means "finished";
- ``.lock``         while a process trains it: that process's host, pid and lease
                    (:class:`common.runs.locks.RunLock`).

One reader, :func:`read_run`, checks every record the same way for every script (docs/runs.md,
section "Runs and records"): a torn, binary or non-object file, a missing key, NaN where a number
must be, a directory where a file must be, or a ``config.json`` whose identity no longer hashes to
its directory's name is a :class:`UserError` naming the file and the fix; :func:`scan_runs` and
:func:`collect` can gather those problems instead of raising, for a report that names what it left out.
A write that fails for want of space, quota or file size (``ENOSPC``, ``EDQUOT``, ``EFBIG``) is a
:class:`UserError` too; the run stays resumable.

This module is the front of the records API, the one place callers import it from; its parts live in modules
of their own: atomic writes and write errors in :mod:`common.runs.atomic`, the checks of one JSON or JSONL file in
:mod:`common.runs.record_io`, the data and run locks in :mod:`common.runs.locks`.

Keys under ``config["runtime"]`` (device, launcher, ...) are stored but are not part of the
run's identity: the same run may resume on another device.
"""

from __future__ import annotations

import functools
import glob as globlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from common.errors import UserError
from common.runs.atomic import (
    atomic_file,
    atomic_write_bytes,
    atomic_write_json,
    write_error,
)
from common.runs.record_io import (
    PERMISSION_FIX,
    append_jsonl,
    default_fix,
    is_number,
    read_json,
    read_jsonl,
    read_record,
)

CONFIG = "config.json"
METRICS = "metrics.jsonl"
RESULT = "result.json"
CHECKPOINT = "checkpoint.pt"
RUNTIME_KEY = "runtime"


# ----------------------------------------------------------------------------- identity
def identity(config: dict) -> dict:
    """The part of a config that defines the run (everything but ``runtime``)."""
    return {k: v for k, v in config.items() if k != RUNTIME_KEY}


def config_hash(config: dict) -> str:
    """Short stable hash of the run identity (sorted-key JSON, sha1, 8 hex digits)."""
    text = json.dumps(identity(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def run_name(config: dict) -> str:
    """Readable part of the directory name: ``config['name']`` made filesystem-safe."""
    name = str(config.get("name") or config.get("experiment") or "run")
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", name).strip("_") or "run"


def run_dir(out: str | os.PathLike, config: dict) -> Path:
    """``<out>/<experiment>/<name>-<hash8>``, derived from the config alone."""
    experiment = run_name({"name": config.get("experiment", "misc")})
    return Path(out) / experiment / f"{run_name(config)}-{config_hash(config)}"


@dataclass(frozen=True)
class RunSpec:
    """One planned run: its config (identity plus ``runtime``) and the output root.

    What a job function receives (``fn(spec) -> result dict``), inline or through submitit.
    """

    config: dict
    out: str

    @functools.cached_property
    def dir(self) -> Path:
        """:func:`run_dir`, hashed once per spec: a plan of thousands of runs (``--seeds 0:999``) asks each spec for
        its directory several times, and a dry run answers in seconds (issue 59)."""
        return run_dir(self.out, self.config)

    @property
    def name(self) -> str:
        return self.dir.name


def make_specs(configs: Sequence[dict], out: str | os.PathLike) -> list[RunSpec]:
    """One :class:`RunSpec` per config, all under the output root ``out``."""
    return [RunSpec(config=dict(c), out=str(out)) for c in configs]


# ----------------------------------------------------------------------------- reading runs
def read_config(path: str | os.PathLike, required: Iterable[str] = ()) -> dict:
    """The ``config.json`` of run directory ``path`` (a :func:`read_record` with ``required`` keys)."""
    return read_record(Path(path) / CONFIG, required)


@dataclass(frozen=True)
class Run:
    """A run directory read back by :func:`read_run`: its config and, when finished, its result."""

    dir: Path
    config: dict
    result: dict | None

    @property
    def row(self) -> dict:
        """The config's keys (``runtime`` flattened as ``runtime.<key>``), then the result's (which win), then ``run_dir``."""
        row = {k: v for k, v in self.config.items() if k != RUNTIME_KEY}
        runtime = self.config.get(RUNTIME_KEY, {})
        row.update({f"{RUNTIME_KEY}.{k}": v for k, v in (runtime if isinstance(runtime, dict) else {}).items()})
        row.update(self.result or {})
        row["run_dir"] = str(self.dir)
        return row


def read_run(
    directory: str | os.PathLike,
    *,
    config_keys: Iterable[str] = (),
    result_keys: Iterable[str] = (),
    row_keys: Iterable[str] = (),
    numbers: Iterable[str] = (),
    finished: bool = True,
) -> Run:
    """The one reader of a run directory; every malformed record is a :class:`UserError` naming the file and the fix.

    ``config.json`` must be a JSON object holding ``config_keys``; with ``finished``, ``result.json`` must be a JSON
    object holding ``result_keys``, the two together ``row_keys``, and each of ``numbers`` that the result holds must
    be a finite number (NaN, infinities and None are not). Last, the config's identity must hash to the directory's
    name (``<name>-<hash8>``): a config edited after the run was made no longer describes its records. Torn, binary
    and non-object files, a directory where a file must be and an unreadable file are refused by :func:`read_record`.
    """
    directory = Path(directory)
    config_path, result_path = directory / CONFIG, directory / RESULT
    if not config_path.exists():
        what = f"a {RESULT} but no {CONFIG}" if result_path.exists() else f"no {CONFIG}"
        raise UserError(f"{directory} has {what}, so nothing says which run it holds; {default_fix(config_path)}")
    config = read_record(config_path, config_keys)
    result = None
    if finished:
        result = read_record(result_path, result_keys)
        missing = [key for key in row_keys if key not in result and key not in config]
        if missing:
            raise UserError(
                f"{result_path} and {config_path} lack the keys {', '.join(missing)}; {default_fix(result_path)}"
            )
        bad = [f"{key} is {result[key]!r}" for key in numbers if key in result and not is_number(result[key])]
        if bad:
            raise UserError(f"{result_path}: {', '.join(bad)}, not a finite number; {default_fix(result_path)}")
    check_identity(directory, config)
    return Run(directory, config, result)


def check_identity(directory: Path, config: dict) -> None:
    """Refuse a ``config.json`` whose identity does not hash to its directory's name (it was edited, or moved)."""
    expected = config_hash(config)
    if directory.name.endswith(f"-{expected}"):
        return
    found = directory.name.rsplit("-", 1)[-1]
    raise UserError(
        f"{directory / CONFIG} does not describe its run: its settings hash to {expected}, the directory "
        f"name says {found} (the config was edited after the run was made); restore the original config.json, "
        f"or delete the run directory {directory} and rerun the command that made it"
    )


def run_dirs(folder: str | os.PathLike) -> list[Path]:
    """The run directories of an experiment folder, sorted: its subdirectories (not its summary files)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def scan_runs(folder: str | os.PathLike, *, problems: list[tuple[Path, str]] | None = None, **keys) -> list[Run]:
    """Every finished run of an experiment folder, read by :func:`read_run` (``keys``: its checks).

    A run is finished when its directory holds a ``result.json`` (of any kind: a directory there is a
    malformed record, not an unfinished run). A malformed run raises its :class:`UserError`, or, when
    ``problems`` is given, is appended there as ``(directory, message)`` and left out.
    """
    found = []
    for directory in run_dirs(folder):
        if not is_done(directory):
            continue
        try:
            found.append(read_run(directory, **keys))
        except UserError as exc:
            if problems is None:
                raise
            problems.append((directory, str(exc)))
    return found


# ----------------------------------------------------------------------------- checkpoints
def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    """``torch.save`` straight into an :func:`atomic_file` (no copy of the whole file in memory); tensors and plain types
    only. A full disk or quota is a :class:`UserError`; the previous checkpoint stays."""
    with atomic_file(path) as handle:
        torch.save(state, handle)


def load_checkpoint(
    path: str | os.PathLike, map_location: Any = "cpu", *, fix: str | None = None, mmap: bool = False
) -> dict:
    """Load with ``weights_only=True``; a corrupt file (or one that is not a dict) is a :class:`UserError`.

    ``fix`` is the advice the message gives; the default (delete the file, which restarts the run from
    scratch) holds for a resumable ``checkpoint.pt``, not for the weights of a finished run. A file that
    cannot be read for a permission is never advised deleted.
    ``mmap``: the tensors map the file (``torch.load(mmap=True)``) instead of being read into memory.
    """
    path = Path(path)
    fix = fix or "delete it to restart that run from scratch"
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise
    except PermissionError:
        raise UserError(f"checkpoint {path} cannot be read (permission denied); {PERMISSION_FIX}") from None
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ...
        raise UserError(f"checkpoint {path} cannot be loaded ({type(exc).__name__}); {fix}") from None
    if not isinstance(state, dict):
        raise UserError(f"checkpoint {path} holds a {type(state).__name__}, not the dict this code saves; {fix}")
    return state


# ----------------------------------------------------------------------------- run lifecycle
def prepare_run(out: str | os.PathLike, config: dict) -> Path:
    """Create the run directory and its ``config.json``, or check the stored one matches.

    A stored config whose identity differs from ``config`` refuses to resume (UserError).
    """
    path = run_dir(out, config)
    stored_path = path / CONFIG
    if stored_path.exists():
        stored = read_json(stored_path)
        if not isinstance(stored, dict) or identity(stored) != identity(json.loads(json.dumps(config, default=str))):
            changed = _changed_keys(stored if isinstance(stored, dict) else {}, config)
            raise UserError(
                f"{stored_path} holds a different config (keys {', '.join(changed) or '?'} differ); "
                f"delete {path} to start over, or use another --out"
            )
    else:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(path, exc) or exc from None
        atomic_write_json(stored_path, config)
    return path


def is_done(path: str | os.PathLike) -> bool:
    """A run is finished exactly when its ``result.json`` exists (it is written last; a directory of that name is
    a malformed record, which :func:`read_run` refuses, not an unfinished run)."""
    return (Path(path) / RESULT).exists()


def read_result(path: str | os.PathLike, required: Iterable[str] = ()) -> dict:
    """The ``result.json`` of run directory ``path`` (a :func:`read_record` with ``required`` keys)."""
    return read_record(Path(path) / RESULT, required)


def write_result(path: str | os.PathLike, result: dict) -> None:
    """Mark the run finished: write ``result.json`` atomically, last."""
    atomic_write_json(Path(path) / RESULT, result)


def append_metrics(path: str | os.PathLike, record: dict) -> None:
    append_jsonl(Path(path) / METRICS, record)


def read_metrics(path: str | os.PathLike) -> list[dict]:
    return read_jsonl(Path(path) / METRICS)


def checkpoint_path(path: str | os.PathLike) -> Path:
    return Path(path) / CHECKPOINT


def resume_state(path: str | os.PathLike, map_location: Any = "cpu", *, mmap: bool = False) -> dict | None:
    """The run's last checkpoint, or None when it has none yet (``mmap``: see :func:`load_checkpoint`)."""
    ckpt = checkpoint_path(path)
    return load_checkpoint(ckpt, map_location, mmap=mmap) if ckpt.exists() else None


# ----------------------------------------------------------------------------- collecting
def collect(
    pattern: str | os.PathLike | Iterable[str | os.PathLike],
    required: Iterable[str] = (),
    *,
    numbers: Iterable[str] = (),
    problems: list[tuple[Path, str]] | None = None,
):
    """One row per finished run matching a glob of run directories (or ``result.json`` paths).

    Columns: the config's keys (nested ``runtime`` flattened as ``runtime.<key>``), then the
    result's keys (a result key wins over a config key of the same name), then ``run_dir``
    (:attr:`Run.row`). Each run is read by :func:`read_run` (``numbers``: result keys that must be finite
    numbers); a malformed run, or one whose row lacks a key in ``required``, is a :class:`UserError`
    naming the file, or, when ``problems`` is given, is appended there as ``(directory, message)`` and left out.
    """
    required = list(required)
    patterns = [pattern] if isinstance(pattern, str | os.PathLike) else list(pattern)
    rows = []
    for pat in patterns:
        for match in sorted(globlib.glob(str(pat), recursive=True)):
            directory = Path(match).parent if Path(match).name == RESULT else Path(match)
            if not directory.is_dir() or not is_done(directory):
                continue
            try:
                row = read_run(directory, row_keys=required, numbers=numbers).row
            except UserError as exc:
                if problems is None:
                    raise
                problems.append((directory, str(exc)))
                continue
            rows.append(row)
    return pd.DataFrame(rows)


def finished_like(out: str | os.PathLike, configs: Sequence[dict], key: Callable[[dict], Any]) -> list[dict]:
    """The results of every finished run under ``out`` (in the experiments of ``configs``) whose ``key(config)``
    equals that of one of ``configs``, in directory order: what a summary of ``configs`` lists.

    A summary is never only the runs of the call that writes it: a narrower request (one seed of two)
    must not shrink it (docs/design.md, section "Runs, records and launching"). ``key`` gives the settings
    a summary file stands for, usually its name. A malformed finished run there is a :class:`UserError`
    (:func:`read_run`): a summary never leaves a run out in silence.
    """
    wanted = {json.dumps(key(c), sort_keys=True, default=str) for c in configs}
    results = []
    for experiment in sorted({c.get("experiment", "misc") for c in configs}):
        for run in scan_runs(Path(out) / run_name({"name": experiment})):
            if json.dumps(key(run.config), sort_keys=True, default=str) in wanted:
                results.append(run.result)
    return results


def write_summary(paths_and_bytes: Sequence[tuple[Path, bytes]], *, runs_found: int) -> list[Path]:
    """Write summary files atomically; an empty run set is a :class:`UserError`, never an empty file."""
    if runs_found == 0:
        raise UserError(
            f"no finished runs, so no summaries: nothing was written to {', '.join(str(p) for p, _ in paths_and_bytes)}"
        )
    for path, data in paths_and_bytes:
        atomic_write_bytes(path, data)
    return [path for path, _ in paths_and_bytes]


# ----------------------------------------------------------------------------- committing records
def portable_runtime(config: dict, root: str | os.PathLike) -> dict:
    """``config`` with every absolute path under ``runtime`` made machine-independent.

    A path inside ``root`` (the repository) becomes relative to it; any other absolute path (a data
    file or text elsewhere on this machine) becomes None. Nested configs under ``runtime`` (09's sweep
    ResNet-8) are treated alike. The identity, and so the run's hash, is unchanged: runtime
    keys are not part of it. A later run that needs a stripped path is given it again by its flag
    (``--data-root``, ``--text-file``).
    """
    root = Path(root).resolve()

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, str) and os.path.isabs(value):
            path = Path(value)
            return path.relative_to(root).as_posix() if path.is_relative_to(root) else None
        return value

    if RUNTIME_KEY not in config:
        return config
    return {**config, RUNTIME_KEY: fix(config[RUNTIME_KEY])}


def make_portable(out: str | os.PathLike, root: str | os.PathLike = ".") -> list[Path]:
    """Rewrite every ``config.json`` under ``out`` with :func:`portable_runtime` (atomically); the files changed.

    The step before committing records (``make mini``; docs/decisions.md, section "Mini preset"): no machine's
    paths in ``runtime``.
    """
    changed = []
    for path in sorted(Path(out).rglob(CONFIG)):
        config = read_json(path)
        portable = portable_runtime(config, root) if isinstance(config, dict) else config
        if portable != config:
            atomic_write_json(path, portable)
            changed.append(path)
    return changed


# ----------------------------------------------------------------------------- helpers
def _changed_keys(stored: dict, requested: dict) -> list[str]:
    a, b = identity(stored), identity(json.loads(json.dumps(requested, default=str)))
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
