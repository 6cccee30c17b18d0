"""Logging set-up shared by the numbered scripts and by submitit jobs (one format, to stderr)."""

from __future__ import annotations

import logging
import sys


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is *now* (pytest's capture swaps it between tests)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def setup_logging(verbose: bool = False) -> None:
    """Log ``common`` and script messages to stderr with timestamps (idempotent)."""
    level = logging.DEBUG if verbose else logging.INFO
    root = logging.getLogger()
    if not any(isinstance(h, _CurrentStderrHandler) for h in root.handlers):
        handler = _CurrentStderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        root.addHandler(handler)
    root.setLevel(level)
