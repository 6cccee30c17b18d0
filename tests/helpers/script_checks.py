"""What the script tests of several rooms share: a script's one error line, and a free port for torchrun."""

from __future__ import annotations

import importlib
import socket


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, err
    return lines[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main_error(script: str, argv: list[str], capsys) -> tuple[int, str]:
    """Run ``script``'s ``main(argv)`` in this process: its exit code (argparse's included) and its one stderr line,
    which must start ``<script>.py: error:``."""
    try:
        code = importlib.import_module(script).main(argv)
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{script}.py: error:"), lines
    return code, lines[0]
