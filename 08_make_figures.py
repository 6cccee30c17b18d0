"""Every figure and table, and the paper-against-reproduction claims report, from the run records alone.

Reads the finished runs of 01-07, 09 and 10 under ``--out`` (``result.json``, ``config.json`` and the summary
tables; no training, no probing, seconds; ``--out`` is only read) for one preset, and writes into
``--figures-dir`` (default ``<out>/figures``): ``figN_<name>.png`` and ``.pdf`` per figure, ``tables/<name>.md``
and ``.csv`` per table, and ``claims.md``, one row per quantitative claim of the paper with the rule
that gave its verdict (:mod:`common.report.rules`; its error rates: ``docs/claim-rules.md``), then the
identity checks apart (never counted among the claims). Without ``--preset`` the preset is the records'
own; a ``--preset`` the records do not hold is refused rather than replace their report. A figure whose
records are missing is skipped with one line naming the command that makes them; the exit code stays 0.
A finished run that cannot be used (a malformed record) is left out and named, with why, in one warning line of its
own, in the report's banner and in every claims row it would have entered (each such row "not decidable"); the last
line counts them, and ``--strict`` makes them an error. With ``--preset``, the runs of other presets are left out
and counted in one line. The record formats and the choices of which records to use are
documented in :mod:`common.report.records`.

    python 08_make_figures.py --out runs/smoke
    python 08_make_figures.py --preset mini --out results/mini --figures-dir results/mini/figures
    python 08_make_figures.py --out runs --figures-dir figures --strict
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from common.errors import UserError
from common.experiments.make_figures import (
    FIGURES,
    IDENTITY,
    build,
    dropped_line,
    left_out_warning,
    load_records,
    other_presets,
    records_preset,
    scan_records,
    verdict_counts,
)
from common.launch.cli import check_flag_use, ensure_writable_dir, entry_point, folder, make_parser, parse_args

log = logging.getLogger("08_make_figures")

SCRIPT_FLAGS = ("preset", "figures_dir", "dry_run", "strict")  # it reads records and launches nothing


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="08_make_figures.py", launches=False)
    group = parser.add_argument_group("figures and claims report")
    group.add_argument(
        "--figures-dir",
        type=folder,
        default=None,
        help=f"where the figures, tables/ and claims.md go; None: <out>/{FIGURES} "
        "(the repository's committed paper-scale figures: --figures-dir figures)",
    )
    group.add_argument(
        "--strict",
        action="store_true",
        help="a finished run that cannot be used (a malformed record) is an error (exit 2, nothing written), "
        "not a warning and a report without it",
    )
    group.add_argument("--dry-run", action="store_true", help="say what would be read and written, and exit")
    return check_flag_use(parser, script=SCRIPT_FLAGS, launches=False)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv, writes_out=False)
    figures_dir = writable_figures_dir(args)  # before any work: a refused command creates nothing
    scan = scan_records(args.out)
    left_out = dropped_line(args.out, scan.dropped)
    if left_out and args.strict:
        raise UserError(f"{left_out}; fix or delete them, or leave out --strict to write the report without them")
    preset = records_preset(scan, args.preset)
    rec = load_records(args.out, preset, scan)
    if args.dry_run:
        print(
            f"would read the {preset} records under {args.out} and write figures, tables and claims.md into {figures_dir}"
        )
        return 0
    for run in scan.dropped:  # one line each: the run and why (the banner and the rows it would have entered name it)
        log.warning("%s", left_out_warning(run))
    start = time.perf_counter()
    report = build(args.out, figures_dir, preset, records=rec)
    for line in report.skipped:
        print(line)
    print(
        f"{len(report.figures)} figures ({', '.join(report.figures) or 'none'}), "
        f"{len(report.skipped)} skipped, in {time.perf_counter() - start:.1f} s"
    )
    checks = sum(1 for r in report.claims if r["kind"] == IDENTITY)
    print(f"claims: {verdict_counts(report.claims)}; identity checks apart: {checks}")
    print(f"figures and tables: {report.figures_dir}/")
    print(f"claims report: {report.claims_path}")
    others = other_presets(scan, preset)
    if others:
        print(others)
    named = " (each named above, with why; --strict makes them an error)" if scan.dropped else ""
    print(
        f"read the {preset} records under {args.out}: {scan.runs_of(preset)} finished runs used, "
        f"{len(scan.dropped)} finished runs left out{named}"
    )
    return 0


def writable_figures_dir(args: argparse.Namespace) -> Path:
    """The folder the report goes to, proved creatable and writable without creating it (:func:`ensure_writable_dir`)."""
    if args.figures_dir is not None:
        return ensure_writable_dir(args.figures_dir, flag="--figures-dir")
    figures_dir = args.out / FIGURES
    try:
        return ensure_writable_dir(figures_dir, flag="--out")
    except UserError:
        raise UserError(
            f"--out {args.out}: the figures go to {figures_dir} by default, which cannot be written (08 only "
            "reads --out); pass --figures-dir a writable directory"
        ) from None


if __name__ == "__main__":
    raise SystemExit(main())
