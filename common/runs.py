"""Run directories and their records (docs/design.md, section "Runs, records and launching").

A run is a pure function of its config. Its directory ``<out>/<experiment>/<name>-<hash8>``
is derived from the config; it holds

- ``config.json``   the config, written when the run is first prepared;
- ``metrics.jsonl`` one JSON object per line, appended as the run goes;
- ``checkpoint.pt`` the latest resumable state (atomic, loaded with ``weights_only=True``);
- ``result.json``   written last and atomically: its presence means "finished".

Keys under ``config["runtime"]`` (device, launcher, ...) are stored but are not part of the
run's identity: the same run may resume on another device.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob as globlib
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd
import torch

from common.errors import UserError

log = logging.getLogger(__name__)

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

    @property
    def dir(self) -> Path:
        return run_dir(self.out, self.config)

    @property
    def name(self) -> str:
        return self.dir.name


def make_specs(configs: Sequence[dict], out: str | os.PathLike) -> list[RunSpec]:
    """One :class:`RunSpec` per config, all under the output root ``out``."""
    return [RunSpec(config=dict(c), out=str(out)) for c in configs]


# ----------------------------------------------------------------------------- atomic IO
@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary handle on a temp file beside ``path``; on success it is fsynced and ``os.replace``d into place.

    A crash at any point leaves either the old file or the new one, never a torn one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` through :func:`atomic_file`."""
    with atomic_file(path) as handle:
        handle.write(data)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode())


def atomic_write_csv(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Atomically write ``rows`` (one dict per row) as a CSV with a header line (pandas)."""
    atomic_write_bytes(path, csv_bytes(rows))


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the duration.

    Shared data (a download, decoded images, token shards) is prepared by one process at a
    time: the others wait here, then find it ready.
    """
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_json(path: str | os.PathLike, *, fix: str | None = None) -> Any:
    """Read a JSON file; an unreadable or corrupt one is a :class:`UserError` naming the file and the fix.

    ``fix`` replaces the default advice (delete the run directory holding the file, which restarts that run).
    A missing file stays a ``FileNotFoundError``: callers ask for files they know exist.
    """
    path = Path(path)
    fix = fix or f"delete its run directory {path.parent} to start that run again"
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is corrupt ({exc.msg} at line {exc.lineno}); {fix}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is corrupt (not UTF-8 text); {fix}") from None
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror or type(exc).__name__}); {fix}") from None


def read_record(path: str | os.PathLike, required: Iterable[str] = (), *, fix: str | None = None) -> dict:
    """A JSON object (``config.json``, ``result.json``, ...) holding every key in ``required``; anything else
    (a list, a string, a number, a missing key) is a :class:`UserError` naming the file and the fix."""
    path = Path(path)
    record = read_json(path, fix=fix)
    fix = fix or f"delete its run directory {path.parent} to start that run again"
    if not isinstance(record, dict):
        raise UserError(f"{path} holds a JSON {type(record).__name__}, not the record object this code writes; {fix}")
    missing = [key for key in required if key not in record]
    if missing:
        raise UserError(f"{path} lacks the keys {', '.join(missing)}; {fix}")
    return record


def read_config(path: str | os.PathLike, required: Iterable[str] = ()) -> dict:
    """The ``config.json`` of run directory ``path`` (a :func:`read_record` with ``required`` keys)."""
    return read_record(Path(path) / CONFIG, required)


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one JSON object as one line (flushed and fsynced)."""
    with open(path, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True, default=_json_default) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """All complete lines of a JSONL file (a torn last line from a crash is ignored)."""
    records = []
    path = Path(path)
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: skipping an unreadable line (an interrupted write)", path)
    return records


def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    """``torch.save`` straight into an :func:`atomic_file` (no copy of the whole file in memory); tensors and plain types only."""
    with atomic_file(path) as handle:
        torch.save(state, handle)


def load_checkpoint(
    path: str | os.PathLike, map_location: Any = "cpu", *, fix: str | None = None, mmap: bool = False
) -> dict:
    """Load with ``weights_only=True``; a corrupt file (or one that is not a dict) is a :class:`UserError`.

    ``fix`` is the advice the message gives; the default (delete the file, which restarts the run from
    scratch) holds for a resumable ``checkpoint.pt``, not for the weights of a finished run.
    ``mmap``: the tensors map the file (``torch.load(mmap=True)``) instead of being read into memory.
    """
    path = Path(path)
    fix = fix or "delete it to restart that run from scratch"
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise
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
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(stored_path, config)
    return path


def is_done(path: str | os.PathLike) -> bool:
    """A run is finished exactly when its ``result.json`` exists (it is written last)."""
    return (Path(path) / RESULT).is_file()


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
def collect(pattern: str | os.PathLike | Iterable[str | os.PathLike], required: Iterable[str] = ()):
    """One row per finished run matching a glob of run directories (or ``result.json`` paths).

    Columns: the config's keys (nested ``runtime`` flattened as ``runtime.<key>``), then the
    result's keys (a result key wins over a config key of the same name), then ``run_dir``.
    A config or result that is not a JSON object, or a run whose row lacks a key in ``required``,
    is a :class:`UserError` naming the file.
    """
    required = list(required)
    patterns = [pattern] if isinstance(pattern, str | os.PathLike) else list(pattern)
    rows = []
    for pat in patterns:
        for match in sorted(globlib.glob(str(pat), recursive=True)):
            directory = Path(match).parent if Path(match).name == RESULT else Path(match)
            if not is_done(directory):
                continue
            config = read_record(directory / CONFIG) if (directory / CONFIG).exists() else {}
            row = {k: v for k, v in config.items() if k != RUNTIME_KEY}
            runtime = config.get(RUNTIME_KEY, {})
            row.update({f"{RUNTIME_KEY}.{k}": v for k, v in (runtime if isinstance(runtime, dict) else {}).items()})
            row.update(read_result(directory))
            missing = [key for key in required if key not in row]
            if missing:
                raise UserError(
                    f"{directory / RESULT} and {directory / CONFIG} lack the keys {', '.join(missing)}; "
                    f"delete the run directory {directory} and rerun the command that made it"
                )
            row["run_dir"] = str(directory)
            rows.append(row)
    return pd.DataFrame(rows)


def finished_like(out: str | os.PathLike, configs: Sequence[dict], key: Callable[[dict], Any]) -> list[dict]:
    """The results of every finished run under ``out`` (in the experiments of ``configs``) whose ``key(config)``
    equals that of one of ``configs``, in directory order: what a summary of ``configs`` lists.

    A summary is never only the runs of the call that writes it: a narrower request (one seed of two)
    must not shrink it (docs/design.md, section "Runs, records and launching"). ``key`` gives the settings
    a summary file stands for, usually its name.
    """
    wanted = {json.dumps(key(c), sort_keys=True, default=str) for c in configs}
    results = []
    for experiment in sorted({c.get("experiment", "misc") for c in configs}):
        for directory in sorted((Path(out) / run_name({"name": experiment})).glob("*")):
            if not is_done(directory) or not (directory / CONFIG).is_file():
                continue
            if json.dumps(key(read_config(directory)), sort_keys=True, default=str) in wanted:
                results.append(read_result(directory))
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


def csv_bytes(rows: Iterable[dict]) -> bytes:
    """``rows`` (one dict per row) as CSV with a header line (pandas), as :func:`atomic_write_csv` writes them."""
    return pd.DataFrame(list(rows)).to_csv(index=False).encode()


# ----------------------------------------------------------------------------- committing records
def portable_runtime(config: dict, root: str | os.PathLike) -> dict:
    """``config`` with every absolute path under ``runtime`` made machine-independent.

    A path inside ``root`` (the repository) becomes relative to it; any other absolute path (a data
    file or text elsewhere on this machine) becomes None. Nested configs under ``runtime`` (a growth
    stage's ``chain``) are treated alike. The identity, and so the run's hash, is unchanged: runtime
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


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
