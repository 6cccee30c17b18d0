"""What script 08 reads first: every finished run under ``--out``, of every script and preset, read once, and the runs
it leaves out (docs/08_make_figures.md, section "Which records, and which preset").

:func:`scan_records` reads every experiment folder of scripts 01-07, 09 and 10 through the one reader of run records
(:func:`common.runs.run_store.collect`, with :data:`REQUIRED` keys and :data:`NUMBERS` as finite numbers), then
checks what that reader does not (:data:`DEEP_CHECKS`: 09's probes and epoch records, 10's per-policy losses), so
that a NaN or an infinity never reaches a row, a table or a figure; 03's table files are checked as well
(:mod:`common.report.growth_table_scan`). A run (or table) that fails any check is a :class:`LeftOut`:
its directory, why, its experiment and what its ``config.json`` says (its preset, its arm), so that 08 can name it in
one warning line, in the report's banner and in every claims row it would have entered
(:mod:`common.report.left_out`). :func:`records_preset` picks the preset of the report; :func:`other_presets` counts
the finished runs of the other presets it leaves out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common.errors import ParamError, UserError
from common.experiments import (
    expand_decoder,
    gpt2_ascend,
    grow_by_criterion,
    growth_vs_scratch,
    matched_insertion,
    probe_ag,
    pythia_cpt,
    weight_scaling,
)
from common.experiments.shared import resnet_sweep, resnet_sweep_records
from common.report.growth_table_scan import scan_tables
from common.runs import run_store
from common.runs.record_io import is_number

SWEEP, PROBE, PYTHIA = resnet_sweep.EXPERIMENT, probe_ag.EXPERIMENT, pythia_cpt.EXPERIMENT  # scripts 01, 02, 04
GROW, EXPAND = grow_by_criterion.EXPERIMENT, expand_decoder.EXPERIMENT  # scripts 09, 10
GROW_NUMBERS = ("train_loss", "test_loss", "train_flops", "budget_flops")  # of 09's RECORD_KEYS

NUMBERS = {  # result keys that must be finite numbers (NaN or None: the run is left out and named)
    SWEEP: resnet_sweep_records.RESULT_KEYS,
    PROBE: ("ag_max", "ag_max_per_example"),
    gpt2_ascend.EXPERIMENT: ("ag_max",),
    PYTHIA: ("ag_max",),
    GROW: GROW_NUMBERS,
    EXPAND: ("blocks", "seed", "train_steps"),
}


REQUIRED = {  # keys every finished run's config + result must hold for the tables below (else it is left out and named)
    SWEEP: ("preset", "dataset", "depth_n", "seed", *NUMBERS[SWEEP]),
    PROBE: ("dataset", "depth_n", "seed", "sweep_run", *NUMBERS[PROBE]),
    gpt2_ascend.EXPERIMENT: ("preset", "n_layer", "seed", *NUMBERS[gpt2_ascend.EXPERIMENT]),
    PYTHIA: ("preset", *NUMBERS[PYTHIA]),
    matched_insertion.EXPERIMENT: ("dataset", "sweep_run", "rows"),
    weight_scaling.EXPERIMENT: ("family",),
    growth_vs_scratch.EXPERIMENT: ("dataset",),
    GROW: ("preset", "dataset", *grow_by_criterion.RECORD_KEYS),
    EXPAND: ("preset", "policies", *NUMBERS[EXPAND]),  # what common.report.rows.expand_decoder reads
}


EXPERIMENTS = (
    SWEEP,
    PROBE,
    growth_vs_scratch.EXPERIMENT,
    PYTHIA,
    gpt2_ascend.EXPERIMENT,
    matched_insertion.EXPERIMENT,
    weight_scaling.EXPERIMENT,
    GROW,
    EXPAND,
)  # every experiment folder 08 reads, in script order

ANALYSES = (PROBE, matched_insertion.EXPERIMENT, weight_scaling.EXPERIMENT)  # runs that analyse a sweep run


# ----------------------------------------------------------------------------- what the one reader does not check
def first_non_finite(value, where: str) -> str | None:
    """``<where> is nan, not a finite number`` for the first NaN or infinity anywhere in ``value`` (objects and lists
    walked, ``where`` growing ``.key`` and ``[i]``), else None. None is no number, and is left to the rows."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {value!r}, not a finite number"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        bad = first_non_finite(item, f"{where}[{key}]" if isinstance(value, list) else f"{where}.{key}".lstrip("."))
        if bad:
            return bad
    return None


def grow_problem(run: run_store.Run) -> str | None:
    """What makes a 09 run unusable beyond :data:`REQUIRED`: probes that are not a list of objects, or an epoch of
    ``metrics.jsonl`` whose clean loss is not finite (figure 10 and the post-hoc rules read them)."""
    probes = run.result.get("probes") or []
    if not isinstance(probes, list) or not all(isinstance(p, dict) for p in probes):
        return f"{run_store.RESULT}: probes is not a list of objects"
    for line, record in enumerate(run_store.read_metrics(run.dir), 1):
        clean = record.get("clean_loss")
        if clean is not None and not is_number(clean):
            return f"{run_store.METRICS} line {line}: clean_loss is {clean!r}, not a finite number"
    return None


def expand_problem(run: run_store.Run) -> str | None:
    """What makes a 10 run unusable beyond :data:`REQUIRED`: ``policies`` not an object of one object per policy."""
    policies = run.result.get("policies")
    if not isinstance(policies, dict) or not all(isinstance(p, dict) for p in policies.values()):
        return f"{run_store.RESULT}: policies is not an object of one object per policy"
    return None


DEEP_CHECKS: dict[str, Callable[[run_store.Run], str | None]] = {GROW: grow_problem, EXPAND: expand_problem}
NAN_ALLOWED = (weight_scaling.EXPERIMENT,)  # 07's records hold NaN for a statistic a depth does not define


def run_problem(experiment: str, run: run_store.Run) -> str | None:
    """Why a run the one reader accepted cannot be used (None: it can): a NaN or an infinity anywhere in its result
    (:func:`first_non_finite`; not 07's, :data:`NAN_ALLOWED`), then its experiment's :data:`DEEP_CHECKS`."""
    if experiment not in NAN_ALLOWED:
        bad = first_non_finite(run.result, "")
        if bad:
            return f"{run_store.RESULT}: {bad}"
    check = DEEP_CHECKS.get(experiment)
    return check(run) if check else None


# ----------------------------------------------------------------------------- reading every run once
@dataclass(frozen=True)
class LeftOut:
    """A finished run 08 cannot use: its directory, why, its experiment (folder) and what its ``config.json`` says
    (``{}`` when that cannot be read); ``preset``: its own, or for an analysis of a sweep run that run's (None:
    unknown, so it counts against every preset's report)."""

    dir: Path
    why: str
    experiment: str
    config: dict
    preset: str | None

    @property
    def label(self) -> str:
        return f"{self.experiment}/{self.dir.name}"


def lenient_config(directory: Path) -> dict:
    """What ``config.json`` says, or ``{}`` where it is missing or not a JSON object (the run is left out anyway)."""
    try:
        config = json.loads((directory / run_store.CONFIG).read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def collect(out: Path, experiment: str, dropped: list[tuple[Path, str]] | None = None) -> pd.DataFrame:
    """Every usable finished run of ``experiment`` under ``out`` (config and result columns, as
    :func:`common.runs.run_store.collect` gives them), or an empty frame.

    Each run is read by :func:`common.runs.run_store.read_run` (with :data:`REQUIRED` keys and :data:`NUMBERS` as
    finite numbers), then checked by :func:`run_problem`; a malformed run is left out and, with ``dropped``, named
    there (directory, why): a :class:`UserError` without it.
    """
    rows = []
    for directory in run_store.run_dirs(out / experiment):
        if not run_store.is_done(directory):
            continue
        try:
            run = run_store.read_run(
                directory, row_keys=REQUIRED.get(experiment, ()), numbers=NUMBERS.get(experiment, ())
            )
            bad = run_problem(experiment, run)
            if bad:
                raise UserError(f"{directory}: {bad}; {run_store.default_fix(directory / run_store.RESULT)}")
        except UserError as exc:
            if dropped is None:
                raise
            dropped.append((directory, str(exc)))
            continue
        rows.append(run.row)
    return pd.DataFrame(rows)


@dataclass
class Scan:
    """Every finished run under ``out``, all presets, as read once: one frame per experiment (usable runs only; a run
    that analysed a sweep run carries that run's ``preset``), the runs (and 03's table files) left out, the preset of
    each sweep run (by directory name) and 03's usable table files."""

    out: Path
    frames: dict[str, pd.DataFrame]
    dropped: list[LeftOut]
    sweep_presets: dict[str, str]
    tables: dict[Path, pd.DataFrame] = field(default_factory=dict)  # 03's usable table files, by path

    def presets(self) -> set[str]:
        """The presets the usable records belong to."""
        return {str(p) for df in self.frames.values() if "preset" in df for p in df["preset"].dropna().unique()}

    def runs_of(self, preset: str) -> int:
        """How many usable finished runs are of ``preset``."""
        return sum(int((df["preset"] == preset).sum()) for df in self.frames.values() if "preset" in df)


def drop_orphans(frames: dict[str, pd.DataFrame], sweep_presets: dict[str, str], out: Path, dropped: list) -> None:
    """Leave out each run that analysed a sweep run not among the usable ones (its preset, and for a probe its
    losses, are that run's); the others take their sweep run's preset."""
    for experiment in ANALYSES:
        df = frames[experiment]
        if df.empty or "sweep_run" not in df:
            continue
        of_sweep = df["family"] == "sweep" if "family" in df else pd.Series(True, index=df.index)
        orphan = of_sweep & ~df["sweep_run"].isin(list(sweep_presets))
        for row in df[orphan].to_dict("records"):
            dropped.append(
                (
                    Path(row["run_dir"]),
                    f"{row['run_dir']} analysed the sweep run {row['sweep_run']}, which is not among the usable "
                    f"finished runs under {out / SWEEP}; rerun the command that made it once that run is trained again",
                )
            )
        kept = df[~orphan]
        preset = kept["sweep_run"].map(sweep_presets)
        own = kept["preset"] if "preset" in kept else pd.Series(None, index=kept.index, dtype=object)
        frames[experiment] = kept.assign(preset=preset.where(of_sweep[~orphan], own)).reset_index(drop=True)


def scan_records(out: str | Path) -> Scan:
    """Read every experiment folder under ``out`` once (:func:`collect`), noting each run that cannot be used
    (:class:`LeftOut`): a malformed one, and one that analysed a sweep run that is not among the usable ones."""
    out = Path(out)
    dropped: list[tuple[Path, str]] = []
    frames, where = {}, {}
    for experiment in EXPERIMENTS:
        before = len(dropped)
        frames[experiment] = collect(out, experiment, dropped)
        where.update({i: experiment for i in range(before, len(dropped))})
    sweep = frames[SWEEP]
    sweep_presets = (
        dict(zip(sweep["run_dir"].map(lambda p: Path(p).name), sweep["preset"], strict=True)) if len(sweep) else {}
    )
    before = len(dropped)
    drop_orphans(frames, sweep_presets, out, dropped)
    where.update({i: Path(dropped[i][0]).parent.name for i in range(before, len(dropped))})
    left = []
    for i, (directory, why) in enumerate(dropped):
        config = lenient_config(Path(directory))
        analysed = sweep_presets.get(str(config.get("sweep_run"))) if where[i] in ANALYSES else None
        preset = analysed or config.get("preset")
        left.append(LeftOut(Path(directory), why, where[i], config, str(preset) if preset else None))
    tables, torn = scan_tables(out, frames[growth_vs_scratch.EXPERIMENT])
    left += [LeftOut(path, why, growth_vs_scratch.EXPERIMENT, named, preset) for path, why, named, preset in torn]
    return Scan(out, frames, left, sweep_presets, tables)


# ----------------------------------------------------------------------------- the report's preset
def records_preset(scan: Scan, preset: str | None) -> str:
    """The preset of the report 08 writes: ``preset`` when the records hold runs of it, else theirs (docs/08_make_figures.md).

    Without ``preset`` the records' own, when they are of one preset. No usable records, records that mix presets
    (without ``preset``), or a ``preset`` the records do not hold (its report would be all "not run" and replace
    theirs) are a :class:`UserError`.
    """
    found = scan.presets()
    if not found:
        left = (
            f" ({len(scan.dropped)} finished runs there cannot be read: {scan.dropped[0].why})" if scan.dropped else ""
        )
        raise ParamError(
            "out", scan.out, f"no usable run records there{left}; pass the folder scripts 01-10 wrote their runs into"
        )
    if preset is None:
        if len(found) > 1:
            counts = ", ".join(f"{p}: {scan.runs_of(p)}" for p in sorted(found))
            raise UserError(
                f"the records under {scan.out} mix the presets {', '.join(sorted(found))} (finished runs {counts}); "
                "pass --preset one of them (and a --figures-dir per preset, so that neither report replaces the other)"
            )
        return next(iter(found))
    if preset not in found:
        theirs = ", ".join(sorted(found))
        raise ParamError(
            "preset",
            preset,
            f"the records under {scan.out} are of preset {theirs}, so a {preset} report would only say 'not run' and "
            f"replace theirs; pass {sorted(found)[0]}, or leave the preset out",
        )
    return preset


def other_presets(scan: Scan, preset: str) -> str | None:
    """One line naming how many usable finished runs of presets other than ``preset`` the report leaves out (None:
    there are none)."""
    others = {p: scan.runs_of(p) for p in sorted(scan.presets() - {preset})}
    if not others:
        return None
    n = sum(others.values())
    counts = ", ".join(f"{p}: {k}" for p, k in others.items())
    return (
        f"left out {n} finished run{'s' if n != 1 else ''} of other presets ({counts}), as a {preset} report "
        f"never mixes presets; their report: --preset {next(iter(others))} with a --figures-dir of its own"
    )


def dropped_line(out: Path, dropped: Sequence[LeftOut]) -> str | None:
    """One line naming every finished run under ``out`` the report could not use, and why (None when there is none)."""
    if not dropped:
        return None
    n = len(dropped)
    return (
        f"{n} finished run{'s' if n != 1 else ''} under {out} could not be used and {'are' if n != 1 else 'is'} "
        f"left out of the report: " + " | ".join(d.why for d in dropped)
    )


def left_out_warning(run: LeftOut) -> str:
    """The warning line naming one run left out, and why."""
    return f"{run.label} could not be used and is left out of the report: {run.why}"


__all__ = [
    "EXPAND",
    "EXPERIMENTS",
    "GROW",
    "LeftOut",
    "Scan",
    "collect",
    "dropped_line",
    "left_out_warning",
    "other_presets",
    "records_preset",
    "scan_records",
]
