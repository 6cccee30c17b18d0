"""Regenerate the committed power table (``common/report/claim_power.csv``) from the records a report reads.

For every statistical row of the claims report of ``--preset`` records under ``--out``, P(holds | claim true) of
its rule at the records' own design (depths, seeds, sample sizes, read from the records by
:func:`common.report.claim_rows.claim_rows`), simulated in the claim's own world at noise 0.5x the effect
(:func:`common.power.claim_rates.power`), and below the power target the seeds it would need. 08 reads the
table, so that rebuilding a report stays fast and deterministic; a design missing from it is reported as "power
not computed for this design", never guessed (docs/claim-rules.md, section "Power at the records' own design").

    python -m common.power.power_table --out results/mini --preset mini      # after make mini, before 08

The table keeps the designs of other record sets unless ``--fresh``; a rerun with the same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from common.errors import UserError
from common.power import claim_rates
from common.report import claim_power, claim_rows, records
from common.report.rules import margins


def regenerate(
    out: str | Path,
    preset: str,
    table: str | Path = claim_power.POWER_TABLE,
    reps: int = claim_rates.REPS,
    seed: int = 0,
    fresh: bool = False,
) -> list[claim_power.Power]:
    """Compute the power of every design the report of ``preset`` records under ``out`` asks for; write ``table``."""
    rec = records.load_records(out, preset)
    asked = claim_power.PowerTable()
    claim_rows.claim_rows(rec, power=asked)
    powers = [claim_rates.power(case, design, reps, seed) for case, design in asked.requested.values()]
    start = claim_power.PowerTable() if fresh else claim_power.PowerTable.load(table)
    start.updated(powers).write(table)
    return powers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="python -m common.power.power_table",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="the records' folder (as 08's --out)")
    parser.add_argument("--preset", default="paper", help="the records' preset (as 08's --preset)")
    parser.add_argument("--table", type=Path, default=claim_power.POWER_TABLE, help="the power table to update")
    parser.add_argument("--reps", type=int, default=claim_rates.REPS, help="repetitions per design")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the simulations")
    parser.add_argument("--fresh", action="store_true", help="drop the table's other designs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prog = build_parser().prog
    try:
        if not args.out.is_dir():
            raise UserError(f"--out {args.out}: no such folder of records")
        if args.reps < 1:
            raise UserError(f"--reps {args.reps}: give at least 1 repetition")
        start = time.perf_counter()
        powers = regenerate(args.out, args.preset, args.table, args.reps, args.seed, args.fresh)
    except UserError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    low = sum(1 for p in powers if p.power < margins.POWER_TARGET)
    print(
        f"{len(powers)} designs of the {args.preset} records under {args.out} ({low} below power "
        f"{margins.POWER_TARGET:g}) in {time.perf_counter() - start:.1f} s; written {args.table}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
