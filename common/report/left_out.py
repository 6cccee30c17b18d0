"""Which claims rows a run left out of the report would have entered, and what those rows say (docs/08_make_figures.md,
section "Which records, and which preset").

Every row reads the runs of one or more experiments, some only of one dataset or one arm (09's policies): its
``_reads``, set by the row's module with :func:`reading`, or by :func:`common.report.claim_rows.claim_rows` for a
whole group of rows. A run left out (:class:`common.report.record_scan.LeftOut`) enters a row when its experiment is
one the row reads and what its config says (dataset, policy) does not rule it out; a config that cannot be read rules
nothing out. Such a row names those runs, per arm, in its records cell, and is "not decidable": it is never decided
on the runs that are left (:func:`mark_left_out`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from common.report.record_scan import EXPAND, GROW, LeftOut
from common.report.rules import verdicts

Reads = list[tuple[str, dict[str, set]]]  # (experiment, {config key: the values the row reads})
ARM_KEYS = {GROW: "policy"}  # experiment -> the config key naming a run's arm (others: the experiment is the arm)
EVERY_ARM = {EXPAND: "every policy"}  # experiments whose one run holds every arm of a row


def reading(row: dict, experiment: str, **filters: str | Iterable[str] | None) -> dict:
    """``row``, noted as reading the runs of ``experiment`` whose config's values are among ``filters`` (a filter
    of None reads every value)."""
    kept = {k: {v} if isinstance(v, str) else set(v) for k, v in filters.items() if v is not None}
    row.setdefault("_reads", []).append((experiment, kept))
    return row


def enters(run: LeftOut, reads: Reads) -> bool:
    """Whether ``run`` would have entered a row that reads ``reads``."""
    return any(
        run.experiment == experiment
        and all(run.config.get(key) is None or run.config.get(key) in values for key, values in filters.items())
        for experiment, filters in reads
    )


def arm_words(runs: Sequence[LeftOut]) -> str:
    """The runs named per arm: ``criterion: <run>, <run>; cyclic: <run>`` (09; ``arm unknown`` where the config cannot
    be read), ``every policy: <run>`` (10, whose every run holds every arm), else per experiment folder."""
    arms: dict[str, list[str]] = {}
    for run in runs:
        key = ARM_KEYS.get(run.experiment)
        arm = f"{run.config.get(key) or 'arm unknown'}" if key else EVERY_ARM.get(run.experiment, run.experiment)
        arms.setdefault(arm, []).append(run.dir.name)
    return "; ".join(f"{arm}: {', '.join(names)}" for arm, names in arms.items())


def mark_left_out(row: dict, left_out: Sequence[LeftOut], default: Reads) -> dict:
    """``row`` without its ``_reads``; where a run left out of the report would have entered it (:func:`enters`), the
    row names those runs per arm in its records cell and is "not decidable" (no power: its design is not the
    records')."""
    reads = row.pop("_reads", None) or default
    runs = [run for run in left_out if enters(run, reads)]
    if not runs:
        return row
    n = len(runs)
    row["records"] = f"{row['records']}; left out: {arm_words(runs)}"
    why = (
        f"not decided: {n} of its finished runs could not be used (named in records, 08 printed why), and a row is "
        "never decided on the runs that are left"
    )
    left = row["reproduced"]
    row["reproduced"] = why if left == "-" else f"{why}; those give (not a verdict): {left}"
    row["_outcome"] = verdicts.Outcome(verdicts.UNDECIDABLE, row["reproduced"])
    row["_design"], row["_comparable"] = None, True
    return row


__all__ = ["Reads", "arm_words", "enters", "mark_left_out", "reading"]
