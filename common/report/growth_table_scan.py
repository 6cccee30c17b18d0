"""Script 03's table files, read once and checked before 08 uses them (docs/08_make_figures.md, section "Which records,
and which preset").

03 writes ``table-<dataset>-e<epochs>-at<fractions>-seeds<seeds>.csv`` (growth against scratch at equal steps) and
``ablation-...csv`` (its restart ablation) atomically from its runs; what 08 finds may still be torn (a copy cut short,
an edit by hand). A table that cannot be parsed, is torn (a line with fewer fields than the header, or no final line
end: pandas would fill the gap with NaN silently), has no rows, lacks a measured column of one of its arms, or holds a
NaN or an infinity in one is left out as a :class:`common.report.record_scan.LeftOut`: named in one warning line, in
the report's banner and in the 03 rows it would have entered, which are then "not decidable"; ``--strict`` makes it
the one-line error. Columns that may be empty by design (the paper's values, a one-seed spread, a slope over fewer
than two epochs) are not checked.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from common.experiments import growth_vs_scratch
from common.experiments.growth_vs_scratch_tables import ARMS, METHODS, METRICS

EXPERIMENT = growth_vs_scratch.EXPERIMENT
GROWTH_TABLE = re.compile(  # 03's table_stem: its table (growth against scratch) or its restart ablation
    r"^(?P<kind>table|ablation)-(?P<dataset>.+?)-e(?P<epochs>\d+)-at(?P<at>[\d.-]+)-seeds(?P<seeds>[\d-]+)$"
)
ARMS_OF = {"table": METHODS, "ablation": ARMS}  # the arms whose measured columns each kind of table must hold
KEYS = ("depth_n", "seeds")  # the numbers that say which row is which (depth_n first)
MEAN_ROW = "mean"  # the row of the mean over architectures: its depth_n is empty by design
FIX = "rerun 03_growth_vs_scratch.py with the flags that wrote it (its runs are kept; it writes the table again), or delete it"


def read_table(path: Path, kind: str) -> tuple[pd.DataFrame | None, str | None]:
    """The rows of one of 03's tables, or None and why it cannot be used (module docstring)."""
    try:
        text = path.read_text(encoding="utf-8")
        rows = pd.read_csv(io.StringIO(text))
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        return None, f"not a readable CSV table ({type(exc).__name__})"
    if not text.endswith("\n"):
        return None, "torn: its last line has no line end"
    widths = [len(fields) for fields in csv.reader(io.StringIO(text))]
    if torn := next((i for i, w in enumerate(widths) if w != widths[0]), None):
        return None, f"torn: line {torn + 1} has {widths[torn]} fields, its header {widths[0]}"
    measured = [*KEYS, *(f"{arm}_{metric}" for arm in ARMS_OF[kind] for metric in METRICS)]
    missing = [c for c in ("model", *measured) if c not in rows]
    if missing:
        return None, f"no column {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} (a torn or foreign table)"
    if rows.empty:
        return None, "no rows"
    values = np.array(rows[measured].apply(pd.to_numeric, errors="coerce"), dtype=float)
    values[(rows["model"] == MEAN_ROW).to_numpy(), 0] = 0.0  # the mean over architectures has no depth
    bad = np.argwhere(~np.isfinite(values))
    if len(bad):
        r, c = bad[0]
        got = rows[measured[c]].iloc[r]
        return None, f"{measured[c]} of row {r + 1} ({rows['model'].iloc[r]}) is {got!r}, not a finite number"
    return rows, None


def table_presets(grown: pd.DataFrame) -> dict[tuple[str, int], set[str]]:
    """The presets of 03's usable growth runs per (dataset, epochs): a table's preset is its growth runs'."""
    presets: dict[tuple[str, int], set[str]] = {}
    for r in grown.to_dict("records") if len(grown) else []:
        if isinstance(r.get("growth"), dict):
            presets.setdefault((r["dataset"], int(r["train"]["epochs"])), set()).add(r.get("preset"))
    return presets


def scan_tables(
    out: Path, grown: pd.DataFrame
) -> tuple[dict[Path, pd.DataFrame], list[tuple[Path, str, dict, str | None]]]:
    """Every table file of 03 under ``out``, read once: the usable ones by path, and each one left out as
    ``(path, why, what its name says, its preset)`` (the preset: its growth runs', when they are of one; else None,
    which counts against every preset's report)."""
    folder = out / EXPERIMENT
    tables: dict[Path, pd.DataFrame] = {}
    left: list[tuple[Path, str, dict, str | None]] = []
    presets = table_presets(grown)
    for path in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
        match = GROWTH_TABLE.match(path.stem)
        if not match:
            continue
        rows, why = read_table(path, match["kind"])
        if rows is not None:
            tables[path] = rows
            continue
        found = {p for p in presets.get((match["dataset"], int(match["epochs"])), set()) if p}
        why = f"{path}: {why}; {FIX}"
        left.append((path, why, {"dataset": match["dataset"]}, next(iter(found)) if len(found) == 1 else None))
    return tables, left


__all__ = ["GROWTH_TABLE", "read_table", "scan_tables", "table_presets"]
