"""Shared fixtures: a real SLURM cluster for the tests marked ``slurm``; deterministic algorithms.

``slurm_cluster`` (session scope) uses a cluster whose ``sinfo`` already answers, or brings up
the single-node cluster of ``slurm/cluster.sh`` (what ``make slurm-up`` runs) when this is a
Debian machine and we are root, and stops it at the end of the session. Elsewhere the slurm
tests skip with the reason; with ``CI=true`` they fail instead, so CI always runs them.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from common.science.precision import precision_flag
from common.training import device
from tests.helpers import precision_flags

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = ROOT / "slurm" / "cluster.sh"
UP_TIMEOUT_S = 600  # a fresh machine runs apt-get update + install first


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def sinfo_answers() -> bool:
    """True when ``sinfo`` reaches a controller that lists at least one node."""
    if shutil.which("sinfo") is None:
        return False
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0 and bool(proc.stdout.strip())


def is_debian() -> bool:
    return Path("/etc/debian_version").is_file()


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def cluster_plan(*, sinfo_ok: bool, root: bool, debian: bool, ci: bool) -> tuple[str, str]:
    """What the session does about SLURM: ``("use" | "start" | "skip" | "fail", reason)``."""
    if sinfo_ok:
        return "use", "a SLURM cluster already answers (sinfo)"
    if root and debian:
        return "start", "root on Debian: slurm/cluster.sh up brings up a single-node cluster"
    missing = [what for what, ok in (("not root", root), ("not Debian", debian)) if not ok]
    reason = (
        f"no SLURM cluster: sinfo does not answer and slurm/cluster.sh cannot start one here "
        f"({', '.join(missing)} on {platform.system()}); run as root on Debian, or where sbatch works"
    )
    return ("fail" if ci else "skip"), reason


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist (``make test``: ``-n 2 --dist loadfile``) each worker brings up the session's cluster for
    the files it runs and stops it at its end: the tests on the cluster must stay in one file, or one worker would stop
    the cluster under the other's jobs."""
    files = {item.path for item in items if "slurm_cluster" in getattr(item, "fixturenames", ())}
    if len(files) > 1 and config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
        names = ", ".join(sorted(str(f.relative_to(ROOT)) for f in files))
        raise pytest.UsageError(
            f"the SLURM tests span several files ({names}); keep them in tests/launch/test_slurm.py"
        )


def _give_up(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI=true requires the SLURM tests to run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A working ``sbatch``; yields the SLURM_CONF path in use (None: the system default)."""
    action, reason = cluster_plan(sinfo_ok=sinfo_answers(), root=is_root(), debian=is_debian(), ci=in_ci())
    if action == "use":
        yield os.environ.get("SLURM_CONF")
        return
    if action != "start":
        _give_up(reason)
    scratch = Path(os.environ.get("DS_SLURM_DIR", f"/tmp/ds-slurm-{os.getuid()}"))
    conf = scratch / "etc" / "slurm.conf"
    try:
        proc = subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "up"], capture_output=True, text=True, timeout=UP_TIMEOUT_S, cwd=ROOT
        )
        output, ok = proc.stdout + proc.stderr, proc.returncode == 0
    except subprocess.TimeoutExpired as exc:
        output, ok = f"timed out after {exc.timeout} s", False
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)  # in case /etc/slurm/slurm.conf belongs to someone else
    try:
        if not ok or not sinfo_answers():
            _give_up(f"slurm/cluster.sh up failed: {output.strip().splitlines()[-1] if output.strip() else '?'}")
        yield str(conf)
    finally:
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "down"], capture_output=True, text=True, timeout=120, cwd=ROOT)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous


@pytest.fixture
def deterministic():
    """torch's deterministic algorithms for one test (bit-identical resume checks), restored afterwards."""
    previous = torch.are_deterministic_algorithms_enabled()
    device.set_deterministic(True)
    yield
    torch.use_deterministic_algorithms(previous)


@pytest.fixture
def tf32_everywhere():
    """TF32 allowed for CUDA matmuls and cuDNN (what many training scripts set); restored afterwards."""
    before = precision_flags()
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    yield precision_flags()
    for path, value in before.items():
        precision_flag(path).fp32_precision = value
