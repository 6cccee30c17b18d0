"""Run directories and their records (docs/design.md, section "Runs, records and launching").

A run is a pure function of its config. Its directory ``<out>/<experiment>/<name>-<hash8>``
is derived from the config; it holds

- ``config.json``   the config, written when the run is first prepared;
- ``metrics.jsonl`` one JSON object per line, appended as the run goes;
- ``checkpoint.pt`` the latest resumable state (atomic, loaded with ``weights_only=True``);
- ``result.json``   written last and atomically: its presence means "finished";
- ``.lock``         while a process trains it: that process's host, pid and lease (:class:`RunLock`).

One reader, :func:`read_run`, checks every record the same way for every script (docs/runs.md,
section "Runs and records"): a torn, binary or non-object file, a missing key, NaN where a number
must be, a directory where a file must be, or a ``config.json`` whose identity no longer hashes to
its directory's name is a :class:`UserError` naming the file and the fix; :func:`scan_runs` and
:func:`collect` can gather those problems instead of raising, for a report that names what it left out.
A write that fails for want of space, quota or file size (``ENOSPC``, ``EDQUOT``, ``EFBIG``) is a
:class:`UserError` too; the run stays resumable.

Keys under ``config["runtime"]`` (device, launcher, ...) are stored but are not part of the
run's identity: the same run may resume on another device.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob as globlib
import hashlib
import json
import logging
import math
import os
import re
import socket
import tempfile
import threading
import time
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
LOCK = ".lock"
RUNTIME_KEY = "runtime"
# A run lock's lease (another host may take the lock over once it is this old) and how often the holder's
# background thread renews it: docs/decisions.md, section "Run records, locks and write errors".
LEASE_S = 300.0
RENEW_S = 60.0


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
def file_mode() -> int:
    """The mode a new file gets under this process's umask (``0o666 & ~umask``), read without changing the umask.

    ``tempfile.mkstemp`` creates its file ``0o600`` whatever the umask; :func:`atomic_file` sets this mode
    instead, so a record is readable by the group a shared cluster folder's umask lets in, like any file
    ``open`` creates. Linux reports the umask in ``/proc/self/status``; elsewhere it is read by setting and
    restoring it once, under a lock.
    """
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


_UMASK_LOCK = threading.Lock()
WRITE_ADVICE = {
    errno.ENOSPC: "the disk is full: free space there",
    errno.EDQUOT: "the disk quota is exceeded: free space or ask for a larger quota",
    errno.EFBIG: "the file size limit is reached (ulimit -f): raise it",
    errno.EROFS: "the file system is read-only: use a writable --out",
    errno.EACCES: "permission denied: make it writable, or use another --out",
    errno.EPERM: "permission denied: make it writable, or use another --out",
}


def write_error(path: str | os.PathLike, exc: BaseException) -> UserError | None:
    """The one-line :class:`UserError` for a failed write of ``path`` (an ``OSError`` with an errno, also when torch
    wraps it in a ``RuntimeError``), or None when ``exc`` is not one: a programming error keeps its traceback."""
    cause: BaseException | None = exc
    while cause is not None and not (isinstance(cause, OSError) and cause.errno is not None):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    reason = cause.strerror or errno.errorcode.get(cause.errno, str(cause.errno))
    advice = WRITE_ADVICE.get(cause.errno, "check the disk")
    return UserError(
        f"{path} could not be written ({reason}); {advice}, then rerun the same command: finished runs are kept "
        "and unfinished ones resume from their last checkpoint"
    )


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary handle on a temp file beside ``path``; on success it is fsynced and ``os.replace``d into place.

    A crash at any point leaves either the old file or the new one, never a torn one. The file gets the
    umask's mode (:func:`file_mode`), not ``mkstemp``'s 0600. A write that fails for want of space, quota or
    file size (any ``OSError`` with an errno, also wrapped by ``torch.save``) is a :class:`UserError` naming
    ``path`` (:func:`write_error`); the old file stays.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError | RuntimeError) and (error := write_error(path, exc)) is not None:
            raise error from None
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
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the duration; the file is removed after.

    Shared data (a download, decoded images, token shards) is prepared by one process at a time: the
    others wait here, then find it ready. The file is deleted on release, so that nothing stays behind
    (a failed download leaves no lock file): a waiter that then holds the lock of a deleted file sees that
    the path no longer names it and locks the path afresh (:func:`_locked_fd`).
    """
    fd = _locked_fd(Path(path))
    assert fd is not None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)  # closing releases the flock, after the unlink: the next holder locks a new file


def _locked_fd(path: Path, *, create: bool = True) -> int | None:
    """A descriptor of ``path`` holding its exclusive ``flock`` (waiting for it), retried until the path still
    names the locked file; None when ``path`` is missing and not ``create``. Where the file system has no
    ``flock`` (some Lustre mounts), the bare descriptor."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o666)
        except FileNotFoundError:
            if create:
                raise
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                log.debug("%s: the file system has no flock (%s); going on without it", path, exc.strerror)
                return fd
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder deleted it on release: lock the path's new file


# ----------------------------------------------------------------------------- reading records
PERMISSION_FIX = (
    "make it readable (check its owner and mode, e.g. chmod u+r); the record itself may be intact, so delete nothing"
)


def default_fix(path: Path) -> str:
    """The advice for a record that is not what this code writes: rerun the run from scratch."""
    return f"delete its run directory {path.parent} and rerun the command that made it (it runs that run again)"


def read_json(path: str | os.PathLike, *, fix: str | None = None) -> Any:
    """Read a JSON file; an unreadable or corrupt one is a :class:`UserError` naming the file and the fix.

    ``fix`` replaces the default advice (delete the run directory holding the file, which restarts that run).
    A file that cannot be read for a permission is never advised deleted (:data:`PERMISSION_FIX`).
    A missing file stays a ``FileNotFoundError``: callers ask for files they know exist.
    """
    path = Path(path)
    fix = fix or default_fix(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is corrupt ({exc.msg} at line {exc.lineno}); {fix}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is corrupt (not UTF-8 text); {fix}") from None
    except PermissionError:
        raise UserError(f"{path} cannot be read (permission denied); {PERMISSION_FIX}") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not the file this code writes; {fix}") from None
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror or type(exc).__name__}); {fix}") from None


def read_record(path: str | os.PathLike, required: Iterable[str] = (), *, fix: str | None = None) -> dict:
    """A JSON object (``config.json``, ``result.json``, ...) holding every key in ``required``; anything else
    (a list, a string, a number, a missing key) is a :class:`UserError` naming the file and the fix."""
    path = Path(path)
    record = read_json(path, fix=fix)
    fix = fix or default_fix(path)
    if not isinstance(record, dict):
        raise UserError(f"{path} holds a JSON {type(record).__name__}, not the record object this code writes; {fix}")
    missing = [key for key in required if key not in record]
    if missing:
        raise UserError(f"{path} lacks the keys {', '.join(missing)}; {fix}")
    return record


def read_config(path: str | os.PathLike, required: Iterable[str] = ()) -> dict:
    """The ``config.json`` of run directory ``path`` (a :func:`read_record` with ``required`` keys)."""
    return read_record(Path(path) / CONFIG, required)


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool, not NaN or infinite)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one JSON object as one line (flushed and fsynced), after repairing a torn tail (:func:`repair_jsonl`).

    A failed write (no space, quota, file size) is a :class:`UserError` (:func:`write_error`); what it left
    is a torn tail, which the next append repairs.
    """
    repair_jsonl(path)
    try:
        with open(path, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True, default=_json_default) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        if (error := write_error(path, exc)) is not None:
            raise error from None
        raise


def repair_jsonl(path: str | os.PathLike) -> None:
    """Cut a torn last line (a crash mid-write left no newline after it) off a JSONL file, with one warning.

    What is cut is a fragment of text; binary bytes there are refused (:class:`UserError`, the file unchanged),
    as :func:`read_jsonl` refuses them anywhere.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if not data or data.endswith(b"\n"):
        return
    keep = data.rfind(b"\n") + 1
    tail = _text(path, data[keep:], data.count(b"\n") + 1)
    try:
        if _complete(tail):  # the write stopped just before its newline: the record is whole
            with open(path, "a") as handle:
                handle.write("\n")
            return
        log.warning("%s: cutting off a torn last line (an interrupted write): %r", path, tail[:60])
        os.truncate(path, keep)
    except OSError as exc:
        raise write_error(path, exc) or exc from None


def _complete(text: str) -> bool:
    """Whether ``text`` (a last line without its newline) is a whole JSON object."""
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def read_jsonl(path: str | os.PathLike, *, fix: str | None = None) -> list[dict]:
    """Every line of a JSONL file as a dict; a torn last line (no newline after it: an interrupted write) is left
    out with a warning. Anything else that is not a JSON object per line (binary bytes, a JSON list, a line
    that does not parse) is a :class:`UserError` naming the file, the line and ``fix``."""
    path = Path(path)
    fix = fix or default_fix(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _unreadable(path, exc, fix) from None
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    records = []
    for number, raw in enumerate(lines, 1):
        text = _text(path, raw, number, fix)
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} line {number} is corrupt ({exc.msg}); {fix}") from None
        if not isinstance(record, dict):
            raise UserError(f"{path} line {number} holds a JSON {type(record).__name__}, not a record object; {fix}")
        records.append(record)
    if torn:
        tail = _text(path, torn, len(lines) + 1, fix)
        if _complete(tail):
            records.append(json.loads(tail))
        else:
            log.warning("%s: leaving out a torn last line (an interrupted write; the next append cuts it off)", path)
    return records


def _text(path: Path, raw: bytes, number: int, fix: str | None = None) -> str:
    """``raw`` (one line of ``path``) as text; binary bytes (not UTF-8, or NUL) are a :class:`UserError`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        raise UserError(f"{path} line {number} holds binary bytes, not JSON text; {fix or default_fix(path)}")
    return text


def _unreadable(path: Path, exc: OSError, fix: str | None = None) -> UserError:
    if isinstance(exc, PermissionError):
        return UserError(f"{path} cannot be read (permission denied); {PERMISSION_FIX}")
    if isinstance(exc, IsADirectoryError):
        return UserError(f"{path} is a directory, not the file this code writes; {fix or default_fix(path)}")
    return UserError(f"{path} cannot be read ({exc.strerror or type(exc).__name__}); {fix or default_fix(path)}")


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


# ----------------------------------------------------------------------------- run locks
class RunLocked(UserError):
    """Another live process holds the run's lock (:class:`RunLock`): it is training that run now."""


def this_host() -> str:
    return socket.gethostname()


def job_id() -> str | None:
    """This process's SLURM job (``<array job>_<task>`` for an array element), which a requeued job keeps; else None."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID")


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (field 22 of ``/proc/<pid>/stat``, clock ticks since boot), or None where unknown:
    with the pid it names one process, so that a reused pid is not taken for the lock's holder."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int, started: str | None) -> bool:
    """Whether process ``pid`` of this host still runs (and, when ``started`` is known, is the same process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    now = process_start(pid)
    return started is None or now is None or now == started


@dataclass(frozen=True)
class LockHolder:
    """What a run's ``.lock`` file says: who holds it and until when its lease runs."""

    host: str
    pid: int
    renewed: float  # time.time() of the last renewal
    lease_s: float
    started: str | None = None  # process_start(pid) on its host
    job: str | None = None  # its SLURM job (job_id())
    token: str = ""  # one acquisition: a holder recognises its own lock by it

    @classmethod
    def parse(cls, text: str) -> LockHolder | None:
        """The holder a lock file's text names, or None (empty or torn: its writer died mid-write)."""
        try:
            record = json.loads(text)
            return cls(
                host=str(record["host"]),
                pid=int(record["pid"]),
                renewed=float(record["renewed"]),
                lease_s=float(record["lease_s"]),
                started=record.get("started"),
                job=record.get("job"),
                token=str(record.get("token", "")),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def gone(self) -> str | None:
        """Why the holder no longer holds the lock, or None while it lives: on this host its process has ended;
        elsewhere its SLURM job is this process's own (a requeued job's dead predecessor) or its lease ran out."""
        if self.host == this_host():
            return None if pid_alive(self.pid, self.started) else f"its process {self.pid} has ended"
        if self.job is not None and self.job == job_id():
            return f"it was this SLURM job {self.job} before it was requeued"
        age = time.time() - self.renewed
        return f"its lease ran out {age - self.lease_s:.0f} s ago" if age > self.lease_s else None

    def describe(self) -> str:
        job = f", SLURM job {self.job}" if self.job else ""
        return f"pid {self.pid} on {self.host}{job}, lease renewed {time.time() - self.renewed:.0f} s ago"


_HELD: dict[Path, RunLock] = {}  # the run locks this process holds (re-entrant: a chain job locks its own stage again)
_HELD_GUARD = threading.Lock()


class RunLock:
    """The lock of one run directory: ``<run>/.lock`` holds the holder's host, pid, SLURM job and lease.

    Taken (:meth:`acquire`, or ``with``) by the process that trains the run, renewed every ``renew_s``
    seconds by a background thread, removed on release. A second process finds the lock held and gets
    :class:`RunLocked` (one line naming the holder) while the holder lives; a holder that is gone
    (:meth:`LockHolder.gone`: on this host its pid has ended; elsewhere its lease of ``lease_s`` seconds
    ran out, or it was this very SLURM job before a requeue) is taken over with one warning. The file is
    read and written under a short ``flock``, so two processes never both take it. Re-entrant within a
    process (docs/runs.md, section "Runs and records"; the lease: docs/decisions.md, section "Run records, locks
    and write errors").
    """

    def __init__(self, directory: str | os.PathLike, *, lease_s: float | None = None, renew_s: float | None = None):
        self.dir = Path(directory)
        self.path = self.dir / LOCK
        self.lease_s = LEASE_S if lease_s is None else lease_s
        self.renew_s = RENEW_S if renew_s is None else renew_s
        self.token = f"{this_host()}:{os.getpid()}:{time.time_ns()}"
        self._depth = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> RunLock:
        key = self.dir.resolve()
        with _HELD_GUARD:
            held = _HELD.get(key)
            if held is not None:
                held._depth += 1
                return held
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            with self._guarded() as fd:
                assert fd is not None
                holder = LockHolder.parse(os.pread(fd, 65536, 0).decode("utf-8", "replace"))
                if holder is not None:
                    why = holder.gone()
                    if why is None:
                        raise RunLocked(
                            f"{self.dir}: another process is training this run ({holder.describe()}; lock file "
                            f"{self.path}); wait for it to finish, or stop it: a lock whose process has ended is "
                            "taken over by the next call"
                        )
                    log.warning("%s: taking over the lock of %s: %s", self.dir, holder.describe(), why)
                self._write(fd)
        except OSError as exc:
            raise write_error(self.path, exc) or exc from None
        self._depth = 1
        with _HELD_GUARD:
            _HELD[key] = self
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease {self.dir.name}", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        key = self.dir.resolve()
        with _HELD_GUARD:
            held = _HELD.get(key, self)
            held._depth -= 1
            if held._depth > 0:
                return
            _HELD.pop(key, None)
        held._stop.set()
        if held._thread is not None:
            held._thread.join()
        with contextlib.suppress(OSError), held._guarded(create=False) as fd:
            if fd is not None and held._mine(fd):
                os.unlink(held.path)

    def renew(self) -> bool:
        """Renew the lease now; False when the lock is no longer this holder's (another process took it over)."""
        with self._guarded(create=False) as fd:
            if fd is None or not self._mine(fd):
                return False
            self._write(fd)
            return True

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                if not self.renew():
                    log.warning("%s: the run lock was taken over by another process; this one goes on", self.dir)
                    return
            except OSError as exc:  # a full disk or a lost mount: try again at the next renewal
                log.warning("%s: could not renew the run lock (%s)", self.dir, exc.strerror or exc)

    @contextlib.contextmanager
    def _guarded(self, *, create: bool = True) -> Iterator[int | None]:
        """The lock file's descriptor under its ``flock`` (None: no lock file, and not ``create``)."""
        fd = _locked_fd(self.path, create=create)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def _mine(self, fd: int) -> bool:
        holder = LockHolder.parse(os.pread(fd, 65536, 0).decode("utf-8", "replace"))
        return holder is not None and holder.token == self.token

    def _write(self, fd: int) -> None:
        record = {
            "host": this_host(),
            "pid": os.getpid(),
            "started": process_start(os.getpid()),
            "job": job_id(),
            "renewed": time.time(),
            "lease_s": self.lease_s,
            "token": self.token,
        }
        data = (json.dumps(record, sort_keys=True) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)


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
