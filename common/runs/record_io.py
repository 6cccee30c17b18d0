"""Reading a record back: every malformed JSON or JSONL file is one :class:`UserError` naming the file and the fix.

A torn, binary or non-object file, a missing key, a directory where a file must be or an unreadable file is
refused the same way for every script (docs/runs.md, section "Runs and records"); :func:`common.runs.run_store.read_run`
applies these checks to a run directory. Appends to a JSONL file first cut a torn last line
(:func:`repair_jsonl`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from common.errors import UserError
from common.runs.atomic import json_default, write_error

log = logging.getLogger(__name__)

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


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool, not NaN or infinite)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one JSON object as one line (flushed and fsynced), after repairing a torn tail (:func:`repair_jsonl`).

    A failed write (no space, quota, file size) is a :class:`UserError` (:func:`write_error`); what it left
    is a torn tail, which the next append repairs.
    """
    repair_jsonl(path)
    try:
        with open(path, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True, default=json_default) + "\n")
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
