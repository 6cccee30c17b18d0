"""Job module of ``08_make_figures.py``: every figure and table, and the claims report, from the run records alone.

Nothing here trains or probes: :func:`common.report.records.load_records` reads the finished runs of scripts
01-07 under ``--out`` and keeps those of one preset (which records, and why: :mod:`common.report.records`), and
:func:`build` draws the figures (:mod:`common.report.plots_ag`, :mod:`common.report.plots_growth`,
:mod:`common.report.plots_scaling`, saved by :mod:`common.report.plots`), writes the tables
(:mod:`common.runs.tables`) and the claims report under the figures folder (its rows: :mod:`common.report.claim_rows`,
their rules: :mod:`common.report.rules`, its text: :mod:`common.report.claims_report`):

- ``<figures>/figN_<name>.png`` and ``.pdf``, one per figure (figure 1 one per dataset);
- ``<figures>/tables/<name>.md`` and ``.csv``;
- ``<figures>/claims.md`` (and ``tables/claims.csv``): one row per quantitative claim of the paper
  and of Cohen et al.: the claim, the paper's value (``common/presets/paper.py`` only), the reproduced
  value, the records it came from (preset, dataset, seeds, number of runs), the verdict, its power at
  the records' own design (``common/report/claim_power.csv``) and the rule that gave it.

Each figure (or group of figures read from one experiment's records) is drawn by one function of
:data:`FIGURE_GROUPS`, which says what it skipped and the command that makes the missing records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common.experiments import gpt2_ascend, growth_vs_scratch, matched_insertion, pythia_cpt, weight_scaling
from common.models.resnet import BACKBONE_DEPTH
from common.presets import paper
from common.report import plots, plots_ag, plots_growth, plots_scaling, sweep_compute
from common.report.claim_rows import claim_rows
from common.report.claims_report import claims_markdown, report_banner, verdict_counts
from common.report.record_scan import left_out_warning, other_presets
from common.report.records import (
    PROBE,
    PYTHIA,
    SWEEP,
    Records,
    commands,
    dropped_line,
    load_records,
    records_preset,
    scan_records,
)
from common.report.rows import grow_by_criterion
from common.report.verdict_row import FIT_TARGET, IDENTITY, STEM_OUTPUT
from common.runs import atomic, tables

GROW = grow_by_criterion.grow_by_criterion.EXPERIMENT  # script 09's folder

FIGURES = "figures"  # default folder, under --out
TABLES = "tables"
CLAIMS = "claims.md"
DATASET_ORDER = ("cifar10", "cifar100", "imagenet100")  # figure 2's dataset: the first present, else the first by name
PYTHIA_COLUMNS = ("model", "model_id", "revision", *pythia_cpt.MODEL_COLUMNS)


# ----------------------------------------------------------------------------- what build writes
@dataclass
class Report:
    """What :func:`build` wrote and what it skipped (one line each, naming the command that makes the records)."""

    figures_dir: Path
    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    claims: list[dict] = field(default_factory=list)
    claims_path: Path | None = None
    figures: list[str] = field(default_factory=list)  # stems of the figures drawn

    def figure(self, stem: str, fig) -> None:
        """Save ``fig`` as ``<figures>/<stem>.png`` and ``.pdf``."""
        self.written += plots.save(fig, self.figures_dir, stem)
        self.figures.append(stem)

    def table(self, stem: str, rows: Sequence[dict], text: str | None = None) -> None:
        """Write ``<figures>/tables/<stem>.csv`` and ``.md`` (:func:`write_table`)."""
        self.written += write_table(self.figures_dir / TABLES, stem, rows, text)

    def skip(self, what: str, needs: str, command: str, rec: Records, experiments: Sequence[str]) -> None:
        """Say that ``what`` was skipped (:func:`skip_line`)."""
        self.skipped.append(skip_line(what, needs, command, rec, experiments))


def skip_line(what: str, needs: str, command: str, rec: Records, experiments: Sequence[str]) -> str:
    others = sorted({p for e in experiments for p in rec.elsewhere.get(e, set())})
    note = f" (records of preset {', '.join(others)} are there: pass --preset {others[0]})" if others else ""
    return f"{what}: skipped, no {needs} of preset {rec.preset}{note}; make them with: {command}"


# ----------------------------------------------------------------------------- tables
def write_table(folder: Path, stem: str, rows: Sequence[dict], text: str | None = None) -> list[Path]:
    """``<folder>/<stem>.csv`` and ``.md`` (``text``, or the rows' :func:`common.runs.tables.markdown_table`), written atomically."""
    csv_path, md_path = folder / f"{stem}.csv", folder / f"{stem}.md"
    atomic.atomic_write_csv(csv_path, rows)
    atomic.atomic_write_bytes(md_path, ((text if text is not None else tables.markdown_table(rows)) + "\n").encode())
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


# ----------------------------------------------------------------------------- the figures
def probe_figures(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figures 1, 2 and 9: the ResNet sweep and its probe (figure 1 and its table per dataset)."""
    if rec.probe.empty:
        for what in (
            "figure 1 (AGmax against depth)",
            "figure 2 (AG per candidate heat map)",
            "figure 9 (AGmax against training loss)",
        ):
            report.skip(what, "probed sweep runs", cmd["probe"], rec, (SWEEP, PROBE))
        return
    datasets = sorted(rec.probe["dataset"].unique())
    for dataset in datasets:
        probe = rec.probe[rec.probe["dataset"] == dataset]
        sweep = rec.sweep[rec.sweep["dataset"] == dataset]
        report.figure(
            f"fig1_ag_vs_depth-{dataset}",
            plots_ag.ag_vs_depth(
                probe,
                sweep,
                dataset=dataset,
                line=paper.LOW_SIGNAL_AG,
                setting=rec.probe_settings[dataset],
                fit_target=FIT_TARGET,
            ),
        )
        report.table(f"ag_vs_depth-{dataset}", depth_table(probe, sweep, paper.LOW_SIGNAL_AG))
    shown = next((d for d in DATASET_ORDER if d in datasets), datasets[0])
    cands = rec.probe_candidates[rec.probe_candidates["dataset"] == shown]
    report.figure(f"fig2_ag_heatmap-{shown}", plots_ag.ag_heatmap(cands, dataset=shown))
    report.figure("fig9_ag_vs_train_loss", plots_ag.ag_vs_train_loss(rec.probe.dropna(subset=["train_loss"])))


def gpt2_figure(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figure 3: the GPT-2 depth sweep."""
    if rec.gpt.empty:
        report.skip("figure 3 (GPT-2 depth sweep)", "GPT-2 runs", cmd["gpt2"], rec, (gpt2_ascend.EXPERIMENT,))
        return
    report.figure("fig3_gpt2_depth", plots_ag.gpt2_depth(rec.gpt, line=paper.LOW_SIGNAL_AG))
    report.table("gpt2_depth", gpt2_ascend.summary_rows(rec.gpt.to_dict("records")))


def pythia_figure(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figure 4: Pythia's AG per layer and Block Influence."""
    if rec.pythia.empty:
        report.skip("figure 4 (Pythia AG per layer, Block Influence)", "Pythia runs", cmd["pythia"], rec, (PYTHIA,))
        return
    report.figure("fig4_pythia", plots_ag.pythia(rec.pythia, rec.pythia_candidates, line=paper.LOW_SIGNAL_AG))
    report.table("pythia", rec.pythia.reindex(columns=list(PYTHIA_COLUMNS)).to_dict("records"))


def growth_figures(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figure 5: growth vs scratch, one per chosen table of script 03; its table and its restart ablation's."""
    if not rec.growth:
        report.skip(
            "figure 5 (growth vs scratch)",
            "growth-vs-scratch table",
            cmd["growth"],
            rec,
            (growth_vs_scratch.EXPERIMENT,),
        )
    for table in rec.growth:
        report.figure(
            f"fig5_growth_vs_scratch-{table.dataset}", plots_growth.growth_bars(table.rows, dataset=table.dataset)
        )
        rows = [
            {k: None if k.startswith("paper_") and pd.isna(v) else v for k, v in r.items()}  # as 03 wrote them:
            for r in table.rows.to_dict("records")
        ]  # NaN std for one seed, None where the paper reports nothing
        report.table(f"growth_vs_scratch-{table.dataset}", rows, growth_vs_scratch.markdown_table(rows))
        if table.ablation is not None:  # what restarting the optimizer and schedule at every insertion alone costs
            rows = table.ablation.to_dict("records")  # as 03 wrote them (NaN std for one seed)
            report.table(f"growth_restart_ablation-{table.dataset}", rows, growth_vs_scratch.ablation_markdown(rows))


def matched_figures(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figure 6: the matched insertion, one per dataset."""
    if rec.matched.empty:
        report.skip(
            "figure 6 (matched insertion)",
            "matched-insertion runs",
            cmd["matched"],
            rec,
            (matched_insertion.EXPERIMENT,),
        )
    for dataset, group in rec.matched.groupby("dataset") if len(rec.matched) else []:
        report.figure(
            f"fig6_matched_insertion-{dataset}",
            plots_growth.matched_insertion(
                group, paper=paper.MATCHED_INSERTION_REDUCTION, alpha=paper.MATCHED_INSERTION_ALPHA
            ),
        )
        rows = matched_insertion.summary_rows([{"rows": group.to_dict("records")}])
        report.table(f"matched_insertion-{dataset}", rows, matched_insertion.summary_markdown(rows))


def scaling_figure(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figure 7: weight scaling, a panel per (family, dataset), the sweep's last."""
    if rec.scaling.empty:
        report.skip(
            "figure 7 (weight scaling)", "weight-scaling runs", cmd["scaling"], rec, (weight_scaling.EXPERIMENT,)
        )
        return
    panels = sorted(
        {(f, d) for f, d in zip(rec.scaling["family"], rec.scaling["dataset"], strict=True)},
        key=lambda p: (p[0] == "sweep", p),
    )
    report.figure("fig7_weight_scaling", plots_scaling.weight_scaling(rec.scaling, rec.exponents, panels=panels))
    rows = rec.exponents.to_dict("records")
    report.table("weight_scaling_exponents", rows, weight_scaling.exponent_markdown(rows))


def growth_value_figure(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figure 8: V_S,l against AG_l over every exact run (02 and 05)."""
    if rec.exact_candidates.empty:
        report.skip(
            "figure 8 (V_S,l against AG_l)", "exact probe runs", cmd["exact"], rec, (PROBE, gpt2_ascend.EXPERIMENT)
        )
        return
    report.figure("fig8_growth_value_vs_ag", plots_ag.growth_value_vs_ag(rec.exact_candidates))


def grow_figures(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figures 10 and 11 (09, beyond the paper): training loss against cumulative FLOPs for every arm with the
    sweep's runs as points and the stop rule's statistic at each probe, and which candidate each policy chose; the
    tables at the budget, of the FLOPs to reach the sweep's loss at N*, and of the post-hoc stopping rules, per
    dataset (:mod:`common.report.rows.grow_by_criterion`)."""
    frame = grow_by_criterion.grow_runs(rec)
    if frame.empty:
        command = grow_by_criterion.grow_command(rec.preset, rec.out)
        report.skip("figures 10 and 11 (growth by the criterion)", "09 runs", command, rec, (GROW,))
        return
    for dataset, group in frame.groupby("dataset", sort=True):
        sweep = rec.sweep[rec.sweep["dataset"] == dataset] if len(rec.sweep) else pd.DataFrame()
        probes, points = grow_by_criterion.grow_by_criterion.probe_frame(group), grow_by_criterion.curves(group)
        figure = plots_growth.grow_vs_compute(points, probes, grow_by_criterion.sweep_flops(sweep), dataset=dataset)
        report.figure(f"fig10_grow_vs_compute-{dataset}", figure)
        report.figure(f"fig11_grow_choices-{dataset}", plots_growth.grow_choices(probes, dataset=dataset))
        report.table(f"grow_at_budget-{dataset}", grow_by_criterion.budget_rows(group))
        report.table(f"grow_stops_post_hoc-{dataset}", grow_by_criterion.stop_rows(group, sweep))
        report.table(f"grow_stop_ratio-{dataset}", grow_by_criterion.ratio_table(rec, group, dataset))
        if sweep.empty:
            report.skipped.append(
                skip_line(f"09 against the sweep ({dataset})", "sweep runs", cmd["sweep"], rec, (SWEEP,))
            )
            continue
        compute = grow_by_criterion.compute_rows(points, sweep)
        rows = [{"comparison": "compute", "result": compute}] if isinstance(compute, str) else compute
        report.table(f"grow_compute_to_reach-{dataset}", rows)


def sweep_compute_figure(rec: Records, report: Report, cmd: dict[str, str]) -> None:
    """Figure 12 and its table, per dataset: the sweep's runs at equal epochs and at equal training FLOPs
    (:mod:`common.report.sweep_compute`; what 09's claims against the never-grown ResNet-8 depend on)."""
    datasets = sorted(rec.sweep["dataset"].unique()) if len(rec.sweep) else []
    curves = {d: sweep_compute.sweep_curves(rec.sweep[rec.sweep["dataset"] == d]) for d in datasets}
    if all(c.empty for c in curves.values()):
        what = "figure 12 (the sweep at equal FLOPs)"
        report.skip(what, "sweep runs with per-epoch training losses", cmd["sweep"], rec, (SWEEP,))
        return
    for dataset, runs in curves.items():
        if runs.empty:
            continue
        means, seeds = sweep_compute.mean_curves(runs), int(runs["seed"].nunique())
        figure = plots_growth.sweep_equal_flops(means, dataset=dataset, seeds=seeds)
        report.figure(f"fig12_sweep_equal_flops-{dataset}", figure)
        rows = sweep_compute.equal_flops_rows(runs)
        report.table(f"sweep_equal_flops-{dataset}", rows, f"{tables.markdown_table(rows)}\n\n{sweep_compute.NOTE}")


FIGURE_GROUPS = (  # in the order build draws them (and lists what it skipped)
    probe_figures,
    gpt2_figure,
    pythia_figure,
    growth_figures,
    matched_figures,
    scaling_figure,
    growth_value_figure,
    grow_figures,
    sweep_compute_figure,
)


# ----------------------------------------------------------------------------- building everything
def write_claims(rec: Records, report: Report, preset: str) -> None:
    """The claims report: its rows as ``tables/claims.csv`` and ``.md``, and ``claims.md`` with its banner."""
    report.claims = claim_rows(rec)
    report.table("claims", report.claims)
    report.claims_path = report.figures_dir / CLAIMS
    banner = report_banner(rec, preset)
    atomic.atomic_write_bytes(
        report.claims_path, (claims_markdown(report.claims, preset, rec.out, banner) + "\n").encode()
    )
    report.written.append(report.claims_path)


def build(out: str | Path, figures_dir: str | Path, preset: str, records: Records | None = None) -> Report:
    """Read the records of ``preset`` under ``out`` (or take ``records``, read already) and write every figure, table
    and the claims report."""
    rec = records if records is not None else load_records(out, preset)
    report = Report(figures_dir=Path(figures_dir))
    (report.figures_dir / TABLES).mkdir(parents=True, exist_ok=True)
    cmd = commands(preset, rec.out)
    for draw in FIGURE_GROUPS:
        draw(rec, report, cmd)
    write_claims(rec, report, preset)
    return report


__all__ = [  # and, for 08 (which imports its own job module only), the records' and the report's names it reads
    "CLAIMS",
    "FIGURES",
    "IDENTITY",
    "TABLES",
    "Report",
    "build",
    "dropped_line",
    "left_out_warning",
    "load_records",
    "other_presets",
    "records_preset",
    "scan_records",
    "verdict_counts",
]
