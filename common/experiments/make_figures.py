"""Job module of ``08_make_figures.py``: every figure and table, and the claims report, from the run records alone.

Nothing here trains or probes: :func:`load_records` reads the finished runs of scripts 01-07 under
``--out`` (``result.json`` and ``config.json`` through :func:`common.runs.collect`, and script
03's table files), keeps those of one preset, and :func:`build` draws the figures
(:mod:`common.plots`), writes the tables and the claims report (:mod:`common.claims`) under the
figures folder:

- ``<figures>/figN_<name>.png`` and ``.pdf``, one per figure (figure 1 one per dataset);
- ``<figures>/tables/<name>.md`` and ``.csv``;
- ``<figures>/claims.md`` (and ``tables/claims.csv``): one row per quantitative claim of the paper
  and of Cohen et al.: the claim, the paper's value (``common/paper.py`` only), the reproduced
  value, the records it came from (preset, dataset, seeds, number of runs), the verdict and the
  rule that gave it.

Which records (README, Reproduction decisions, "Figures and the claims report"):

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
  stages (its preset is that of its growth stages); and, when 03 ran with ``--scratch-budget
  total``, the same choice among the tables whose scratch runs had growth's total epochs (their
  rows say "scratch at equal total epochs"). Every row shows both sides' total epochs.
- **Matched insertion**: every row in figure 6; the claims use the end-of-stage-1 candidate at
  every depth (06's default ``stage1-end``, or the same candidate from ``next`` / ``all`` runs),
  the closed-form fit and the paper's alpha, one value per seed.
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common import claims, paper, plots, runs, scaling
from common.experiments import gpt2_ascend, growth_vs_scratch, matched_insertion, probe_ag, weight_scaling
from common.experiments.probe_ag import DEFAULT_BATCH_SIZE, DEFAULT_N_BATCHES, probe_tag
from common.models.resnet import BACKBONE_DEPTH

log = logging.getLogger(__name__)

FIGURES = "figures"  # default folder, under --out
TABLES = "tables"
CLAIMS = "claims.md"
PYTHIA_EXPERIMENT = "pythia_cpt"  # 04_pythia_cpt.py's records (its job module's EXPERIMENT)
SMOKE_NOTE = "smoke scale: not evidence about the paper"
# Presets whose verdicts are marked (the note after every verdict, the banner atop the report); the paper preset has none.
MINI_NOTE = "mini scale"  # every verdict of --preset mini records carries it (README, make mini)
SCALE_NOTES = {"smoke": SMOKE_NOTE, "mini": MINI_NOTE}
SCALE_BANNERS = {
    "smoke": "> **Smoke scale.** Every record below comes from `--preset smoke` (tiny offline data, minutes on a CPU). "
             f"The verdicts test the code path, not the paper: {SMOKE_NOTE}.",
}  # fmt: skip
CLAIM, IDENTITY = "claim", "identity check"  # the two kinds of report rows: only claims are counted as reproduced
MINI_DATA_TITLES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "npz": "CIFAR-10", "imagenet100": "ImageNet-100"}
READINGS = (("ag_max", "batch-mean AG_l"), ("ag_max_per_example", "per-example RMS"))
DATASET_ORDER = ("cifar10", "cifar100", "imagenet100")  # figure 2's dataset: the first present, else the first by name
PROBE_KEYS = ("split", "batch_size", "n_batches", "bn_mode", "probe_seed")
DEFAULT_PROBE = ("train", DEFAULT_BATCH_SIZE, DEFAULT_N_BATCHES, "eval", 0)
GROWTH_TABLE = re.compile(r"^table-(?P<dataset>.+)-stage(?P<stage>\d+)-scratch(?P<scratch>[\d-]+)-seeds(?P<seeds>[\d-]+)$")


def commands(preset: str, out: str | Path) -> dict[str, str]:
    """The command that makes each experiment's records (what a skipped figure or a "not run" claim names)."""
    p = "" if preset == "paper" else f" --preset {preset}"
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
        return bool(models) and all(self.growth_epochs[m] is not None and self.growth_epochs[m] == self.scratch_epochs.get(m)
                                    for m in models)  # fmt: skip

    @property
    def stem(self) -> str:
        """The dataset, marked when scratch had the equal total budget (figure and table file names)."""
        return f"{self.dataset}-equal-budget" if self.equal_budget else self.dataset

    def budget(self) -> str:
        """Each side's total epochs in words (growth restarts the schedule at every stage)."""
        def span(epochs: dict[str, int | None]) -> str:
            known = sorted({e for e in epochs.values() if e is not None})
            return "?" if not known else str(known[0]) if len(known) == 1 else f"{known[0]}-{known[-1]}"

        return (f"epochs in all: growth {span(self.growth_epochs)} (ResNet-8's plus {self.stage_epochs} per stage), "
                f"scratch {span(self.scratch_epochs)}")  # fmt: skip


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


REQUIRED = {  # keys every finished run's config + result must hold for the tables below (else one line naming the file)
    "resnet_sweep": ("preset", "dataset", "depth_n", "seed"),
    "ag_probe": ("dataset", "depth_n", "seed", "sweep_run"),
    gpt2_ascend.EXPERIMENT: ("preset", "n_layer", "seed"),
    PYTHIA_EXPERIMENT: ("preset",),
    matched_insertion.EXPERIMENT: ("dataset", "sweep_run", "rows"),
    weight_scaling.EXPERIMENT: ("family",),
    growth_vs_scratch.EXPERIMENT: ("dataset",),
}


def collect(out: Path, experiment: str) -> pd.DataFrame:
    """Every finished run of ``experiment`` under ``out`` (config and result columns), or an empty frame."""
    if not (out / experiment).is_dir():
        return pd.DataFrame()
    return runs.collect(str(out / experiment / "*"), required=REQUIRED.get(experiment, ()))


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


def load_records(out: str | Path, preset: str) -> Records:
    """Read every experiment's records under ``out`` for ``preset`` (module docstring)."""
    out = Path(out)
    rec = Records(out=out, preset=preset)
    all_sweep = collect(out, "resnet_sweep")
    sweep_presets = dict(zip(all_sweep["run_dir"].map(lambda p: Path(p).name), all_sweep["preset"], strict=True)) if len(all_sweep) else {}
    rec.sweep = select_preset(all_sweep, preset, "resnet_sweep", rec.elsewhere)
    probe = select_preset(with_sweep_preset(collect(out, "ag_probe"), sweep_presets), preset, "ag_probe", rec.elsewhere)
    rec.probe, rec.probe_settings = choose_probe_setting(probe)
    if len(rec.probe):
        losses = rec.sweep.assign(sweep_run=rec.sweep["run_dir"].map(lambda p: Path(p).name))[
            ["sweep_run", "train_loss", "test_loss", "test_acc"]]  # fmt: skip
        rec.probe = rec.probe.drop(columns=[c for c in ("train_loss", "test_loss", "test_acc") if c in rec.probe])
        rec.probe = rec.probe.merge(losses, on="sweep_run", how="left")
        rec.probe_candidates = candidate_rows(rec.probe, ("dataset", "depth_n", "seed"))
    gpt = select_preset(collect(out, gpt2_ascend.EXPERIMENT), preset, gpt2_ascend.EXPERIMENT, rec.elsewhere)
    rec.gpt = largest_group(gpt, gpt_group)
    exact = [candidate_rows(probe[probe["exact"].astype(bool)], ("dataset", "depth_n", "seed")).assign(source=lambda d: "ResNet " + d["dataset"])
             if len(probe) else pd.DataFrame()]  # fmt: skip
    if len(gpt):
        exact.append(candidate_rows(gpt[gpt["exact"].astype(bool)], ("n_layer", "seed")).assign(source="GPT-2"))
    exact = [e for e in exact if len(e) and "growth_value" in e]
    rec.exact_candidates = pd.concat(exact, ignore_index=True).dropna(subset=["growth_value"]) if exact else pd.DataFrame()
    pythia = select_preset(collect(out, PYTHIA_EXPERIMENT), preset, PYTHIA_EXPERIMENT, rec.elsewhere)
    if len(pythia):
        rec.pythia = decoder_labels(pythia.sort_values(["n_layer", "d_model", "run_dir"]).drop_duplicates(["model", "n_layer", "d_model"]))
        rec.pythia_candidates = candidate_rows(rec.pythia, ("model", "n_layer"))
    rec.growth = growth_tables(out, preset, rec.elsewhere)
    matched = select_preset(with_sweep_preset(collect(out, matched_insertion.EXPERIMENT), sweep_presets), preset,
                            matched_insertion.EXPERIMENT, rec.elsewhere)  # fmt: skip
    if len(matched):
        rows = [{**row, "dataset": r["dataset"], "candidate_rule": r["candidate_rule"], "run": Path(r["run_dir"]).name}
                for r in matched.to_dict("records") for row in r["rows"]]  # fmt: skip
        rec.matched = pd.DataFrame(rows)
    scaling_runs = collect(out, weight_scaling.EXPERIMENT)
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
    return pd.concat(chosen, ignore_index=True).sort_values(["dataset", "depth_n", "seed"]).reset_index(drop=True), settings


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
                behind[(*key, int(r["depth_n"]))] = int(r["train"]["epochs"]) + sum(int(c["train"]["epochs"]) for c in chain)
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
def markdown(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """A markdown table of ``rows`` (floats in 4 significant digits, ``|`` escaped)."""
    rows = list(rows)
    columns = list(columns or (rows[0].keys() if rows else []))

    def cell(v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        text = f"{v:.4g}" if isinstance(v, float) else str(v)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_table(folder: Path, stem: str, rows: Sequence[dict], text: str | None = None) -> list[Path]:
    """``<folder>/<stem>.csv`` and ``.md`` (``text``, or :func:`markdown` of the rows), written atomically."""
    csv_path, md_path = folder / f"{stem}.csv", folder / f"{stem}.md"
    runs.atomic_write_csv(csv_path, rows)
    runs.atomic_write_bytes(md_path, ((text if text is not None else markdown(rows)) + "\n").encode())
    return [csv_path, md_path]


def depth_table(probe: pd.DataFrame, sweep: pd.DataFrame, line: float) -> list[dict]:
    """Figure 1's numbers: per depth N, mean over seeds of AGmax (three readings) and of the sweep's losses."""
    rows = []
    for n, group in probe.groupby("depth_n"):
        trained = sweep[sweep["depth_n"] == n]
        row = {"N": int(n), "model": f"ResNet-{BACKBONE_DEPTH + int(n)}", "seeds": int(group["seed"].nunique())}
        for column in ("ag_max", "ag_max_per_example", "ag_max_blocks"):
            row[column] = float(group[column].mean())
        row["ag_max_below_line"] = row["ag_max"] < line
        row["ag_max_per_example_below_line"] = row["ag_max_per_example"] < line
        for column in ("train_loss", "test_loss", "test_acc"):
            row[column] = float(trained[column].mean()) if len(trained) else math.nan
            row[f"{column}_std"] = float(trained[column].std(ddof=1)) if len(trained) > 1 else math.nan
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- claims
def describe(preset: str, dataset: str, seeds: Iterable, n_runs: int, extra: str = "") -> str:
    seeds = sorted({int(s) for s in seeds})
    return f"{preset}, {dataset}, seeds {','.join(map(str, seeds)) or '-'}, {n_runs} runs" + (f", {extra}" if extra else "")


def claim_row(claim: str, said: str, fn: Callable, outcome: claims.Outcome | None, records: str, preset: str,
              kind: str = CLAIM) -> dict:  # fmt: skip
    """One row of the report; ``outcome`` None means not run (``records`` then names the command).

    ``kind``: a paper's ``claim`` (counted) or an ``identity check`` (shown apart). The rule text ends with
    :func:`common.claims.power_note` where the rule cannot reach its required error rates at the paper's design.
    """
    verdict = claims.NOT_RUN if outcome is None else outcome.verdict
    if preset in SCALE_NOTES and outcome is not None:
        verdict = f"{verdict} ({SCALE_NOTES[preset]})"
    text = " ".join(t for t in (fn.rule, claims.power_note(fn)) if t)
    return {"kind": kind, "claim": claim, "paper": said, "reproduced": "-" if outcome is None else outcome.value,
            "records": records, "verdict": verdict, "rule": text, "scale": preset}  # fmt: skip


def resnet_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """AGmax across ResNet depth, per dataset and normalisation: falls, stays low, plateau, training loss alone."""
    rows = []
    datasets = sorted(rec.probe["dataset"].unique()) if len(rec.probe) else [None]
    for dataset in datasets:
        group = rec.probe[rec.probe["dataset"] == dataset] if dataset else None
        for column, reading in READINGS:
            where = f"ResNet sweep, {dataset or 'any dataset'}, {reading}"
            specs = [
                (f"AGmax falls with depth ({where})", paper.AG_DEPTH_TREND, claims.falls_with_depth,
                 lambda g, c=column: claims.falls_with_depth(g["depth_n"], g[c])),
                (f"once below {paper.LOW_SIGNAL_AG:g}, AGmax stays below it ({where})", paper.LOW_SIGNAL_PLATEAU, claims.stays_below_line,
                 lambda g, c=column: claims.stays_below_line(g["depth_n"], g[c], paper.LOW_SIGNAL_AG)),
                (f"low-signal plateau: past N*, test loss gains less than {claims.PLATEAU_MARGIN:.0%} ({where})", paper.LOW_SIGNAL_PLATEAU,
                 claims.plateau_within_margin,
                 lambda g, c=column: claims.plateau_within_margin(g["depth_n"], g[c], g["test_loss"], paper.LOW_SIGNAL_AG)),
                (f"beyond the paper: AGmax is explained by the training loss alone ({where})",
                 "not claimed by the paper (reviewers' question)", claims.explained_by_training_loss,
                 lambda g, c=column: claims.explained_by_training_loss(g["depth_n"], g[c], g["train_loss"])),
            ]  # fmt: skip
            for claim, said, fn, run in specs:
                if group is None:
                    rows.append(claim_row(claim, said, fn, None, f"none: {cmd['probe']}", rec.preset))
                    continue
                usable = group.dropna(subset=[column, "test_loss", "train_loss"])
                records = describe(rec.preset, dataset, usable["seed"], len(usable), f"probe {rec.probe_settings[dataset]}")
                rows.append(claim_row(claim, said, fn, run(usable), records, rec.preset))
    return rows


def projection_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """The identity check V_S,l <= AG_l over every exact run (a theorem: shown apart from the claims)."""
    claim, fn = "the exact growth value never exceeds AG_l at any candidate", claims.projection_never_exceeds
    if rec.exact_candidates.empty:
        return [claim_row(claim, paper.PROJECTION_BOUND, fn, None, f"none: {cmd['exact']}", rec.preset, IDENTITY)]
    c = rec.exact_candidates
    sources = ", ".join(f"{s} ({n} candidates)" for s, n in c.groupby("source").size().items())
    records = f"{rec.preset}, exact runs of 02/05: {sources}"
    return [claim_row(claim, paper.PROJECTION_BOUND, fn, fn(c["growth_value"], c["ag_norm"]), records, rec.preset, IDENTITY)]


def saturation_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """App. G at the deepest depth probed, per dataset: every seed's interval, t, number of candidates and verdict."""
    claim, fn = "the deepest models probed are first-order saturated within delta (App. G)", claims.saturated_within_delta
    if rec.probe.empty:
        return [claim_row(claim, paper.SEPARATED_TEST, fn, None, f"none: {cmd['probe']}", rec.preset)]
    rows = []
    for dataset, group in rec.probe.groupby("dataset"):
        deepest = group[group["depth_n"] == group["depth_n"].max()]
        found = deepest.dropna(subset=["saturation"]) if "saturation" in deepest else deepest.iloc[:0]
        summaries = {f"ResNet-{r['depth_label']} seed {r['seed']}": probe_ag.saturation_summary(r["saturation"])
                     for r in found.to_dict("records")}  # fmt: skip
        n_test = sorted({s["n_test"] for s in summaries.values()})
        records = describe(rec.preset, dataset, found["seed"], len(found),
                           f"ResNet-{int(BACKBONE_DEPTH + deepest['depth_n'].iloc[0])}, probe {rec.probe_settings[dataset]}, "
                           f"n_test {', '.join(map(str, n_test)) or '-'}")  # fmt: skip
        rows.append(claim_row(f"{claim} ({dataset})", paper.SEPARATED_TEST, fn, fn(summaries), records, rec.preset))
    return rows


def decoder_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """AGmax falls with depth: the GPT-2 sweep (over L) and the probed Pythia models (across models)."""
    rows = []
    for df, depth, what, key in ((rec.gpt, "n_layer", "GPT-2 sweep, over L", "gpt2"),
                                 (rec.pythia, "n_layer", "Pythia models, across models", "pythia")):  # fmt: skip
        for column, reading in READINGS:
            claim = f"AGmax falls with depth ({what}, {reading})"
            if df.empty:
                rows.append(claim_row(claim, paper.AG_DEPTH_TREND, claims.falls_with_depth, None, f"none: {cmd[key]}", rec.preset))
                continue
            usable = df.dropna(subset=[column])
            label = gpt_data_label(usable)
            seeds = usable.get("seed", [0])
            records = describe(rec.preset, label, seeds, len(usable))
            outcome = claims.falls_with_depth(usable[depth], usable[column])
            rows.append(claim_row(claim, paper.AG_DEPTH_TREND, claims.falls_with_depth, outcome, records, rec.preset))
    return rows


def gpt_data_label(df: pd.DataFrame) -> str:
    """The text source of decoder runs (05, 04) as their configs name it."""
    data = df["data"].iloc[0] if "data" in df and len(df) else {}
    return str(data.get("source", "?")) if isinstance(data, dict) else "?"


def reduction_summaries(t: pd.DataFrame, models: Iterable[str], metric: str) -> tuple[dict[str, tuple[float, float, int]], bool]:
    """Per architecture, (mean, sample std, seeds) of the per-seed ``scratch - growth`` ``metric`` from 03's table.

    Paired: its ``<metric>_reduction`` and ``_std`` columns. A table written before 03 kept the paired training-loss
    spread has only each side's std: then the unpaired spread ``sqrt(std_g^2 + std_s^2)`` (the second value is False).
    """
    paired = f"{metric}_reduction_std" in t.columns
    out = {}
    for m in models:
        row = t.loc[m]
        if paired:
            out[m] = (float(row[f"{metric}_reduction"]), float(row[f"{metric}_reduction_std"]), int(row["seeds"]))
        else:
            std = math.hypot(float(row[f"growth_{metric}_std"]), float(row[f"scratch_{metric}_std"]))
            out[m] = (float(row[f"scratch_{metric}"] - row[f"growth_{metric}"]), std, int(row["seeds"]))
    return out, paired


def growth_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Growth vs scratch: the means, the relative and absolute reductions, per-architecture winners; per dataset, at the
    main table's budget and, when its runs exist, at scratch's equal total budget (each row shows both sides' epochs)."""
    mean_train = f"growth {paper.GROWTH_MEAN_TRAIN_LOSS['growth']} vs scratch {paper.GROWTH_MEAN_TRAIN_LOSS['scratch']}"
    mean_test = f"growth {paper.GROWTH_MEAN_TEST_LOSS['growth']} vs scratch {paper.GROWTH_MEAN_TEST_LOSS['scratch']}"
    names = [f"ResNet-{d}" for d in paper.GROWTH_DEPTHS]
    specs = [
        ("growth's mean training loss is below scratch's", mean_train, claims.growth_lower_mean),
        ("growth's mean test loss is below scratch's", mean_test, claims.growth_lower_mean),
        ("relative test-loss reduction of the means", f"{paper.GROWTH_TEST_RELATIVE_REDUCTION:.1%}", claims.paper_size),
        ("growth's test loss is lower for all four architectures", ", ".join(paper.GROWTH_LOWER_TEST_LOSS), claims.growth_wins_everywhere),
        ("growth's training loss is lower at ResNet-10, -11 and -13", ", ".join(paper.GROWTH_LOWER_TRAIN_LOSS), claims.growth_wins_everywhere),
        *(spec for m, v in paper.GROWTH_TEST_ABS_REDUCTION_RANGE.items()
          for spec in ((f"absolute test-loss reduction at {m}: direction", f"{v} (growth lower)", claims.paper_direction),
                       (f"absolute test-loss reduction at {m}: size", f"{v}", claims.paper_size))),
    ]  # fmt: skip
    if not rec.growth:
        return [claim_row(c, p, fn, None, f"none: {cmd['growth']}", rec.preset) for c, p, fn in specs]
    rows = []
    for table in rec.growth:
        t = table.rows.set_index("model")
        mean = t.loc["mean"]
        present = [m for m in t.index if m != "mean"]
        test, _ = reduction_summaries(t, present, "test_loss")
        train, paired = reduction_summaries(t, present, "train_loss")
        records = describe(rec.preset, table.dataset, table.seeds, 2 * len(present) * len(table.seeds),
                           f"{', '.join(present)}; {table.budget()}; {table.path.name}"
                           + ("" if paired else "; training-loss spread unpaired (table without train_loss_reduction_std)"))  # fmt: skip
        mean_train_est = claims.over_seeds(*reduction_summaries(t, ["mean"], "train_loss")[0]["mean"])
        mean_test_est = claims.over_seeds(*reduction_summaries(t, ["mean"], "test_loss")[0]["mean"])
        scale = float(mean["scratch_test_loss"])
        relative = None if mean_test_est is None else claims.Estimate(mean_test_est.mean / scale, mean_test_est.se / scale, mean_test_est.df)
        pooled = claims.pooled_estimates(test) or {}
        outcomes = [
            claims.growth_lower_mean(mean["growth_train_loss"], mean["scratch_train_loss"], mean_train_est),
            claims.growth_lower_mean(mean["growth_test_loss"], mean["scratch_test_loss"], mean_test_est),
            claims.paper_size(relative, paper.GROWTH_TEST_RELATIVE_REDUCTION),
            claims.growth_wins_everywhere(test, names),
            claims.growth_wins_everywhere(train, paper.GROWTH_LOWER_TRAIN_LOSS),
        ]
        for model, value in paper.GROWTH_TEST_ABS_REDUCTION_RANGE.items():
            if model in t.index:
                outcomes += [claims.paper_direction(pooled.get(model), value), claims.paper_size(pooled.get(model), value)]
            else:
                outcomes += [claims.Outcome(claims.UNDECIDABLE, f"{model} not run")] * 2
        where = f"{table.dataset}, scratch at equal total epochs" if table.equal_budget else table.dataset
        for (claim, said, fn), outcome in zip(specs, outcomes, strict=True):
            rows.append(claim_row(f"{claim} ({where})", said, fn, outcome, records, rec.preset))
    return rows


def matched_rows(matched: pd.DataFrame) -> pd.DataFrame:
    """The rows the matched-insertion claims use: the end-of-stage-1 candidate at every depth (whichever
    ``--candidate`` rule produced it: ``stage1-end``, ``next`` at N = 0 mod 3, ``all``), the closed-form fit and the
    paper's alpha; one row per (dataset, depth, seed)."""
    if matched.empty:
        return matched
    at_stage1 = matched["candidate"] == matched["depth_n"].map(lambda n: matched_insertion.stage_end_candidate(int(n)))
    chosen = matched[at_stage1 & (matched["fit"] == "closed-form")
                     & matched["alpha"].map(lambda a: math.isclose(a, paper.MATCHED_INSERTION_ALPHA))]  # fmt: skip
    preferred = chosen.assign(_rank=(chosen["candidate_rule"] != matched_insertion.DEFAULT_CANDIDATE).astype(int))
    return preferred.sort_values(["_rank", "run"]).drop_duplicates(["dataset", "depth_label", "seed"]).drop(columns="_rank")


def matched_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Matched insertion at the paper's alpha, at one kind of candidate (the end of stage 1) at every depth: the drop
    does not rise with depth and equals the paper's (claims); a drop at every depth (an identity check)."""
    said = ", ".join(f"ResNet-{d}: {v:.0e}" for d, v in sorted(paper.MATCHED_INSERTION_REDUCTION.items()))
    specs = [
        ("matched insertion lowers the training loss at every depth", said, claims.lowers_loss_everywhere, IDENTITY),
        ("the matched-insertion drop does not increase with depth", said, claims.drop_not_increasing, CLAIM),
        ("the matched-insertion drops equal the paper's", said, claims.matches_paper_precision, CLAIM),
    ]
    rows_df = matched_rows(rec.matched)
    where = f"candidate: end of stage 1 (input of stage 2's first block), alpha {paper.MATCHED_INSERTION_ALPHA:g}"
    if rows_df.empty:
        return [claim_row(c, p, fn, None, f"none at the {where}: {cmd['matched']}", rec.preset, kind) for c, p, fn, kind in specs]
    out = []
    for dataset, group in rows_df.groupby("dataset"):
        per_seed = {int(d): g["measured_change"].astype(float).tolist() for d, g in group.groupby("depth_label")}
        means = {d: sum(v) / len(v) for d, v in per_seed.items()}
        records = describe(rec.preset, dataset, group["seed"], group["run"].nunique(),
                           f"ResNet-{', -'.join(map(str, sorted(per_seed)))}, {where}")  # fmt: skip
        outcomes = [claims.lowers_loss_everywhere(means), claims.drop_not_increasing(per_seed),
                    claims.matches_paper_precision(per_seed, paper.MATCHED_INSERTION_REDUCTION)]  # fmt: skip
        exact = group.get("predicted_change_exact_targets")
        if exact is not None and exact.notna().any():  # another reading of H.1's scale, beside ours (README; not judged)
            drops = group.assign(x=-exact).groupby("depth_label")["x"].mean()
            beside = ", ".join(f"ResNet-{int(d)}: {v:.1e}" for d, v in drops.items())
            outcomes[2] = claims.Outcome(outcomes[2].verdict, f"{outcomes[2].value}; beside it, the exact-target reading: {beside}")
        out += [claim_row(f"{c} ({dataset})", p, fn, o, records, rec.preset, kind)
                for (c, p, fn, kind), o in zip(specs, outcomes, strict=True)]  # fmt: skip
    return out


SCALING_CLAIMS = (  # (claim, family, tensor, exponent of the verdict, Step 2's exponent beside it, paper value, side or None for ±0.1)
    ("fc-tanh: beta", "fc-tanh", "A", "max_norm_exponent", "beta", paper.COHEN_TANH_BETA, None),
    ("fc-tanh: alpha from max |delta_k|", "fc-tanh", "delta", "alpha", None, paper.COHEN_TANH_ALPHA, None),
    ("fc-relu: alpha + beta from |delta_k| A_k", "fc-relu", "delta_A", "alpha_plus_beta_max_norm", "alpha_plus_beta",
     paper.COHEN_RELU_ALPHA_PLUS_BETA, None),
    ("ResNet sweep (BatchNorm folded): max norm exponent ~0", "sweep", None, "max_norm_exponent", None,
     paper.COHEN_CONV_MAX_NORM_EXPONENT, None),
    ("ResNet sweep (BatchNorm folded): scaled increments bounded, nu >= 0", "sweep", None, "nu_max_norm", "nu",
     paper.COHEN_CONV_BOUNDED["nu"], ">= 0"),
    ("ResNet sweep (BatchNorm folded): root sum of squares bounded", "sweep", None, "rss_slope", None,
     paper.COHEN_CONV_BOUNDED["rss_slope"], "<= 0"),
)  # fmt: skip


def scaling_claims(rec: Records, cmd: dict[str, str]) -> list[dict]:
    """Cohen et al.'s exponents against 07's fits (Frobenius norm): FC families within ±0.1, the sweep's bounds.

    A beta-based verdict uses the max-norm estimator (how their figures were read); Step 2's cumulative-sum
    estimate (their text) is shown beside it in the reproduced value, not used."""
    rows = []
    for claim, family, tensor, exponent, step2, said, side in SCALING_CLAIMS:
        fn = claims.exponent_within_tolerance if side is None else claims.sign_within_tolerance
        paper_text = f"{said}" if side is None or isinstance(said, str) else f"{side}"
        if step2 is not None:
            claim = f"{claim}, {scaling.MAX_NORM_ESTIMATOR}"
        ex = rec.exponents
        mine = ex[(ex["family"] == family) & (ex["norm"] == "fro")] if len(ex) else ex
        if tensor is not None and len(mine):
            mine = mine[mine["tensor"] == tensor]
        if mine.empty or not (mine["exponent"] == exponent).any():
            rows.append(claim_row(claim, paper_text, fn, None, f"none: {cmd['scaling']}", rec.preset))
            continue
        for dataset, both in mine.groupby("dataset"):
            group = both[both["exponent"] == exponent]
            runs_used = rec.scaling[(rec.scaling["family"] == family) & (rec.scaling["dataset"] == dataset)]
            records = describe(rec.preset, dataset, runs_used["seed"], runs_used["run"].nunique(),
                               f"depths {sorted(runs_used['depth'].unique().tolist())}")  # fmt: skip
            fits = {exponent_label(r, family): (r["estimate"], r["ci_low"], r["ci_high"]) for _, r in group.iterrows()}
            outcome = fn(fits, said if side is None else side)  # the fit's intervals, so the sign rows' verdicts are statistical too
            if step2 is not None:
                beside = both[both["exponent"] == step2]
                shown = ", ".join(f"{exponent_label(r, family) + ': ' if exponent_label(r, family) else ''}{r['estimate']:.3f}"
                                  + (f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if side is None else "")
                                  for _, r in beside.iterrows() if r["status"] == "ok")  # fmt: skip
                outcome = claims.Outcome(outcome.verdict, f"{outcome.value}; {scaling.STEP2_ESTIMATOR}, not used for the "
                                                          f"verdict: {shown or 'not fitted'}")  # fmt: skip
            rows.append(claim_row(f"{claim} ({dataset})", paper_text, fn, outcome, records, rec.preset))
    return rows


def exponent_label(row, family: str) -> str:
    """How an exponent row is named in a claim's reproduced value: the sweep's stage and tensor, nothing for an FC family."""
    return f"stage {row['stage']} {row['tensor']}" if family == "sweep" else ""


def claim_rows(rec: Records) -> list[dict]:
    """Every row of the claims report, in the paper's order (``kind``: claim or identity check)."""
    cmd = commands(rec.preset, rec.out)
    rows = [*resnet_claims(rec, cmd), *projection_claims(rec, cmd), *saturation_claims(rec, cmd), *decoder_claims(rec, cmd),
            *growth_claims(rec, cmd), *matched_claims(rec, cmd), *scaling_claims(rec, cmd)]  # fmt: skip
    return [{"id": i + 1, **r} for i, r in enumerate(rows)]


def verdict_counts(rows: Sequence[dict]) -> str:
    """``holds: 3, does not hold: 1, ...`` over the report's claims (identity checks are not counted)."""
    counted = [r for r in rows if r.get("kind", CLAIM) == CLAIM]
    return ", ".join(f"{v}: {sum(1 for r in counted if r['verdict'].startswith(v))}" for v in claims.VERDICTS)


REPORT_COLUMNS = ("id", "claim", "paper", "reproduced", "records", "verdict", "rule")


def mini_banner(rec: Records) -> str:
    """The banner of a ``--preset mini`` report: how many real training images, how many seeds, which copy of them.

    ``--dataset npz`` is how ``make mini`` is given CIFAR-10 (README, Results); a copy such as the
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
            files = ", ".join(sorted({f"`{d.get('file')}`" for d in group.get("data", []) if isinstance(d, dict)})) or "an `.npz` file"
            sources.append(f"The images are a class-balanced subset of {files} (`--dataset npz`), a copy of CIFAR-10: the "
                           "committed `results/mini` used one decoded from a JPEG re-encoding, which differs slightly from the "
                           "official files, so runs on the official files give slightly different numbers.")
        else:
            sources.append(f"The images are a class-balanced subset of the official {MINI_DATA_TITLES.get(dataset, dataset)} files.")
    seeds = sweep["seed"].nunique()
    return (f"**Mini scale.** {MINI_NOTE}: {images} real {title} training images, {seeds} seed{'s' if seeds != 1 else ''}; "
            f"evidence at reduced scale, not the paper's. {' '.join(sources)}")


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
        "`docs/claim-rules.md`. \"holds\" needs the records to show the claim at the 5% level, \"does not hold\" "
        "its negation; failing to show either is \"not decidable\". A claim that does not reproduce is reported as "
        "such; nothing is tuned to make a claim hold.",
        "",
        "## Claims",
        "",
        "Verdicts: " + verdict_counts(rows),
        "",
        markdown([r for r in rows if r.get("kind", CLAIM) == CLAIM], REPORT_COLUMNS),
        "",
        "## Identity checks",
        "",
        "True by construction (a theorem, or a first-order identity at small alpha): a check of the code, not a "
        "reproduced claim, so not counted above.",
        "",
        markdown(checks, REPORT_COLUMNS) if checks else "(none)",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the README's Results block
README_START = "<!-- mini-results: start (make mini-readme copies this table from results/mini/figures/claims.md) -->"
README_END = "<!-- mini-results: end -->"
RESULTS_COLUMNS = ("id", "claim", "paper", "reproduced", "verdict")  # the claims report's columns the README shows


def claims_cells(claims_text: str) -> list[dict[str, str]]:
    """The rows of a claims report's table (:func:`claims_markdown`), each cell as written (``|`` still escaped)."""
    rows, header = [], None
    for line in claims_text.splitlines():
        if not line.startswith("|"):
            if header is not None:
                break  # the report's one table has ended
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if header is None:
            header = cells
        elif not all(set(c) <= {"-"} for c in cells):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def results_block(claims_text: str) -> str:
    """The README's Results table: every row of the claims report, in :data:`RESULTS_COLUMNS`."""
    lines = ["| " + " | ".join(RESULTS_COLUMNS) + " |", "|" + "---|" * len(RESULTS_COLUMNS)]
    lines += ["| " + " | ".join(r[c] for c in RESULTS_COLUMNS) + " |" for r in claims_cells(claims_text)]
    return "\n".join(lines)


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


def build(out: str | Path, figures_dir: str | Path, preset: str) -> Report:
    """Read the records of ``preset`` under ``out`` and write every figure, table and the claims report."""
    rec = load_records(out, preset)
    folder = Path(figures_dir)
    tables = folder / TABLES
    tables.mkdir(parents=True, exist_ok=True)
    report = Report(figures_dir=folder)
    cmd = commands(preset, rec.out)

    def figure(stem: str, fig) -> None:
        report.written += plots.save(fig, folder, stem)
        report.figures.append(stem)

    # 1, 2, 9: the ResNet sweep and its probe
    if rec.probe.empty:
        for what in ("figure 1 (AGmax against depth)", "figure 2 (AG per candidate heat map)",
                     "figure 9 (AGmax against training loss)"):  # fmt: skip
            report.skipped.append(skip_line(what, "probed sweep runs", cmd["probe"], rec, ("resnet_sweep", "ag_probe")))
    else:
        datasets = sorted(rec.probe["dataset"].unique())
        for dataset in datasets:
            probe = rec.probe[rec.probe["dataset"] == dataset]
            sweep = rec.sweep[rec.sweep["dataset"] == dataset]
            figure(f"fig1_ag_vs_depth-{dataset}",
                   plots.ag_vs_depth(probe, sweep, dataset=dataset, line=paper.LOW_SIGNAL_AG, setting=rec.probe_settings[dataset]))  # fmt: skip
            report.written += write_table(tables, f"ag_vs_depth-{dataset}", depth_table(probe, sweep, paper.LOW_SIGNAL_AG))
        shown = next((d for d in DATASET_ORDER if d in datasets), datasets[0])
        cands = rec.probe_candidates[rec.probe_candidates["dataset"] == shown]
        figure(f"fig2_ag_heatmap-{shown}", plots.ag_heatmap(cands, dataset=shown))
        figure("fig9_ag_vs_train_loss", plots.ag_vs_train_loss(rec.probe.dropna(subset=["train_loss"])))
    # 3: GPT-2
    if rec.gpt.empty:
        report.skipped.append(skip_line("figure 3 (GPT-2 depth sweep)", "GPT-2 runs", cmd["gpt2"], rec, (gpt2_ascend.EXPERIMENT,)))
    else:
        figure("fig3_gpt2_depth", plots.gpt2_depth(rec.gpt, line=paper.LOW_SIGNAL_AG))
        report.written += write_table(tables, "gpt2_depth", gpt2_ascend.summary_rows(rec.gpt.to_dict("records")))
    # 4: Pythia
    if rec.pythia.empty:
        report.skipped.append(skip_line("figure 4 (Pythia AG per layer, Block Influence)", "Pythia runs", cmd["pythia"], rec,
                                        (PYTHIA_EXPERIMENT,)))  # fmt: skip
    else:
        figure("fig4_pythia", plots.pythia(rec.pythia, rec.pythia_candidates, line=paper.LOW_SIGNAL_AG))
        columns = ["model", "model_id", "revision", "n_layer", "d_model", "ag_max", "ag_max_per_example", "ag_max_blocks", "val_loss_before", "val_loss_after"]
        report.written += write_table(tables, "pythia", rec.pythia.reindex(columns=columns).to_dict("records"))
    # 5: growth vs scratch
    if not rec.growth:
        report.skipped.append(skip_line("figure 5 (growth vs scratch)", "growth-vs-scratch table", cmd["growth"], rec,
                                        (growth_vs_scratch.EXPERIMENT,)))  # fmt: skip
    for table in rec.growth:
        figure(f"fig5_growth_vs_scratch-{table.stem}", plots.growth_bars(table.rows, dataset=table.stem))
        rows = [{k: None if k.startswith("paper_") and pd.isna(v) else v for k, v in r.items()}  # as 03 wrote them:
                for r in table.rows.to_dict("records")]  # NaN std for one seed, None where the paper reports nothing  # fmt: skip
        report.written += write_table(tables, f"growth_vs_scratch-{table.stem}", rows, growth_vs_scratch.markdown_table(rows))
    # 6: matched insertion
    if rec.matched.empty:
        report.skipped.append(skip_line("figure 6 (matched insertion)", "matched-insertion runs", cmd["matched"], rec,
                                        (matched_insertion.EXPERIMENT,)))  # fmt: skip
    for dataset, group in rec.matched.groupby("dataset") if len(rec.matched) else []:
        figure(f"fig6_matched_insertion-{dataset}",
               plots.matched_insertion(group, paper=paper.MATCHED_INSERTION_REDUCTION, alpha=paper.MATCHED_INSERTION_ALPHA))
        rows = matched_insertion.summary_rows([{"rows": group.to_dict("records")}])
        report.written += write_table(tables, f"matched_insertion-{dataset}", rows, matched_insertion.summary_markdown(rows))
    # 7: weight scaling
    if rec.scaling.empty:
        report.skipped.append(skip_line("figure 7 (weight scaling)", "weight-scaling runs", cmd["scaling"], rec,
                                        (weight_scaling.EXPERIMENT,)))  # fmt: skip
    else:
        panels = sorted({(f, d) for f, d in zip(rec.scaling["family"], rec.scaling["dataset"], strict=True)},
                        key=lambda p: (p[0] == "sweep", p))  # fmt: skip
        figure("fig7_weight_scaling", plots.weight_scaling(rec.scaling, rec.exponents, panels=panels))
        rows = rec.exponents.to_dict("records")
        report.written += write_table(tables, "weight_scaling_exponents", rows, weight_scaling.exponent_markdown(rows))
    # 8: V_S,l against AG_l
    if rec.exact_candidates.empty:
        report.skipped.append(skip_line("figure 8 (V_S,l against AG_l)", "exact probe runs", cmd["exact"], rec,
                                        ("ag_probe", gpt2_ascend.EXPERIMENT)))  # fmt: skip
    else:
        figure("fig8_growth_value_vs_ag", plots.growth_value_vs_ag(rec.exact_candidates))
    # the claims report
    report.claims = claim_rows(rec)
    report.written += write_table(tables, "claims", report.claims)
    report.claims_path = folder / CLAIMS
    banner = mini_banner(rec) if preset == "mini" else None
    runs.atomic_write_bytes(report.claims_path, (claims_markdown(report.claims, preset, rec.out, banner) + "\n").encode())
    report.written.append(report.claims_path)
    return report


__all__ = [
    "CLAIMS",
    "FIGURES",
    "Records",
    "Report",
    "build",
    "claim_rows",
    "claims_markdown",
    "commands",
    "load_records",
    "markdown",
    "mini_banner",
    "readme_block",
    "results_block",
    "update_readme",
    "verdict_counts",
]
