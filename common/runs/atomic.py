"""Atomic files: a write that a crash leaves whole or absent, and one line for a write that fails.

Every record of a run (docs/design.md, section "Runs, records and launching") and every shared data file is
written through :func:`atomic_file`: a temporary file beside the target, fsynced, then ``os.replace``d into
place, with the umask's mode (:func:`file_mode`). A write that fails for want of space, quota or file size
(``ENOSPC``, ``EDQUOT``, ``EFBIG``) is a :class:`UserError` naming the file (:func:`write_error`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd

from common.errors import UserError


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
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=json_default) + "\n").encode())


def atomic_write_csv(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Atomically write ``rows`` (one dict per row) as a CSV with a header line (pandas)."""
    atomic_write_bytes(path, csv_bytes(rows))


def atomic_write_table(folder: str | os.PathLike, stem: str, rows: Sequence[dict], markdown: str) -> tuple[Path, Path]:
    """A summary table as ``<folder>/<stem>.csv`` (``rows``) and ``<stem>.md`` (``markdown``), each written atomically."""
    csv_path, md_path = Path(folder) / f"{stem}.csv", Path(folder) / f"{stem}.md"
    atomic_write_csv(csv_path, rows)
    atomic_write_bytes(md_path, (markdown + "\n").encode())
    return csv_path, md_path


def csv_bytes(rows: Iterable[dict]) -> bytes:
    """``rows`` (one dict per row) as CSV with a header line (pandas), as :func:`atomic_write_csv` writes them."""
    return pd.DataFrame(list(rows)).to_csv(index=False).encode()


def json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
