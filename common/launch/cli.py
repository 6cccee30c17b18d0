"""The flags every numbered script shares, and the command-line boundary.

A numbered script builds its parser with :func:`make_parser` (its docstring's first paragraph is
the description, its usage examples end ``--help``), adds its own flags, declares who consumes each
one (:func:`check_flag_use`), and wraps its ``main`` with :func:`entry_point`, which turns a
:class:`~common.errors.UserError` into one line on stderr and exit code 2 (docs/design.md, section "Runs, records
and launching").

Every flag has exactly one consumer: the planner (the preset fields a script's flag table sets, handed over as
``overrides``, or a keyword by name: docs/design.md, section "Validation"), the shared command line and the launcher (:data:`CLI_FLAGS`,
:data:`LAUNCHER_FLAGS`), or the script itself (the flags it lists as its own).
"""

from __future__ import annotations

import argparse
import difflib
import errno
import functools
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from common.errors import ParamError, UserError
from common.launch.bounds import MAX_LIST_VALUES, check_bounds
from common.launch.logs import setup_logging
from common.launch.slurm import load_profile
from common.presets.choose import BlankItem, comma_items, repeated_values

PRESETS = ("smoke", "mini", "paper", "gpu-hour")
# A preset that only some scripts have, and those scripts (their prog); any other script refuses it in one line
# (parse_args). gpu-hour: the ResNet experiments sized for about an hour on one GPU (common/presets/train_resnet_sweep.py).
PRESET_SCRIPTS = {
    "gpu-hour": (
        "01_train_resnet_sweep.py",
        "02_probe_ag.py",
        "03_growth_vs_scratch.py",
        "06_matched_insertion.py",
        "08_make_figures.py",
    )
}
DEVICES = ("auto", "cpu", "cuda", "npu", "mps")
LAUNCHERS = ("inline", "local", "slurm")
CLI_FLAGS = frozenset({"out", "verbose"})  # read by parse_args (the writable --out check, logging) in every script
SLURM_FLAGS = (
    "partition",
    "account",
    "qos",
    "constraint",
    "time_min",
    "gpus_per_node",
    "cpus_per_task",
    "mem_gb",
    "array_parallelism",
)
LAUNCHER_FLAGS = frozenset(
    {"launcher", "runs_per_device", "dry_run", "wait", "slurm_profile", *SLURM_FLAGS}
)  # read by launch_from_args


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (plus exit code 2), not a usage dump."""

    def error(self, message: str) -> None:
        hint = nearest_choice(message) or self.nearest_flag(message)
        self.exit(2, f"{self.prog}: error: {message}{hint} (see {self.prog} --help)\n")

    def nearest_flag(self, message: str) -> str:
        """``"; did you mean --blocks?"`` for ``unrecognized arguments: --block 1``, else ``""``."""
        found = re.search(r"unrecognized arguments: (--?[\w-]+)", message)
        flags = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        close = difflib.get_close_matches(found[1], flags, n=1, cutoff=0.6) if found else []
        return f"; did you mean {close[0]}?" if close else ""


def nearest_choice(message: str) -> str:
    """``"; did you mean 'cuda'?"`` for argparse's ``invalid choice: 'cdua' (choose from ...)``, else ``""``."""
    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if found is None:
        return ""
    close = difflib.get_close_matches(found[1], re.findall(r"'([^']*)'", found[2]), n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else ""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each flag's help; the description and the usage examples kept as written."""


def usage_examples(doc: str) -> str | None:
    """The indented command lines of a script's docstring (its usage examples), as ``--help``'s epilog."""
    lines = [line.strip() for line in doc.splitlines() if line.startswith("    ") and line.strip()]
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) if lines else None


def make_parser(doc: str, *, prog: str | None = None, launches: bool = True) -> argparse.ArgumentParser:
    """A parser with the shared flags of a numbered script already added.

    ``doc``: the script's docstring (the first paragraph describes it; its indented command lines
    become the examples at the end of ``--help``). ``launches``: the script launches runs, so it takes
    ``--seed``, ``--device``, ``--launcher``, ``--dry-run`` and the SLURM flags; a script that only
    reads records (08) takes ``--preset``, ``--out`` and ``--verbose``.
    """
    parser = OneLineParser(
        prog=prog,
        allow_abbrev=False,  # --block is not --blocks: a flag is spelled out
        description=doc.strip().split("\n\n")[0],
        epilog=usage_examples(doc),
        formatter_class=HelpFormatter,
    )
    shared = parser.add_argument_group("shared flags (every numbered script)")
    add_record_flags(shared, launches=launches)
    if not launches:
        return parser
    add_run_flags(shared)
    add_slurm_flags(parser)
    return parser


def add_record_flags(shared: argparse._ArgumentGroup, *, launches: bool) -> None:
    """``--preset``, ``--out`` and ``--verbose``, which every numbered script takes; a script that only reads
    records (not ``launches``, 08) reads ``--out`` only and defaults ``--preset`` to its records' preset."""
    shared.add_argument(
        "--preset",
        choices=PRESETS,
        default="paper" if launches else None,
        help="'paper': the paper's settings (GPU cluster scale, real datasets); "
        "'smoke': minutes on a laptop CPU with offline data, same code paths; "
        "'mini': real CIFAR-10 images and real text at reduced scale (about 75 minutes for 01-08 and 30 more for 09-10 on a 2-core CPU on 2026-12-03; "
        'README, section "Results"); '
        "'gpu-hour' (scripts 01, 02, 03, 06 and 08's report): all of CIFAR-10 at the paper's recipe for 20 epochs, "
        "N = 0..26 x 5 seeds, about an hour on one H100-class GPU with --runs-per-device 4 (an estimate; --dry-run "
        "prints it)" + ("" if launches else "; None: the preset of the records under --out"),
    )
    shared.add_argument(
        "--out",
        type=folder,
        default=Path("runs"),
        help="root directory of run directories (config.json, metrics.jsonl, result.json, checkpoints)"
        + ("" if launches else ", read only"),
    )
    shared.add_argument("-v", "--verbose", action="store_true", help="log debug messages")


def add_run_flags(shared: argparse._ArgumentGroup) -> None:
    """``--seed``, ``--device``, ``--launcher``, ``--runs-per-device`` and ``--dry-run``: a script that launches runs."""
    shared.add_argument("--seed", type=non_negative_int, default=0, help="base random seed of every planned run")
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
        "--runs-per-device",
        type=positive_int,
        default=1,
        metavar="K",
        help="with --launcher local: K runs share each GPU (NPU; each CPU core), the longest first; with --launcher "
        "slurm: K array jobs per GPU, through the profile's gpu_share (slurm/README.md); CPU runs keep one thread each",
    )
    shared.add_argument(
        "--dry-run",
        action="store_true",
        help="print the planned runs (and which are already finished) and exit without running",
    )


def check_flag_use(
    parser: argparse.ArgumentParser, *, planner: Iterable[str] = (), script: Iterable[str] = (), launches: bool = True
) -> argparse.ArgumentParser:
    """Return ``parser`` once every flag has exactly one consumer; else raise ``TypeError`` (a programming error).

    ``planner``: the flags (dests) handed to the run planner; ``script``: the flags the script reads
    itself; the shared command line takes :data:`CLI_FLAGS` and, when the script ``launches`` runs,
    the launcher :data:`LAUNCHER_FLAGS`. A flag nobody consumes would be shown by ``--help`` and then
    ignored; one with two consumers has no single meaning.
    """
    problems = []
    for dest, who in flag_consumers(parser, planner=planner, script=script, launches=launches).items():
        if len(who) != 1:
            problems.append(f"{dest}: {' and '.join(who) or 'no consumer'}")
    if problems:
        raise TypeError(f"{parser.prog}: every flag needs exactly one consumer; {'; '.join(problems)}")
    return parser


def flag_consumers(
    parser: argparse.ArgumentParser, *, planner: Iterable[str] = (), script: Iterable[str] = (), launches: bool = True
) -> dict[str, list[str]]:
    """``{dest: [consumers]}`` for every flag of ``parser`` (see :func:`check_flag_use`)."""
    planner, script = set(planner), set(script)
    launcher = CLI_FLAGS | (LAUNCHER_FLAGS if launches else frozenset())
    consumers = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        dest = action.dest
        consumers[dest] = [
            who for who, names in (("planner", planner), ("launcher", launcher), ("script", script)) if dest in names
        ]
    return consumers


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


def add_training_data_flags(group: argparse._ArgumentGroup, datasets: Sequence[str]) -> None:
    """``--dataset``, ``--data-root`` and ``--train-subset`` of a script that trains on the sweep's data as 01 does
    (03 and 09): the flags' meaning is 01's, their dests the planners' parameters."""
    group.add_argument(
        "--dataset",
        choices=datasets,
        default=None,
        help="None: cifar10 with --preset paper and mini, digits (offline) with smoke; as in 01_train_resnet_sweep.py",
    )
    group.add_argument("--data-root", default=None, help="as in 01_train_resnet_sweep.py")
    group.add_argument(
        "--train-subset",
        type=positive_int,
        default=None,
        metavar="K",
        help="as in 01_train_resnet_sweep.py: K / C training images per class; None: the preset's (mini: 1000), else all",
    )


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, writes_out: bool = True
) -> argparse.Namespace:
    """Parse ``argv``, set up logging, and check ``--out`` unless this is a dry run: writable (``writes_out``; it is
    not created yet, so a call refused later leaves no empty folder behind), else an existing folder to read."""
    args = parser.parse_args(argv)
    check_bounds(parser, args)
    having = PRESET_SCRIPTS.get(getattr(args, "preset", None))
    if having is not None and parser.prog not in having:
        others = " or ".join(p for p in PRESETS if p not in PRESET_SCRIPTS)
        parser.error(f"--preset {args.preset}: only {', '.join(having)} have it; use --preset {others} here")
    _FLAGS.clear()
    _FLAGS.update({a.dest: max(a.option_strings, key=len) for a in parser._actions if a.option_strings})
    setup_logging(verbose=getattr(args, "verbose", False))
    if getattr(args, "slurm_profile", None) is not None:  # a bad profile fails before any planning
        load_profile(args.slurm_profile)
    if not writes_out:
        args.out = ensure_readable_dir(args.out, flag="--out")
    elif not getattr(args, "dry_run", False):
        args.out = ensure_writable_dir(args.out, flag="--out")
    return args


def ensure_writable_dir(path: Path, *, flag: str, create: bool = False) -> Path:
    """Prove that ``path`` can be written, with a probe file in it or, while it does not exist yet, in its nearest
    existing parent (which it would be created in); ``create``: create it now."""
    path = Path(path)
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
        where = next(p for p in (path, *path.parents) if p.exists() or p == Path(p.anchor or "."))
        if not where.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", str(where))
        with tempfile.NamedTemporaryFile(dir=where, prefix=".write-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"{flag} {path}: cannot write there ({reason}); pass {flag} a writable directory") from None
    return path


def ensure_readable_dir(path: Path, *, flag: str) -> Path:
    """``path``, an existing directory this process can list; else a :class:`UserError` (nothing is created)."""
    path = Path(path)
    if not path.is_dir():
        what = "is a file" if path.exists() else "does not exist"
        raise UserError(f"{flag} {path}: {what}; pass {flag} the folder the scripts wrote their runs into")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UserError(f"{flag} {path}: cannot be read (permission denied); make it readable, or pass another {flag}")
    return path


_FLAGS: dict[str, str] = {}  # parameter (an argparse dest) -> its flag, for the script being parsed


def user_message(exc: UserError) -> str:
    """``exc`` worded for the command line: a :class:`ParamError` names the flag that sets its parameter (the flag
    whose ``dest`` is the parameter's name, as every planner and preset flag's is), any other error as it is."""
    if isinstance(exc, ParamError):
        return exc.worded(_FLAGS.get(exc.param, exc.param))
    return str(exc)


def entry_point(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap a script's ``main(argv=None) -> int`` so user mistakes exit 2 with one line."""

    @functools.wraps(main)
    def wrapped(argv: Sequence[str] | None = None) -> int:
        try:
            return main(argv)
        except UserError as exc:
            prog = Path(sys.argv[0]).name if argv is None else f"{main.__module__.rpartition('.')[2]}.py"
            print(f"{prog}: error: {user_message(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted; finished runs are kept and unfinished ones resume on the next call", file=sys.stderr)
            return 130

    return wrapped


def comma_ints(text: str) -> list[int]:
    """Parse ``"0,1,2"`` or ``"1:100"`` (inclusive range) or ``"1:49:4"`` into a non-empty list of distinct ints >= 0."""
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
            start, stop = parts[0], parts[1]
            step = parts[2] if len(parts) == 3 else 1
            if step <= 0:
                raise ValueError
            values = range(start, stop + 1, step)  # measured before it is made: no list of a billion values
        else:
            values = [int(p) for p in comma_items(text)]
        if len(values) > MAX_LIST_VALUES:
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r} gives {len(values):,} values, more than any list flag takes ({MAX_LIST_VALUES:,})"
            )
        values = list(values)
    except BlankItem as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 0,1,2 or a range like 1:100 or 1:49:4") from None
    if not values:
        raise argparse.ArgumentTypeError(
            f"{text!r} gives no values; give a list like 0,1,2 or a range start:stop with start <= stop"
        )
    if min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} holds a negative value; depths and seeds are >= 0")
    repeated = sorted(repeated_values(values))  # linear in the list
    if repeated:  # the same run planned twice (docs/runs.md, section "Runs and records")
        raise argparse.ArgumentTypeError(
            f"{text!r} repeats {','.join(map(str, repeated))}; give each value once (each value is one run)"
        )
    return values


def names_flag(names_of: Callable[[str], tuple]) -> Callable[[str], tuple]:
    """A flag type from a preset's names parser (``policies_of``): its :class:`ParamError` (an unknown, repeated or
    blank name) becomes argparse's error, so the line names the flag (``--policy``), not the preset's field; the
    parsed tuple then meets its bound (its size) like any list flag's."""

    @functools.wraps(names_of)
    def parse(text: str) -> tuple:
        try:
            return names_of(text)
        except ParamError as exc:
            raise argparse.ArgumentTypeError(f"{exc.shown!r}: {exc.message}") from None

    return parse


def comma_list(text: str) -> tuple[str, ...]:
    """An argparse type: the comma-separated items of a list flag whose values its planner checks (03's
    ``--insert-at``), as a tuple, so that its size meets the bounds table; a blank item is refused here."""
    try:
        return tuple(comma_items(text))
    except BlankItem as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def comma_names(text: str) -> list[str]:
    """An argparse type: comma-separated names (model ids, folders), at least one, none blank, none twice (each name is
    one run, so a repeat would plan it twice)."""
    names = list(comma_list(text))
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r} gives no names; give one or more, comma-separated")
    if repeated := repeated_values(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} names {', '.join(repeated)} twice; give each once (each is one run)"
        )
    return names


def folder(text: str) -> Path:
    """An argparse type: a folder's path; an empty one (``--out ""``, which would mean the current folder) is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a folder (for the current folder, '.')")
    return Path(text)


def positive_ints(text: str) -> list[int]:
    """:func:`comma_ints` whose values are all >= 1 (numbers of layers to add)."""
    values = comma_ints(text) if not text.strip().startswith("-") else None
    if values is None or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers like 1 or 1,2")
    return values


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _number(text, int, lambda v: v >= 1, "an integer >= 1")


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _number(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    return _number(text, float, lambda v: v > 0, "a finite number > 0")


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    return _number(text, float, lambda v: v >= 0, "a finite number >= 0")


def finite_float(text: str) -> float:
    """An argparse type: any finite number (NaN and infinities are refused)."""
    return _number(text, float, lambda v: True, "a finite number")


def unit_interval(text: str) -> float:
    """An argparse type: a number from 0 to 1, both included."""
    return _number(text, float, lambda v: 0 <= v <= 1, "a number from 0 to 1")


def fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    return _number(text, float, lambda v: 0 < v < 1, "a number strictly between 0 and 1")


def _number(text: str, kind: type, ok: Callable[[float], bool], want: str):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {want}")
    return value
