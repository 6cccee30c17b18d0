"""File locks: one process at a time prepares shared data (:func:`file_lock`), one process trains a run (:class:`RunLock`).

A run's ``.lock`` holds its holder's host, pid, SLURM job and a lease renewed by a background thread; a holder
that is gone is taken over with one warning (docs/runs.md, section "Runs and records"; the lease:
docs/decisions.md, section "Run records, locks and write errors").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from common.runs.atomic import write_error

log = logging.getLogger(__name__)

LOCK = ".lock"
# A run lock's lease (another host may take the lock over once it is this old) and how often the holder's
# background thread renews it: docs/decisions.md, section "Run records, locks and write errors".
LEASE_S = 300.0
RENEW_S = 60.0


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
