"""Error rates of the claim rules (:data:`common.report.rules`), measured by simulation at a design.

For each rule, a "claim true" world and a "claim false" world at its least favourable point (the
boundary of the claim's region in the rule's own terms) are simulated ``reps`` times at a design
(depths and seeds of the sweep, architectures and seeds of growth vs scratch, depths and seeds of
the matched insertion, depths of the weight-scaling fits), with Gaussian noise whose standard
deviation is ``k`` times the rule's *effect* (the difference between the two worlds in the units
of one observation: one run's value, one architecture-seed pair's paired difference, one depth's
log statistic; for a trend, its change over the design's range). Each simulated record set goes
through the rule function itself; the measured rates are

- ``P(holds | true)`` (power; issue 21 asks for >= 0.8 at k = 0.5),
- ``P(does not hold | true)`` (a faithful reproduction rejected),
- ``P(holds | false)`` (noise accepted; issue 21 asks for <= 0.05 at k = 0.5 and 1; the largest
  over the rule's false worlds when it has two sides).

Where the paper gives only a figure, the true world is fixed here (issue 21), before any record:
AGmax halving over the depth grid (the trend), and for the low-signal rules AGmax falling from 4x
the line to the line over the first quarter of the grid, to half the line at 3/8 and flat after.
The worlds are the cases of :mod:`common.report.rules.cases` (:data:`CASES`), the designs
the :class:`~common.report.rules.design.Design` of :mod:`common.report.rules.design`; this module measures them,
and the design of a preset's default depths is :func:`common.report.claim_power.design_for_preset` (read from :mod:`common.presets`).
``docs/claim-rules.md`` lists every case with its measured rates at the paper preset's design (a generated
table: ``python -m common.power.claim_rates --write-docs docs/claim-rules.md``).

**Power at the records' own design** (issue 29): :func:`power` gives P(holds | true) of a case at noise 0.5x
the effect at any :class:`Design`, such as the one a report row's records have (one seed count per depth
where they differ), and below :data:`common.report.rules.margins.POWER_TARGET` the seeds it would need. The report reads
these from a committed table (:class:`common.report.claim_power.PowerTable`, ``common/report/claim_power.csv``, beside the report's modules), regenerated from
the records by ``python -m common.power.power_table`` (:data:`common.report.claim_power.POWER_COMMAND`).

Another design (a preset's default depths, other seeds or noise levels)::

    python -m common.power.claim_rates --preset mini --seeds 3          # every rule, markdown table
    python -m common.power.claim_rates --seeds 5 --noise 0.25,0.5,1 --rules growth_wins_everywhere

or from Python, with any depths: ``design = replace(design_for_preset("paper"), sweep_depths=tuple(range(0, 41, 2)))``,
``print(markdown(measure_all(design), design))``.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from common.errors import UserError
from common.report.claim_power import (
    POWER_TABLE,
    SEED_STEPS,
    SEEDS,
    Power,
    PowerTable,
    design_for_preset,
)
from common.report.rules import margins
from common.report.rules import verdicts as verdicts_rules
from common.report.rules.cases import CASES, Case
from common.report.rules.design import Design
from common.runs import atomic

NOISE = (0.5, 1.0)  # noise sd in units of the effect (issue 21)
REPS = 2000  # repetitions per world and noise level (issue 21: >= 2,000)


# ----------------------------------------------------------------------------- designs


# ----------------------------------------------------------------------------- measuring
@dataclass(frozen=True)
class Rates:
    """The measured rates of one case at one design, per noise level ``k``."""

    case: Case
    reps: int
    holds_true: dict[float, float] = field(default_factory=dict)
    fails_true: dict[float, float] = field(default_factory=dict)
    holds_false: dict[float, float] = field(default_factory=dict)  # the largest over the false worlds
    seconds: float = 0.0

    def meets(self, power_at: float = 0.5) -> bool:
        """Issue 21's requirements: power >= 0.8 at ``power_at``, P(holds | false) <= 0.05 at every noise level."""
        return (
            self.holds_true[power_at] >= margins.POWER_TARGET
            and max(self.holds_false.values()) <= margins.FALSE_HOLDS_LIMIT
        )


def _rng(seed: int, case: Case, world: str, k: float) -> np.random.Generator:
    """One stream per (seed, case, world, noise level), stable across runs and independent of the order of cases."""
    key = zlib.crc32(f"{case.name}|{world}".encode())
    return np.random.default_rng([seed, key, int(round(k * 1000))])


def measure(case: Case, design: Design, reps: int = REPS, seed: int = 0, noise: Sequence[float] = NOISE) -> Rates:
    """Simulate ``case`` at ``design``: ``reps`` record sets per world and noise level, through the rule itself."""
    start = time.perf_counter()
    rates = Rates(case=case, reps=reps)
    for k in noise:
        true = case.simulate(design, _rng(seed, case, "true", k), reps, k, "true")
        rates.holds_true[k] = true.count(verdicts_rules.HOLDS) / reps
        rates.fails_true[k] = true.count(verdicts_rules.FAILS) / reps
        rates.holds_false[k] = max(
            case.simulate(design, _rng(seed, case, w, k), reps, k, w).count(verdicts_rules.HOLDS) / reps
            for w in case.false_worlds
        )
    return replace(rates, seconds=time.perf_counter() - start)


def measure_all(
    design: Design, reps: int = REPS, seed: int = 0, noise: Sequence[float] = NOISE, rules: Sequence[str] | None = None
) -> list[Rates]:
    """Every case (or those of ``rules``, by function name) at ``design``."""
    chosen = [c for c in CASES if rules is None or c.rule.__name__ in rules]
    return [measure(c, design, reps, seed, noise) for c in chosen]


def markdown(rates: Sequence[Rates], design: Design) -> str:
    """The docs' table: one line per case with its worlds and the measured rates."""
    noise = list(rates[0].holds_true) if rates else list(NOISE)
    head = ["rule", "kind", "noise unit (the effect)", "claim true", "claim false (least favourable)"]
    head += [f"P(holds / true) at {k:g}x" for k in noise] + [f"P(fails / true) at {k:g}x" for k in noise]
    head += [f"P(holds / false) at {k:g}x" for k in noise] + ["meets issue 21"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rates:
        c = r.case
        cells = [
            f"`{c.rule.__name__}`" + (f" ({c.label})" if c.label else ""),
            c.kind,
            c.effect,
            c.true_world,
            c.false_world,
        ]
        cells += [f"{r.holds_true[k]:.3f}" for k in noise] + [f"{r.fails_true[k]:.3f}" for k in noise]
        cells += [f"{r.holds_false[k]:.3f}" for k in noise] + ["yes" if r.meets(noise[0]) else "**no**"]
        lines.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    lines.append(
        f"\nDesign: {design.describe()}; {rates[0].reps if rates else REPS} repetitions per world and noise level."
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- power at the records' own design
POWER_NOISE = NOISE[0]  # the power target's noise level: 0.5x the effect (issue 21)


def power_at(
    case: Case, design: Design, reps: int = REPS, seed: int = 0, k: float = POWER_NOISE
) -> tuple[float, float]:
    """(P(holds | true), P(does not hold | true)) of ``case`` at ``design``, noise ``k`` times the effect."""
    verdicts = case.simulate(design, _rng(seed, case, "true", k), reps, k, "true")
    return verdicts.count(verdicts_rules.HOLDS) / reps, verdicts.count(verdicts_rules.FAILS) / reps


def power(case: Case, design: Design, reps: int = REPS, seed: int = 0, k: float = POWER_NOISE) -> Power:
    """The power of ``case`` at ``design`` and, below the target, the seeds it would need (:class:`Power`)."""
    holds, fails = power_at(case, design, reps, seed, k)
    needed = runs = None
    if holds < margins.POWER_TARGET:
        have = design.seeds(case.experiment)
        for n in (n for n in SEED_STEPS if n > have):
            bigger = design.with_seeds(case.experiment, n)
            if power_at(case, bigger, reps, seed, k)[0] >= margins.POWER_TARGET:
                needed, runs = n, bigger.runs(case.experiment)
                break
    return Power(case.name, design.key(case.experiment), holds, fails, needed, runs, reps, seed, k)


def power_markdown(table: PowerTable) -> str:
    """The power table as the docs show it: one line per (case, design), the power and what it would need."""
    lines = [
        "| rule | design of the records | P(holds / true) at 0.5x | P(fails / true) at 0.5x | to reach 0.8 |",
        "|---|---|---|---|---|",
    ]
    for _, p in sorted(table.entries.items()):
        need = "-" if p.power >= margins.POWER_TARGET else p.needs()
        lines.append(f"| `{p.case}` | {p.design} | {p.power:.3f} | {p.fails_true:.3f} | {need} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the docs' tables, regenerated
DOCS = Path(__file__).resolve().parents[2] / "docs" / "claim-rules.md"
DOCS_COMMAND = "python -m common.power.claim_rates --write-docs docs/claim-rules.md"


def docs_block(name: str) -> tuple[str, str]:
    """The markers around a generated block of docs/claim-rules.md (never edited by hand)."""
    return f"<!-- {name}: generated by {DOCS_COMMAND} -->", f"<!-- {name}: end -->"


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with the block ``name`` replaced by ``body`` (a ValueError naming the markers when they are missing)."""
    start, end = docs_block(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"no block {start} ... {end}")
    head, rest = text.split(start)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def read_block(text: str, name: str) -> str:
    """The body of the block ``name`` of ``text``."""
    start, end = docs_block(name)
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n")


def write_docs(path: str | Path, reps: int = REPS, seed: int = 0, table: str | Path = POWER_TABLE) -> None:
    """Regenerate the docs' rates table at the paper preset's design and its copy of the committed power table."""
    design = design_for_preset("paper")
    text = Path(path).read_text()
    text = replace_block(text, "rates-paper", markdown(measure_all(design, reps, seed), design))
    text = replace_block(text, "power-table", power_markdown(PowerTable.load(table)))
    atomic.atomic_write_bytes(path, text.encode())


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    """Flags of ``python -m common.power.claim_rates`` (plain argparse: a job module stays clear of the launcher's CLI)."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="python -m common.power.claim_rates",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--preset", default="paper", help="take the default depths of this preset (scripts 01, 03, 06, 07)"
    )
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds of every experiment")
    parser.add_argument(
        "--noise",
        default=",".join(f"{k:g}" for k in NOISE),
        help="noise levels in units of the effect; the first is the power's",
    )
    parser.add_argument("--reps", type=int, default=REPS, help="repetitions per world and noise level")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the simulations")
    parser.add_argument("--rules", default=None, help="comma-separated rule names (default: every rule)")
    parser.add_argument(
        "--write-docs",
        type=Path,
        default=None,
        metavar="PATH",
        help="regenerate the generated tables of PATH (docs/claim-rules.md: the rates at the paper preset's design, "
        "the committed power table) instead of printing; --reps and --seed apply",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rates table at a preset's design (other designs: :func:`measure_all` with a :class:`Design`)."""
    args = build_parser().parse_args(argv)
    try:
        if args.seeds < 2 or args.reps < 1:
            raise UserError(
                f"--seeds {args.seeds} --reps {args.reps}: give at least 2 seeds (a spread) and 1 repetition"
            )
        try:
            noise = [float(k) for k in args.noise.split(",") if k.strip()]
        except ValueError:
            raise UserError(f"--noise {args.noise}: give numbers like 0.5,1") from None
        rules = args.rules.split(",") if args.rules else None
        known = {c.rule.__name__ for c in CASES}
        if rules and set(rules) - known:
            raise UserError(
                f"--rules {args.rules}: unknown {sorted(set(rules) - known)}; known: {', '.join(sorted(known))}"
            )
        design = design_for_preset(args.preset, args.seeds)
        if args.write_docs is not None:
            if not args.write_docs.is_file():
                raise UserError(f"--write-docs {args.write_docs}: no such file (docs/claim-rules.md)")
            try:
                write_docs(args.write_docs, args.reps, args.seed)
            except ValueError as exc:
                raise UserError(f"--write-docs {args.write_docs}: {exc}") from None
            print(f"regenerated the rates and power tables of {args.write_docs}")
            return 0
    except UserError as exc:
        print(f"{build_parser().prog}: error: {exc}", file=sys.stderr)
        return 2
    print(markdown(measure_all(design, args.reps, args.seed, noise, rules), design))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
