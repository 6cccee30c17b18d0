"""The claims report's power column: the committed power table (``common/report/claim_power.csv``) read back, and the
design of a preset's records.

Each row's power is P(holds | claim true) at its records' own design, noise 0.5x the effect, measured by simulation
(:mod:`common.power.claim_rates`) and committed as a table that ``python -m common.power.power_table`` regenerates
(:data:`POWER_COMMAND`): the report reads the table and never simulates, so that 08 runs no simulation.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from common.presets.expand_decoder import PRESETS as EXPAND_PRESETS
from common.presets.grow_by_criterion import PRESETS as GROW_PRESETS
from common.presets.growth_vs_scratch import growth_preset
from common.presets.make_figures import report_preset
from common.presets.matched_insertion import PAPER_DEPTHS as MATCHED_PAPER_DEPTHS
from common.presets.train_resnet_sweep import sweep_preset
from common.presets.weight_scaling import FC_PRESETS
from common.report.rules.cases import CASES_BY_NAME, Case
from common.report.rules.design import Design
from common.runs import atomic

SEEDS = 3  # seeds of the paper preset's design (issue 21: N = 0..100 with 3 seeds; growth 4 architectures x 3 seeds)
EXPAND_BLOCKS = EXPAND_PRESETS["mini"].blocks  # K of script 10's runs, one run per (K, seed): its mini grid
SEED_STEPS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)  # seeds (runs per depth) tried for "needs about"
POWER_TABLE = Path(__file__).with_name("claim_power.csv")  # committed; 08 reads it (docs/claim-rules.md)
POWER_COLUMNS = ("case", "design", "power", "fails_true", "seeds_needed", "runs_needed", "reps", "seed", "noise")
POWER_COMMAND = "python -m common.power.power_table --out results/mini --preset mini"  # regenerates the table


@dataclass(frozen=True)
class Power:
    """P(holds | claim true) of one case at one design (noise 0.5x the effect, the claim's own true world of
    :data:`CASES`), P(does not hold | true), and the seeds (runs per depth) at which the power first reaches
    :data:`common.report.rules.margins.POWER_TARGET` on :data:`SEED_STEPS` (None: not up to the last step; absent when it already does)."""

    case: str
    design: str
    power: float
    fails_true: float
    seeds_needed: int | None
    runs_needed: int | None
    reps: int
    seed: int
    noise: float

    @property
    def experiment(self) -> str:
        """The part of the design the case reads ("" for a case no longer in :data:`CASES`)."""
        case = CASES_BY_NAME.get(self.case)
        return case.experiment if case is not None else ""

    def needs(self) -> str:
        """``about 4 seeds per depth, 32 runs`` (what the design would need to reach the power target)."""
        if self.experiment == "expand":  # a run trains every policy: its runs are its only count
            about = f"more than {SEED_STEPS[-1]}" if self.seeds_needed is None else f"about {self.seeds_needed}"
            return f"{about} runs (one per K and seed, each training every policy)"
        unit = {"sweep": "seeds per depth", "growth": "seeds", "matched": "seeds per depth", "grow": "seeds"}.get(
            self.experiment, "runs per depth"
        )
        if self.seeds_needed is None:
            return f"more than {SEED_STEPS[-1]} {unit}"
        what = {"scaling": "points per fit", "grow": "runs (two arms)"}.get(self.experiment, "runs")
        return f"about {self.seeds_needed} {unit}, {self.runs_needed} {what}"

    def row(self) -> dict:
        return {c: getattr(self, c) for c in POWER_COLUMNS}


class PowerTable:
    """The committed power table (:data:`POWER_TABLE`): :class:`Power` by (case name, design key).

    Every :meth:`lookup` is remembered in :attr:`requested` (case and design), found or not, so that
    ``python -m common.power.power_table`` can compute exactly the designs a report asks for.
    """

    def __init__(self, entries: Sequence[Power] = ()):
        self.entries = {(p.case, p.design): p for p in entries}
        self.requested: dict[tuple[str, str], tuple[Case, Design]] = {}

    @classmethod
    def load(cls, path: str | Path = POWER_TABLE) -> PowerTable:
        """The table at ``path`` (an empty table when there is no file)."""
        path = Path(path)
        if not path.is_file():
            return cls()
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))

        def count(v: str) -> int | None:
            return int(v) if v.strip() else None

        return cls(
            [
                Power(
                    r["case"],
                    r["design"],
                    float(r["power"]),
                    float(r["fails_true"]),
                    count(r["seeds_needed"]),
                    count(r["runs_needed"]),
                    int(r["reps"]),
                    int(r["seed"]),
                    float(r["noise"]),
                )
                for r in rows
            ]
        )

    def lookup(self, case: Case, design: Design) -> Power | None:
        """The power of ``case`` at ``design`` (None: not in the table: the report says so, never guesses)."""
        key = (case.name, design.key(case.experiment))
        self.requested.setdefault(key, (case, design))
        return self.entries.get(key)

    def updated(self, powers: Sequence[Power]) -> PowerTable:
        """This table with ``powers`` added or replaced."""
        return PowerTable([*self.entries.values(), *powers])

    def write(self, path: str | Path = POWER_TABLE) -> None:
        """Atomically, sorted by case and design (a rerun with the same seed writes the same bytes)."""
        rows = [p.row() for _, p in sorted(self.entries.items())]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=POWER_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: "" if v is None else (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
        atomic.atomic_write_bytes(path, buffer.getvalue().encode())


def design_for_preset(preset: str = "paper", seeds: int = SEEDS, dataset: str = "cifar10") -> Design:
    """The design of ``preset``'s default depths (scripts 01, 03, 06, 07) with ``seeds`` seeds everywhere (script 10:
    ``seeds`` runs at each K of :data:`EXPAND_BLOCKS`)."""
    sweep = sweep_preset(preset, dataset).depths
    # 06 probes the paper's depths, or every finished depth of the sweep (the preset's field)
    matched_n = MATCHED_PAPER_DEPTHS if report_preset(preset).matched_paper_depths else sweep
    matched = tuple(n + 8 for n in matched_n)
    scaling = report_preset(preset).weight_scaling_preset or preset  # gpu-hour: 07's paper design (07 has no gpu-hour)
    if scaling not in FC_PRESETS:
        raise UserError(f"--preset {preset}: no weight-scaling preset of that name ({', '.join(FC_PRESETS)})")
    return Design(
        sweep_depths=tuple(sweep),
        sweep_seeds=seeds,
        growth_architectures=len(growth_preset(preset).depths),
        growth_seeds=seeds,
        matched_depths=matched,
        matched_seeds=seeds,
        scaling_depths=tuple(FC_PRESETS[scaling].depths),
        grow_seeds=seeds,
        grow_rounds=GROW_PRESETS[preset].cap if preset in GROW_PRESETS else GROW_PRESETS["paper"].cap,
        expand_runs=len(EXPAND_BLOCKS) * seeds,
    )
