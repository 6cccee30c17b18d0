"""08_make_figures.py draws every figure from hand-made records, and skips (exit 0) what is missing."""

from __future__ import annotations

import importlib

import pandas as pd

from common.experiments import make_figures
from common.report import plots_ag
from tests.helpers import figure_records

script = importlib.import_module("08_make_figures")

FIGURES = (
    "fig1_ag_vs_depth-digits",
    "fig2_ag_heatmap-digits",
    "fig3_gpt2_depth",
    "fig4_pythia",
    "fig5_growth_vs_scratch-digits",
    "fig6_matched_insertion-digits",
    "fig7_weight_scaling",
    "fig8_growth_value_vs_ag",
    "fig9_ag_vs_train_loss",
)


def test_every_figure_table_and_the_claims_report_appear(tmp_path, capsys):
    out = figure_records.everything(tmp_path / "runs", seeds=(0, 1))
    assert script.main(["--preset", "smoke", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    folder = out / "figures"
    for stem in FIGURES:
        for ext in ("png", "pdf"):
            assert (folder / f"{stem}.{ext}").stat().st_size > 1000, f"{stem}.{ext}"
    # figures 10 and 11 read 09's trajectories, which figure_records does not write (tests/report/test_grow_by_criterion_report.py),
    # and figure 12 the sweep's per-epoch losses, which it does not write either (tests/report/test_sweep_compute.py)
    assert "2 skipped" in printed and "figures 10 and 11 (growth by the criterion): skipped" in printed
    assert "figure 12 (the sweep at equal FLOPs): skipped" in printed
    tables = folder / "tables"
    for stem in (
        "ag_vs_depth-digits",
        "gpt2_depth",
        "pythia",
        "growth_vs_scratch-digits",
        "growth_restart_ablation-digits",
        "matched_insertion-digits",
        "weight_scaling_exponents",
        "claims",
    ):
        assert (tables / f"{stem}.csv").is_file() and (tables / f"{stem}.md").is_file(), stem
    pythia = pd.read_csv(tables / "pythia.csv")
    assert pythia["model"].tolist() == ["pythia-70m-deduped", "pythia-160m-deduped"]  # by depth
    report = (folder / "claims.md").read_text()
    assert report.splitlines()[2].startswith("> **Smoke scale.**")
    assert report.index("## Claims") < report.index("## Identity checks")  # identity checks apart, after the claims
    assert f"{folder / 'claims.md'}" in printed


def test_no_records_name_what_makes_each_figure_and_the_script_refuses_an_empty_out(tmp_path, capsys):
    assert script.main(["--preset", "smoke", "--out", str(tmp_path)]) == 2  # an empty (or mistyped) --out: one line
    assert "no usable run records" in capsys.readouterr().err and not list(tmp_path.iterdir())  # nothing created
    report = make_figures.build(tmp_path, tmp_path / "figures", "smoke")  # what each figure needs, named
    printed = "\n".join(report.skipped)
    skipped = [line for line in printed.splitlines() if ": skipped, no " in line]
    assert len(skipped) == 11, printed  # figures 1, 2, 9 share the probe's records but get a line each
    for needed in (
        "01_train_resnet_sweep.py --preset smoke",
        "02_probe_ag.py --preset smoke",
        "03_growth_vs_scratch.py",
        "04_pythia_cpt.py",
        "05_gpt2_ascend.py",
        "06_matched_insertion.py",
        "07_weight_scaling.py",
        "02_probe_ag.py --preset smoke --exact",
        "09_grow_by_criterion.py --preset smoke",
    ):
        assert needed in printed, needed
    assert not list((tmp_path / "figures").glob("*.png"))
    report = (tmp_path / "figures" / "claims.md").read_text()
    assert "not run" in report and "holds (" not in report


def test_a_skip_line_points_at_the_other_preset(tmp_path, capsys):
    figure_records.gpt2(tmp_path, preset="paper")
    report = make_figures.build(tmp_path, tmp_path / "figs", "smoke")
    (line,) = [s for s in report.skipped if s.startswith("figure 3")]
    assert "pass --preset paper" in line
    assert "fig3_gpt2_depth" not in report.figures


def test_figure_1_marks_the_depths_that_did_not_fit_on_every_panel():
    probe = pd.DataFrame({"depth_n": [0, 2, 4], "seed": 0, "ag_max": [0.1, 0.05, 0.02], "ag_max_per_example": 1.0})
    sweep = probe.assign(train_loss=[0.01, 0.2, 0.03], test_loss=1.0, test_acc=0.5)
    fig = plots_ag.ag_vs_depth(probe, sweep, dataset="digits", line=5e-3, fit_target=0.05)
    spans = [[p.get_x() for p in ax.patches] for ax in fig.axes[:3]]  # axvspan: one rectangle per unfit depth
    assert all(len(s) == 1 and abs(s[0] - (2 - 0.35)) < 1e-9 for s in spans), spans  # N = 2 only, on each panel
    assert "did not fit (a run's training loss > 0.05)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    plain = plots_ag.ag_vs_depth(probe, sweep, dataset="digits", line=5e-3)
    assert not any(ax.patches for ax in plain.axes[:3])
