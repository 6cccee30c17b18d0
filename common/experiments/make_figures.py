"""Job module of ``08_make_figures.py``: every figure and table, and the claims report, from the run records alone.

Nothing here trains or probes: :func:`load_records` reads the finished runs of scripts 01-07 under
``--out`` (``result.json`` and ``config.json`` through :func:`common.runs.collect`, and script
03's table files), keeps those of one preset, and :func:`build` draws the figures
(:mod:`common.plots`), writes the tables (:mod:`common.tables`) and the claims report under the
figures folder (its rows: :mod:`common.experiments.claim_rows`, their rules: :mod:`common.claims`):

- ``<figures>/figN_<name>.png`` and ``.pdf``, one per figure (figure 1 one per dataset);
- ``<figures>/tables/<name>.md`` and ``.csv``;
- ``<figures>/claims.md`` (and ``tables/claims.csv``): one row per quantitative claim of the paper
  and of Cohen et al.: the claim, the paper's value (``common/paper.py`` only), the reproduced
  value, the records it came from (preset, dataset, seeds, number of runs), the verdict, its power at
  the records' own design (``common/experiments/claim_power.csv``) and the rule that gave it.

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
- **Growth vs scratch**: per dataset, script 03's table with the most seeds, then the longest
  stages (its preset is that of its growth stages), among the tables whose scratch runs had
  growth's epochs in all (03's ``total`` arm: the claims' verdicts) and, apart, among the others
  (the sweep's fixed epochs: shown beside the verdicts). Every row shows both sides' total epochs.
- **Matched insertion**: every row in figure 6; the claims use one candidate at every depth
  (:func:`common.experiments.claim_rows.matched_rows`).
- **Claims and identity checks**: ``claims.md`` lists the paper's claims (counted) and, apart, the
  identity checks (``V_S,l <= AG_l``; the matched insertion's drop at small alpha), which hold by
  construction and are never counted among reproduced claims.
- **Weight scaling**: 07's per-depth records of the preset, fitted again here with
  :func:`common.experiments.weight_scaling.exponent_rows` (a fit of a few numbers, not a training).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common import claims, paper, plots, resnet_sweep, runs, tables
from common.errors import UserError
from common.experiments import (
    gpt2_ascend,
    growth_vs_scratch,
    matched_insertion,
    probe_ag,
    pythia_cpt,
    weight_scaling,
)
from common.experiments.claim_rows import (
    CLAIM,
    FIT_TARGET,
    IDENTITY,
    MINI_NOTE,
    POWER_NOT_COMPUTED,
    SMOKE_NOTE,
    STEM_OUTPUT,
    claim_rows,
    commands,
    regime,
    unfit_note,
)
from common.experiments.probe_ag import DEFAULT_BATCH_SIZE, DEFAULT_N_BATCHES, probe_tag
from common.models.resnet import BACKBONE_DEPTH

log = logging.getLogger(__name__)

FIGURES = "figures"  # default folder, under --out
TABLES = "tables"
CLAIMS = "claims.md"
SWEEP, PROBE, PYTHIA = resnet_sweep.EXPERIMENT, probe_ag.EXPERIMENT, pythia_cpt.EXPERIMENT  # scripts 01, 02, 04
SCALE_BANNERS = {  # the banner atop a report of a marked preset (claim_rows.SCALE_NOTES); mini's is mini_banner
    "smoke": "> **Smoke scale.** Every record below comes from `--preset smoke` (tiny offline data, minutes on a CPU). "
    f"The verdicts test the code path, not the paper: {SMOKE_NOTE}.",
}
MINI_DATA_TITLES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "npz": "CIFAR-10", "imagenet100": "ImageNet-100"}
DATASET_ORDER = ("cifar10", "cifar100", "imagenet100")  # figure 2's dataset: the first present, else the first by name
PROBE_KEYS = ("split", "batch_size", "n_batches", "bn_mode", "probe_seed")
DEFAULT_PROBE = ("train", DEFAULT_BATCH_SIZE, DEFAULT_N_BATCHES, "eval", 0)
GROWTH_TABLE = re.compile(  # 03's table_stem; "-parent<epochs>" where the chain's ResNet-8 is not the sweep's run
    r"^table-(?P<dataset>.+?)(?:-parent(?P<parent>\d+))?-stage(?P<stage>\d+)-scratch(?P<scratch>[\d-]+)"
    r"-seeds(?P<seeds>[\d-]+)$"
)


# ----------------------------------------------------------------------------- reading the records
@dataclass
class GrowthTable:
    """Script 03's table of one dataset (its rows as written), where it came from, its preset and each side's budget."""

    dataset: str
    path: Path
    rows: pd.DataFrame
    seeds: list[int]
    stage_epochs: int
    growth_epochs: dict[str, int | None] = field(default_factory=dict)  # model -> every epoch behind the grown model
    scratch_epochs: dict[str, int | None] = field(default_factory=dict)  # model -> the scratch run's epochs

    @property
    def equal_budget(self) -> bool:
        """Scratch trained as many epochs in all as growth at every row (``--scratch-budget total``)."""
        models = list(self.growth_epochs)
        return bool(models) and all(
            self.growth_epochs[m] is not None and self.growth_epochs[m] == self.scratch_epochs.get(m) for m in models
        )

    @property
    def stem(self) -> str:
        """The dataset, marked when scratch had the equal total budget (figure and table file names)."""
        return f"{self.dataset}-equal-budget" if self.equal_budget else self.dataset

    def budget(self) -> str:
        """Each side's total epochs in words (growth restarts the schedule at every stage)."""
        return (
            f"epochs in all: growth {_span(self.growth_epochs)} (ResNet-8's plus {self.stage_epochs} per stage), "
            f"scratch {_span(self.scratch_epochs)}"
        )

    def budget_words(self) -> str:
        """Both sides' budgets in a few words, for a claims row: "equal epochs (..)" or "scratch at .. epochs (..)"."""
        if self.equal_budget:
            return f"equal epochs ({_span(self.scratch_epochs)} in all)"
        return f"scratch at {_span(self.scratch_epochs)} epochs (growth {_span(self.growth_epochs)} in all)"


def _span(epochs: dict[str, int | None]) -> str:
    known = sorted({e for e in epochs.values() if e is not None})
    return "?" if not known else str(known[0]) if len(known) == 1 else f"{known[0]}-{known[-1]}"


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
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (run directory, why): finished runs left out


NUMBERS = {  # result keys that must be finite numbers (NaN or None: the run is left out and named)
    SWEEP: resnet_sweep.RESULT_KEYS,
    PROBE: ("ag_max", "ag_max_per_example"),
    gpt2_ascend.EXPERIMENT: ("ag_max",),
    PYTHIA: ("ag_max",),
}
REQUIRED = {  # keys every finished run's config + result must hold for the tables below (else it is left out and named)
    SWEEP: ("preset", "dataset", "depth_n", "seed", *NUMBERS[SWEEP]),
    PROBE: ("dataset", "depth_n", "seed", "sweep_run", *NUMBERS[PROBE]),
    gpt2_ascend.EXPERIMENT: ("preset", "n_layer", "seed", *NUMBERS[gpt2_ascend.EXPERIMENT]),
    PYTHIA: ("preset", *NUMBERS[PYTHIA]),
    matched_insertion.EXPERIMENT: ("dataset", "sweep_run", "rows"),
    weight_scaling.EXPERIMENT: ("family",),
    growth_vs_scratch.EXPERIMENT: ("dataset",),
}


EXPERIMENTS = (
    SWEEP,
    PROBE,
    growth_vs_scratch.EXPERIMENT,
    PYTHIA,
    gpt2_ascend.EXPERIMENT,
    matched_insertion.EXPERIMENT,
    weight_scaling.EXPERIMENT,
)  # every experiment folder 08 reads, in script order


def collect(out: Path, experiment: str, dropped: list[tuple[Path, str]] | None = None) -> pd.DataFrame:
    """Every usable finished run of ``experiment`` under ``out`` (config and result columns), or an empty frame.

    Each run is read by :func:`common.runs.collect` (:func:`common.runs.read_run`, with :data:`REQUIRED` keys and
    :data:`NUMBERS` as finite numbers); a malformed run is left out and, with ``dropped``, named there
    (directory, why): :func:`load_records` reports every one of them.
    """
    if not (out / experiment).is_dir():
        return pd.DataFrame()
    return runs.collect(
        str(out / experiment / "*"),
        required=REQUIRED.get(experiment, ()),
        numbers=NUMBERS.get(experiment, ()),
        problems=[] if dropped is None else dropped,
    )


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


ANALYSES = (PROBE, matched_insertion.EXPERIMENT, weight_scaling.EXPERIMENT)  # runs that analyse a sweep run


@dataclass
class Scan:
    """Every finished run under ``out``, all presets, as read once: one frame per experiment (usable runs only; a run
    that analysed a sweep run carries that run's ``preset``), the runs left out (directory, why) and the preset of
    each sweep run (by directory name)."""

    out: Path
    frames: dict[str, pd.DataFrame]
    dropped: list[tuple[Path, str]]
    sweep_presets: dict[str, str]

    def presets(self) -> set[str]:
        """The presets the usable records belong to."""
        return {str(p) for df in self.frames.values() if "preset" in df for p in df["preset"].dropna().unique()}


def scan_records(out: str | Path) -> Scan:
    """Read every experiment folder under ``out`` once (:func:`collect`), noting each run that cannot be used: a
    malformed one, and one that analysed a sweep run that is not among the usable ones (its preset, and for a
    probe its losses, are that run's)."""
    out = Path(out)
    dropped: list[tuple[Path, str]] = []
    frames = {experiment: collect(out, experiment, dropped) for experiment in EXPERIMENTS}
    sweep = frames[SWEEP]
    sweep_presets = (
        dict(zip(sweep["run_dir"].map(lambda p: Path(p).name), sweep["preset"], strict=True)) if len(sweep) else {}
    )
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
    return Scan(out, frames, dropped, sweep_presets)


def records_preset(scan: Scan, preset: str | None) -> str:
    """The preset of the report 08 writes: ``preset`` when the records hold runs of it, else theirs (docs/08_make_figures.md).

    Without ``preset`` the records' own, when they are of one preset. No usable records, records that mix presets
    (without ``preset``), or a ``preset`` the records do not hold (its report would be all "not run" and replace
    theirs) are a :class:`UserError`.
    """
    found = scan.presets()
    if not found:
        left = (
            f" ({len(scan.dropped)} finished runs there cannot be read: {scan.dropped[0][1]})" if scan.dropped else ""
        )
        raise UserError(
            f"--out {scan.out}: no usable run records there{left}; pass --out the folder scripts 01-07 wrote their "
            "runs into (default runs/)"
        )
    if preset is None:
        if len(found) > 1:
            raise UserError(
                f"the records under {scan.out} mix the presets {', '.join(sorted(found))}; pass --preset one of them "
                "(and a --figures-dir per preset, so that neither report replaces the other)"
            )
        return next(iter(found))
    if preset not in found:
        theirs = ", ".join(sorted(found))
        raise UserError(
            f"--preset {preset}: the records under {scan.out} are of preset {theirs}, so a {preset} report would only "
            f"say 'not run' and replace theirs; pass --preset {sorted(found)[0]}, or leave --preset out"
        )
    return preset


def dropped_line(out: Path, dropped: Sequence[tuple[Path | str, str]]) -> str | None:
    """One line naming every finished run under ``out`` the report could not use, and why (None when there is none)."""
    if not dropped:
        return None
    n = len(dropped)
    return (
        f"{n} finished run{'s' if n != 1 else ''} under {out} could not be used and {'are' if n != 1 else 'is'} "
        f"left out of the report: " + " | ".join(why for _, why in dropped)
    )


def dropped_banner(rec: Records) -> str | None:
    """The claims report's paragraph naming the runs left out (:func:`dropped_line`), or None."""
    if not rec.dropped:
        return None
    names = ", ".join(f"`{Path(d).parent.name}/{Path(d).name}`" for d, _ in rec.dropped)
    n = len(rec.dropped)
    return (
        f"**Runs left out.** {n} finished run{'s' if n != 1 else ''} could not be read and {'are' if n != 1 else 'is'} "
        f"not in this report: {names}. 08_make_figures.py printed why for each (`--strict` makes this an error)."
    )


def report_banner(rec: Records, preset: str) -> str | None:
    """The banner passed to :func:`claims_markdown`: the preset's (:func:`mini_banner`, :data:`SCALE_BANNERS`), and
    beside it, as its own paragraph, the runs left out (:func:`dropped_banner`)."""
    scale = mini_banner(rec) if preset == "mini" else None
    left_out = dropped_banner(rec)
    if left_out is None:
        return scale
    scale = scale or SCALE_BANNERS.get(preset, "").removeprefix("> ")
    return f"{scale}\n>\n> {left_out}" if scale else left_out


def load_records(out: str | Path, preset: str, scan: Scan | None = None) -> Records:
    """Read every experiment's records under ``out`` for ``preset`` (module docstring); ``scan``: what
    :func:`scan_records` read already. ``Records.dropped`` names every finished run that could not be used."""
    out = Path(out)
    scan = scan if scan is not None else scan_records(out)
    rec = Records(out=out, preset=preset, dropped=[(str(d), why) for d, why in scan.dropped])
    all_sweep = scan.frames[SWEEP]
    sweep_presets = scan.sweep_presets
    rec.sweep = select_preset(all_sweep, preset, SWEEP, rec.elsewhere)
    probe = select_preset(with_sweep_preset(scan.frames[PROBE], sweep_presets), preset, PROBE, rec.elsewhere)
    rec.probe, rec.probe_settings = choose_probe_setting(probe)
    if len(rec.probe):
        losses = rec.sweep.assign(sweep_run=rec.sweep["run_dir"].map(lambda p: Path(p).name))[
            ["sweep_run", "train_loss", "test_loss", "test_acc"]
        ]
        rec.probe = rec.probe.drop(columns=[c for c in ("train_loss", "test_loss", "test_acc") if c in rec.probe])
        rec.probe = rec.probe.merge(losses, on="sweep_run", how="left")
        rec.probe_candidates = candidate_rows(rec.probe, ("dataset", "depth_n", "seed"))
    gpt = select_preset(scan.frames[gpt2_ascend.EXPERIMENT], preset, gpt2_ascend.EXPERIMENT, rec.elsewhere)
    rec.gpt = largest_group(gpt, gpt_group)
    exact = [
        candidate_rows(probe[probe["exact"].astype(bool)], ("dataset", "depth_n", "seed")).assign(
            source=lambda d: "ResNet " + d["dataset"]
        )
        if len(probe)
        else pd.DataFrame()
    ]
    if len(gpt):
        exact.append(candidate_rows(gpt[gpt["exact"].astype(bool)], ("n_layer", "seed")).assign(source="GPT-2"))
    exact = [e for e in exact if len(e) and "growth_value" in e]
    rec.exact_candidates = (
        pd.concat(exact, ignore_index=True).dropna(subset=["growth_value"]) if exact else pd.DataFrame()
    )
    pythia = select_preset(scan.frames[PYTHIA], preset, PYTHIA, rec.elsewhere)
    if len(pythia):
        rec.pythia = decoder_labels(
            pythia.sort_values(["n_layer", "d_model", "run_dir"]).drop_duplicates(["model", "n_layer", "d_model"])
        )
        rec.pythia_candidates = candidate_rows(rec.pythia, ("model", "n_layer"))
    rec.growth = growth_tables(out, preset, rec.elsewhere)
    matched = select_preset(
        with_sweep_preset(scan.frames[matched_insertion.EXPERIMENT], sweep_presets),
        preset,
        matched_insertion.EXPERIMENT,
        rec.elsewhere,
    )
    if len(matched):
        rows = [
            {**row, "dataset": r["dataset"], "candidate_rule": r["candidate_rule"], "run": Path(r["run_dir"]).name}
            for r in matched.to_dict("records")
            for row in r["rows"]
        ]
        rec.matched = pd.DataFrame(rows)
    scaling_runs = scan.frames[weight_scaling.EXPERIMENT].copy()
    if len(scaling_runs):
        from_sweep = scaling_runs["family"] == "sweep"
        if from_sweep.any():  # a sweep analysis takes the preset of the sweep run it analysed
            scaling_runs.loc[from_sweep, "preset"] = scaling_runs.loc[from_sweep, "sweep_run"].map(sweep_presets)
        scaling_runs = select_preset(scaling_runs, preset, weight_scaling.EXPERIMENT, rec.elsewhere)
        if len(scaling_runs):
            records = weight_scaling.record_rows(scaling_runs.to_dict("records"))
            rec.scaling = pd.DataFrame(records)
            rec.exponents = pd.DataFrame(weight_scaling.exponent_rows(records))
    return rec


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


def growth_tables(out: Path, preset: str, elsewhere: dict[str, set[str]]) -> list[GrowthTable]:
    """Per dataset, script 03's table of ``preset`` with the most seeds, then the longest stages; and beside it the
    same choice among its equal-total-budget tables (``--scratch-budget total``), when there are any."""
    folder = out / growth_vs_scratch.EXPERIMENT
    if not folder.is_dir():
        return []
    stages = collect(out, growth_vs_scratch.EXPERIMENT)
    presets: dict[tuple[str, int], set[str]] = {}
    behind: dict[tuple[str, int, int], int] = {}  # (dataset, stage epochs, N) -> every epoch behind the grown model
    for r in stages.to_dict("records") if len(stages) else []:
        if isinstance(r.get("growth"), dict):
            key = (r["dataset"], int(r["train"]["epochs"]))
            presets.setdefault(key, set()).add(r.get("preset"))
            chain = r.get("runtime.chain") if isinstance(r.get("runtime.chain"), list) else None
            if chain is not None:
                behind[(*key, int(r["depth_n"]))] = int(r["train"]["epochs"]) + sum(
                    int(c["train"]["epochs"]) for c in chain
                )
    best: dict[tuple[str, bool], GrowthTable] = {}
    for path in sorted(folder.glob("table-*.csv")):
        match = GROWTH_TABLE.match(path.stem)
        if not match:
            continue
        dataset, stage = match["dataset"], int(match["stage"])
        found = presets.get((dataset, stage), set())
        if preset not in found:
            elsewhere.setdefault(growth_vs_scratch.EXPERIMENT, set()).update(str(p) for p in found if p)
            continue
        rows = pd.read_csv(path)
        table = GrowthTable(dataset, path, rows, [int(s) for s in match["seeds"].split("-")], stage)
        grown = {n: e for (d, st, n), e in behind.items() if (d, st) == (dataset, stage)}
        table.growth_epochs, table.scratch_epochs = table_budgets(rows, match["scratch"], grown)
        key = (dataset, table.equal_budget)
        current = best.get(key)
        if current is None or (len(table.seeds), table.stage_epochs) > (len(current.seeds), current.stage_epochs):
            best[key] = table
    return [best[k] for k in sorted(best)]


def table_budgets(rows: pd.DataFrame, scratch_tag: str, grown: dict[int, int]) -> tuple[dict, dict]:
    """Each architecture's total epochs per side: the table's ``growth_epochs`` / ``scratch_epochs`` columns, or, for a
    table written before them, growth from the stage runs' chains (``grown[N]``) and scratch from the file name (a
    single budget, or a range ``a-b``, which only ``--scratch-budget total`` writes: then growth's own)."""
    growth, scratch = {}, {}
    for r in rows.to_dict("records"):
        if r["model"] == "mean":
            continue
        model, n = r["model"], int(r["depth_n"])
        g, s = r.get("growth_epochs"), r.get("scratch_epochs")
        growth[model] = int(g) if g is not None and not pd.isna(g) else grown.get(n)
        if s is not None and not pd.isna(s):
            scratch[model] = int(s)
        else:
            scratch[model] = int(scratch_tag) if "-" not in scratch_tag else growth[model]
    return growth, scratch


# ----------------------------------------------------------------------------- tables
def write_table(folder: Path, stem: str, rows: Sequence[dict], text: str | None = None) -> list[Path]:
    """``<folder>/<stem>.csv`` and ``.md`` (``text``, or the rows' :func:`common.tables.markdown_table`), written atomically."""
    csv_path, md_path = folder / f"{stem}.csv", folder / f"{stem}.md"
    runs.atomic_write_csv(csv_path, rows)
    runs.atomic_write_bytes(md_path, ((text if text is not None else tables.markdown_table(rows)) + "\n").encode())
    return [csv_path, md_path]


def depth_table(probe: pd.DataFrame, sweep: pd.DataFrame, line: float) -> list[dict]:
    """Figure 1's numbers: per depth N, mean over seeds of AGmax (three readings) and of the sweep's losses; where AGmax
    sits (the candidate, and how many seeds put it there), AGmax without the stem output beside it (mean over seeds,
    both readings), and whether every seed fitted (final clean training loss at most ``FIT_TARGET``)."""
    rows = []
    for n, group in probe.groupby("depth_n"):
        trained = sweep[sweep["depth_n"] == n]
        row = {"N": int(n), "model": f"ResNet-{BACKBONE_DEPTH + int(n)}", "seeds": int(group["seed"].nunique())}
        for column in ("ag_max", "ag_max_per_example", "ag_max_blocks"):
            row[column] = float(group[column].mean())
        row["ag_max_below_line"] = row["ag_max"] < line
        row["ag_max_per_example_below_line"] = row["ag_max_per_example"] < line
        where = group["ag_max_candidate"].dropna() if "ag_max_candidate" in group else pd.Series(dtype=object)
        top = where.value_counts()
        row["ag_max_candidate"] = f"{top.index[0]} ({int(top.iloc[0])}/{len(group)})" if len(top) else "-"
        for column, value in (("ag_max", "ag_norm"), ("ag_max_per_example", "per_example_rms")):
            rest = [
                max((c[value] for c in (r or []) if c.get("name") != STEM_OUTPUT), default=math.nan)
                for r in group.get("candidates", pd.Series([None] * len(group)))
            ]
            row[f"{column}_without_stem"] = float(pd.Series(rest, dtype=float).mean())
        for column in ("train_loss", "test_loss", "test_acc"):
            row[column] = float(trained[column].mean()) if len(trained) else math.nan
            row[f"{column}_std"] = float(trained[column].std(ddof=1)) if len(trained) > 1 else math.nan
        row["fits"] = bool(len(trained)) and bool((trained["train_loss"] <= FIT_TARGET).all())
        rows.append(row)
    return rows


def verdict_counts(rows: Sequence[dict]) -> str:
    """``holds: 3, does not hold: 1, ...`` over the report's claims, one count per verdict kind (identity checks are
    not counted; a row is one test: readings with identical ranks share one row). The two kinds of "not decidable"
    are counted apart; the plain kind says how many of its rows had no power computed for their design."""
    counted = [r for r in rows if r.get("kind", CLAIM) == CLAIM]
    kinds = [claims.verdict_kind(r["verdict"]) for r in counted]
    parts = []
    for v in claims.VERDICTS:
        part = f"{v}: {kinds.count(v)}"
        if v == claims.UNDECIDABLE:
            unknown = sum(
                1
                for r, k in zip(counted, kinds, strict=True)
                if k == v and str(r.get("power", "")).startswith(POWER_NOT_COMPUTED)
            )
            part += f" ({unknown} with {POWER_NOT_COMPUTED})" if unknown else ""
        parts.append(part)
    return ", ".join(parts)


REPORT_COLUMNS = ("id", "claim", "paper", "reproduced", "records", "verdict", "power", "rule")


def mini_banner(rec: Records) -> str:
    """The banner of a ``--preset mini`` report: how many real training images, how many seeds, which copy of them.

    ``--dataset npz`` is how ``make mini`` is given CIFAR-10 (README, section "Results"); a copy such as the
    committed records' JPEG-decoded one differs slightly from the official files, and the banner says so.
    """
    sweep = rec.sweep
    if sweep.empty:
        return f"**Mini scale.** {MINI_NOTE}: no ResNet sweep records; evidence at reduced scale, not the paper's."
    sizes = sweep.get("train_size", pd.Series(dtype=float)).dropna()
    images = " / ".join(f"{int(n):,}" for n in sorted(set(sizes))) or "?"
    title = " and ".join(sorted({MINI_DATA_TITLES.get(d, d) for d in sweep["dataset"]}))
    sources = []
    for dataset, group in sweep.groupby("dataset"):
        if dataset == "npz":
            files = (
                ", ".join(sorted({f"`{d.get('file')}`" for d in group.get("data", []) if isinstance(d, dict)}))
                or "an `.npz` file"
            )
            sources.append(
                f"The images are a class-balanced subset of {files} (`--dataset npz`), a copy of CIFAR-10: the "
                "committed `results/mini` used one decoded from a JPEG re-encoding, which differs slightly from the "
                "official files, so runs on the official files give slightly different numbers."
            )
        else:
            sources.append(
                f"The images are a class-balanced subset of the official {MINI_DATA_TITLES.get(dataset, dataset)} files."
            )
    seeds = sweep["seed"].nunique()
    regimes = []
    for dataset, group in sweep.groupby("dataset"):
        said, unfit = regime(group), unfit_note(group)
        where = f" ({dataset})" if sweep["dataset"].nunique() > 1 else ""
        if said:
            regimes.append(f"Regime of the sweep{where}: {said}; every row about test performance is read in it.")
        if unfit:
            regimes.append(f"Depths that{where} {unfit}: the rows about AGmax and figure 1 mark them.")
    return (
        f"**Mini scale.** {MINI_NOTE}: {images} real {title} training images, {seeds} seed{'s' if seeds != 1 else ''}; "
        f"evidence at reduced scale, not the paper's. {' '.join(sources + regimes)}"
    )


def claims_markdown(rows: Sequence[dict], preset: str, out: Path, banner: str | None = None) -> str:
    """The claims report: a banner (``banner``, else the preset's in :data:`SCALE_BANNERS`), the claims with their
    verdict counts, then the identity checks apart (never counted among reproduced claims)."""
    lines = ["# Claims: the paper against this reproduction", ""]
    if banner:
        lines += [f"> {banner}", ""]
    elif preset in SCALE_BANNERS:
        lines += [SCALE_BANNERS[preset], ""]
    checks = [r for r in rows if r.get("kind") == IDENTITY]
    lines += [
        f"Records: `{out}`, preset `{preset}`. Paper values come from `common/paper.py` only; each verdict comes from "
        "the rule in its row (`common/claims.py`), whose error rates are measured by simulation in "
        '`docs/claim-rules.md`. "holds" needs the records to show the claim at the 5% level, "does not hold" '
        'its negation; failing to show either is "not decidable", or "not decidable at this design" where the rule '
        "could not reach a power of "
        f"{claims.POWER_TARGET:g} with these records (it says how many runs, seeds or test examples it would need). "
        '"not comparable": the paper\'s value cannot be compared as it stands. The power column is P(holds | claim '
        "true) at the records' own design (their depths, seeds and sample sizes), simulated in the claim's own world at "
        "noise 0.5x the effect (`common/experiments/claim_power.csv`); a decided verdict stands beside it. Readings "
        "that order the runs identically are one test and one row. A claim that does not reproduce is reported as "
        "such; nothing is tuned to make a claim hold.",
        "",
        "## Claims",
        "",
        "Verdicts: " + verdict_counts(rows),
        "",
        tables.markdown_table([r for r in rows if r.get("kind", CLAIM) == CLAIM], REPORT_COLUMNS),
        "",
        "## Identity checks",
        "",
        "True by construction (a theorem, or a first-order identity at small alpha): a check of the code, not a "
        "reproduced claim, so not counted above.",
        "",
        tables.markdown_table(checks, REPORT_COLUMNS) if checks else "(none)",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the README's Results block
README_START = "<!-- mini-results: start (make mini-readme copies this table from results/mini/figures/claims.md) -->"
README_END = "<!-- mini-results: end -->"
RESULTS_COLUMNS = ("id", "claim", "paper", "reproduced", "verdict")  # the claims report's columns the README shows


def claims_cells(claims_text: str) -> list[dict[str, str]]:
    """The rows of a claims report's table (:func:`claims_markdown`), each cell's text (``\\|`` read back as ``|``)."""
    rows, header = [], None
    for line in claims_text.splitlines():
        if not line.startswith("|"):
            if header is not None:
                break  # the report's one table has ended
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if header is None:
            header = cells
        elif not all(set(c) <= {"-"} for c in cells):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def results_block(claims_text: str) -> str:
    """The README's Results table: every row of the claims report, in :data:`RESULTS_COLUMNS`."""
    return tables.markdown_table(claims_cells(claims_text), RESULTS_COLUMNS)


def readme_block(readme_text: str) -> str | None:
    """The text between the README's Results markers (None when they are missing)."""
    start, end = readme_text.find(README_START), readme_text.find(README_END)
    if start < 0 or end < start:
        return None
    return readme_text[start + len(README_START) : end].strip("\n")


def update_readme(readme: str | Path, claims_path: str | Path) -> None:
    """Rewrite the README's Results block from a claims report (``make mini-readme``)."""
    text = Path(readme).read_text()
    if readme_block(text) is None:
        raise ValueError(f"{readme} has no {README_START} ... {README_END} block")
    head, rest = text.split(README_START, 1)
    tail = rest.split(README_END, 1)[1]
    block = results_block(Path(claims_path).read_text())
    runs.atomic_write_bytes(readme, f"{head}{README_START}\n{block}\n{README_END}{tail}".encode())


# ----------------------------------------------------------------------------- building everything
@dataclass
class Report:
    """What :func:`build` wrote and what it skipped (one line each, naming the command that makes the records)."""

    figures_dir: Path
    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    claims_path: Path | None = None
    figures: list[str] = field(default_factory=list)  # stems of the figures drawn


def skip_line(what: str, needs: str, command: str, rec: Records, experiments: Sequence[str]) -> str:
    others = sorted({p for e in experiments for p in rec.elsewhere.get(e, set())})
    note = f" (records of preset {', '.join(others)} are there: pass --preset {others[0]})" if others else ""
    return f"{what}: skipped, no {needs} of preset {rec.preset}{note}; make them with: {command}"


def build(out: str | Path, figures_dir: str | Path, preset: str, records: Records | None = None) -> Report:
    """Read the records of ``preset`` under ``out`` (or take ``records``, read already) and write every figure, table
    and the claims report."""
    rec = records if records is not None else load_records(out, preset)
    folder = Path(figures_dir)
    table_dir = folder / TABLES
    table_dir.mkdir(parents=True, exist_ok=True)
    report = Report(figures_dir=folder)
    cmd = commands(preset, rec.out)

    def figure(stem: str, fig) -> None:
        report.written += plots.save(fig, folder, stem)
        report.figures.append(stem)

    # 1, 2, 9: the ResNet sweep and its probe
    if rec.probe.empty:
        for what in (
            "figure 1 (AGmax against depth)",
            "figure 2 (AG per candidate heat map)",
            "figure 9 (AGmax against training loss)",
        ):
            report.skipped.append(skip_line(what, "probed sweep runs", cmd["probe"], rec, (SWEEP, PROBE)))
    else:
        datasets = sorted(rec.probe["dataset"].unique())
        for dataset in datasets:
            probe = rec.probe[rec.probe["dataset"] == dataset]
            sweep = rec.sweep[rec.sweep["dataset"] == dataset]
            figure(
                f"fig1_ag_vs_depth-{dataset}",
                plots.ag_vs_depth(
                    probe,
                    sweep,
                    dataset=dataset,
                    line=paper.LOW_SIGNAL_AG,
                    setting=rec.probe_settings[dataset],
                    fit_target=FIT_TARGET,
                ),
            )
            report.written += write_table(
                table_dir, f"ag_vs_depth-{dataset}", depth_table(probe, sweep, paper.LOW_SIGNAL_AG)
            )
        shown = next((d for d in DATASET_ORDER if d in datasets), datasets[0])
        cands = rec.probe_candidates[rec.probe_candidates["dataset"] == shown]
        figure(f"fig2_ag_heatmap-{shown}", plots.ag_heatmap(cands, dataset=shown))
        figure("fig9_ag_vs_train_loss", plots.ag_vs_train_loss(rec.probe.dropna(subset=["train_loss"])))
    # 3: GPT-2
    if rec.gpt.empty:
        report.skipped.append(
            skip_line("figure 3 (GPT-2 depth sweep)", "GPT-2 runs", cmd["gpt2"], rec, (gpt2_ascend.EXPERIMENT,))
        )
    else:
        figure("fig3_gpt2_depth", plots.gpt2_depth(rec.gpt, line=paper.LOW_SIGNAL_AG))
        report.written += write_table(table_dir, "gpt2_depth", gpt2_ascend.summary_rows(rec.gpt.to_dict("records")))
    # 4: Pythia
    if rec.pythia.empty:
        report.skipped.append(
            skip_line("figure 4 (Pythia AG per layer, Block Influence)", "Pythia runs", cmd["pythia"], rec, (PYTHIA,))
        )
    else:
        figure("fig4_pythia", plots.pythia(rec.pythia, rec.pythia_candidates, line=paper.LOW_SIGNAL_AG))
        columns = [
            "model",
            "model_id",
            "revision",
            "n_layer",
            "d_model",
            "ag_max",
            "ag_max_per_example",
            "ag_max_blocks",
            "val_loss_before",
            "val_loss_after",
        ]
        report.written += write_table(table_dir, "pythia", rec.pythia.reindex(columns=columns).to_dict("records"))
    # 5: growth vs scratch
    if not rec.growth:
        report.skipped.append(
            skip_line(
                "figure 5 (growth vs scratch)",
                "growth-vs-scratch table",
                cmd["growth"],
                rec,
                (growth_vs_scratch.EXPERIMENT,),
            )
        )
    for table in rec.growth:
        figure(f"fig5_growth_vs_scratch-{table.stem}", plots.growth_bars(table.rows, dataset=table.stem))
        rows = [
            {k: None if k.startswith("paper_") and pd.isna(v) else v for k, v in r.items()}  # as 03 wrote them:
            for r in table.rows.to_dict("records")
        ]  # NaN std for one seed, None where the paper reports nothing
        report.written += write_table(
            table_dir, f"growth_vs_scratch-{table.stem}", rows, growth_vs_scratch.markdown_table(rows)
        )
    # 6: matched insertion
    if rec.matched.empty:
        report.skipped.append(
            skip_line(
                "figure 6 (matched insertion)",
                "matched-insertion runs",
                cmd["matched"],
                rec,
                (matched_insertion.EXPERIMENT,),
            )
        )
    for dataset, group in rec.matched.groupby("dataset") if len(rec.matched) else []:
        figure(
            f"fig6_matched_insertion-{dataset}",
            plots.matched_insertion(
                group, paper=paper.MATCHED_INSERTION_REDUCTION, alpha=paper.MATCHED_INSERTION_ALPHA
            ),
        )
        rows = matched_insertion.summary_rows([{"rows": group.to_dict("records")}])
        report.written += write_table(
            table_dir, f"matched_insertion-{dataset}", rows, matched_insertion.summary_markdown(rows)
        )
    # 7: weight scaling
    if rec.scaling.empty:
        report.skipped.append(
            skip_line(
                "figure 7 (weight scaling)", "weight-scaling runs", cmd["scaling"], rec, (weight_scaling.EXPERIMENT,)
            )
        )
    else:
        panels = sorted(
            {(f, d) for f, d in zip(rec.scaling["family"], rec.scaling["dataset"], strict=True)},
            key=lambda p: (p[0] == "sweep", p),
        )
        figure("fig7_weight_scaling", plots.weight_scaling(rec.scaling, rec.exponents, panels=panels))
        rows = rec.exponents.to_dict("records")
        report.written += write_table(
            table_dir, "weight_scaling_exponents", rows, weight_scaling.exponent_markdown(rows)
        )
    # 8: V_S,l against AG_l
    if rec.exact_candidates.empty:
        report.skipped.append(
            skip_line(
                "figure 8 (V_S,l against AG_l)", "exact probe runs", cmd["exact"], rec, (PROBE, gpt2_ascend.EXPERIMENT)
            )
        )
    else:
        figure("fig8_growth_value_vs_ag", plots.growth_value_vs_ag(rec.exact_candidates))
    # the claims report
    report.claims = claim_rows(rec)
    report.written += write_table(table_dir, "claims", report.claims)
    report.claims_path = folder / CLAIMS
    banner = report_banner(rec, preset)
    runs.atomic_write_bytes(
        report.claims_path, (claims_markdown(report.claims, preset, rec.out, banner) + "\n").encode()
    )
    report.written.append(report.claims_path)
    return report


__all__ = [
    "CLAIMS",
    "FIGURES",
    "Records",
    "Report",
    "build",
    "claims_markdown",
    "load_records",
    "mini_banner",
    "records_preset",
    "scan_records",
    "readme_block",
    "results_block",
    "update_readme",
    "verdict_counts",
]
