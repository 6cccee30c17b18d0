"""The report's records: every finished run of scripts 01-07, 09 and 10 under ``--out`` that script 08 reads, of one
preset.

:func:`scan_records` reads every experiment folder once and names the runs it leaves out
(:mod:`common.report.record_scan`); script 03's table files are read here; :func:`records_preset` picks the preset of
the report;
:func:`load_records` selects that preset's runs as tidy tables (:class:`Records`), which the figures
(:mod:`common.experiments.make_figures`) and the claims report's rows (:mod:`common.report.claim_rows`) read;
:func:`commands` names the command that makes each experiment's records (a skipped figure, a "not run" claim).

Which records (docs/decisions.md, section "Figures and the claims report"):

- **One preset.** ``--preset`` (default ``paper``) selects the runs whose config says that preset;
  a probe, matched-insertion or weight-scaling run of the sweep takes the preset of the sweep run
  it analysed. Records of the other preset are never mixed in; a skipped figure says they exist.
- **One probe setting per dataset** (figures 1, 2, 9 and the AG claims): the setting (split,
  batch size, number of batches, BatchNorm mode, probe seed) with the most probed runs, ties going
  to the default ``train-b128x10`` and then by name; the same sweep run probed twice under it
  (exact and not, or two App. G settings) counts once, the exact run first. Figure 8 and the
  projection claim use every exact run.
- **GPT-2**: the group of runs (data, width, probe setting) with the most runs.
- **Pythia** (04, ``<out>/pythia_cpt/<name>-<hash8>/result.json``): ``model``, ``n_layer``,
  ``d_model``, ``val_loss_before`` / ``_after``, the probe's summary (``ag_max``,
  ``ag_max_per_example``, ``ag_max_blocks``) and ``candidates`` (``index``, ``ag_norm``,
  ``per_example_rms``, ``block_input``, ``block_influence``: None for the final stream); one run per
  (model, depth, width), labelled by the model's short name.
- **Growth vs scratch**: per dataset, script 03's table with the most seeds, then the most epochs (its preset is
  that of its growth runs), and its restart ablation beside it when there is one. Growth and scratch train the same
  epochs on one schedule each; every row shows both sides' training FLOPs and the last epochs' slope.
- **Matched insertion**: every row in figure 6; the claims use one candidate at every depth
  (:func:`common.report.claim_rows.matched_rows`).
- **Claims and identity checks**: ``claims.md`` lists the paper's claims (counted) and, apart, the
  identity checks (``V_S,l <= AG_l``; the matched insertion's drop at small alpha), which hold by
  construction and are never counted among reproduced claims.
- **Weight scaling**: 07's per-depth records of the preset, fitted again here with
  :func:`common.experiments.weight_scaling_fits.exponent_rows` (a fit of a few numbers, not a training).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common.experiments import (
    gpt2_ascend,
    growth_vs_scratch,
    matched_insertion,
    weight_scaling,
    weight_scaling_fits,
)
from common.experiments.probe_ag import probe_tag
from common.presets.make_figures import report_preset
from common.presets.probe_ag import DEFAULT_BATCH_SIZE, DEFAULT_N_BATCHES
from common.report.growth_table_scan import GROWTH_TABLE, table_presets
from common.report.record_scan import (
    EXPAND,
    EXPERIMENTS,
    GROW,
    PROBE,
    PYTHIA,
    SWEEP,
    LeftOut,
    Scan,
    collect,
    dropped_line,
    records_preset,
    scan_records,
)

PROBE_KEYS = ("split", "batch_size", "n_batches", "bn_mode", "probe_seed")
DEFAULT_PROBE = ("train", DEFAULT_BATCH_SIZE, DEFAULT_N_BATCHES, "eval", 0)


# ----------------------------------------------------------------------------- the records
@dataclass
class GrowthTable:
    """Script 03's table of one dataset (its rows as written), where it came from, and its restart ablation's rows."""

    dataset: str
    path: Path
    rows: pd.DataFrame
    seeds: list[int]
    epochs: int  # every run's: growth and scratch train the same epochs and steps on one schedule
    insert_at: str  # the insertion fractions in percent, as in the file name (``10-20-30-40-50``)
    ablation: pd.DataFrame | None = None  # the restart ablation's rows (its file beside the table), if any
    ablation_path: Path | None = None

    def budget(self) -> str:
        """Both sides' budget in words: equal epochs on one schedule, and when growth's blocks went in."""
        at = self.insert_at.replace("-", ", ")
        return f"equal epochs ({self.epochs}, one schedule each); growth's blocks in after {at}% of the run"

    def budget_words(self) -> str:
        """Both sides' budgets in a few words, for a claims row."""
        return f"equal epochs ({self.epochs}, one schedule)"

    def side_means(self, key: str) -> tuple[float, float] | None:
        """(growth, scratch) means of ``key`` on the mean row; None where the table has none."""
        rows = self.rows.set_index("model")
        if "mean" not in rows.index or f"growth_{key}" not in rows.columns:
            return None
        g, s = float(rows.loc["mean", f"growth_{key}"]), float(rows.loc["mean", f"scratch_{key}"])
        return None if pd.isna(g) or pd.isna(s) else (g, s)

    def flops_words(self) -> str:
        """Each side's mean training FLOPs ("" where the table has none)."""
        both = self.side_means("train_flops")
        return (
            ""
            if both is None
            else f"training FLOPs growth {both[0]:.3g} vs scratch {both[1]:.3g} ({both[0] / both[1]:.0%})"
        )

    def slope_words(self) -> str:
        """Whether the runs had levelled off: each side's mean slope of the running training loss over the last 10% of
        the epochs ("" where the table has none)."""
        both = self.side_means("train_loss_slope")
        if both is None:
            return ""
        return f"running training loss over the last 10% of epochs: growth {both[0]:+.1e}, scratch {both[1]:+.1e} per epoch"


@dataclass
class Records:
    """The finished runs of one preset under ``out``, as tidy tables (empty DataFrames when absent)."""

    out: Path
    preset: str
    sweep: pd.DataFrame = field(default_factory=pd.DataFrame)
    probe: pd.DataFrame = field(default_factory=pd.DataFrame)  # one setting per dataset, joined with the sweep's losses
    probe_settings: dict[str, str] = field(default_factory=dict)  # dataset -> probe tag
    probe_candidates: pd.DataFrame = field(default_factory=pd.DataFrame)  # candidates of ``probe``
    exact_candidates: pd.DataFrame = field(default_factory=pd.DataFrame)  # every exact run (02 and 05)
    gpt: pd.DataFrame = field(default_factory=pd.DataFrame)
    pythia: pd.DataFrame = field(default_factory=pd.DataFrame)
    pythia_candidates: pd.DataFrame = field(default_factory=pd.DataFrame)
    growth: list[GrowthTable] = field(default_factory=list)
    matched: pd.DataFrame = field(default_factory=pd.DataFrame)
    scaling: pd.DataFrame = field(default_factory=pd.DataFrame)
    exponents: pd.DataFrame = field(default_factory=pd.DataFrame)
    elsewhere: dict[str, set[str]] = field(default_factory=dict)  # experiment -> presets present but not selected
    grow: pd.DataFrame | None = None  # 09's runs (None: not read yet, read on first use)
    expand: pd.DataFrame | None = None  # 10's runs (None: not read yet, read on first use)
    dropped: list[LeftOut] = field(default_factory=list)  # finished runs left out of this preset's report

    def left_out(self, experiment: str) -> list[LeftOut]:
        """The runs of ``experiment`` left out of this report."""
        return [d for d in self.dropped if d.experiment == experiment]


def select_preset(df: pd.DataFrame, preset: str, experiment: str, elsewhere: dict[str, set[str]]) -> pd.DataFrame:
    """The rows of ``preset`` (column ``preset``); the other presets present are noted in ``elsewhere``."""
    if df.empty:
        return df
    presets = df["preset"] if "preset" in df else pd.Series([None] * len(df), index=df.index)
    others = {str(p) for p in presets.dropna().unique() if p != preset}
    if others:
        elsewhere.setdefault(experiment, set()).update(others)
    return df[presets == preset].reset_index(drop=True)


def with_sweep_preset(df: pd.DataFrame, sweep_presets: dict[str, str]) -> pd.DataFrame:
    """``df`` with the ``preset`` of the sweep run each row analysed (column ``sweep_run``)."""
    if df.empty:
        return df
    return df.assign(preset=df["sweep_run"].map(sweep_presets))


def load_records(out: str | Path, preset: str, scan: Scan | None = None) -> Records:
    """Read every experiment's records under ``out`` for ``preset`` (module docstring); ``scan``: what
    :func:`scan_records` read already. ``Records.dropped`` names every finished run that could not be used."""
    out = Path(out)
    scan = scan if scan is not None else scan_records(out)
    mine = [d for d in scan.dropped if d.preset in (None, preset)]  # a run of unknown preset counts against every one
    rec = Records(out=out, preset=preset, dropped=mine)
    sweep_presets = scan.sweep_presets
    rec.sweep = select_preset(scan.frames[SWEEP], preset, SWEEP, rec.elsewhere)
    probe = select_preset(with_sweep_preset(scan.frames[PROBE], sweep_presets), preset, PROBE, rec.elsewhere)
    read_probe(rec, probe)
    gpt = select_preset(scan.frames[gpt2_ascend.EXPERIMENT], preset, gpt2_ascend.EXPERIMENT, rec.elsewhere)
    rec.gpt = largest_group(gpt, gpt_group)
    rec.exact_candidates = exact_candidates(probe, gpt)
    read_pythia(rec, select_preset(scan.frames[PYTHIA], preset, PYTHIA, rec.elsewhere))
    rec.growth = growth_tables(scan, preset, rec.elsewhere)
    rec.grow = select_preset(scan.frames[GROW], preset, GROW, rec.elsewhere)
    rec.expand = select_preset(scan.frames[EXPAND], preset, EXPAND, rec.elsewhere)
    matched = select_preset(
        with_sweep_preset(scan.frames[matched_insertion.EXPERIMENT], sweep_presets),
        preset,
        matched_insertion.EXPERIMENT,
        rec.elsewhere,
    )
    if len(matched):
        rec.matched = matched_table(matched)
    read_scaling(rec, scan.frames[weight_scaling.EXPERIMENT], sweep_presets)
    return rec


def read_probe(rec: Records, probe: pd.DataFrame) -> None:
    """``rec.probe``: one probe setting per dataset, each run joined with its sweep run's losses; and its candidates."""
    rec.probe, rec.probe_settings = choose_probe_setting(probe)
    if len(rec.probe):
        losses = rec.sweep.assign(sweep_run=rec.sweep["run_dir"].map(lambda p: Path(p).name))[
            ["sweep_run", "train_loss", "test_loss", "test_acc"]
        ]
        rec.probe = rec.probe.drop(columns=[c for c in ("train_loss", "test_loss", "test_acc") if c in rec.probe])
        rec.probe = rec.probe.merge(losses, on="sweep_run", how="left")
        rec.probe_candidates = candidate_rows(rec.probe, ("dataset", "depth_n", "seed"))


def exact_candidates(probe: pd.DataFrame, gpt: pd.DataFrame) -> pd.DataFrame:
    """Every candidate of every exact run (02's under any setting, then 05's) with its ``growth_value``, ``source``
    naming where it came from (``ResNet <dataset>``, ``GPT-2``)."""
    runs = probe[probe["exact"].astype(bool)] if len(probe) else probe  # no exact run: no candidates (not an error)
    exact = [
        candidate_rows(runs, ("dataset", "depth_n", "seed")).assign(source=lambda d: "ResNet " + d["dataset"])
        if len(runs)
        else pd.DataFrame()
    ]
    if len(gpt):
        exact.append(candidate_rows(gpt[gpt["exact"].astype(bool)], ("n_layer", "seed")).assign(source="GPT-2"))
    exact = [e for e in exact if len(e) and "growth_value" in e]
    return pd.concat(exact, ignore_index=True).dropna(subset=["growth_value"]) if exact else pd.DataFrame()


def read_pythia(rec: Records, pythia: pd.DataFrame) -> None:
    """``rec.pythia``: one run per (model, depth, width), labelled (:func:`decoder_labels`); and its candidates."""
    if len(pythia):
        rec.pythia = decoder_labels(
            pythia.sort_values(["n_layer", "d_model", "run_dir"]).drop_duplicates(["model", "n_layer", "d_model"])
        )
        rec.pythia_candidates = candidate_rows(rec.pythia, ("model", "n_layer"))


def matched_table(matched: pd.DataFrame) -> pd.DataFrame:
    """06's runs one row per recorded insertion, each with its run's dataset, candidate rule and run name."""
    rows = [
        {**row, "dataset": r["dataset"], "candidate_rule": r["candidate_rule"], "run": Path(r["run_dir"]).name}
        for r in matched.to_dict("records")
        for row in r["rows"]
    ]
    return pd.DataFrame(rows)


def read_scaling(rec: Records, scaling_runs: pd.DataFrame, sweep_presets: dict[str, str]) -> None:
    """``rec.scaling`` and ``rec.exponents``: 07's per-depth records of the preset, fitted again (module docstring)."""
    scaling_runs = scaling_runs.copy()
    if len(scaling_runs):
        from_sweep = scaling_runs["family"] == "sweep"
        if from_sweep.any():  # a sweep analysis takes the preset of the sweep run it analysed
            scaling_runs.loc[from_sweep, "preset"] = scaling_runs.loc[from_sweep, "sweep_run"].map(sweep_presets)
        scaling_runs = select_preset(scaling_runs, rec.preset, weight_scaling.EXPERIMENT, rec.elsewhere)
        if len(scaling_runs):
            records = weight_scaling.record_rows(scaling_runs.to_dict("records"))
            rec.scaling = pd.DataFrame(records)
            rec.exponents = pd.DataFrame(weight_scaling_fits.exponent_rows(records))


def decoder_labels(df: pd.DataFrame) -> pd.DataFrame:
    """Probed decoders one run each, ``model`` shortened to its last path part (``pythia-70m-deduped``), made unique
    with ``-L<n_layer>-d<d_model>`` where two share it (local checkpoints); the full name stays in ``model_id``."""
    short = df["model"].map(lambda m: str(m).rstrip("/").split("/")[-1])
    clash = short.duplicated(keep=False)
    label = short.where(~clash, short + "-L" + df["n_layer"].astype(str) + "-d" + df["d_model"].astype(str))
    return df.assign(model_id=df["model"], model=label).reset_index(drop=True)


def candidate_rows(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per candidate of every run in ``df`` (its ``candidates`` list), with the run's ``keys``."""
    rows = [{**{k: r[k] for k in keys}, **c} for r in df.to_dict("records") for c in (r.get("candidates") or [])]
    return pd.DataFrame(rows)


def choose_probe_setting(probe: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """Per dataset, the probe setting with the most runs, each sweep run once (module docstring)."""
    if probe.empty:
        return probe, {}
    chosen, settings = [], {}
    for dataset, group in probe.groupby("dataset", sort=True):
        keys = group[list(PROBE_KEYS)].apply(tuple, axis=1)
        counts = {k: group.loc[keys == k, "sweep_run"].nunique() for k in keys.unique()}
        best = max(counts, key=lambda k: (counts[k], k == DEFAULT_PROBE, str(k)))
        rows = group[keys == best].sort_values(["exact", "run_dir"], ascending=[False, True])
        chosen.append(rows.drop_duplicates("sweep_run"))
        settings[str(dataset)] = probe_tag(best[0], int(best[1]), int(best[2]), False, best[3])
    return pd.concat(chosen, ignore_index=True).sort_values(["dataset", "depth_n", "seed"]).reset_index(
        drop=True
    ), settings


def gpt_group(row: dict) -> str:
    probe = {k: v for k, v in (row.get("probe") or {}).items() if k != "exact"}
    return json.dumps([row.get("data"), (row.get("model") or {}).get("n_embd"), probe], sort_keys=True, default=str)


def largest_group(df: pd.DataFrame, key: Callable[[dict], str]) -> pd.DataFrame:
    """The rows of the largest group under ``key`` (ties: the first key by name); each (depth, seed) once, exact first."""
    if df.empty:
        return df
    keys = pd.Series([key(r) for r in df.to_dict("records")], index=df.index)
    counts = keys.value_counts()
    best = sorted(counts.index, key=lambda k: (-counts[k], k))[0]
    rows = df[keys == best].sort_values(["exact", "run_dir"], ascending=[False, True])
    return rows.drop_duplicates(["n_layer", "seed"]).sort_values(["n_layer", "seed"]).reset_index(drop=True)


def growth_tables(scan: Scan, preset: str, elsewhere: dict[str, set[str]]) -> list[GrowthTable]:
    """Per dataset, script 03's table of ``preset`` with the most seeds, then the most epochs, with its restart
    ablation (the file of the same name with ``ablation`` for ``table``) when there is one. A table's preset is its
    growth runs' (:func:`common.report.growth_table_scan.table_presets`); only the table files the scan could use
    (:func:`common.report.growth_table_scan.scan_tables`: a torn one is left out and named)."""
    presets = table_presets(scan.frames[growth_vs_scratch.EXPERIMENT])
    best: dict[str, GrowthTable] = {}
    for path, rows in sorted(scan.tables.items()):
        match = GROWTH_TABLE.match(path.stem)
        if match is None or match["kind"] != "table":
            continue
        dataset, epochs = match["dataset"], int(match["epochs"])
        found = presets.get((dataset, epochs), set())
        if preset not in found:
            elsewhere.setdefault(growth_vs_scratch.EXPERIMENT, set()).update(str(p) for p in found if p)
            continue
        seeds = [int(s) for s in match["seeds"].split("-")]
        table = GrowthTable(dataset, path, rows, seeds, epochs, match["at"])
        ablation = path.with_name("ablation" + path.name.removeprefix("table"))
        if ablation in scan.tables:
            table.ablation, table.ablation_path = scan.tables[ablation], ablation
        current = best.get(dataset)
        if current is None or (len(table.seeds), table.epochs) > (len(current.seeds), current.epochs):
            best[dataset] = table
    return [best[k] for k in sorted(best)]


# ----------------------------------------------------------------------------- the commands that make them
def commands(preset: str, out: str | Path) -> dict[str, str]:
    """The command that makes each experiment's records (what a skipped figure or a "not run" claim names)."""
    p = report_preset(preset).preset_flag(preset)
    o = f" --out {out}"
    sweep = f"python 01_train_resnet_sweep.py{p}{o}"
    return {
        "sweep": sweep,
        "probe": f"{sweep} && python 02_probe_ag.py{p}{o}",
        "exact": f"{sweep} && python 02_probe_ag.py{p} --exact{o}",
        "growth": f"python 03_growth_vs_scratch.py{p}{o}",
        "pythia": f"python 04_pythia_cpt.py{p}{o}",
        "gpt2": f"python 05_gpt2_ascend.py{p}{o}",
        "matched": f"{sweep} && python 06_matched_insertion.py{p}{o}",
        "scaling": f"python 07_weight_scaling.py{p}{o}",
    }


__all__ = [  # and, read by 08 and the rows through this module, what common.report.record_scan reads first
    "EXPAND",
    "EXPERIMENTS",
    "GROW",
    "PROBE",
    "PYTHIA",
    "SWEEP",
    "GrowthTable",
    "LeftOut",
    "Records",
    "Scan",
    "collect",
    "commands",
    "dropped_line",
    "load_records",
    "records_preset",
    "scan_records",
]
