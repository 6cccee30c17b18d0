"""ruff is part of the test command: the tree stays lint-clean and formatted (`ruff format`)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_check_is_clean():
    ruff = Path(sys.executable).with_name("ruff")
    cmd = [str(ruff)] if ruff.exists() else [shutil.which("ruff") or "ruff"]
    proc = subprocess.run([*cmd, "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_leaves_the_tree_unchanged():
    ruff = Path(sys.executable).with_name("ruff")
    cmd = [str(ruff)] if ruff.exists() else [shutil.which("ruff") or "ruff"]
    proc = subprocess.run([*cmd, "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, "run `ruff format .`:\n" + proc.stdout + proc.stderr
