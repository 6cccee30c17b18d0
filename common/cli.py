"""The flags every numbered script shares, and the command-line boundary.

A numbered script builds its parser with :func:`make_parser`, adds its own flags, and wraps
its ``main`` with :func:`entry_point`, which turns a :class:`~common.errors.UserError` into
one line on stderr and exit code 2 (DESIGN.md section 4, STYLE.md "Our conventions").
"""

from __future__ import annotations

import argparse
import functools
import inspect
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from common.errors import UserError
from common.logs import setup_logging
from common.slurm import load_profile

PRESETS = ("smoke", "mini", "paper")
DEVICES = ("auto", "cpu", "cuda", "npu", "mps")
LAUNCHERS = ("inline", "local", "slurm")

class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (plus exit code 2), not a usage dump."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def make_parser(description: str, *, prog: str | None = None) -> argparse.ArgumentParser:
    """A parser with the shared flags of DESIGN.md section 4 already added."""
    parser = OneLineParser(
        prog=prog,
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    shared = parser.add_argument_group("shared flags (every numbered script)")
    shared.add_argument(
        "--preset",
        choices=PRESETS,
        default="paper",
        help="'paper': the paper's settings (GPU cluster scale, real datasets); "
        "'smoke': minutes on a laptop CPU with offline data, same code paths; "
        "'mini': real CIFAR-10 images and real text at reduced scale (about an hour on a 2-core CPU; README, make mini)",
    )
    shared.add_argument(
        "--out",
        type=Path,
        default=Path("runs"),
        help="root directory of run directories (config.json, metrics.jsonl, result.json, checkpoints)",
    )
    shared.add_argument("--seed", type=int, default=0, help="base random seed of every planned run")
    shared.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to compute; 'auto' picks CUDA, then an Ascend NPU (torch_npu), then MPS, then CPU",
    )
    shared.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="inline",
        help="'inline': in this process, one run after another; 'local': submitit's local executor "
        "(one process per run); 'slurm': submitit job array on a SLURM cluster",
    )
    shared.add_argument(
        "--dry-run",
        action="store_true",
        help="print the planned runs (and which are already finished) and exit without running",
    )
    shared.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    add_slurm_flags(parser)
    return parser


def add_slurm_flags(parser: argparse.ArgumentParser) -> None:
    """``--slurm-profile``, ``--wait`` and the flags that override profile keys (slurm/README.md)."""
    group = parser.add_argument_group(
        "SLURM (with --launcher slurm; a flag overrides the profile, see slurm/README.md)"
    )
    group.add_argument(
        "--slurm-profile",
        type=Path,
        metavar="TOML",
        help="cluster profile: partition, account, time limit, GPUs, ... per job kind "
        "(e.g. slurm/example.toml); without one, only the flags below and SLURM's defaults apply",
    )
    group.add_argument(
        "--wait",
        action="store_true",
        help="after submitting, wait for every job and report failures with their log paths "
        "(rerun a command with --wait to collect jobs it submitted earlier; nothing is submitted twice)",
    )
    group.add_argument("--partition", help="sbatch --partition")
    group.add_argument("--account", help="sbatch --account")
    group.add_argument("--qos", help="sbatch --qos")
    group.add_argument("--constraint", help="sbatch --constraint (node features)")
    group.add_argument("--time-min", type=positive_int, metavar="MIN", help="time limit per job, minutes")
    group.add_argument("--gpus-per-node", type=non_negative_int, metavar="N", help="GPUs per job (per node)")
    group.add_argument("--cpus-per-task", type=positive_int, metavar="N", help="CPUs per task")
    group.add_argument("--mem-gb", type=positive_float, metavar="GB", help="memory per job (per node), GB")
    group.add_argument(
        "--array-parallelism", type=positive_int, metavar="N", help="at most N jobs of the array run at once"
    )


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``, set up logging, and check ``--out`` unless this is a dry run."""
    args = parser.parse_args(argv)
    setup_logging(verbose=getattr(args, "verbose", False))
    if getattr(args, "slurm_profile", None) is not None:  # a bad profile fails before any planning
        load_profile(args.slurm_profile)
    if not getattr(args, "dry_run", False):
        args.out = ensure_writable_dir(args.out, flag="--out")
    return args


def ensure_writable_dir(path: Path, *, flag: str) -> Path:
    """Create ``path`` if needed and prove it is writable by writing a probe file."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(
            f"{flag} {path}: cannot write there ({reason}); pass {flag} a writable directory"
        ) from None
    return path


def entry_point(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap a script's ``main(argv=None) -> int`` so user mistakes exit 2 with one line."""

    @functools.wraps(main)
    def wrapped(argv: Sequence[str] | None = None) -> int:
        try:
            return main(argv)
        except UserError as exc:
            prog = Path(sys.argv[0]).name if argv is None else main.__module__
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted; finished runs are kept and unfinished ones resume on the next call", file=sys.stderr)
            return 130

    return wrapped


def flags_for(fn: Callable, args: argparse.Namespace, **given) -> dict:
    """Keyword arguments for ``fn`` from parsed flags: each parameter of ``fn`` whose name is a flag's
    ``dest`` takes that flag's value; ``given`` adds or overrides values (flags the script derives).

    A script's config planner is called as ``plan(**flags_for(plan, args, exact=...))``, so a flag
    reaches the planner under its own name without the script copying every one by hand.
    """
    names = inspect.signature(fn).parameters
    found = {name: getattr(args, name) for name in names if hasattr(args, name)}
    unknown = set(given) - set(names)
    if unknown:
        raise TypeError(f"{fn.__name__} takes no arguments {sorted(unknown)}")
    return {**found, **given}


def comma_ints(text: str) -> list[int]:
    """Parse ``"0,1,2"`` or ``"1:100"`` (inclusive range) or ``"1:49:4"`` into a list of ints."""
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
            start, stop = parts[0], parts[1]
            step = parts[2] if len(parts) == 3 else 1
            if step <= 0:
                raise ValueError
            return list(range(start, stop + 1, step))
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list like 0,1,2 or a range like 1:100 or 1:49:4"
        ) from None


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _number(text, int, lambda v: v >= 1, "an integer >= 1")


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _number(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    """An argparse type: a number > 0."""
    return _number(text, float, lambda v: v > 0, "a number > 0")


def _number(text: str, kind: type, ok: Callable[[float], bool], want: str):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {want}")
    return value
